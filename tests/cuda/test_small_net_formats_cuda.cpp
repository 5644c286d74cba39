// The foundation's small network through the executor on CUDA in f16 NHWC and bf16 NHWC (and f32 NHWC) against
// f32 NCHW and float64: inference (BatchNorm folded in f32, then cast; graph replay) and a training step (f32 master
// weights, compute copies, gradients converted into the f32 buffer; dynamic loss scaling in f16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "error_bounds.h"
#include "models/small_net_reference.h"
#include "test_util.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/executor.h"
#include "vision/graph/loss_scaler.h"
#include "vision/models/demo/small_net.h"
#include "vision/ops/elementwise.h"

using namespace vision;
using namespace vision::graph;
using core::Layout;
using models::demo::SmallNetConfig;

namespace {

struct FormatCase {
  DType dtype;
  Layout layout;
};
std::string case_name(const testing::TestParamInfo<FormatCase>& info) {
  return std::string(core::dtype_name(info.param.dtype)) + "_" + std::string(core::layout_name(info.param.layout));
}

void copy_state(StateStore& from, Executor& to, const std::vector<Shape>& shapes) {
  auto& dst = to.state(shapes);
  for (auto& [key, t] : from.to_host()) dst.set_from_host(key, t);
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// The training step's gradients against f32 NCHW's, split at the max-pool. net.0's parameters reach the loss through
// max-pool's backward, which sends each 2×2 window's gradient to its largest input; in low precision near-equal
// inputs round to equal or reordered values (SiLU's flat minimum, −0.278 at x ≈ −1.28, makes such windows common),
// so a few windows send their gradient to another pixel than f32 does — a discontinuity every low-precision
// implementation has. Measured on the H100 over eight seeds (f16): net.0.conv.weight up to 0.035 (71 u), every
// parameter past the pool and net.0's BatchNorm ≤ 3 u.
struct GradErrors {
  double before_pool = 0;  // net.0.*
  double after_pool = 0;   // everything else
};
GradErrors grad_errors(Executor& low, Executor& ref) {
  std::vector<float> got[2], want[2];
  for (const StateEntry& e : ref.state().entries()) {
    if (e.kind != StateKind::parameter) continue;
    const int part = e.key.rfind("net.0.", 0) == 0 ? 0 : 1;
    const auto g = test::to_host(low, low.state().grad(e.key)), w = test::to_host(ref, ref.state().grad(e.key));
    got[part].insert(got[part].end(), g.begin(), g.end());
    want[part].insert(want[part].end(), w.begin(), w.end());
  }
  EXPECT_FALSE(got[0].empty() || got[1].empty());
  return {test::rel_error(got[0], test::to_double(want[0])), test::rel_error(got[1], test::to_double(want[1]))};
}

class SmallNetFormats : public testing::TestWithParam<FormatCase> {};

}  // namespace

// Inference: every output element within its first-order bound for the storage dtype (the f32 arithmetic's γ_K terms
// plus one unit roundoff per stored value on its way), eager and replayed alike; every step but the input and output
// conversions ran in the plan's format.
TEST_P(SmallNetFormats, InferenceWithinTheStorageDtypesBound) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const FormatCase c = GetParam();
  const SmallNetConfig cfg{.in_channels = 3, .width = 16};
  const Shape shape{2, 3, 32, 24};
  Executor cpu(models::demo::small_net(cfg), cpu_backend());
  Executor gpu(models::demo::small_net(cfg), cuda_backend(), PlanOptions{.compute_dtype = c.dtype, .layout = c.layout});
  test::randomize_batchnorm_state(cpu.state({shape}));
  copy_state(cpu.state(), gpu, {shape});
  for (int run = 0; run < 3; ++run) {  // eager, captured, replayed on new data
    SCOPED_TRACE(testing::Message() << "run " << run);
    const Tensor x = test::random_tensor(shape);
    const test::SmallNetReference ref = test::small_net_reference(cpu.state(), x, 1e-3, c.dtype);
    const Tensor out = gpu.forward({x})[0];
    EXPECT_EQ(out.dtype(), DType::f32);
    EXPECT_EQ(out.layout(), Layout::nchw);
    const auto got = test::to_host(gpu, out);
    EXPECT_TRUE(test::within_bounds(got, ref.y, ref.bound));
    EXPECT_LT(test::rel_error(got, ref.y), norm(ref.bound) / norm(ref.y));
    if (c.dtype != DType::f32) EXPECT_GT(test::rel_error(got, ref.y), 1e-5);  // it did compute in low precision
  }
  Plan& plan = gpu.plan(Mode::inference, {shape});
  EXPECT_TRUE(plan.graph_replayed());
  for (const PlanStep& s : plan.steps())
    if (s.op->name() != "plan.convert") EXPECT_EQ(s.format, (Format{c.dtype, c.layout})) << plan.describe();
  // The input's conversion and the output's, nothing in between.
  EXPECT_EQ(plan.conversion_steps(), c.dtype == DType::f32 && c.layout == Layout::nchw ? 0u : 2u) << plan.describe();
}

