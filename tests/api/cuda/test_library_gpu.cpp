// The library's entry points on CUDA, with the bundled model and a tiny generated dataset: caller-owned pixels
// (data::ImageView, BGR or RGB, padded rows) give the detections of the same picture as an Image on the GPU too; a
// vision::run_training on CUDA in f32 starts from the CPU's first-batch losses (same data, same initial weights, no
// TF32) and a bf16 run trains, validates and saves its checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "api/image_buffers.h"
#include "test_util.h"
#include "vision/cuda/check.h"
#include "vision/cuda/device.h"
#include "vision/data/image.h"
#include "vision/data/synth/shapes.h"
#include "vision/detector.h"
#include "vision/trainer.h"
#include "vision/data/yuv.h"

#include <cuda_runtime_api.h>

namespace vision {
namespace {

namespace fs = std::filesystem;
const fs::path kBundled = fs::path(VISION_SOURCE_DIR) / "assets" / "yolo26n_synth.safetensors";

TEST(LibraryGpu, ImageViewsGiveTheImagesDetectionsOnCuda) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  Detector detector(kBundled, {.device = "cuda", .imgsz = std::array<int64_t, 2>{320, 320}});
  ASSERT_EQ(detector.device(), "cuda");
  const data::Image image = test::first_sample_image();
  const std::vector<data::Detection> expected = detector.detect(image);
  ASSERT_FALSE(expected.empty());
  for (const int64_t pad : {0, 9})
    for (const data::ChannelOrder order : {data::ChannelOrder::rgb, data::ChannelOrder::bgr}) {
      const int64_t stride = image.width * 3 + pad;
      const std::vector<uint8_t> buffer = test::image_buffer(image, stride, order);
      const std::vector<data::Detection> found =
          detector.detect(data::ImageView(buffer.data(), image.width, image.height, stride, order));
      ASSERT_EQ(found.size(), expected.size()) << "pad " << pad;
      for (size_t i = 0; i < found.size(); ++i) {
        EXPECT_EQ(found[i].box, expected[i].box) << "pad " << pad << " detection " << i;
        EXPECT_EQ(found[i].score, expected[i].score) << "pad " << pad << " detection " << i;
        EXPECT_EQ(found[i].cls, expected[i].cls) << "pad " << pad << " detection " << i;
      }
    }
}

// An RGB image as I420 planes (BT.601 limited range, chroma of each 2 × 2 block's mean), packed.
data::Yuv420Image yuv_of(const data::Image& im) {
  data::Yuv420Image f;
  f.width = im.width, f.height = im.height;
  f.bytes.resize(data::Yuv420Image::packed_bytes(im.width, im.height));
  const int64_t cw = (im.width + 1) / 2, ch = (im.height + 1) / 2;
  uint8_t* y = f.bytes.data();
  uint8_t* u = y + im.width * im.height;
  uint8_t* v = u + cw * ch;
  const auto clip = [](double x) { return static_cast<uint8_t>(std::clamp(std::lround(x), 0L, 255L)); };
  for (int64_t r = 0; r < im.height; ++r)
    for (int64_t c = 0; c < im.width; ++c) {
      const uint8_t* p = im.at(c, r);
      y[r * im.width + c] = clip(16 + 0.256788 * p[0] + 0.504129 * p[1] + 0.097906 * p[2]);
    }
  for (int64_t r = 0; r < ch; ++r)
    for (int64_t c = 0; c < cw; ++c) {
      double cb = 0, cr = 0;
      int n = 0;
      for (int64_t dy = 0; dy < 2; ++dy)
        for (int64_t dx = 0; dx < 2; ++dx) {
          const int64_t x = std::min(2 * c + dx, im.width - 1), yy = std::min(2 * r + dy, im.height - 1);
          const uint8_t* p = im.at(x, yy);
          cb += 128 - 0.148223 * p[0] - 0.290993 * p[1] + 0.439216 * p[2];
          cr += 128 + 0.439216 * p[0] - 0.367788 * p[1] - 0.071427 * p[2];
          ++n;
        }
      u[r * cw + c] = clip(cb / n), v[r * cw + c] = clip(cr / n);
    }
  return f;
}

// Video frames as YUV planes (host, and device as NVDEC's are) give exactly the detections of their RGB conversion
// (yuv420_to_rgb, the fused kernel's twin) given as an image: the model sees the same input.
TEST(LibraryGpu, YuvFramesGiveTheDetectionsOfTheirRgb) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  Detector detector(kBundled, {.device = "cuda", .imgsz = std::array<int64_t, 2>{320, 320}});
  const data::Yuv420Image frame = yuv_of(test::first_sample_image());
  const std::vector<data::Detection> expected = detector.detect(data::yuv420_to_rgb(frame.view()));
  ASSERT_FALSE(expected.empty());
  void* device = nullptr;
  VISION_CUDA_CHECK(cudaMalloc(&device, frame.bytes.size()));
  const std::shared_ptr<void> owner(device, [](void* p) { cudaFree(p); });
  VISION_CUDA_CHECK(cudaMemcpy(device, frame.bytes.data(), frame.bytes.size(), cudaMemcpyHostToDevice));
  data::Yuv420Image on_device = frame;
  on_device.bytes.clear();
  on_device.device_memory = owner, on_device.device_capacity = frame.bytes.size(), on_device.on_device = true;
  for (const data::Yuv420View& view : {frame.view(), on_device.view()}) {
    const std::vector<data::Yuv420View> batch = {view};  // a batch of one, as `expected` (one plan, one algorithm)
    const std::vector<std::vector<data::Detection>> found = detector.detect(batch);
    ASSERT_EQ(found.size(), 1u);
    for (const std::vector<data::Detection>& f : found) {
      ASSERT_EQ(f.size(), expected.size()) << (view.device ? "device" : "host");
      for (size_t i = 0; i < f.size(); ++i) {
        EXPECT_EQ(f[i].box, expected[i].box) << i;
        EXPECT_EQ(f[i].score, expected[i].score) << i;
        EXPECT_EQ(f[i].cls, expected[i].cls) << i;
      }
    }
  }
}

class LibraryTrainingGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    data::synth::write_dataset({.out = dir_.path() / "shapes", .train = 8, .val = 4, .imgsz = 64, .seed = 11});
  }
  TrainConfig config(const std::string& name, const std::string& device, const std::string& dtype) const {
    TrainConfig c;
    c.data = (dir_.path() / "shapes" / "data.yaml").string();
    c.imgsz = 64, c.batch = 4, c.nbs = 4, c.epochs = 1, c.device = device, c.dtype = dtype, c.optimizer = "AdamW";
    c.lr0 = 0.01, c.warmup_epochs = 0, c.mosaic = 0, c.fliplr = 0, c.scale_aug = 0, c.translate = 0;
    c.hsv_h = 0, c.hsv_s = 0, c.hsv_v = 0, c.workers = 2, c.close_mosaic = 0, c.deterministic = true;
    c.project = (dir_.path() / "runs").string(), c.name = name, c.verbose = false, c.progress = false;
    return c;
  }
  test::TempDir dir_;
};

TEST_F(LibraryTrainingGpu, F32StartsFromTheCpuLossesAndBf16Trains) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const auto first_batch = [&](const TrainConfig& c) {
    BatchReport first;
    TrainCallbacks cb;
    cb.on_batch = [&](const BatchReport& b) {
      if (b.epoch == 1 && b.batch == 1) first = b;
      return true;
    };
    const TrainResult r = run_training(c, cb);
    EXPECT_EQ(r.epochs_done, c.epochs) << c.device << " " << c.dtype;
    EXPECT_TRUE(fs::is_regular_file(r.last)) << c.device << " " << c.dtype;
    return first;
  };
  const BatchReport cpu = first_batch(config("cpu", "cpu", "f32"));
  const BatchReport gpu = first_batch(config("gpu", "cuda", "f32"));
  ASSERT_GT(cpu.box, 0);
  ASSERT_GT(cpu.cls, 0);
  EXPECT_NEAR(gpu.box, cpu.box, 1e-3 * cpu.box);
  EXPECT_NEAR(gpu.cls, cpu.cls, 1e-3 * cpu.cls);
  EXPECT_NEAR(gpu.l1, cpu.l1, 1e-3 * std::max(cpu.l1, 1e-6));

  TrainConfig bf16 = config("bf16", "cuda", "");
  bf16.epochs = 2;
  std::vector<EpochReport> epochs;
  TrainCallbacks cb;
  cb.on_epoch = [&](const EpochReport& e) {
    epochs.push_back(e);
    return true;
  };
  const TrainResult r = run_training(bf16, cb);
  EXPECT_EQ(r.epochs_done, 2);
  ASSERT_EQ(epochs.size(), 2u);
  for (const EpochReport& e : epochs) {
    EXPECT_TRUE(std::isfinite(e.box) && e.box > 0) << e.box;
    EXPECT_TRUE(std::isfinite(e.cls) && e.cls > 0) << e.cls;
  }
  ASSERT_TRUE(r.best_metrics.has_value());
  EXPECT_TRUE(fs::is_regular_file(r.best));
  EXPECT_TRUE(fs::is_regular_file(r.run_dir / "results.csv"));
}

}  // namespace
}  // namespace vision
