// YOLO26's Attention block on CUDA against the float64 PyTorch fixture: f32 NCHW (the suite's f32 bounds), and f16 /
// bf16 in NCHW and NHWC plans (the block's convolutions, BatchNorm, PSA copies and FlashAttention-2 all in the plan's
// format), both PSA forms, as three ops and fused into one step; inference (BatchNorm folded, graph replay) and a training step.
#include <gtest/gtest.h>

#include "error_bounds.h"
#include "models/yolo/attention_fixture.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"

using namespace vision;
using namespace vision::test::attention_fixture;
using core::DType;
using core::Layout;
using models::yolo::kernels::attention::PsaForm;

namespace {

struct Case {
  DType dtype;
  Layout layout;
  PsaForm form;
  bool fused = false;
};
std::string name(const testing::TestParamInfo<Case>& i) {
  return std::string(core::dtype_name(i.param.dtype)) + "_" + std::string(core::layout_name(i.param.layout)) + "_" +
         Variant{i.param.form, i.param.fused}.name();
}

class AttentionBlockGpu : public testing::TestWithParam<Case> {};

// Bounds. f32: 1e-5 in relative norm (forward and gradients), as on the CPU. f16/bf16: the block rounds its values to
// the dtype at about six points on the way to y (input, qkv, FlashAttention-2's P and output, the pe sum, proj), each
// worth at most about u in relative norm: 8u for the output; the gradients go through the same chain twice more
// (backward of the attention and of three BatchNorms in batch-statistics mode): 32u, as for the small network.
TEST_P(AttentionBlockGpu, MatchesTheFloat64Fixture) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  const Case c = GetParam();
  const double u = test::unit_roundoff(c.dtype);
  const bool f32 = c.dtype == DType::f32;
  graph::Executor ex(attention_graph({c.form, c.fused}), graph::cuda_backend(),
                     graph::PlanOptions{.compute_dtype = c.dtype, .layout = c.layout});
  load(ex);
  for (int run = 0; run < 3; ++run) {  // eager, captured, replayed
    const auto y = test::to_host(ex, ex.forward({get("x")})[0]);
    const double err = test::rel_error(y, test::to_double(get("y_eval")));
    EXPECT_LT(err, f32 ? 1e-5 : 8 * u) << "run " << run;
    if (!f32) EXPECT_GT(err, 1e-6) << "computed in " << core::dtype_name(c.dtype);
  }
  EXPECT_TRUE(ex.plan(graph::Mode::inference, {get("x").shape()}).graph_replayed());
  const float loss = test::to_host(ex, ex.forward_train({get("x"), get("r")})[0])[0];
  const float ref_loss = get("loss").to_vector()[0];
  // The loss is a mean of products that cancel (|loss| ≪ mean |y·r|): bounded by the output's error instead.
  EXPECT_NEAR(loss, ref_loss, (f32 ? 1e-5 : 8 * u) * std::abs(ref_loss) + (f32 ? 1e-7 : 8 * u * 1e-1));
  ex.backward();
  expect_gradients_match(ex.state(), f32 ? 1e-5 : 32 * u);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, AttentionBlockGpu,
    testing::Values(Case{DType::f32, Layout::nchw, PsaForm::two_pass}, Case{DType::f32, Layout::nchw, PsaForm::one_pass},
                    Case{DType::f32, Layout::nhwc, PsaForm::one_pass}, Case{DType::f16, Layout::nchw, PsaForm::one_pass},
                    Case{DType::f16, Layout::nhwc, PsaForm::two_pass}, Case{DType::f16, Layout::nhwc, PsaForm::one_pass},
                    Case{DType::bf16, Layout::nchw, PsaForm::two_pass},
                    Case{DType::bf16, Layout::nhwc, PsaForm::one_pass},
                    // fused: the direct attention kernel in f16/bf16 NHWC inference on sm_90a, the rows otherwise
                    Case{DType::f32, Layout::nchw, PsaForm::one_pass, true},
                    Case{DType::f16, Layout::nhwc, PsaForm::one_pass, true},
                    Case{DType::bf16, Layout::nhwc, PsaForm::one_pass, true},
                    Case{DType::f16, Layout::nhwc, PsaForm::two_pass, true}),
    name);

// The fused step's inference in f16 and bf16 NHWC: on sm_90a its attention kernel reads Q, K, V straight from qkv and
// writes the merged image, with the same tiles and arithmetic as FlashAttention-2's wgmma forward over packed rows:
// the output equals the three ops' bit for bit. Its training step (rows again) equals theirs too.
TEST(AttentionBlockGpu, FusedStepEqualsTheThreeOpsBitForBit) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  for (DType dtype : {DType::f16, DType::bf16}) {
    const graph::PlanOptions options{.compute_dtype = dtype, .layout = Layout::nhwc};
    graph::Executor a(attention_graph({PsaForm::one_pass, false}), graph::cuda_backend(), options);
    graph::Executor b(attention_graph({PsaForm::one_pass, true}), graph::cuda_backend(), options);
    load(a);
    load(b);
    for (int run = 0; run < 3; ++run)  // eager, captured, replayed
      EXPECT_EQ(test::to_host(a, a.forward({get("x")})[0]), test::to_host(b, b.forward({get("x")})[0]))
          << core::dtype_name(dtype) << " run " << run;
    const auto& steps = b.plan(graph::Mode::inference, {get("x").shape()}).steps();
    bool fused_step = false, direct = false;
    for (const graph::PlanStep& s : steps) {
      fused_step = fused_step || s.op->name() == "yolo.psa_attention";
      for (const graph::KernelInfo& k : s.runtime->kernels()) direct = direct || k.name == "psa_attention_forward_sm90";
    }
    EXPECT_TRUE(fused_step);
    EXPECT_EQ(b.plan(graph::Mode::inference, {get("x").shape()}).conversion_steps(),
              a.plan(graph::Mode::inference, {get("x").shape()}).conversion_steps())
        << "the fused step runs in the plan's format (only the f32 NCHW input and output are converted)";
    EXPECT_EQ(direct, cuda::current_arch() == "sm_90a") << "the direct kernel runs exactly on sm_90a";
    EXPECT_EQ(test::to_host(a, a.forward_train({get("x"), get("r")})[0]),
              test::to_host(b, b.forward_train({get("x"), get("r")})[0]));
    a.backward();
    b.backward();
    EXPECT_EQ(test::to_host(a, a.state().flat_grads()), test::to_host(b, b.state().flat_grads()));
  }
}

}  // namespace
