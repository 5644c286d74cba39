#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "graph/test_ops.h"
#include "vision/ops/shape_ops.h"
#include "test_util.h"
#include "vision/graph/executor.h"

using namespace vision;
using namespace vision::graph;
using vision::test::random_tensor;

namespace {

// x → a = scale(x) → b = scale(a) → c = add(a, b) → loss = Σ c²   (a has two consumers)
std::shared_ptr<Graph> residual_graph() {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{Shape::kAny, 3, 4, 5});
  auto _ = g->scope("net");
  auto a = g->apply(std::make_shared<test::ScaleOp>(), {x}, "a");
  auto b = g->apply(std::make_shared<test::ScaleOp>(), {a}, "b");
  auto c = g->apply(std::make_shared<test::AddOp>(), {a, b}, "sum");
  g->mark_output(g->apply(std::make_shared<test::SquareSumOp>(), {c}, "loss"));
  return g;
}

}  // namespace

TEST(Arena, LiveBuffersNeverOverlapAndMemoryIsReused) {
  std::mt19937 rng(7);
  std::vector<ArenaRequest> req;
  size_t sum = 0;
  for (int i = 0; i < 200; ++i) {
    const int first = static_cast<int>(rng() % 100);
    req.push_back({1 + rng() % 5000, first, first + static_cast<int>(rng() % 10)});
    sum += req.back().bytes;
  }
  const ArenaLayout l = plan_arena(req, 256);
  for (size_t i = 0; i < req.size(); ++i) {
    EXPECT_EQ(l.offsets[i] % 256, 0u);
    EXPECT_LE(l.offsets[i] + req[i].bytes, l.total);
    for (size_t j = i + 1; j < req.size(); ++j) {
      const bool time = req[i].first <= req[j].last && req[j].first <= req[i].last;
      const bool mem = l.offsets[i] < l.offsets[j] + req[j].bytes && l.offsets[j] < l.offsets[i] + req[i].bytes;
      EXPECT_FALSE(time && mem) << "requests " << i << " and " << j << " overlap";
    }
  }
  EXPECT_LT(l.total, sum / 2);
}

TEST(Graph, ScopesNameNodesAndShapesStaySymbolic) {
  auto g = residual_graph();
  EXPECT_EQ(g->nodes()[0].name, "net.a");
  EXPECT_EQ(g->nodes()[3].name, "net.loss");
  EXPECT_EQ(g->value(g->nodes()[0].outputs[0]).shape.str(), "[?, 3, 4, 5]");
  Graph other;
  auto y = other.input("y", Shape{1, 3, 4, 5});
  EXPECT_THROW(g->apply(std::make_shared<test::AddOp>(), {y, y}, "bad"), Error);
  EXPECT_THROW(other.apply(std::make_shared<test::AddOp>(), {y}, "one_input"), Error);
}

TEST(Plan, CachedPerShapeAndStateShared) {
  auto g = residual_graph();
  Executor ex(g, cpu_backend());
  auto x1 = random_tensor(Shape{2, 3, 4, 5});
  auto x2 = random_tensor(Shape{3, 3, 4, 5});
  ex.forward({x1});
  ex.forward({x1});
  EXPECT_EQ(ex.cached_plans(), 1u);
  ex.forward({x2});
  EXPECT_EQ(ex.cached_plans(), 2u);
  EXPECT_EQ(ex.state().parameter_count(), 6);
  EXPECT_THROW(ex.forward({random_tensor(Shape{2, 4, 4, 5})}), Error);  // wrong channels
  EXPECT_THROW(ex.forward({}), Error);
}

// At most max_plans() plans (8 by default): one more drops the least recently used, never the one just used.
TEST(Plan, CacheDropsTheLeastRecentlyUsedPlan) {
  Executor ex(residual_graph(), cpu_backend());
  EXPECT_EQ(ex.max_plans(), Executor::kDefaultMaxPlans);
  EXPECT_EQ(Executor::kDefaultMaxPlans, 8u);
  for (int64_t batch = 1; batch <= 8; ++batch) ex.forward({random_tensor(Shape{batch, 3, 4, 5})});
  EXPECT_EQ(ex.cached_plans(), 8u);
  const Plan* first = &ex.plan(Mode::inference, {Shape{1, 3, 4, 5}});  // batch 1 is now the most recent
  ex.forward({random_tensor(Shape{9, 3, 4, 5})});                        // drops batch 2
  EXPECT_EQ(ex.cached_plans(), 8u);
  EXPECT_EQ(&ex.plan(Mode::inference, {Shape{1, 3, 4, 5}}), first);
  ex.set_max_plans(3);
  EXPECT_EQ(ex.cached_plans(), 3u);
  EXPECT_EQ(&ex.plan(Mode::inference, {Shape{1, 3, 4, 5}}), first);
  // The training plan of the last forward_train stays usable for backward while it is cached, and says so if not.
  ex.forward_train({random_tensor(Shape{2, 3, 4, 5})});
  ex.backward();
  ex.set_max_plans(1);
  ex.forward({random_tensor(Shape{1, 3, 4, 5})});
  EXPECT_THROW(ex.backward(), Error);
  ex.set_max_plans(0);  // no bound
  for (int64_t batch = 1; batch <= 10; ++batch) ex.forward({random_tensor(Shape{batch, 3, 4, 5})});
  EXPECT_EQ(ex.cached_plans(), 10u);
}