// A training step: the loss and the f32 gradients against the f32 NCHW plan on the GPU. Tolerances: the loss by the
// error of the outputs it averages (below); the gradients past the max-pool, through two BatchNorms in
// batch-statistics mode and three convolutions, within 32 u in relative L2 norm (bf16: 0.125, f16: 0.016); net.0's,
// behind the pool's window choices (grad_errors), within max(32 u, 0.1) — a wrong layout, a gradient left in its
// compute copy or one not converted gives O(1).
TEST_P(SmallNetFormats, TrainingStepMatchesF32) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const FormatCase c = GetParam();
  const SmallNetConfig cfg{.in_channels = 3, .width = 16, .loss = SmallNetConfig::Loss::projection};
  const Shape xs{4, 3, 16, 16}, rs{4, 16, 16, 16};
  Executor ref(models::demo::small_net(cfg), cuda_backend());
  Executor low(models::demo::small_net(cfg), cuda_backend(), PlanOptions{.compute_dtype = c.dtype, .layout = c.layout});
  test::randomize_batchnorm_state(ref.state({xs, rs}));
  copy_state(ref.state(), low, {xs, rs});
  const Tensor x = test::random_tensor(xs), r = test::random_tensor(rs);
  const float loss_ref = test::to_host(ref, ref.forward_train({x, r})[0])[0];
  ref.backward();
  const double u = test::unit_roundoff(c.dtype);

  LossScaler scaler(LossScaler::Options{.initial_scale = c.dtype == DType::f16 ? 65536.0f : 1.0f});
  float loss = 0;
  bool finite = false;
  for (int attempt = 0; attempt < 24 && !finite; ++attempt) {  // f16: skip and shrink until nothing overflows
    loss = test::to_host(low, low.forward_train({x, r})[0])[0];
    low.backward({}, false, scaler.scale());
    finite = scaler.unscale(low.state());
  }
  ASSERT_TRUE(finite) << "the loss scale fell to " << scaler.scale();
  // The loss mean(y ∘ r) cancels (|loss| ≪ mean |y·r|), so its error is bounded by the outputs' own: each y_i within
  // about 4u·|y_i| of f32, independent round-to-nearest errors, so |Δloss| ≤ 7.5 · 4u · sqrt(Σ (r_i y_i)²) / N ≤
  // 30u · sqrt(Σ y_i²) / N (|r| ≤ 1; Hoeffding at 7.5σ, see error_bounds.h). Σ y² from the same state and batch in f32.
  // An output in the wrong layout would give an uncorrelated loss, several times this bound.
  Executor squares(models::demo::small_net({.in_channels = 3, .width = 16, .loss = SmallNetConfig::Loss::sum_squares}),
                   cuda_backend());
  copy_state(ref.state(), squares, {xs});
  const double sum_y2 = test::to_host(squares, squares.forward_train({x})[0])[0];
  const double n_y = static_cast<double>(rs.numel());
  EXPECT_NEAR(loss, loss_ref, 30 * u * std::sqrt(sum_y2) / n_y + 1e-7);
  const GradErrors err = grad_errors(low, ref);
  EXPECT_LT(err.after_pool, c.dtype == DType::f32 ? 5e-5 : 32 * u);
  EXPECT_LT(err.before_pool, c.dtype == DType::f32 ? 5e-5 : std::max(32 * u, 0.1));
  // BatchNorm statistics stay f32 and see the same batch.
  for (const char* key : {"net.0.bn.running_mean", "net.0.bn.running_var"})
    EXPECT_LT(test::rel_error(test::to_host(low, low.state().tensor(key)),
                              test::to_double(test::to_host(ref, ref.state().tensor(key)))),
              c.dtype == DType::f32 ? 1e-5 : 8 * u)
        << key;
  if (c.dtype != DType::f32) EXPECT_GT(low.state().compute_copies(), 0u);
}

