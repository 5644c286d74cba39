#include <gtest/gtest.h>

#include "ops/op_harness.h"
#include "vision/graph/graph.h"
#include "vision/ops/shape_ops.h"
#include "vision/ops/upsample.h"

namespace vision::test {
namespace {

using graph::Mode;

// Element (n, c, i) of a rank >= 2 tensor with the trailing dims flattened into i.
float at(const Tensor& t, int64_t n, int64_t c, int64_t i) {
  const int64_t inner = t.numel() / (t.dim(0) * t.dim(1));
  return t.data<float>()[(n * t.dim(1) + c) * inner + i];
}

TEST(Concat, ForwardJoinsChannels) {
  for (const Shape& tail : {Shape{5, 4}, Shape{7}}) {
    std::vector<Tensor> xs;
    for (int64_t c : {3, 1, 4}) {
      std::vector<int64_t> d{2, c};
      d.insert(d.end(), tail.dims().begin(), tail.dims().end());
      xs.push_back(random_tensor(Shape(d)));
    }
    ops::ConcatOp op(3);
    OpHarness h(op, xs);
    const Tensor y = h.forward();
    ASSERT_EQ(y.dim(1), 8);
    std::vector<double> ref;
    for (int64_t n = 0; n < 2; ++n)
      for (const Tensor& x : xs)
        for (int64_t c = 0; c < x.dim(1); ++c)
          for (int64_t i = 0; i < tail.numel(); ++i) ref.push_back(at(x, n, c, i));
    EXPECT_EQ(rel_error(y.to_vector(), ref), 0.0);
  }
}

TEST(ChannelSlice, ForwardTakesChannels) {
  ops::ChannelSliceOp op(2, 3);
  OpHarness h(op, {random_tensor({2, 6, 3, 4})});
  const Tensor y = h.forward();
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3, 4}));
  std::vector<double> ref;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 2; c < 5; ++c)
      for (int64_t i = 0; i < 12; ++i) ref.push_back(at(h.inputs[0], n, c, i));
  EXPECT_EQ(rel_error(y.to_vector(), ref), 0.0);
}

TEST(ShapeOps, BackwardMatchesFiniteDifferences) {
  ops::ConcatOp cat(3);
  OpHarness hc(cat, {random_tensor({2, 2, 3, 3}), random_tensor({2, 1, 3, 3}), random_tensor({2, 3, 3, 3})},
               Mode::train);
  check_gradients(hc, {.eps = 1e-2, .tol = 1e-4});
  ops::ChannelSliceOp slice(1, 2);
  OpHarness hs(slice, {random_tensor({2, 4, 3, 3})}, Mode::train);
  check_gradients(hs, {.eps = 1e-2, .tol = 1e-4});
  ops::UpsampleNearestOp up(2);
  OpHarness hu(up, {random_tensor({2, 2, 3, 4})}, Mode::train);
  check_gradients(hu, {.eps = 1e-2, .tol = 1e-4});
}

TEST(ChannelSlice, BackwardZeroesOtherChannels) {
  ops::ChannelSliceOp op(1, 2);
  OpHarness h(op, {random_tensor({2, 4, 2, 2})}, Mode::train);
  h.forward(true);
  const Tensor dy = random_tensor(h.output_shape());
  const Tensor dx = h.backward(dy).inputs[0];
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 4; ++c)
      for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(at(dx, n, c, i), c == 1 || c == 2 ? at(dy, n, c - 1, i) : 0.0f);
}

TEST(UpsampleNearest, Forward) {
  for (int64_t s : {2, 3}) {
    ops::UpsampleNearestOp op(s);
    OpHarness h(op, {random_tensor({2, 3, 4, 5})});
    const Tensor y = h.forward();
    EXPECT_EQ(y.shape(), (Shape{2, 3, 4 * s, 5 * s}));
    std::vector<double> ref;
    const float* x = h.inputs[0].data<float>();
    for (int64_t pl = 0; pl < 6; ++pl)
      for (int64_t i = 0; i < 4 * s; ++i)
        for (int64_t j = 0; j < 5 * s; ++j) ref.push_back(x[(pl * 4 + i / s) * 5 + j / s]);
    EXPECT_EQ(rel_error(y.to_vector(), ref), 0.0);
  }
}

TEST(ShapeOps, BuildersAndErrors) {
  graph::Graph g;
  auto a = g.input("a", {Shape::kAny, 4, 8, 8});
  auto b = g.input("b", {2, 6, 8, 8});
  auto c = g.input("c", {2, 6, 4, 8});
  auto flat = g.input("flat", {2, 6, 64});
  auto cat = ops::concat({a, b, a}, "cat");
  EXPECT_EQ(cat.shape(), (Shape{2, 14, 8, 8}));
  EXPECT_EQ(g.nodes().back().op->name(), "ops.concat");
  EXPECT_THROW(ops::concat({a, c}), Error);     // spatial sizes differ
  EXPECT_THROW(ops::concat({a, flat}), Error);  // ranks differ
  EXPECT_EQ(ops::channel_slice(a, 1, 2).shape(), (Shape{Shape::kAny, 2, 8, 8}));
  EXPECT_THROW(ops::channel_slice(a, 3, 2), Error);
  EXPECT_THROW(ops::channel_slice(a, 0, 0), Error);

  auto parts = ops::split(b, {2, 4}, "split");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].shape(), (Shape{2, 2, 8, 8}));
  EXPECT_EQ(parts[1].shape(), (Shape{2, 4, 8, 8}));
  // One node with two outputs, named "<node>:<k>".
  EXPECT_EQ(g.nodes().back().name, "split");
  EXPECT_EQ(g.nodes().back().outputs, (std::vector<int>{parts[0].id(), parts[1].id()}));
  EXPECT_EQ(g.value(parts[1].id()).name, "split:1");
  EXPECT_EQ(g.value(parts[1].id()).producer_output, 1);
  EXPECT_THROW(ops::split(b, {2, 3}), Error);
  EXPECT_THROW(g.apply(std::make_shared<ops::SplitOp>(std::vector<int64_t>{2, 4}), {b}, "one"), Error);

  EXPECT_EQ(ops::upsample_nearest(a).shape(), (Shape{Shape::kAny, 4, 16, 16}));
  EXPECT_THROW(ops::upsample_nearest(flat), Error);
}

TEST(ShapeOps, SplitThenConcatRoundTrips) {
  const Tensor x = random_tensor({2, 5, 3, 3});
  ops::ChannelSliceOp first(0, 2), second(2, 3);
  OpHarness h1(first, {x}), h2(second, {x});
  ops::ConcatOp cat(2);
  OpHarness hc(cat, {h1.forward(), h2.forward()});
  EXPECT_EQ(hc.forward().to_vector(), x.to_vector());
}

}  // namespace
}  // namespace vision::test
