// The model EMA on the CPU: which tensors it averages (parameters and BatchNorm running statistics, not
// num_batches_tracked), its decay ramp, values after several updates against float64, copy_to and load.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "test_util.h"
#include "vision/graph/graph.h"
#include "vision/graph/state.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/train/ema.h"

using namespace vision;
using namespace vision::test;
using core::Shape;
using core::Tensor;

namespace {

// model.0: conv 3→8 (3×3) + BatchNorm; model.1: conv 8→4 (1×1) with a bias. Big enough for several EMA chunks.
std::shared_ptr<graph::Graph> small_model() {
  auto g = std::make_shared<graph::Graph>();
  auto x = g->input("x", Shape{1, 3, 8, 8});
  auto model = g->scope("model");
  graph::SymTensor y;
  {
    auto s = g->scope("0");
    y = ops::batchnorm2d(ops::conv2d(x, {.in_channels = 3, .out_channels = 8, .kernel = 3}));
  }
  {
    auto s = g->scope("1");
    y = ops::conv2d(y, {.in_channels = 8, .out_channels = 4, .kernel = 1, .bias = true});
  }
  {
    auto s = g->scope("2");
    y = ops::conv2d(y, {.in_channels = 4, .out_channels = 1200, .kernel = 3});  // 43,200 weights: 11 chunks
  }
  g->mark_output(y);
  return g;
}

// Random values for every floating state tensor (running_var positive).
void randomise(graph::StateStore& st) {
  for (const auto& e : st.entries()) {
    if (!core::is_floating(e.dtype)) continue;
    const bool var = e.key.ends_with("running_var");
    st.set_from_host(e.key, random_tensor(e.shape, var ? 0.5f : -1.0f, var ? 2.0f : 1.0f));
  }
}

std::map<std::string, std::vector<double>> snapshot(const graph::StateStore& st) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [k, t] : st.to_host())
    if (core::is_floating(t.dtype())) out[k] = to_double(t);
  return out;
}

}  // namespace

TEST(Ema, DecayRamp) {
  EXPECT_DOUBLE_EQ(train::ema_decay(1), 0.9999 * (1 - std::exp(-1.0 / 2000)));
  EXPECT_NEAR(train::ema_decay(1), 4.99825e-4, 1e-9);  // 0.9999 · 0.000499875
  EXPECT_NEAR(train::ema_decay(2000), 0.9999 * (1 - std::exp(-1.0)), 1e-15);  // ≈ 0.63206
  EXPECT_NEAR(train::ema_decay(100000), 0.9999, 1e-12);
  EXPECT_EQ(train::ema_decay(0), 0.0);
}

// Starts as the model; after n updates of a changing model each element is d_n·v + (1 − d_n)·x in f32, within a few
// f32 roundings of the float64 recurrence (|v|, |x| ≤ 2: 4 updates × 3 roundings × 2u·2).
TEST(Ema, AveragesParametersAndRunningStatisticsOnly) {
  auto g = small_model();
  graph::StateStore st(*g, graph::cpu_backend(), {Shape{1, 3, 8, 8}});
  randomise(st);
  train::ModelEma ema(st);
  const auto keys = ema.keys();
  EXPECT_EQ(keys, (std::vector<std::string>{"model.0.conv.weight", "model.0.bn.weight", "model.0.bn.bias",
                                            "model.0.bn.running_mean", "model.0.bn.running_var",
                                            "model.1.conv.weight", "model.1.conv.bias", "model.2.conv.weight"}));
  EXPECT_EQ(ema.updates(), 0);
  auto v = snapshot(st);
  for (const auto& k : keys) EXPECT_EQ(to_double(ema.tensor(k).to_vector()), v[k]) << k;

  double worst = 0;
  for (int n = 1; n <= 4; ++n) {
    randomise(st);
    const auto x = snapshot(st);
    const double d = train::ema_decay(n);
    EXPECT_DOUBLE_EQ(ema.next_decay(), d);
    ema.update(st);
    for (const auto& k : keys) {
      for (size_t i = 0; i < v[k].size(); ++i) v[k][i] = d * v[k][i] + (1 - d) * x.at(k)[i];
      worst = std::max(worst, max_abs_error(ema.tensor(k).to_vector(), v[k]));
    }
  }
  EXPECT_EQ(ema.updates(), 4);
  EXPECT_LT(worst, 4 * 3 * 2 * 0x1p-24 * 2);
  EXPECT_GT(worst, 0.0);  // f32 arithmetic, not a float64 copy

  // copy_to: another store of the same model gets the averaged floating tensors; its counters stay.
  graph::StateStore other(*g, graph::cpu_backend(), {Shape{1, 3, 8, 8}});
  const uint64_t version = other.version();
  ema.copy_to(other);
  EXPECT_GT(other.version(), version);
  for (const auto& k : keys) EXPECT_EQ(other.tensor(k).to_vector(), ema.tensor(k).to_vector()) << k;

  // load: a restored EMA continues like the original.
  train::ModelEma restored(other);
  restored.load(ema.to_host(), ema.updates());
  randomise(st);
  ema.update(st);
  restored.update(st);
  for (const auto& k : keys) EXPECT_EQ(restored.tensor(k).to_vector(), ema.tensor(k).to_vector()) << k;
  EXPECT_EQ(restored.updates(), 5);
  auto partial = ema.to_host();
  partial.pop_back();
  EXPECT_NE(error_of([&] { restored.load(partial, 1); }).find("model.2.conv.weight (missing)"), std::string::npos);
}

TEST(Ema, RefusesAnotherModelsState) {
  auto g = small_model();
  graph::StateStore st(*g, graph::cpu_backend(), {Shape{1, 3, 8, 8}});
  train::ModelEma ema(st);
  auto other_graph = std::make_shared<graph::Graph>();
  auto x = other_graph->input("x", Shape{1, 3, 8, 8});
  other_graph->mark_output(ops::conv2d(x, {.in_channels = 3, .out_channels = 2, .kernel = 1}));
  graph::StateStore other(*other_graph, graph::cpu_backend(), {Shape{1, 3, 8, 8}});
  EXPECT_NE(error_of([&] { ema.update(other); }).find("not the one the average was made from"), std::string::npos);
}

// The update queued behind an optimizer step follows the step's decision: a skipped step leaves the average and its
// count as they were, an applied one equals update(); a second queue before finishing is refused.
TEST(Ema, QueuedUpdateFollowsTheStepsDecision) {
  auto g = small_model();
  graph::StateStore st(*g, graph::cpu_backend(), {Shape{1, 3, 8, 8}});
  randomise(st);
  train::ModelEma queued(st), plain(st);
  randomise(st);
  train::OptimStatus skipped{1.0f, 1.0f, 1.0f, 0}, applied{1.0f, 1.0f, 1.0f, 1};
  queued.queue_update(st, &skipped);
  EXPECT_THROW(queued.queue_update(st, &applied), Error);
  queued.finish_update(false);
  EXPECT_EQ(queued.updates(), 0);
  for (const auto& k : queued.keys()) EXPECT_EQ(queued.tensor(k).to_vector(), plain.tensor(k).to_vector()) << k;
  queued.queue_update(st, &applied);
  queued.finish_update(true);
  plain.update(st);
  EXPECT_EQ(queued.updates(), 1);
  for (const auto& k : queued.keys()) EXPECT_EQ(queued.tensor(k).to_vector(), plain.tensor(k).to_vector()) << k;
  EXPECT_THROW(queued.finish_update(true), Error);
}
