// The CPU backend in f32 NHWC (the CPU's default inference layout): convolutions on oneDNN's NHWC kernels with their
// weights packed once per state version, max-pooling and nearest upsampling on pixels of C values, elementwise ops,
// concat and split, all against the same graph's NCHW plan; a plan in NHWC converts only at its input and output.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>

#include "test_util.h"
#include "vision/graph/executor.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/pool.h"
#include "vision/ops/reduce.h"
#include "vision/ops/shape_ops.h"
#include "vision/ops/upsample.h"

using namespace vision;
using namespace vision::graph;
using core::Layout;

namespace {

const PlanOptions kNhwc{.layout = Layout::nhwc};

// Every f32 state tensor of `ex` set to fresh random values (BatchNorm variances positive).
void randomize_state(Executor& ex, const std::vector<Shape>& shapes) {
  StateStore& state = ex.state(shapes);
  for (auto& [key, t] : state.to_host()) {
    if (t.dtype() != DType::f32) continue;  // BatchNorm's batch counter
    const bool variance = key.ends_with("running_var");
    state.set_from_host(key, test::random_tensor(t.shape(), variance ? 0.5f : -1.0f, variance ? 1.5f : 1.0f));
  }
}

void copy_state(Executor& from, Executor& to, const std::vector<Shape>& shapes) {
  StateStore& dst = to.state(shapes);
  for (auto& [key, t] : from.state(shapes).to_host()) dst.set_from_host(key, t);
}

// conv-BN-SiLU → max-pool 5/1/2 → upsample ×2 → a strided convolution with bias, a 1×1 conv-SiLU and a depthwise
// conv-BN → concat, split, add, mul: what YOLO26's blocks do, at odd sizes.
std::shared_ptr<Graph> stack() {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{Shape::kAny, 5, 12, 10});
  auto c1 = ops::silu(ops::batchnorm2d(ops::conv2d(x, {.in_channels = 5, .out_channels = 16, .kernel = 3}, "c1.conv"),
                                       1e-3f, 0.03f, "c1.bn"),
                      "c1.act");
  auto p = ops::maxpool2d(c1, 5, 1, 2, "pool");
  auto u = ops::upsample_nearest(p, 2, "up");
  auto c2 = ops::conv2d(u, {.in_channels = 16, .out_channels = 16, .kernel = 3, .stride = 2, .bias = true}, "c2");
  auto c3 = ops::silu(ops::conv2d(c2, {.in_channels = 16, .out_channels = 8, .kernel = 1}, "c3.conv"), "c3.act");
  auto dw = ops::batchnorm2d(
      ops::conv2d(c1, {.in_channels = 16, .out_channels = 16, .kernel = 3, .groups = 16}, "dw.conv"), 1e-3f, 0.03f,
      "dw.bn");
  auto cat = ops::concat({c3, dw}, 1, "cat");
  auto parts = ops::split(cat, {12, 12}, 1, "split");
  auto y = ops::mul(ops::add(parts[0], parts[1], "add"), ops::sigmoid(parts[1], "gate"), "mul");
  g->mark_output(y);
  return g;
}

}  // namespace

TEST(CpuNhwc, StackMatchesNchwAndConvertsOnlyAtItsEnds) {
  Executor nchw(stack(), cpu_backend()), nhwc(stack(), cpu_backend(), kNhwc);
  const Tensor x = test::random_tensor(Shape{2, 5, 12, 10});
  randomize_state(nchw, {x.shape()});
  copy_state(nchw, nhwc, {x.shape()});
  const auto ref = nchw.forward({x})[0].to_vector();
  const Tensor out = nhwc.forward({x})[0];
  EXPECT_EQ(out.layout(), Layout::nchw);
  EXPECT_LT(test::rel_error(out.to_vector(), ref), 1e-6);
  EXPECT_GT(test::rel_error(ref, std::vector<float>(ref.size(), 0.0f)), 0.5);
  Plan& plan = nhwc.plan(Mode::inference, {x.shape()});
  EXPECT_EQ(plan.conversion_steps(), 2u) << plan.describe();  // x → NHWC, y → NCHW
  // New state reaches the convolutions' packed weights (the plan refreshes them), in both plans alike.
  randomize_state(nchw, {x.shape()});
  copy_state(nchw, nhwc, {x.shape()});
  const auto ref2 = nchw.forward({x})[0].to_vector();
  EXPECT_GT(test::rel_error(ref2, ref), 0.1);
  EXPECT_LT(test::rel_error(nhwc.forward({x})[0].to_vector(), ref2), 1e-6);
}

