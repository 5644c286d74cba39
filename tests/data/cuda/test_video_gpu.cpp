// NVDEC frames kept on the GPU (VideoReaderOptions::yuv with --hwaccel cuda): each frame's NV12 planes copied out of
// the decoder's surface into device memory of the frame's own, equal bit for bit to the software decoder's planes
// (H.264 decoding is exact), and the recycled device buffers reused; skipped with the reason where this FFmpeg or the
// driver has no NVDEC.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/data/video.h"
#include "vision/data/video_streams.h"
#include "vision/data/yuv.h"

namespace vision::data {
namespace {

namespace fs = std::filesystem;

// Frame i: a gradient with a square moving right (a size of no particular alignment).
Image moving_square(int64_t i, int64_t w, int64_t h) {
  Image im(w, h, 3);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      uint8_t* p = im.at(x, y);
      const bool square = x >= 10 + 6 * i && x < 50 + 6 * i && y >= 20 && y < 60;
      p[0] = square ? 240 : static_cast<uint8_t>(x), p[1] = square ? 30 : static_cast<uint8_t>(2 * y), p[2] = 90;
    }
  return im;
}

TEST(VideoGpu, NvdecYuvFramesStayOnTheGpuAndEqualSoftwareOnes) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  test::TempDir dir;
  const fs::path path = dir.path() / "n.mp4";
  {
    VideoWriter w(path, 322, 180, 30);
    for (int64_t i = 0; i < 20; ++i) w.write(moving_square(i, 322, 180));
    w.close();
  }
  VideoReader hard(path.string(), {.hwaccel = "cuda", .yuv = true});
  if (hard.hwaccel() != "cuda")
    GTEST_SKIP() << "no NVDEC here: " << (hard.warnings().empty() ? "" : hard.warnings()[0]);
  VideoReader soft(path.string(), {.yuv = true});
  VideoFrame a, b;
  int64_t n = 0;
  const void* first_buffer = nullptr;
  while (soft.read(a)) {
    ASSERT_TRUE(hard.read(b)) << "frame " << n;
    ASSERT_TRUE(b.yuv.on_device) << "frame " << n;
    EXPECT_TRUE(b.yuv.nv12);
    EXPECT_EQ(b.yuv.width, 322);
    EXPECT_EQ(b.yuv.height, 180);
    if (!first_buffer) first_buffer = b.yuv.device_memory.get();
    EXPECT_EQ(b.yuv.device_memory.get(), first_buffer) << "the frame's device buffer is reused";
    EXPECT_EQ(a.index, b.index);
    EXPECT_EQ(yuv420_to_rgb(a.yuv.view()), yuv420_to_rgb(b.yuv.view())) << "frame " << n;
    ++n;
  }
  EXPECT_FALSE(hard.read(b));
  EXPECT_EQ(n, 20);
}

// yuv_on_gpu: software-decoded frames uploaded by the reader, the same planes in device memory (VideoStreams too).
TEST(VideoGpu, SoftwareYuvFramesUploadedByTheReaderEqualHostOnes) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  test::TempDir dir;
  const fs::path video = dir.path() / "t.mp4";
  {
    VideoWriter w(video, 200, 120, 30);
    for (int64_t i = 0; i < 12; ++i) w.write(moving_square(i, 200, 120));
    w.close();
  }
  VideoReader host(video.string(), {.yuv = true});
  VideoStreams streams({video.string()}, {.yuv = true, .yuv_on_gpu = true}, 4);
  VideoFrame a;
  std::vector<StreamFrame> got;
  int64_t n = 0;
  while (host.read(a)) {
    ASSERT_TRUE(streams.read(got)) << "frame " << n;
    ASSERT_EQ(got.size(), 1u);
    const Yuv420Image& b = got[0].frame.yuv;
    ASSERT_TRUE(b.on_device) << "frame " << n;
    EXPECT_FALSE(b.nv12);
    EXPECT_EQ(got[0].frame.index, a.index);
    EXPECT_EQ(yuv420_to_rgb(a.yuv.view()), yuv420_to_rgb(b.view())) << "frame " << n;
    streams.recycle(std::move(got[0].frame.yuv));
    ++n;
  }
  EXPECT_FALSE(streams.read(got));
  EXPECT_EQ(n, 12);
}

// `vision predict` on CUDA reads a video as YUV planes on the GPU (no --save) and as RGB when it draws (--save): the
// same frames, and the same detections but for the conversion's rounding (swscale's RGB against the letterbox
// kernel's): at least 95% of the boxes matched within 2 px and 0.05 of score, with software decoding and NVDEC.
TEST(VideoCliGpu, PredictFromYuvFramesFindsWhatRgbFramesFind) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  test::TempDir dir;
  const test::CliRun synth = test::run_cli(fmt::format("'{}' synth --videos 1 --frames 24 --imgsz 320 --out '{}' 2>&1",
                                                       VISION_CLI, (dir.path() / "v").string()));
  ASSERT_EQ(synth.code, 0) << synth.out;
  const std::string video = (dir.path() / "v" / "seq-01" / "seq-01.mp4").string();
  const auto predict = [&](const std::string& extra) {
    const test::CliRun r = test::run_cli(fmt::format(
        "'{}' predict --model '{}/assets/yolo26n_synth.safetensors' --source '{}' --device cuda --imgsz 320 --batch 8 "
        "--json --quiet {} 2>/dev/null", VISION_CLI, VISION_SOURCE_DIR, video, extra));
    EXPECT_EQ(r.code, 0) << r.out;
    return nlohmann::json::parse(r.out);
  };
  const nlohmann::json rgb = predict(fmt::format("--save '{}'", (dir.path() / "saved").string()));
  ASSERT_EQ(rgb.size(), 24u);
  for (const std::string hwaccel : {"none", "cuda"}) {
    const nlohmann::json yuv = predict("--hwaccel " + hwaccel);
    ASSERT_EQ(yuv.size(), rgb.size()) << hwaccel;
    size_t boxes = 0, matched = 0;
    for (size_t i = 0; i < rgb.size(); ++i) {
      EXPECT_EQ(yuv[i]["frame"], rgb[i]["frame"]);
      EXPECT_EQ(yuv[i]["width"], rgb[i]["width"]);
      for (const nlohmann::json& want : rgb[i]["detections"]) {
        ++boxes;
        for (const nlohmann::json& got : yuv[i]["detections"]) {
          bool near = got["class"] == want["class"] &&
                      std::abs(got["confidence"].get<double>() - want["confidence"].get<double>()) < 0.05;
          for (const char* k : {"x1", "y1", "x2", "y2"})
            near = near && std::abs(got["box"][k].get<double>() - want["box"][k].get<double>()) < 2.0;
          if (near) {
            ++matched;
            break;
          }
        }
      }
    }
    ASSERT_GT(boxes, 24u) << "the synthetic video has objects in every frame";
    EXPECT_GE(static_cast<double>(matched), 0.95 * static_cast<double>(boxes)) << hwaccel << ": " << matched << " of "
                                                                                << boxes;
  }
}

}  // namespace
}  // namespace vision::data
