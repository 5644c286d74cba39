#include <gtest/gtest.h>

#include <cmath>

#include "error_bounds.h"
#include "ops/op_harness.h"
#include "vision/graph/graph.h"
#include "vision/ops/conv2d.h"

namespace vision::test {
namespace {

using graph::Mode;
using ops::Conv2dAttrs;
using ops::Conv2dOp;

// Direct convolution in float64.
std::vector<double> conv_ref(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2dAttrs& a,
                             const Shape& out) {
  const int64_t n = x.dim(0), h = x.dim(2), wd = x.dim(3), co = out[1], oh = out[2], ow = out[3];
  const int64_t cig = a.in_channels / a.groups, cog = a.out_channels / a.groups, k = a.kernel;
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  std::vector<double> y(static_cast<size_t>(out.numel()));
  for (int64_t in = 0; in < n; ++in)
    for (int64_t oc = 0; oc < co; ++oc) {
      const int64_t g = oc / cog;
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = b ? b->data<float>()[oc] : 0.0;
          for (int64_t ic = 0; ic < cig; ++ic)
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t iy = oy * a.stride - a.pad() + ky * a.dilation;
                const int64_t ix = ox * a.stride - a.pad() + kx * a.dilation;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += static_cast<double>(xp[((in * a.in_channels + g * cig + ic) * h + iy) * wd + ix]) *
                       wp[((oc * cig + ic) * k + ky) * k + kx];
              }
          y[static_cast<size_t>(((in * co + oc) * oh + oy) * ow + ox)] = acc;
        }
    }
  return y;
}

// The weight gradient dW[oc, ic, ky, kx] = Σ_{n, oy, ox} dy[n, oc, oy, ox] · x[n, g·cig + ic, iy, ix] in float64, and
// the magnitudes of its terms: in f32 every product and every addition rounds (the f32 rounding bound of a K-term
// reduction, K = N·Ho·Wo).
std::vector<double> conv_weight_grad_ref(const Tensor& x, const Tensor& dy, const Conv2dAttrs& a,
                                         RoundingTerms* terms) {
  const int64_t n = x.dim(0), h = x.dim(2), wd = x.dim(3), co = dy.dim(1), oh = dy.dim(2), ow = dy.dim(3);
  const int64_t cig = a.in_channels / a.groups, cog = a.out_channels / a.groups, k = a.kernel;
  const float* xp = x.data<float>();
  const float* gp = dy.data<float>();
  std::vector<double> dw(static_cast<size_t>(a.weight_shape().numel()));
  for (int64_t oc = 0; oc < co; ++oc)
    for (int64_t ic = 0; ic < cig; ++ic)
      for (int64_t ky = 0; ky < k; ++ky)
        for (int64_t kx = 0; kx < k; ++kx) {
          const size_t wi = static_cast<size_t>(((oc * cig + ic) * k + ky) * k + kx);
          for (int64_t in = 0; in < n; ++in)
            for (int64_t oy = 0; oy < oh; ++oy)
              for (int64_t ox = 0; ox < ow; ++ox) {
                const int64_t iy = oy * a.stride - a.pad() + ky * a.dilation;
                const int64_t ix = ox * a.stride - a.pad() + kx * a.dilation;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const double t = static_cast<double>(gp[((in * co + oc) * oh + oy) * ow + ox]) *
                                 xp[((in * a.in_channels + (oc / cog) * cig + ic) * h + iy) * wd + ix];
                dw[wi] += t;
                if (terms) terms->add(wi, t);
              }
          if (terms) terms->add(wi, dw[wi]);
        }
  return dw;
}

struct ConvCase {
  const char* label;
  Conv2dAttrs a;
  Shape x;
};

