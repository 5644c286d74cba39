#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "ops/op_harness.h"
#include "vision/graph/graph.h"
#include "vision/ops/pool.h"

namespace vision::test {
namespace {

using graph::Mode;

struct PoolRef {
  std::vector<double> y;
  std::vector<int32_t> argmax;  // index within the input plane
};

PoolRef maxpool_ref(const Tensor& x, int64_t k, int64_t s, int64_t p) {
  const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
  PoolRef r;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        double best = -INFINITY;
        int32_t arg = -1;
        for (int64_t ky = 0; ky < k; ++ky)
          for (int64_t kx = 0; kx < k; ++kx) {
            const int64_t iy = oy * s - p + ky, ix = ox * s - p + kx;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;  // padding is −inf
            const double v = x.data<float>()[(pl * h + iy) * w + ix];
            if (v > best) best = v, arg = static_cast<int32_t>(iy * w + ix);
          }
        r.y.push_back(best);
        r.argmax.push_back(arg);
      }
  return r;
}

// Distinct values 0.01 apart in random order: finite differences with a smaller step never swap a maximum.
Tensor distinct_tensor(const Shape& s) {
  std::vector<float> v(static_cast<size_t>(s.numel()));
  std::iota(v.begin(), v.end(), 0.0f);
  std::shuffle(v.begin(), v.end(), rng());
  for (auto& x : v) x = (x - v.size() / 2.0f) * 0.01f;
  return Tensor::from_vector(s, v);
}

struct PoolCase {
  int64_t k, s, p;
  Shape x;
};
const PoolCase kCases[] = {
    {5, 1, 2, {2, 3, 8, 8}},  // SPPF
    {3, 2, 1, {2, 2, 9, 7}},  {2, 2, 0, {1, 3, 8, 6}}, {3, 2, 0, {2, 2, 7, 9}}, {4, 3, 2, {1, 2, 10, 11}},
};

TEST(MaxPool2d, ForwardMatchesReference) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(testing::Message() << "k " << c.k << " s " << c.s << " p " << c.p);
    ops::MaxPool2dOp op(c.k, c.s, c.p);
    OpHarness h(op, {random_tensor(c.x, -3.0f, -1.0f)}, Mode::train);  // all negative: padding must not win
    const auto ref = maxpool_ref(h.inputs[0], c.k, c.s, c.p);
    EXPECT_LT(rel_error(h.forward(false).to_vector(), ref.y), 1e-7);
    EXPECT_LT(rel_error(h.forward(true).to_vector(), ref.y), 1e-7);
    ASSERT_EQ(h.saved.size(), 1u);
    EXPECT_EQ(h.saved[0].dtype(), DType::i32);
    const int32_t* arg = h.saved[0].data<int32_t>();
    EXPECT_EQ(std::vector<int32_t>(arg, arg + h.saved[0].numel()), ref.argmax);
  }
}

TEST(MaxPool2d, BackwardMatchesFiniteDifferences) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(testing::Message() << "k " << c.k << " s " << c.s << " p " << c.p);
    ops::MaxPool2dOp op(c.k, c.s, c.p);
    OpHarness h(op, {distinct_tensor(c.x)}, Mode::train);
    check_gradients(h, {.training = true, .eps = 2e-3, .tol = 1e-3});
  }
}

TEST(MaxPool2d, InferenceSavesNothing) {
  ops::MaxPool2dOp op(5, 1, 2);
  OpHarness h(op, {random_tensor({1, 2, 6, 6})});
  EXPECT_TRUE(h.saved.empty());
  EXPECT_LT(rel_error(h.forward().to_vector(), maxpool_ref(h.inputs[0], 5, 1, 2).y), 1e-7);
}

// Inference takes the separable path (each row's maximum, then the maximum over the rows): the values of the
// windowed loop that training runs, bit for bit, with ties, −0 beside +0, NaN and ±inf in the windows.
TEST(MaxPool2d, InferenceEqualsTheTrainingForwardBitForBit) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(testing::Message() << "k " << c.k << " s " << c.s << " p " << c.p);
    std::vector<float> v(static_cast<size_t>(c.x.numel()));
    std::uniform_int_distribution<int> pick(0, 9);
    const float specials[] = {0.0f, -0.0f, 1.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, 2.5f, -2.5f};
    for (float& x : v) x = specials[pick(rng())];
    ops::MaxPool2dOp op(c.k, c.s, c.p);
    OpHarness train(op, {Tensor::from_vector(c.x, v)}, Mode::train);
    OpHarness infer(op, {Tensor::from_vector(c.x, v)});
    const Tensor a = train.forward(), b = infer.forward();
    ASSERT_EQ(a.numel(), b.numel());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
    size_t nans = 0;
    for (float y : b.to_vector()) nans += std::isnan(y);
    EXPECT_GT(nans, 0u) << "the case has NaN windows";
  }
}

TEST(MaxPool2d, BuilderAndErrors) {
  graph::Graph g;
  auto x = g.input("x", {Shape::kAny, 16, 20, 20});
  auto flat = g.input("flat", {2, 16, 20});
  EXPECT_EQ(ops::maxpool2d(x, 5, 1, 2).shape(), (Shape{Shape::kAny, 16, 20, 20}));
  EXPECT_EQ(ops::maxpool2d(x, 2).shape(), (Shape{Shape::kAny, 16, 10, 10}));  // stride defaults to the kernel
  EXPECT_EQ(ops::maxpool2d(x, 3, 2, 1).shape(), (Shape{Shape::kAny, 16, 10, 10}));
  EXPECT_THROW(ops::maxpool2d(x, 3, 1, 2), Error);  // padding > kernel / 2
  EXPECT_THROW(ops::maxpool2d(x, 0), Error);
  EXPECT_THROW(ops::maxpool2d(x, 32, 1, 0), Error);
  EXPECT_THROW(ops::maxpool2d(flat, 2), Error);
}

}  // namespace
}  // namespace vision::test
