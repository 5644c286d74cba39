// Foundation 4a on CUDA: the capability cases of tests/graph/capability_cases.h on the GPU (each compares with the
// CPU or with exact references), and what only the GPU path has: views with graph replay, the fold of BatchNorm
// refreshed once per weight version outside the replayed graph, the fused FlashAttention-2 backward only in
// non-deterministic plans.
#include <gtest/gtest.h>

#include "graph/capability_cases.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"

namespace vision::test {
namespace {

using graph::cuda_backend;

#define GPU_CASE(name, body)                        \
  TEST(GraphCapabilitiesCuda, name) {               \
    VISION_SKIP_WITHOUT_GPU(cuda::gpu_available()); \
    body;                                           \
  }

GPU_CASE(SplitAndConcatForwardBackwardMatchFiniteDifferences,
         for (auto [batch, axis] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {2, 2}, {3, 0}})
             check_split_concat(cuda_backend(), batch, axis))
GPU_CASE(ConcatAndSplitOnEveryAxis, check_concat_split_every_axis(cuda_backend()))
GPU_CASE(ReshapeFlattenPermuteForwardAndBackward, check_reshape_permute(cuda_backend()))
GPU_CASE(ScalarInputChangesWithoutANewPlanAndUnderReplay, check_scalar_input(cuda_backend()))
GPU_CASE(DetachStopsTheGradient, check_detach(cuda_backend()))
GPU_CASE(DeterministicBackwardIsBitIdentical, check_deterministic_backward(cuda_backend()))
// f32 NCHW: cuDNN's statistics, our fused SiLU; f16/bf16 NHWC: our kernels, where the unfused plan rounds the
// normalised value and the SiLU gradient to the dtype and the fused one keeps them in f32 (the bound: a few units of
// the dtype's roundoff, far below what a wrong formula moves).
TEST(GraphCapabilitiesCuda, BatchNormSiluFusesInTrainingPlans) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  check_batchnorm_silu_fusion(cuda_backend(), {.deterministic = true}, 1e-5);
  check_batchnorm_silu_fusion(cuda_backend(), {.compute_dtype = DType::f32, .layout = core::Layout::nhwc}, 1e-5);
  check_batchnorm_silu_fusion(cuda_backend(), {.compute_dtype = DType::f16, .layout = core::Layout::nhwc}, 8 * 0x1p-11);
  check_batchnorm_silu_fusion(cuda_backend(), {.compute_dtype = DType::bf16, .layout = core::Layout::nhwc}, 8 * 0x1p-8);
}

// Inference of conv → bn → silu (fused, BatchNorm folded by refresh) under graph replay: after the BatchNorm
// statistics change, the next replay uses the new fold — and equals the CPU with the same state.
TEST(GraphCapabilitiesCuda, FoldedBatchNormFollowsTheStateUnderReplay) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto inference = std::make_shared<Graph>();
  {
    auto x = inference->input("x", Shape{4, 3, 12, 12});
    auto y = ops::conv2d(x, {.in_channels = 3, .out_channels = 16, .kernel = 3}, "c1");
    inference->mark_output(ops::silu(ops::batchnorm2d(y, 1e-3f, 0.03f, "bn1"), "act1"));
  }
  Executor gpu(inference, cuda_backend()), cpu(inference, graph::cpu_backend());
  const Tensor xt = random_tensor(Shape{4, 3, 12, 12});
  gpu.state({xt.shape()});
  cpu.state({xt.shape()});
  for (auto& [key, t] : cpu.state().to_host()) gpu.state().set_from_host(key, t);
  for (int version = 0; version < 2; ++version) {
    // Random BatchNorm state (γ, β, μ, σ² > 0), the same on both backends.
    for (const char* key : {"bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"}) {
      Tensor t = random_tensor(Shape{16}, std::string(key).find("var") != std::string::npos ? 0.2f : -1.0f, 1.5f);
      cpu.state().set_from_host(key, t);
      gpu.state().set_from_host(key, t);
    }
    const auto ref = cpu.forward({xt})[0].to_vector();
    for (int run = 0; run < 3; ++run) {  // eager, capture, replay
      const auto out = host_values(gpu, gpu.forward({xt})[0]);
      EXPECT_LT(rel_error(out, ref), 1e-5) << "version " << version << " run " << run;
    }
    EXPECT_TRUE(gpu.plan(Mode::inference, {xt.shape()}).graph_replayed());
  }
}

}  // namespace
}  // namespace vision::test
