// YOLO26n's gradients on CUDA against the independent PyTorch reference (yolo26_grads_fixture.h): one training step of
// record_yolo26_training + e2e_loss in f32 (IEEE f32, no TF32, deterministic algorithms) on 4 images of 160×160 with
// 0–20 boxes each: the loss and its terms, every parameter's gradient and every BatchNorm running statistic within 2×
// the reference's own float32 error (the larger of its NCHW and channels_last runs': PyTorch on CUDA, the natural peer,
// is not in the fixture); the step run twice gives bit-identical gradients. bf16 is not covered: the
// fixture holds no bf16 reference error (see tools/reference/make_yolo26_grad_fixture.py).
#include <gtest/gtest.h>

#include "models/yolo/yolo26_grads_fixture.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_yolo26_grads_gpu_cpp {

using namespace vision;
using namespace vision::test::yolo26_grads;
using vision::test::yolo26_grads::fixture;  // before any other test file's fixture() its batch makes visible

namespace {

TEST(Yolo26GradsGpu, EveryGradientMatchesTheReferenceInF32) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  graph::Executor ex(training_loss_graph(fixture().at("targets").dim(1)), graph::cuda_backend(),
                     graph::PlanOptions{.deterministic = true, .compute_dtype = core::DType::f32});
  const StepResult first = run_step(ex);
  expect_matches_fixture(first, Peer::larger_of_two);
  const StepResult second = run_step(ex);
  for (const auto& [key, grad] : first.grads) EXPECT_EQ(grad, second.grads.at(key)) << key << ": not deterministic";
  for (const auto& [key, stat] : first.buffers) EXPECT_EQ(stat, second.buffers.at(key)) << key;
}

}  // namespace

}  // namespace test_yolo26_grads_gpu_cpp
