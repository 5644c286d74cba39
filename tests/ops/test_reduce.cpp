#include <gtest/gtest.h>

#include "ops/op_harness.h"
#include "vision/graph/graph.h"
#include "vision/ops/reduce.h"

namespace vision::test {
namespace {

using graph::Mode;

TEST(Reduce, ForwardIsAScalar) {
  for (const Shape& s : {Shape{3, 4, 5, 6}, Shape{70000}}) {
    const Tensor x = random_tensor(s);
    double sq = 0, sum = 0;
    for (float v : x.to_vector()) sq += 0.5 * double(v) * v, sum += v;
    ops::SumSquaresOp ss;
    OpHarness hs(ss, {x});
    const Tensor y = hs.forward();
    EXPECT_EQ(y.shape(), Shape{});
    EXPECT_NEAR(y.data<float>()[0], sq, 1e-6 * sq);
    ops::MeanOp mean;
    OpHarness hm(mean, {x});
    EXPECT_NEAR(hm.forward().data<float>()[0], sum / double(x.numel()), 1e-6);
  }
}

TEST(Reduce, BackwardMatchesFiniteDifferences) {
  ops::SumSquaresOp ss;
  OpHarness hs(ss, {random_tensor({2, 3, 4})}, Mode::train);
  check_gradients(hs, {.eps = 1e-2, .tol = 1e-3});
  ops::MeanOp mean;
  OpHarness hm(mean, {random_tensor({2, 3, 4})}, Mode::train);
  check_gradients(hm, {.eps = 1e-2, .tol = 1e-3});
}

TEST(Reduce, Builders) {
  graph::Graph g;
  auto x = g.input("x", {Shape::kAny, 3, 8, 8});
  EXPECT_EQ(ops::sum_squares(x, "loss").shape(), Shape{});
  EXPECT_EQ(g.nodes().back().op->name(), "ops.sum_squares");
  EXPECT_EQ(ops::mean(x).shape(), Shape{});
}

}  // namespace
}  // namespace vision::test
