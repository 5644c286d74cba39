// Every built-in op on the GPU against its CPU twin, forward and backward, on identical inputs and state.
#include <gtest/gtest.h>

#include <functional>

#include "ops/op_harness.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/pool.h"
#include "vision/ops/reduce.h"
#include "vision/ops/shape_ops.h"
#include "vision/ops/upsample.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_cuda_ops_cpp {

using namespace vision;
using namespace vision::test;
using graph::Mode;

namespace {

// f32 on both sides, IEEE arithmetic (no TF32): only summation order differs.
constexpr double kF32Bound = 1e-5;

// Element-wise bound, so that one wrong element cannot hide in the norm: 1e-4·max|y|, ten times the norm bound on the
// scale of the largest element. The two sides reorder f32 sums of at most K = 3·5·11·13 = 2145 terms (the largest
// reduction here: the scalar reductions), which moves an element by about sqrt(K)·2^-24 ≈ 3e-6 of its terms'
// magnitude, and those magnitudes stay within a few max|y| for random inputs; a wrong element (an error of the
// order of |y|) exceeds the bound by orders of magnitude.
double max_abs_bound(const Tensor& ref) { return 1e-4 * max_abs(ref.to_vector()); }

// Runs op on the CPU and on the GPU (one OpHarness each, the GPU one the CPU one's twin) from the same inputs and
// state and compares the output, every input gradient and every parameter gradient (and, in training, the updated
// state). `prepare` may change the CPU harness's state first (random BatchNorm statistics); the twin copies it.
void compare_with_cpu_twin(const graph::Op& op, std::vector<Tensor> inputs, Mode mode = Mode::train,
                           const std::function<void(OpHarness&)>& prepare = {}) {
  OpHarness cpu(op, std::move(inputs), mode);
  if (prepare) prepare(cpu);
  OpHarness gpu(op, cpu, graph::cuda_backend());
  const bool training = mode == Mode::train;
  const Tensor y_cpu = cpu.forward(training);
  const Tensor y_gpu = gpu.forward(training);
  EXPECT_LT(rel_error(y_gpu.to_vector(), y_cpu.to_vector()), kF32Bound) << op.name() << " forward";
  EXPECT_LT(max_abs_error(y_gpu.to_vector(), y_cpu.to_vector()), max_abs_bound(y_cpu)) << op.name() << " forward";
  for (size_t j = 0; j < cpu.params.size(); ++j)
    if (cpu.specs()[j].dtype == DType::f32)
      EXPECT_LT(rel_error(gpu.params[j].to_vector(), cpu.params[j].to_vector()), kF32Bound)
          << op.name() << " state " << cpu.specs()[j].name << " after forward";
  if (!training) return;
  const Tensor dy = random_tensor(y_cpu.shape());
  const auto g_cpu = cpu.backward(dy);
  const auto g_gpu = gpu.backward(dy);
  for (size_t i = 0; i < g_cpu.inputs.size(); ++i) {
    EXPECT_LT(rel_error(g_gpu.inputs[i].to_vector(), g_cpu.inputs[i].to_vector()), kF32Bound)
        << op.name() << " gradient of input " << i;
    EXPECT_LT(max_abs_error(g_gpu.inputs[i].to_vector(), g_cpu.inputs[i].to_vector()), max_abs_bound(g_cpu.inputs[i]))
        << op.name() << " gradient of input " << i;
  }
  for (size_t j = 0; j < g_cpu.params.size(); ++j)
    if (g_cpu.params[j].defined()) {
      EXPECT_LT(rel_error(g_gpu.params[j].to_vector(), g_cpu.params[j].to_vector()), kF32Bound)
          << op.name() << " gradient of " << cpu.specs()[j].name;
      EXPECT_LT(max_abs_error(g_gpu.params[j].to_vector(), g_cpu.params[j].to_vector()), max_abs_bound(g_cpu.params[j]))
          << op.name() << " gradient of " << cpu.specs()[j].name;
    }
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override { VISION_SKIP_WITHOUT_GPU(cuda::gpu_available()); }
};

ops::Conv2dAttrs conv(int64_t cin, int64_t cout, int64_t k, int64_t stride = 1, int64_t groups = 1, bool bias = false,
                      int64_t dilation = 1) {
  ops::Conv2dAttrs a;
  a.in_channels = cin;
  a.out_channels = cout;
  a.kernel = k;
  a.stride = stride;
  a.groups = groups;
  a.bias = bias;
  a.dilation = dilation;
  return a;
}

}  // namespace

