#include <gtest/gtest.h>

#include "ops/op_harness.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"

namespace vision::test {
namespace {

using graph::Mode;
using ops::BatchNorm2dOp;
using ops::Conv2dAttrs;
using ops::Conv2dOp;
using ops::SiluOp;

// conv → bn → silu run as three separate inference ops, with random state everywhere.
struct Separate {
  Conv2dOp conv_op;
  BatchNorm2dOp bn_op{1e-3f, 0.03f};
  SiluOp silu_op;
  OpHarness conv, bn, silu;

  Separate(const Conv2dAttrs& a, const Shape& x)
      : conv_op(a),
        conv(conv_op, {random_tensor(x)}),
        bn(bn_op, {Tensor::zeros(a.output_shape(x))}),
        silu(silu_op, {Tensor::zeros(a.output_shape(x))}) {
    for (auto& p : conv.params) p = random_tensor(p.shape());
    randomize_batchnorm(bn);
  }
  Tensor run(bool with_bn, bool with_silu) {
    Tensor y = conv.forward();
    if (with_bn) {
      bn.inputs[0] = y;
      y = bn.forward(false);
    }
    if (with_silu) {
      silu.inputs[0] = y;
      y = silu.forward();
    }
    return y;
  }
  // The fused op's harness with the same state (conv's then bn's, the fused op's order).
  OpHarness fused(const graph::Op& op, bool with_bn) {
    OpHarness h(op, {conv.inputs[0]});
    std::vector<Tensor> state = conv.params;
    if (with_bn) state.insert(state.end(), bn.params.begin(), bn.params.end());
    EXPECT_EQ(h.params.size(), state.size());
    for (size_t i = 0; i < state.size() && i < h.params.size(); ++i) h.params[i].copy_from(state[i]);
    return h;
  }
};

const Conv2dAttrs kAttrs[] = {
    {.in_channels = 4, .out_channels = 6, .kernel = 3},
    {.in_channels = 4, .out_channels = 8, .kernel = 3, .stride = 2, .bias = true},
    {.in_channels = 6, .out_channels = 6, .kernel = 3, .groups = 6},
    {.in_channels = 8, .out_channels = 4, .kernel = 1},
};

TEST(ConvFusion, ConvBatchnormFoldsIntoOneConvolution) {
  for (const auto& a : kAttrs) {
    Separate s(a, {2, a.in_channels, 9, 8});
    auto fused = s.conv_op.fuse_with(s.bn_op, Mode::inference, "conv.", "bn.");
    ASSERT_NE(fused, nullptr);
    EXPECT_EQ(fused->name(), "ops.conv2d_bn");
    OpHarness h = s.fused(*fused, true);
    std::vector<std::string> names;
    for (auto& spec : h.specs()) names.push_back(spec.name);
    std::vector<std::string> want{"conv.weight"};
    if (a.bias) want.push_back("conv.bias");
    for (auto n : {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"})
      want.push_back(n);
    EXPECT_EQ(names, want);
    EXPECT_EQ(h.specs()[h.param_index("bn.running_var")].kind, graph::StateKind::buffer);
    EXPECT_LT(rel_error(h.forward().to_vector(), s.run(true, false).to_vector()), 1e-5);
  }
}

TEST(ConvFusion, ConvBatchnormSiluIsOneOp) {
  for (const auto& a : kAttrs) {
    Separate s(a, {2, a.in_channels, 7, 10});
    auto conv_bn = s.conv_op.fuse_with(s.bn_op, Mode::inference, "conv.", "bn.");
    ASSERT_NE(conv_bn, nullptr);
    auto all = conv_bn->fuse_with(s.silu_op, Mode::inference, "", "act.");
    ASSERT_NE(all, nullptr);
    EXPECT_EQ(all->name(), "ops.conv2d_bn_silu");
    EXPECT_EQ(all->fuse_with(s.silu_op, Mode::inference, "", ""), nullptr);  // one epilogue only
    OpHarness h = s.fused(*all, true);
    EXPECT_EQ(h.specs()[0].name, "conv.weight");
    EXPECT_LT(rel_error(h.forward().to_vector(), s.run(true, true).to_vector()), 1e-5);
  }
}

TEST(ConvFusion, ConvSilu) {
  const Conv2dAttrs a{.in_channels = 3, .out_channels = 5, .kernel = 3, .bias = true};
  Separate s(a, {2, 3, 6, 6});
  auto fused = s.conv_op.fuse_with(s.silu_op, Mode::inference, "conv.", "act.");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->name(), "ops.conv2d_silu");
  OpHarness h = s.fused(*fused, false);
  EXPECT_EQ(h.specs().size(), 2u);
  EXPECT_EQ(h.specs()[1].name, "conv.bias");
  EXPECT_LT(rel_error(h.forward().to_vector(), s.run(false, true).to_vector()), 1e-5);
}

TEST(ConvFusion, NestedPrefixesAndTrainingMode) {
  const Conv2dAttrs a{.in_channels = 3, .out_channels = 4, .kernel = 3};
  Conv2dOp conv(a);
  BatchNorm2dOp bn(1e-3f, 0.03f);
  SiluOp silu;
  EXPECT_EQ(conv.fuse_with(bn, Mode::train, "conv.", "bn."), nullptr);
  EXPECT_EQ(conv.fuse_with(silu, Mode::train, "conv.", "act."), nullptr);
  EXPECT_EQ(conv.fuse_with(conv, Mode::inference, "a.", "b."), nullptr);
  auto conv_bn = conv.fuse_with(bn, Mode::inference, "conv.", "bn.");
  ASSERT_NE(conv_bn, nullptr);
  EXPECT_THROW(conv_bn->lower(graph::Backend::cpu, Mode::train), Error);
  EXPECT_EQ(conv_bn->fuse_with(silu, Mode::train, "m.", "act."), nullptr);
  auto all = conv_bn->fuse_with(silu, Mode::inference, "m.", "act.");
  ASSERT_NE(all, nullptr);
  OpHarness h(*all, {random_tensor({1, 3, 5, 5})});
  EXPECT_EQ(h.specs().front().name, "m.conv.weight");
  EXPECT_EQ(h.specs().back().name, "m.bn.num_batches_tracked");
  EXPECT_EQ(all->infer_output_shape({{Shape::kAny, 3, 5, 5}}), (Shape{Shape::kAny, 4, 5, 5}));
  EXPECT_THROW(all->infer_output_shape({{1, 4, 5, 5}}), Error);
}

}  // namespace
}  // namespace vision::test
