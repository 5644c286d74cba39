// vision::Detector on CUDA: f32 against the independent reference's detections (as on the CPU); the default f16 plan
// against Yolo26Model fed the CPU letterbox of the same images (the GPU letterbox gives the model the same input, so
// the detections are the same bit for bit), for a batch of images of different sizes, twice (the plan replayed).
#include <gtest/gtest.h>

#include <vector>

#include "models/yolo/detector_test_util.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/data/letterbox.h"
#include "vision/detector.h"
#include "vision/graph/backend.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/models/yolo/model.h"
#include "vision/data/image_tensor.h"

using namespace vision;
using namespace vision::test;
using namespace vision::test::yolo26_fixture;

namespace {

std::string weights_path() { return fixture_path("yolo26n_random.safetensors"); }

TEST(DetectorGpu, F32MatchesTheReferenceDetections) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const float conf = metadata_float("e2e_conf");
  const core::Tensor reference = clipped_reference_detections();
  Detector detector(weights_path(), {.device = "cuda",
                                     .dtype = core::DType::f32,
                                     .imgsz = std::array<int64_t, 2>{320, 320},
                                     .conf = conf});
  EXPECT_EQ(detector.device(), "cuda");
  for (int run = 0; run < 2; ++run) {
    const FoundTensors t = as_tensors(detector.detect(upscale_nearest(fixture_image("image_320"), 2)), 0.5);
    expect_same_detections({t.dets, t.count}, {reference, output("e2e.count")}, score_tolerance(),
                           box_tolerance(), "cuda f32, run " + std::to_string(run));
  }
}

TEST(DetectorGpu, F16EqualsTheModelOnTheCpuLetterbox) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  Detector detector(weights_path(), {.device = "cuda", .imgsz = std::array<int64_t, 2>{320, 320}, .conf = 0.01f});
  EXPECT_EQ(detector.dtype(), core::DType::f16);
  const std::vector<data::Image> images = {fixture_image("image_192x320"), upscale_nearest(fixture_image("image_320"), 2),
                                           fixture_image("image_320")};

  // The same model fed the CPU letterbox (f32 NCHW on the host; the plan converts it to f16 NHWC).
  models::yolo::Yolo26Model::Options o;
  o.inference.postprocess.conf = 0.01f;
  auto model = models::yolo::Yolo26Model::load(weights_path(), graph::cuda_backend(), o);
  std::vector<std::pair<int64_t, int64_t>> sizes;
  for (const data::Image& im : images) sizes.emplace_back(im.height, im.width);
  const auto t = data::letterbox_batch(sizes, 320, 320, 32);
  core::Tensor input = core::Tensor::zeros(core::Shape{3, 3, t[0].input_h, t[0].input_w});
  for (size_t i = 0; i < images.size(); ++i)
    data::write_normalized(data::letterbox(images[i], t[i]), input, static_cast<int64_t>(i));
  const auto out = model.forward(input);
  const core::Tensor dets = model.executor().backend().download(out[0]);
  const core::Tensor count = model.executor().backend().download(out[1]);

  for (int run = 0; run < 2; ++run) {
    const std::vector<std::vector<data::Detection>> found = detector.detect(images);
    ASSERT_EQ(found.size(), images.size());
    for (size_t i = 0; i < images.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "run " << run << " image " << i);
      ASSERT_EQ(static_cast<int64_t>(found[i].size()), count.data<int32_t>()[i]);
      ASSERT_FALSE(found[i].empty());
      for (size_t r = 0; r < found[i].size(); ++r) {
        const float* row = dets.data<float>() + (static_cast<int64_t>(i) * dets.dim(1) + static_cast<int64_t>(r)) * 6;
        EXPECT_EQ(found[i][r].box, t[i].to_original({row[0], row[1], row[2], row[3]})) << "row " << r;
        EXPECT_EQ(found[i][r].score, row[4]);
        EXPECT_EQ(found[i][r].cls, static_cast<int64_t>(row[5]));
      }
    }
  }
}

}  // namespace