TEST(Plan, ForwardMatchesDirectComputation) {
  auto g = residual_graph();
  Executor ex(g, cpu_backend());
  auto x = random_tensor(Shape{2, 3, 4, 5});
  const float loss = ex.forward({x})[0].data<float>()[0];
  const auto wa = ex.state().tensor("net.a.weight").to_vector();
  const auto wb = ex.state().tensor("net.b.weight").to_vector();
  double ref = 0;
  const auto xv = x.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = (i / 20) % 3;
    const double a = wa[c] * double(xv[i]), b = wb[c] * a;
    ref += (a + b) * (a + b);
  }
  EXPECT_NEAR(loss, ref, 1e-5 * ref);
}

TEST(Plan, ProfileTimesEveryStepInOrderAndLeavesTheOutputAsForwardDoes) {
  auto g = residual_graph();
  Executor ex(g, cpu_backend());
  auto x = random_tensor(Shape{2, 3, 4, 5});
  Plan& plan = ex.plan(Mode::inference, {x.shape()});
  EXPECT_THROW(plan.profile_forward({}, 3), Error);  // no inputs
  const float loss = ex.forward({x})[0].data<float>()[0];
  plan.outputs()[0].data<float>()[0] = -1.0f;  // poison: the profiled runs must write the output again
  const auto times = plan.profile_forward({x}, 3);
  ASSERT_EQ(times.size(), plan.steps().size());
  for (size_t i = 0; i < times.size(); ++i) {
    EXPECT_EQ(times[i].name, plan.steps()[i].name);
    EXPECT_EQ(times[i].op, plan.steps()[i].op->name());
    EXPECT_GE(times[i].ms, 0.0);
  }
  EXPECT_EQ(plan.outputs()[0].data<float>()[0], loss);
  const std::string table = Plan::format_profile(times, 2);
  EXPECT_NE(table.find(fmt::format("{} steps", times.size())), std::string::npos);
  EXPECT_NE(table.find("per op:"), std::string::npos);
  EXPECT_THROW(plan.profile_forward({x}, 0), Error);
}

TEST(Plan, BackwardProfileTimesEveryStepInReverseOrderAndLeavesTheGradientsAsBackwardDoes) {
  auto g = residual_graph();
  Executor ex(g, cpu_backend());
  auto x = random_tensor(Shape{2, 3, 4, 5});
  ex.forward_train({x});
  ex.backward();
  const std::vector<float> want = ex.state().flat_grads().to_vector();
  Plan& plan = *ex.last_train_plan();
  std::vector<Plan::StepTime> times;
  plan.set_backward_profile(&times);
  ex.forward_train({x});
  ex.state().flat_grads().fill(-1.0f);  // poison: the profiled backward must write every gradient again
  ex.backward();
  plan.set_backward_profile(nullptr);
  EXPECT_EQ(ex.state().flat_grads().to_vector(), want);
  // One entry per step with a backward, from the last step to the first.
  std::vector<const PlanStep*> with_backward;
  for (const PlanStep& s : plan.steps())
    if (s.backward) with_backward.insert(with_backward.begin(), &s);
  ASSERT_EQ(times.size(), with_backward.size());
  ASSERT_GT(times.size(), 1u);
  for (size_t i = 0; i < times.size(); ++i) {
    EXPECT_EQ(times[i].name, with_backward[i]->name) << i;
    EXPECT_EQ(times[i].op, with_backward[i]->op->name()) << i;
    EXPECT_GE(times[i].ms, 0.0);
  }
  ex.forward_train({x});
  ex.backward();  // no longer profiled
  EXPECT_EQ(times.size(), with_backward.size());
}

TEST(Plan, BackwardAccumulatesMultiConsumerGradientsAndMatchesFiniteDifferences) {
  auto g = residual_graph();
  Executor ex(g, cpu_backend());
  auto x = random_tensor(Shape{2, 3, 4, 5});
  ex.forward_train({x});
  ex.backward();
  const std::vector<float> grads = ex.state().flat_grads().to_vector();
  Tensor params = ex.state().flat_params();
  for (int64_t i = 0; i < params.numel(); ++i) {
    float* p = params.data<float>() + i;
    const float saved = *p, h = 1e-2f;
    *p = saved + h;
    const double up = ex.forward({x})[0].data<float>()[0];
    *p = saved - h;
    const double down = ex.forward({x})[0].data<float>()[0];
    *p = saved;
    const double fd = (up - down) / (2 * h);
    EXPECT_NEAR(grads[static_cast<size_t>(i)], fd, 2e-3 * std::abs(fd) + 1e-3) << "parameter " << i;
  }
  // Accumulating adds a second copy of the gradient.
  ex.forward_train({x});
  ex.backward({}, /*accumulate=*/true);
  const auto twice = ex.state().flat_grads().to_vector();
  for (size_t i = 0; i < grads.size(); ++i) EXPECT_NEAR(twice[i], 2 * grads[i], 1e-4 * std::abs(grads[i]) + 1e-5);
}