const ConvCase kForwardCases[] = {
    {"3x3_same", {.in_channels = 4, .out_channels = 8, .kernel = 3}, {2, 4, 9, 7}},
    {"1x1_bias", {.in_channels = 6, .out_channels = 5, .kernel = 1, .bias = true}, {3, 6, 5, 5}},
    {"strided", {.in_channels = 3, .out_channels = 8, .kernel = 3, .stride = 2}, {2, 3, 11, 10}},
    {"no_padding", {.in_channels = 4, .out_channels = 4, .kernel = 3, .padding = 0, .bias = true}, {1, 4, 8, 6}},
    {"padding_2_k5", {.in_channels = 2, .out_channels = 3, .kernel = 5, .stride = 2, .padding = 2}, {2, 2, 9, 9}},
    {"dilation_2", {.in_channels = 3, .out_channels = 4, .kernel = 3, .dilation = 2}, {1, 3, 10, 9}},
    {"groups_2", {.in_channels = 8, .out_channels = 6, .kernel = 3, .groups = 2, .bias = true}, {2, 8, 7, 7}},
    {"depthwise", {.in_channels = 8, .out_channels = 8, .kernel = 3, .groups = 8}, {2, 8, 9, 9}},
    {"depthwise_strided", {.in_channels = 6, .out_channels = 6, .kernel = 3, .stride = 2, .groups = 6}, {1, 6, 8, 8}},
};

TEST(Conv2d, ForwardMatchesDirectConvolution) {
  for (const auto& c : kForwardCases) {
    SCOPED_TRACE(c.label);
    Conv2dOp op(c.a);
    OpHarness h(op, {random_tensor(c.x)});
    for (auto& p : h.params) p = random_tensor(p.shape());  // not the default init: any values
    const Tensor y = h.forward();
    EXPECT_EQ(y.shape(), c.a.output_shape(c.x));
    const auto ref = conv_ref(h.inputs[0], h.params[0], c.a.bias ? &h.params[1] : nullptr, c.a, y.shape());
    EXPECT_LT(rel_error(y.to_vector(), ref), 1e-5);
  }
}

TEST(Conv2d, TrainingForwardMatchesInference) {
  const Conv2dAttrs a{.in_channels = 4, .out_channels = 6, .kernel = 3, .stride = 2, .bias = true};
  Conv2dOp op(a);
  OpHarness train(op, {random_tensor({2, 4, 8, 8})}, Mode::train);
  const auto ref = conv_ref(train.inputs[0], train.params[0], &train.params[1], a, train.output_shape());
  EXPECT_LT(rel_error(train.forward(true).to_vector(), ref), 1e-5);
}

TEST(Conv2d, ReusesPrimitivesAcrossShapes) {
  const Conv2dAttrs a{.in_channels = 3, .out_channels = 4, .kernel = 3};
  Conv2dOp op(a);
  OpHarness h(op, {random_tensor({1, 3, 6, 6})});
  for (const Shape& s : {Shape{1, 3, 6, 6}, Shape{2, 3, 5, 7}, Shape{1, 3, 6, 6}}) {
    h.inputs[0] = random_tensor(s);
    h.output = Tensor::zeros(a.output_shape(s));
    const Tensor y = h.forward();
    EXPECT_LT(rel_error(y.to_vector(), conv_ref(h.inputs[0], h.params[0], nullptr, a, y.shape())), 1e-5);
  }
}

