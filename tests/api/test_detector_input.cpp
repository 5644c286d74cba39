// vision::Detector's inputs and threads, on the CPU with the bundled model: caller-owned pixels (data::ImageView:
// RGB or BGR, rows back to back or at a larger stride) give exactly the detections of the same picture as an Image;
// a bad view is a clear error; Detectors used at once on several threads (one per thread, as detector.h says) each
// give the single-threaded detections.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "api/image_buffers.h"
#include "test_util.h"
#include "vision/data/image.h"
#include "vision/data/letterbox.h"
#include "vision/detector.h"

namespace vision {
namespace {

namespace fs = std::filesystem;
const fs::path kAssetDir = fs::path(VISION_SOURCE_DIR) / "assets";

DetectorOptions small_cpu() { return {.device = "cpu", .imgsz = std::array<int64_t, 2>{160, 160}}; }

data::Image noise_image(int64_t w, int64_t h) {
  data::Image im(w, h, 3);
  for (auto& v : im.pixels) v = static_cast<uint8_t>(test::rng()());
  return im;
}

bool same(const std::vector<data::Detection>& a, const std::vector<data::Detection>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].box != b[i].box || a[i].score != b[i].score || a[i].cls != b[i].cls) return false;
  return true;
}

TEST(ImageView, ResizeAndLetterboxEqualThePackedImage) {
  const data::Image image = noise_image(37, 23);
  for (const int64_t stride : {37 * 3, 37 * 3 + 5})
    for (const data::ChannelOrder order : {data::ChannelOrder::rgb, data::ChannelOrder::bgr}) {
      const std::vector<uint8_t> buffer = test::image_buffer(image, stride, order);
      const data::ImageView view(buffer.data(), 37, 23, stride, order);
      EXPECT_EQ(view.contiguous_rgb(), stride == 37 * 3 && order == data::ChannelOrder::rgb);
      EXPECT_EQ(data::to_image(view), image);
      EXPECT_EQ(data::resize_bilinear(view, 50, 11), data::resize_bilinear(image, 50, 11));
      EXPECT_EQ(data::resize_bilinear(view, 37, 23), image);
      const data::LetterboxTransform t = data::letterbox_transform(23, 37, 64, 64, true, 32);
      EXPECT_EQ(data::letterbox(view, t), data::letterbox(image, t));
    }
}

TEST(ImageView, BadViewsAreClearErrors) {
  const std::vector<uint8_t> pixels(300);
  EXPECT_NE(test::error_of([&] { data::to_image(data::ImageView(nullptr, 10, 10)); }).find("no pixels"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { data::to_image(data::ImageView(pixels.data(), 10, 10, 20)); }).find("stride 20"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { data::to_image(data::ImageView(pixels.data(), 0, 10)); }).find("0×10"),
            std::string::npos);
  Detector detector(kAssetDir / "yolo26n_synth.safetensors", small_cpu());
  EXPECT_NE(test::error_of([&] { detector.detect(data::ImageView(pixels.data(), -3, 10)); }).find("image 0"),
            std::string::npos);
}

TEST(DetectorInput, ViewsOfEveryOrderAndStrideGiveTheImagesDetections) {
  Detector detector(kAssetDir / "yolo26n_synth.safetensors", small_cpu());
  const data::Image image = test::first_sample_image();
  const std::vector<data::Detection> expected = detector.detect(image);
  ASSERT_FALSE(expected.empty());
  for (const int64_t pad : {0, 7})
    for (const data::ChannelOrder order : {data::ChannelOrder::rgb, data::ChannelOrder::bgr}) {
      const int64_t stride = image.width * 3 + pad;
      const std::vector<uint8_t> buffer = test::image_buffer(image, stride, order);
      const std::vector<data::Detection> found = detector.detect(data::ImageView(buffer.data(), image.width, image.height, stride, order));
      EXPECT_TRUE(same(found, expected)) << "pad " << pad << " bgr " << (order == data::ChannelOrder::bgr);
    }
}

TEST(DetectorThreads, OneDetectorPerThreadGivesTheSingleThreadedDetections) {
  const data::Image image = test::first_sample_image();
  const std::vector<data::Detection> expected = Detector(kAssetDir / "yolo26n_synth.safetensors", small_cpu()).detect(image);
  constexpr int kThreads = 3;
  std::vector<std::vector<data::Detection>> found(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      try {
        Detector mine(kAssetDir / "yolo26n_synth.safetensors", small_cpu());
        for (int k = 0; k < 2; ++k) found[static_cast<size_t>(i)] = mine.detect(image);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(i)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(errors[static_cast<size_t>(i)], "") << "thread " << i;
    EXPECT_TRUE(same(found[static_cast<size_t>(i)], expected)) << "thread " << i;
  }
}

}  // namespace
}  // namespace vision
