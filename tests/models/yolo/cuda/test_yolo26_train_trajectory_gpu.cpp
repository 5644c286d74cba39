// Yolo26Trainer's training trajectory on CUDA in f32 (IEEE f32, no TF32, deterministic plans) against the independent
// PyTorch reference trainer (yolo26_train_fixture.h): YOLO26n on two fixed batches of 2 images of 128×128, 20 SGD
// steps and 5 AdamW and MuSGD steps, the loss at every iteration within 2× the reference's own float32 divergence (its
// four CPU float32 runs': PyTorch on CUDA, the natural peer, is not in the fixture), never worse than 1e-3 relative.
#include <gtest/gtest.h>

#include "models/yolo/yolo26_train_fixture.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"

using namespace vision;
using namespace vision::test::yolo26_train;

namespace {

void expect_cuda_follows(const std::string& run) {
  expect_follows_reference(run_trainer(graph::cuda_backend(), run, /*deterministic=*/true), run);
}

TEST(Yolo26TrainTrajectoryGpu, SgdFollowsTheReferenceInF32) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  expect_cuda_follows("sgd");
}

TEST(Yolo26TrainTrajectoryGpu, AdamWFollowsTheReferenceInF32) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  expect_cuda_follows("adamw");
}

TEST(Yolo26TrainTrajectoryGpu, MuSgdFollowsTheReferenceInF32) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  expect_cuda_follows("musgd");
}

}  // namespace