TEST(Conv2d, BackwardMatchesFiniteDifferences) {
  const ConvCase cases[] = {
      {"3x3_bias", {.in_channels = 3, .out_channels = 4, .kernel = 3, .bias = true}, {2, 3, 5, 5}},
      {"strided", {.in_channels = 2, .out_channels = 3, .kernel = 3, .stride = 2}, {1, 2, 7, 6}},
      {"groups_2", {.in_channels = 4, .out_channels = 4, .kernel = 3, .groups = 2, .bias = true}, {2, 4, 4, 4}},
      {"depthwise", {.in_channels = 3, .out_channels = 3, .kernel = 3, .groups = 3}, {2, 3, 5, 5}},
      {"dilation_2", {.in_channels = 2, .out_channels = 2, .kernel = 3, .dilation = 2}, {1, 2, 6, 6}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    Conv2dOp op(c.a);
    OpHarness h(op, {random_tensor(c.x)}, Mode::train);
    check_gradients(h, {.training = true, .eps = 1e-2, .tol = 1e-3});  // linear in x and w: FD is exact
  }
}

TEST(Conv2d, BackwardWithoutInputGradient) {
  const Conv2dAttrs a{.in_channels = 3, .out_channels = 4, .kernel = 3, .bias = true};
  Conv2dOp op(a);
  OpHarness h(op, {random_tensor({1, 3, 5, 5})}, Mode::train);
  h.forward(true);
  const Tensor dy = random_tensor(h.output_shape());
  const auto g = h.backward(dy, {false});
  EXPECT_FALSE(g.inputs[0].defined());
  // Bias gradient = Σ dy over batch and space.
  for (int64_t c = 0; c < 4; ++c) {
    double s = 0;
    for (int64_t i = 0; i < 25; ++i) s += dy.data<float>()[c * 25 + i];
    EXPECT_NEAR(g.params[1].data<float>()[c], s, 1e-4);
  }
  // Weight gradient against float64, as a norm and element by element (f32 rounding bound of its N·Ho·Wo-term sums).
  RoundingTerms terms(static_cast<size_t>(a.weight_shape().numel()), DType::f32);
  const auto dw = conv_weight_grad_ref(h.inputs[0], dy, a, &terms);
  EXPECT_LT(rel_error(g.params[0].to_vector(), dw), 1e-5);
  EXPECT_TRUE(within_rounding(g.params[0].to_vector(), dw, terms, DType::f32, /*k=*/1 * 5 * 5));
}

TEST(Conv2d, StateAndDefaultInit) {
  const Conv2dAttrs a{.in_channels = 16, .out_channels = 32, .kernel = 3, .bias = true};
  Conv2dOp op(a);
  OpHarness h(op, {random_tensor({1, 16, 4, 4})});
  ASSERT_EQ(h.specs().size(), 2u);
  EXPECT_EQ(h.specs()[0].name, "weight");
  EXPECT_EQ(h.specs()[0].shape, (Shape{32, 16, 3, 3}));
  EXPECT_EQ(h.specs()[1].name, "bias");
  EXPECT_EQ(h.specs()[1].kind, graph::StateKind::parameter);
  const double bound = 1.0 / std::sqrt(16.0 * 9.0);
  for (const Tensor& p : h.params) {
    double lo = 1, hi = -1;
    for (float v : p.to_vector()) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v);
    EXPECT_GE(lo, -bound);
    EXPECT_LE(hi, bound);
    EXPECT_GT(hi - lo, bound);  // spread over the range, not constant
  }
  // Deterministic per name.
  OpHarness same(op, {random_tensor({1, 16, 4, 4})});
  EXPECT_EQ(same.params[0].to_vector(), h.params[0].to_vector());
  OpHarness other(op, {random_tensor({1, 16, 4, 4})}, Mode::inference, "other");
  EXPECT_NE(other.params[0].to_vector(), h.params[0].to_vector());
}

TEST(Conv2d, BuilderKeepsTheBatchSymbolic) {
  graph::Graph g;
  auto x = g.input("images", {Shape::kAny, 3, 64, 48});
  auto scope = g.scope("model.0");
  auto y = ops::conv2d(x, {.in_channels = 3, .out_channels = 16, .kernel = 3, .stride = 2});
  EXPECT_EQ(y.shape(), (Shape{Shape::kAny, 16, 32, 24}));
  EXPECT_EQ(g.nodes().back().name, "model.0.conv");
  EXPECT_EQ(g.nodes().back().op->name(), "ops.conv2d");
}

TEST(Conv2d, RejectsBadInputs) {
  graph::Graph g;
  auto x = g.input("x", {Shape::kAny, 3, 8, 8});
  auto flat = g.input("flat", {2, 3, 8});
  EXPECT_THROW(ops::conv2d(x, {.in_channels = 4, .out_channels = 8, .kernel = 3}), Error);  // channel count
  EXPECT_THROW(ops::conv2d(flat, {.in_channels = 3, .out_channels = 8, .kernel = 3}), Error);  // rank
  EXPECT_THROW(ops::conv2d(x, {.in_channels = 3, .out_channels = 8, .kernel = 3, .groups = 2}), Error);
  EXPECT_THROW(ops::conv2d(x, {.in_channels = 3, .out_channels = 8, .kernel = 11, .padding = 0}), Error);  // too small
  EXPECT_THROW(Conv2dOp({.in_channels = 3, .out_channels = 0}), Error);
  try {
    ops::conv2d(x, {.in_channels = 4, .out_channels = 8, .kernel = 3}, "stem");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("stem"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4 input channels"), std::string::npos) << msg;
  }
}

#ifndef VISION_HAS_CUDA
TEST(Conv2d, CudaLoweringWithoutCudaIsAClearError) {
  Conv2dOp op({.in_channels = 3, .out_channels = 8, .kernel = 3});
  EXPECT_THROW(op.lower(graph::Backend::cuda, Mode::inference), Error);
}
#endif

}  // namespace
}  // namespace vision::test