// The training plans' BatchNorm → SiLU fusion does not make a low-precision step less exact: the same step with
// the fusion on and off (PlanOptions::fuse_training), the gradients past the max-pool against the f32 NCHW plan's
// (fused: cuDNN's statistics, the apply in f64, our fused backward); the fused error within 1.5× the unfused one
// plus u/2 (the two differ in where y and dy are rounded, the fused keeping them in f32; f32 NHWC: both within
// 5e-5). net.0's gradients, behind the pool's window choices, which the two roundings make differently, within the
// bound of TrainingStepMatchesF32. Both errors are printed.
TEST_P(SmallNetFormats, TrainingStepFusionKeepsTheUnfusedError) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const FormatCase c = GetParam();
  const SmallNetConfig cfg{.in_channels = 3, .width = 16, .loss = SmallNetConfig::Loss::projection};
  const Shape xs{4, 3, 16, 16}, rs{4, 16, 16, 16};
  Executor ref(models::demo::small_net(cfg), cuda_backend());
  test::randomize_batchnorm_state(ref.state({xs, rs}));
  const Tensor x = test::random_tensor(xs), r = test::random_tensor(rs);
  (void)ref.forward_train({x, r});
  ref.backward();
  const double u = test::unit_roundoff(c.dtype);
  double err[2] = {0, 0};
  for (const bool fuse : {false, true}) {
    Executor low(models::demo::small_net(cfg), cuda_backend(),
                 PlanOptions{.compute_dtype = c.dtype, .layout = c.layout, .fuse_training = fuse});
    copy_state(ref.state(), low, {xs, rs});
    LossScaler scaler(LossScaler::Options{.initial_scale = c.dtype == DType::f16 ? 65536.0f : 1.0f});
    bool finite = false;
    for (int attempt = 0; attempt < 24 && !finite; ++attempt) {
      (void)low.forward_train({x, r});
      low.backward({}, false, scaler.scale());
      finite = scaler.unscale(low.state());
    }
    ASSERT_TRUE(finite) << "fuse " << fuse << ": the loss scale fell to " << scaler.scale();
    const GradErrors e = grad_errors(low, ref);
    err[fuse] = e.after_pool;
    EXPECT_LT(e.before_pool, c.dtype == DType::f32 ? 5e-5 : std::max(32 * u, 0.1)) << "fuse " << fuse;
  }
  std::printf("gradients' relative error past the max-pool against f32 NCHW: unfused %.4g, fused %.4g (u = %.3g)\n",
              err[0], err[1], u);
  if (c.dtype == DType::f32)  // both at f32's level, where their ratio is noise
    EXPECT_LT(err[1], 5e-5);
  else
    EXPECT_LE(err[1], 1.5 * err[0] + 0.5 * u);
}

INSTANTIATE_TEST_SUITE_P(CudaFormats, SmallNetFormats,
                         testing::Values(FormatCase{DType::f32, Layout::nhwc}, FormatCase{DType::f16, Layout::nhwc},
                                         FormatCase{DType::bf16, Layout::nhwc}, FormatCase{DType::f16, Layout::nchw},
                                         FormatCase{DType::bf16, Layout::nchw}),
                         case_name);

// A plan for an f16 NHWC input takes exactly that, on the GPU too.
TEST(SmallNetFormatsCuda, InputOfTheWrongDeclaredFormatIsRejected) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  auto g = std::make_shared<Graph>();
  auto x = g->input("image", Shape{1, 3, 8, 8}, DType::f16, Layout::nhwc);
  g->mark_output(ops::silu(x, "act"));
  Executor ex(g, cuda_backend(), PlanOptions{.compute_dtype = DType::f16, .layout = Layout::nhwc});
  const Tensor ok = Tensor::zeros(Shape{1, 3, 8, 8}, DType::f16, Layout::nhwc);
  EXPECT_NO_THROW(ex.forward({ex.backend().upload(ok)}));
  for (const Tensor& wrong : {Tensor::zeros(Shape{1, 3, 8, 8}, DType::f16, Layout::nchw),
                              Tensor::zeros(Shape{1, 3, 8, 8}, DType::f32, Layout::nhwc)}) {
    try {
      ex.forward({ex.backend().upload(wrong)});
      ADD_FAILURE() << "accepted " << wrong.str();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("f16 [1, 3, 8, 8] nhwc"), std::string::npos) << e.what();
    }
  }
}