TEST_F(CudaOps, Conv2d) {
  compare_with_cpu_twin(ops::Conv2dOp(conv(5, 7, 3, 1, 1, true)), {random_tensor({2, 5, 11, 9})});
  compare_with_cpu_twin(ops::Conv2dOp(conv(4, 6, 3, 2, 2)), {random_tensor({3, 4, 12, 10})});
  compare_with_cpu_twin(ops::Conv2dOp(conv(8, 8, 3, 1, 8)), {random_tensor({2, 8, 9, 9})});  // depthwise
  compare_with_cpu_twin(ops::Conv2dOp(conv(16, 8, 1, 1, 1, true)), {random_tensor({2, 16, 7, 5})});
  compare_with_cpu_twin(ops::Conv2dOp(conv(3, 4, 3, 1, 1, false, 2)), {random_tensor({1, 3, 10, 10})});  // dilated
  compare_with_cpu_twin(ops::Conv2dOp(conv(6, 5, 5, 1, 1, true)), {random_tensor({2, 6, 8, 8})}, Mode::inference);
}

// Random γ, β and running statistics: the running-statistics update (training) and cuDNN's inference BatchNorm see
// real values, not the identity state.
TEST_F(CudaOps, BatchNorm2dTrainingAndInference) {
  const auto random_state = [](OpHarness& h) { randomize_batchnorm(h); };
  compare_with_cpu_twin(ops::BatchNorm2dOp(1e-3f, 0.03f), {random_tensor({4, 6, 5, 7}, -2.0f, 3.0f)}, Mode::train,
                        random_state);
  compare_with_cpu_twin(ops::BatchNorm2dOp(1e-3f, 0.03f), {random_tensor({2, 6, 5, 7})}, Mode::inference,
                        random_state);
}

TEST_F(CudaOps, FusedConvBatchNormSilu) {
  for (bool bn : {false, true})
    for (bool silu : {false, true}) {
      if (!bn && !silu) continue;
      ops::ConvFusion f;
      f.batchnorm = bn;
      f.silu = silu;
      f.conv_prefix = "conv.";
      f.bn_prefix = "bn.";
      // The fold kernel sees random γ, β and running statistics.
      compare_with_cpu_twin(ops::FusedConv2dOp(conv(6, 10, 3, 1, 1, bn), f), {random_tensor({2, 6, 9, 8})},
                            Mode::inference, [bn](OpHarness& h) {
                              if (bn) randomize_batchnorm(h, "bn.");
                            });
    }
}

TEST_F(CudaOps, Elementwise) {
  compare_with_cpu_twin(ops::SiluOp(), {random_tensor({2, 3, 17, 5}, -6.0f, 6.0f)});
  compare_with_cpu_twin(ops::SigmoidOp(), {random_tensor({2, 3, 17, 5}, -6.0f, 6.0f)});
  compare_with_cpu_twin(ops::AddOp(), {random_tensor({2, 3, 7, 5}), random_tensor({2, 3, 7, 5})});
  compare_with_cpu_twin(ops::MulOp(), {random_tensor({2, 3, 7, 5}), random_tensor({2, 3, 7, 5})});
}

TEST_F(CudaOps, MaxPool2d) {
  compare_with_cpu_twin(ops::MaxPool2dOp(5, 1, 2), {random_tensor({2, 3, 10, 9})});  // SPPF's pool
  compare_with_cpu_twin(ops::MaxPool2dOp(2, 2, 0), {random_tensor({2, 3, 10, 8})});
  compare_with_cpu_twin(ops::MaxPool2dOp(3, 2, 1), {random_tensor({1, 4, 11, 7})});
  compare_with_cpu_twin(ops::MaxPool2dOp(5, 1, 2), {random_tensor({2, 3, 10, 9})}, Mode::inference);
}

TEST_F(CudaOps, UpsampleConcatSlice) {
  compare_with_cpu_twin(ops::UpsampleNearestOp(2), {random_tensor({2, 3, 5, 7})});
  compare_with_cpu_twin(ops::ConcatOp(3),
                        {random_tensor({2, 3, 4, 5}), random_tensor({2, 1, 4, 5}), random_tensor({2, 4, 4, 5})});
  compare_with_cpu_twin(ops::ChannelSliceOp(2, 3), {random_tensor({2, 7, 4, 5})});
}

TEST_F(CudaOps, ScalarReductions) {
  compare_with_cpu_twin(ops::SumSquaresOp(), {random_tensor({3, 5, 11, 13})});
  compare_with_cpu_twin(ops::MeanOp(), {random_tensor({3, 5, 11, 13})});
}

}  // namespace test_cuda_ops_cpp
