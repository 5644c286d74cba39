#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_harness.h"
#include "vision/graph/graph.h"
#include "vision/ops/elementwise.h"

namespace vision::test {
namespace {

using graph::Mode;

template <typename F>
std::vector<double> map_ref(const std::vector<Tensor>& in, F f) {
  std::vector<double> y(static_cast<size_t>(in[0].numel()));
  for (size_t i = 0; i < y.size(); ++i)
    y[i] = in.size() == 1 ? f(double(in[0].data<float>()[i]), 0.0) : f(in[0].data<float>()[i], in[1].data<float>()[i]);
  return y;
}

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(Elementwise, UnaryForward) {
  const Shape shapes[] = {{2, 3, 5, 7}, {4, 2048}, {3}};
  for (const Shape& s : shapes) {
    ops::SiluOp silu;
    OpHarness hs(silu, {random_tensor(s, -8.0f, 8.0f)});
    EXPECT_LT(rel_error(hs.forward().to_vector(), map_ref(hs.inputs, [](double x, double) { return x * sigmoid_ref(x); })),
              1e-6);
    ops::SigmoidOp sig;
    OpHarness hg(sig, {random_tensor(s, -8.0f, 8.0f)});
    EXPECT_LT(rel_error(hg.forward().to_vector(), map_ref(hg.inputs, [](double x, double) { return sigmoid_ref(x); })),
              1e-6);
  }
}

TEST(Elementwise, SiluSaturatesWithoutNaN) {
  ops::SiluOp silu;
  OpHarness h(silu, {Tensor::from_vector({4}, std::vector<float>{-200.0f, -90.0f, 90.0f, 200.0f})});
  const auto y = h.forward().to_vector();
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_NEAR(y[1], 0.0f, 1e-30);
  EXPECT_EQ(y[2], 90.0f);
  EXPECT_EQ(y[3], 200.0f);
  h.forward();
  const auto g = h.backward(Tensor::from_vector({4}, std::vector<float>{1, 1, 1, 1})).inputs[0].to_vector();
  for (float v : g) EXPECT_TRUE(std::isfinite(v));
}

TEST(Elementwise, BinaryForward) {
  ops::AddOp add;
  OpHarness ha(add, {random_tensor({2, 4, 6, 6}), random_tensor({2, 4, 6, 6})});
  EXPECT_LT(rel_error(ha.forward().to_vector(), map_ref(ha.inputs, [](double a, double b) { return a + b; })), 1e-7);
  ops::MulOp mul;
  OpHarness hm(mul, {random_tensor({2, 4, 6, 6}), random_tensor({2, 4, 6, 6})});
  EXPECT_LT(rel_error(hm.forward().to_vector(), map_ref(hm.inputs, [](double a, double b) { return a * b; })), 1e-7);
}

TEST(Elementwise, BackwardMatchesFiniteDifferences) {
  ops::SiluOp silu;
  ops::SigmoidOp sig;
  ops::AddOp add;
  ops::MulOp mul;
  OpHarness hs(silu, {random_tensor({2, 3, 4, 4}, -4.0f, 4.0f)}, Mode::train);
  check_gradients(hs, {.eps = 1e-2, .tol = 1e-3});
  OpHarness hg(sig, {random_tensor({2, 3, 4, 4}, -4.0f, 4.0f)}, Mode::train);
  check_gradients(hg, {.eps = 1e-2, .tol = 1e-3});
  OpHarness ha(add, {random_tensor({2, 3, 4}), random_tensor({2, 3, 4})}, Mode::train);
  check_gradients(ha, {.eps = 1e-2, .tol = 1e-3});
  OpHarness hm(mul, {random_tensor({2, 3, 4}), random_tensor({2, 3, 4})}, Mode::train);
  check_gradients(hm, {.eps = 1e-2, .tol = 1e-3});
}

TEST(Elementwise, Builders) {
  graph::Graph g;
  auto a = g.input("a", {Shape::kAny, 3, 8, 8});
  auto b = g.input("b", {2, 3, 8, 8});
  auto c = g.input("c", {2, 4, 8, 8});
  auto flat = g.input("flat", {2, 3, 64});
  auto ints = g.input("ints", {2, 3, 8, 8}, DType::i32);
  const Shape as = a.shape();  // a copy: recording may move the graph's values
  EXPECT_EQ(ops::silu(a).shape(), as);
  EXPECT_EQ(ops::sigmoid(a, "gate").shape(), as);
  EXPECT_EQ(g.nodes().back().name, "gate");
  EXPECT_EQ(ops::add(a, b).shape(), (Shape{2, 3, 8, 8}));  // the symbolic batch meets a concrete one
  EXPECT_EQ(ops::mul(a, a).shape(), as);
  EXPECT_THROW(ops::add(b, c), Error);
  EXPECT_THROW(ops::mul(a, c), Error);
  EXPECT_THROW(ops::add(b, flat), Error);
  EXPECT_THROW(ops::silu(ints), Error);  // the built-in ops take f32
  EXPECT_THROW(ops::add(b, ints), Error);
}

}  // namespace
}  // namespace vision::test
