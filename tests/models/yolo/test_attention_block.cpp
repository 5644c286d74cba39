// YOLO26's Attention block (qkv conv → pack → FlashAttention-2 → merge; extract V → depthwise pe → add → proj) on the
// CPU against the float64 PyTorch fixture of YOLO26.md's formula: inference (BatchNorm on running statistics, folded)
// and a training step (batch statistics; every parameter's gradient), in both PSA forms, as three ops and fused.
#include <gtest/gtest.h>

#include "models/yolo/attention_fixture.h"
#include "vision/models/yolo/kernels/attention/psa_attention.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_attention_block_cpp {

using namespace vision;
using namespace vision::test::attention_fixture;
using models::yolo::kernels::attention::PsaForm;

namespace {

class AttentionBlock : public testing::TestWithParam<Variant> {};

// f32 throughout (oneDNN convolutions, the FlashAttention-2 CPU twin): the suite's f32 bound, 1e-5 in relative norm.
TEST_P(AttentionBlock, MatchesTheFloat64FixtureForwardAndGradients) {
  graph::Executor ex(attention_graph(GetParam()), graph::cpu_backend());
  load(ex);
  const auto y = ex.forward({get("x")})[0].to_vector();
  EXPECT_LT(test::rel_error(y, test::to_double(get("y_eval"))), 1e-5);

  const float loss = ex.forward_train({get("x"), get("r")})[0].to_vector()[0];
  EXPECT_NEAR(loss, get("loss").to_vector()[0], 1e-5 * std::abs(get("loss").to_vector()[0]));
  ex.backward();
  expect_gradients_match(ex.state(), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Variants, AttentionBlock,
                         testing::Values(Variant{PsaForm::two_pass, false}, Variant{PsaForm::one_pass, false},
                                         Variant{PsaForm::two_pass, true}, Variant{PsaForm::one_pass, true}),
                         [](const testing::TestParamInfo<Variant>& i) { return i.param.name(); });

// The fused step runs the three ops' RuntimeOps over rows of its own: outputs and every gradient bit for bit the
// same as the separate ops', in both forms.
TEST(AttentionBlock, FusedStepEqualsTheThreeOpsBitForBit) {
  for (PsaForm form : {PsaForm::two_pass, PsaForm::one_pass}) {
    graph::Executor a(attention_graph({form, false}), graph::cpu_backend());
    graph::Executor b(attention_graph({form, true}), graph::cpu_backend());
    load(a);
    load(b);
    EXPECT_EQ(a.forward({get("x")})[0].to_vector(), b.forward({get("x")})[0].to_vector());
    EXPECT_EQ(a.forward_train({get("x"), get("r")})[0].to_vector(), b.forward_train({get("x"), get("r")})[0].to_vector());
    b.state().flat_grads().fill(std::nanf(""));  // poison: backward must write every gradient
    a.backward();
    b.backward();
    EXPECT_EQ(a.state().flat_grads().to_vector(), b.state().flat_grads().to_vector());
  }
}

TEST(PsaAttentionOp, ShapesAndErrors) {
  using models::yolo::kernels::attention::PsaAttentionOp;
  using models::yolo::kernels::attention::PsaConfig;
  const PsaAttentionOp op(PsaConfig{16, 2, PsaForm::one_pass});
  EXPECT_EQ(op.infer_output_shape({core::Shape{3, 128, 4, 5}}), (core::Shape{3, 64, 4, 5}));
  EXPECT_EQ(op.infer_output_shape({core::Shape{3, 128, 8, 2}}), (core::Shape{3, 64, 8, 2}));  // any size
  EXPECT_THROW(op.infer_output_shape({core::Shape{3, 96, 4, 5}}), Error);  // not 4·key_dim·heads channels
  EXPECT_THROW(op.infer_output_shape({core::Shape{3, 128, 20}}), Error);   // not an image
  EXPECT_THROW(PsaAttentionOp(PsaConfig{0, 2, PsaForm::one_pass}), Error);
}

// The two-pass op's backward adds dQ and dK over both halves: its gradients equal the one-pass op's.
TEST(AttentionBlock, TwoPassAndOnePassGradientsAgree) {
  graph::Executor a(attention_graph({PsaForm::two_pass, false}), graph::cpu_backend());
  graph::Executor b(attention_graph({PsaForm::one_pass, false}), graph::cpu_backend());
  load(a);
  load(b);
  a.forward_train({get("x"), get("r")});
  a.backward();
  b.forward_train({get("x"), get("r")});
  b.backward();
  EXPECT_LT(test::rel_error(a.state().flat_grads().to_vector(), test::to_double(b.state().flat_grads())), 1e-5);
}

TEST(FlashAttn2PsaOp, ShapesAndErrors) {
  using models::yolo::kernels::attention::FlashAttn2PsaOp;
  using models::yolo::kernels::attention::PsaConfig;
  const FlashAttn2PsaOp two(PsaConfig{16, 2, PsaForm::two_pass}), one(PsaConfig{16, 2, PsaForm::one_pass});
  const core::Shape q{4, 20, 16}, v{4, 20, 32};
  EXPECT_EQ(two.infer_output_shapes({q, q, q, q}), (std::vector<core::Shape>{q, q}));
  EXPECT_EQ(one.infer_output_shapes({q, q, v}), (std::vector<core::Shape>{v}));
  EXPECT_THROW(one.infer_output_shapes({q, q, q}), Error);      // V must be 2·key_dim wide
  EXPECT_THROW(two.infer_output_shapes({q, q, v}), Error);      // two inputs missing
  EXPECT_FLOAT_EQ(two.scale(), 0.25f);
}

}  // namespace

}  // namespace test_attention_block_cpp