TEST(Plan, TrainingPlanWithoutBackwardIsAnErrorNamingTheOp) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{1, 2, 3, 3});
  auto s = g->apply(std::make_shared<test::ScaleOp>(), {x}, "head.scale");  // a parameter: gradients flow
  auto y = g->apply(std::make_shared<test::OffsetOp>(), {s}, "head.offset");
  g->mark_output(g->apply(std::make_shared<test::SquareSumOp>(), {y}, "loss"));
  Executor ex(g, cpu_backend());
  try {
    ex.forward_train({random_tensor(Shape{1, 2, 3, 3})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head.offset"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no backward"), std::string::npos) << e.what();
  }
}

// Gradients are tracked per value: an op that no gradient passes through (it reads only graph inputs, or a
// detached value) needs no backward in a training plan.
TEST(Plan, OpsNoGradientPassesThroughNeedNoBackward) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{1, 2, 3, 3});
  auto y = g->apply(std::make_shared<test::OffsetOp>(), {x}, "offset");  // input only: no gradient
  auto s = g->apply(std::make_shared<test::ScaleOp>(), {x}, "scale");
  auto z = g->apply(std::make_shared<test::OffsetOp>(), {ops::detach(s)}, "offset2");  // after a detach
  g->mark_output(g->apply(std::make_shared<test::SquareSumOp>(), {g->apply(std::make_shared<test::AddOp>(),
                                                                          {g->apply(std::make_shared<test::AddOp>(), {y, z}, "yz"), s}, "sum")},
                          "loss"));
  Executor ex(g, cpu_backend());
  EXPECT_NO_THROW(ex.forward_train({random_tensor(Shape{1, 2, 3, 3})}));
  EXPECT_NO_THROW(ex.backward());
}

TEST(Plan, ConstantsAreUploadedPerPlanAndTheirByteCountIsChecked) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{Shape::kAny, 4, 2, 2});
  g->mark_output(g->apply(std::make_shared<test::OffsetOp>(), {x}, "offset"));
  Executor ex(g, cpu_backend());
  auto xin = random_tensor(Shape{1, 4, 2, 2});
  const auto y = ex.forward({xin})[0].to_vector();
  const auto xv = xin.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(y[i], xv[i] + 0.5f * static_cast<float>(i / 4));
  EXPECT_EQ(ex.state().entries().size(), 0u);  // a constant is not model state

  auto bad = std::make_shared<Graph>();
  auto bx = bad->input("x", Shape{1, 4, 2, 2});
  bad->mark_output(bad->apply(std::make_shared<test::OffsetOp>(true), {bx}, "offset"));
  Executor bex(bad, cpu_backend());
  try {
    bex.forward({xin});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  }
}

TEST(Plan, InferenceFusesAndMatchesTheUnfusedTrainingForward) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{Shape::kAny, 3, 4, 5});
  {
    auto _ = g->scope("block");
    auto a = g->apply(std::make_shared<test::ScaleOp>(), {x}, "a");
    auto b = g->apply(std::make_shared<test::ScaleOp>(), {a}, "b");
    g->mark_output(b);
  }
  Executor ex(g, cpu_backend());
  auto xin = random_tensor(Shape{2, 3, 4, 5});
  const auto fused = ex.forward({xin})[0].to_vector();
  const Plan& p = ex.plan(Mode::inference, {xin.shape()});
  ASSERT_EQ(p.steps().size(), 1u);
  EXPECT_EQ(p.steps()[0].name, "block");
  EXPECT_EQ(p.steps()[0].op->name(), "test.scale_scale");
  const auto plain = ex.forward_train({xin})[0].to_vector();
  EXPECT_LT(vision::test::rel_error(fused, plain), 1e-6);
}

TEST(Plan, ArenaReusesMemoryAlongAChain) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{1, 8, 32, 32});
  for (int i = 0; i < 10; ++i) {
    x = g->apply(std::make_shared<test::AddOp>(), {x, x}, "add" + std::to_string(i));
  }
  g->mark_output(x);
  Executor ex(g, cpu_backend());
  auto xin = random_tensor(Shape{1, 8, 32, 32});
  const auto y = ex.forward({xin})[0].to_vector();
  const auto xv = xin.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(y[i], xv[i] * 1024.0f);
  const size_t one = 8 * 32 * 32 * 4;
  EXPECT_LE(ex.plan(Mode::inference, {xin.shape()}).arena_bytes(), 2 * one + 512);
}
