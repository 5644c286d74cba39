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
#include "vision/cuda/device.h"
#include "vision/data/image.h"
#include "vision/data/synth/shapes.h"
#include "vision/detector.h"
#include "vision/trainer.h"

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