// Max-pooling and upsampling only move and compare values: NHWC gives NCHW's bits, ties included (values on a grid
// of quarters, so windows hold equal maxima).
TEST(CpuNhwc, PoolingAndUpsamplingAreBitExact) {
  auto make = [] {
    auto g = std::make_shared<Graph>();
    auto x = g->input("x", Shape{Shape::kAny, 24, 9, 7});
    auto a = ops::maxpool2d(x, 5, 1, 2, "p5");
    auto b = ops::upsample_nearest(a, 3, "up");
    g->mark_output(ops::maxpool2d(b, 3, 2, 1, "p3"));
    g->mark_output(ops::maxpool2d(x, 2, 2, 0, "p2"));
    return g;
  };
  Executor nchw(make(), cpu_backend()), nhwc(make(), cpu_backend(), kNhwc);
  Tensor x = test::random_tensor(Shape{2, 24, 9, 7}, -2.0f, 2.0f);
  for (float& v : std::span(x.data<float>(), static_cast<size_t>(x.numel()))) v = std::round(v * 4) / 4;
  const auto r = nchw.forward({x}), o = nhwc.forward({x});
  ASSERT_EQ(r.size(), o.size());
  for (size_t i = 0; i < r.size(); ++i) EXPECT_EQ(o[i].to_vector(), r[i].to_vector()) << "output " << i;
  EXPECT_EQ(nhwc.plan(Mode::inference, {x.shape()}).conversion_steps(), 3u);  // x in, two outputs out
}

// Training in an NHWC plan: the convolutions train in NCHW (layout steps around them), upsampling's backward runs on
// NHWC pixels; the gradients equal the NCHW plan's.
TEST(CpuNhwc, TrainingThroughNhwcUpsamplingMatchesNchw) {
  auto make = [] {
    auto g = std::make_shared<Graph>();
    auto x = g->input("x", Shape{Shape::kAny, 3, 6, 5});
    auto c = ops::conv2d(x, {.in_channels = 3, .out_channels = 8, .kernel = 3, .bias = true}, "conv");
    auto u = ops::upsample_nearest(ops::silu(c, "act"), 2, "up");
    auto y = ops::conv2d(u, {.in_channels = 8, .out_channels = 4, .kernel = 3, .stride = 2}, "head");
    g->mark_output(y, kInferenceOutput);
    g->mark_output(ops::sum_squares(y, "loss"), kTrainingLoss);
    return g;
  };
  Executor nchw(make(), cpu_backend()), nhwc(make(), cpu_backend(), kNhwc);
  const Tensor x = test::random_tensor(Shape{2, 3, 6, 5});
  copy_state(nchw, nhwc, {x.shape()});
  const float l1 = nchw.forward_train({x})[0].to_vector()[0];
  nchw.backward();
  const float l2 = nhwc.forward_train({x})[0].to_vector()[0];
  nhwc.backward();
  EXPECT_NEAR(l1, l2, 1e-6 * std::abs(l1));
  EXPECT_GT(nhwc.last_train_plan()->conversion_steps(), 0u);
  const auto g1 = nchw.state().flat_grads().to_vector(), g2 = nhwc.state().flat_grads().to_vector();
  EXPECT_LT(test::rel_error(g2, g1), 1e-6);
  EXPECT_GT(test::rel_error(g1, std::vector<float>(g1.size(), 0.0f)), 0.5);
}

// Conv2dAttrs::int8_absmax: in an NHWC inference plan the convolution quantises its input to s8 (scale 127 / absmax)
// and its weights to s8 per output channel, and matches the f32 convolution within that quantisation: |error| of
// about one step of the input's scale times the weights' size, far below 2% of the output's norm here, but not
// zero. A plain, a strided-with-bias-and-SiLU and a depthwise convolution; new weights reach the int8 copy too.
TEST(CpuNhwc, Int8ConvolutionsMatchF32WithinTheirQuantisation) {
  const ops::Conv2dAttrs cases[] = {
      {.in_channels = 16, .out_channels = 32, .kernel = 3},
      {.in_channels = 8, .out_channels = 16, .kernel = 3, .stride = 2, .bias = true},
      {.in_channels = 16, .out_channels = 16, .kernel = 3, .groups = 16},
      {.in_channels = 24, .out_channels = 8, .kernel = 1, .bias = true},
  };
  for (const ops::Conv2dAttrs& a : cases) {
    SCOPED_TRACE(fmt::format("cin {} cout {} k {} s {} g {}", a.in_channels, a.out_channels, a.kernel, a.stride,
                             a.groups));
    auto make = [&](float absmax) {
      auto g = std::make_shared<Graph>();
      auto x = g->input("x", Shape{Shape::kAny, a.in_channels, 10, 9});
      ops::Conv2dAttrs q = a;
      q.int8_absmax = absmax;
      auto y = ops::conv2d(x, q, "conv");
      g->mark_output(a.bias ? ops::silu(y, "act") : y);
      return g;
    };
    Executor f32(make(0.0f), cpu_backend(), kNhwc), int8(make(2.0f), cpu_backend(), kNhwc),
        int8_nchw(make(2.0f), cpu_backend());
    const Tensor x = test::random_tensor(Shape{2, a.in_channels, 10, 9}, -2.0f, 2.0f);
    for (int round = 0; round < 2; ++round) {
      randomize_state(f32, {x.shape()});
      copy_state(f32, int8, {x.shape()});
      copy_state(f32, int8_nchw, {x.shape()});
      const auto ref = f32.forward({x})[0].to_vector();
      const auto q = int8.forward({x})[0].to_vector();
      const double err = test::rel_error(q, ref);
      EXPECT_LT(err, 2e-2) << "round " << round;
      EXPECT_GT(err, 1e-5) << "round " << round << ": no quantisation error: the int8 path did not run";
      // In NCHW the attribute is ignored: the f32 result.
      EXPECT_LT(test::rel_error(int8_nchw.forward({x})[0].to_vector(), ref), 1e-6);
    }
  }
}
