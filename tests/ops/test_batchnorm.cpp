#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "ops/op_harness.h"
#include "ops/thread_ranks.h"
#include "vision/graph/graph.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/elementwise.h"

namespace vision::test {
namespace {

using graph::Mode;
using ops::BatchNorm2dOp;

struct ChannelStats {
  std::vector<double> mean, var;  // var is the biased (population) variance
};

ChannelStats batch_stats(const Tensor& x) {
  const int64_t n = x.dim(0), c = x.dim(1), hw = x.dim(2) * x.dim(3);
  const float* p = x.data<float>();
  ChannelStats s{std::vector<double>(c), std::vector<double>(c)};
  for (int64_t ic = 0; ic < c; ++ic) {
    double sum = 0, sq = 0;
    for (int64_t in = 0; in < n; ++in)
      for (int64_t i = 0; i < hw; ++i) sum += p[(in * c + ic) * hw + i];
    s.mean[ic] = sum / double(n * hw);
    for (int64_t in = 0; in < n; ++in)
      for (int64_t i = 0; i < hw; ++i) sq += std::pow(p[(in * c + ic) * hw + i] - s.mean[ic], 2);
    s.var[ic] = sq / double(n * hw);
  }
  return s;
}

// γ·(x − mean)/sqrt(var + eps) + β in float64.
std::vector<double> normalize_ref(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                                  const Tensor& gamma, const Tensor& beta, double eps) {
  const int64_t c = x.dim(1), hw = x.dim(2) * x.dim(3);
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t ic = (i / hw) % c;
    y[i] = gamma.data<float>()[ic] * (x.data<float>()[i] - mean[ic]) / std::sqrt(var[ic] + eps) +
           beta.data<float>()[ic];
  }
  return y;
}

TEST(BatchNorm2d, StateMatchesTheUltralyticsStateDict) {
  BatchNorm2dOp op(1e-3f, 0.03f);
  OpHarness h(op, {random_tensor({2, 5, 3, 3})});
  const char* names[] = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
  ASSERT_EQ(h.specs().size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(h.specs()[i].name, names[i]);
  EXPECT_EQ(h.specs()[0].kind, graph::StateKind::parameter);
  EXPECT_EQ(h.specs()[1].kind, graph::StateKind::parameter);
  EXPECT_EQ(h.specs()[2].kind, graph::StateKind::buffer);
  EXPECT_EQ(h.specs()[3].kind, graph::StateKind::buffer);
  EXPECT_EQ(h.specs()[4].kind, graph::StateKind::buffer);
  EXPECT_EQ(h.specs()[4].dtype, DType::i64);
  EXPECT_EQ(h.specs()[4].shape, Shape{});
  EXPECT_EQ(h.param("weight").to_vector(), std::vector<float>(5, 1.0f));
  EXPECT_EQ(h.param("bias").to_vector(), std::vector<float>(5, 0.0f));
  EXPECT_EQ(h.param("running_mean").to_vector(), std::vector<float>(5, 0.0f));
  EXPECT_EQ(h.param("running_var").to_vector(), std::vector<float>(5, 1.0f));
  EXPECT_EQ(h.param("num_batches_tracked").data<int64_t>()[0], 0);
}

TEST(BatchNorm2d, TrainingForwardUsesBatchStatistics) {
  const float eps = 1e-3f;
  BatchNorm2dOp op(eps, 0.03f);
  OpHarness h(op, {random_tensor({4, 3, 5, 6}, -2.0f, 3.0f)}, Mode::train);
  randomize_batchnorm(h);
  const Tensor y = h.forward(true);
  const auto s = batch_stats(h.inputs[0]);
  EXPECT_LT(rel_error(y.to_vector(), normalize_ref(h.inputs[0], s.mean, s.var, h.param("weight"), h.param("bias"), eps)),
            1e-5);
  // Saved for backward: batch mean and biased variance.
  ASSERT_EQ(h.saved.size(), 2u);
  EXPECT_LT(rel_error(h.saved[0].to_vector(), s.mean), 1e-5);
  EXPECT_LT(rel_error(h.saved[1].to_vector(), s.var), 1e-5);
}

TEST(BatchNorm2d, TrainingStatisticsOfOffsetData) {
  // A large mean next to a small spread: a one-pass E[x²] − E[x]² variance would lose every digit here.
  BatchNorm2dOp op(1e-5f, 0.1f);
  OpHarness h(op, {random_tensor({8, 2, 16, 16}, 99.9f, 100.1f)}, Mode::train);
  const Tensor y = h.forward(true);
  const auto s = batch_stats(h.inputs[0]);
  EXPECT_LT(rel_error(h.saved[1].to_vector(), s.var), 1e-3);
  EXPECT_LT(rel_error(y.to_vector(), normalize_ref(h.inputs[0], s.mean, s.var, h.param("weight"), h.param("bias"), 1e-5)),
            1e-3);
}

TEST(BatchNorm2d, TrainingUpdatesRunningStatistics) {
  const double m = 0.03;
  BatchNorm2dOp op(1e-3f, static_cast<float>(m));
  OpHarness h(op, {random_tensor({2, 4, 3, 5}, -1.0f, 2.0f)}, Mode::train);
  randomize_batchnorm(h);
  const auto mean0 = to_double(h.param("running_mean")), var0 = to_double(h.param("running_var"));
  h.forward(true);
  const auto s = batch_stats(h.inputs[0]);
  const double n = 2 * 3 * 5;
  std::vector<double> mean1(4), var1(4);
  for (size_t c = 0; c < 4; ++c) {
    mean1[c] = (1 - m) * mean0[c] + m * s.mean[c];
    var1[c] = (1 - m) * var0[c] + m * s.var[c] * n / (n - 1);  // PyTorch: unbiased batch variance
  }
  EXPECT_LT(rel_error(h.param("running_mean").to_vector(), mean1), 1e-6);
  EXPECT_LT(rel_error(h.param("running_var").to_vector(), var1), 1e-6);
  EXPECT_EQ(h.param("num_batches_tracked").data<int64_t>()[0], 1);
  h.forward(true);
  EXPECT_EQ(h.param("num_batches_tracked").data<int64_t>()[0], 2);
  // An inference forward leaves the state alone.
  const auto mean2 = h.param("running_mean").to_vector();
  h.forward(false);
  EXPECT_EQ(h.param("running_mean").to_vector(), mean2);
  EXPECT_EQ(h.param("num_batches_tracked").data<int64_t>()[0], 2);
}

TEST(BatchNorm2d, InferenceUsesRunningStatistics) {
  const float eps = 1e-3f;
  BatchNorm2dOp op(eps, 0.03f);
  OpHarness h(op, {random_tensor({3, 6, 4, 4}, -2.0f, 2.0f)});
  randomize_batchnorm(h);
  const Tensor y = h.forward(false);
  const auto ref = normalize_ref(h.inputs[0], to_double(h.param("running_mean")), to_double(h.param("running_var")),
                                 h.param("weight"), h.param("bias"), eps);
  EXPECT_LT(rel_error(y.to_vector(), ref), 1e-5);
  EXPECT_TRUE(h.saved.empty());
}

TEST(BatchNorm2d, TrainingBackwardMatchesFiniteDifferences) {
  BatchNorm2dOp op(1e-3f, 0.03f);
  OpHarness h(op, {random_tensor({3, 2, 3, 3}, -1.0f, 2.0f)}, Mode::train);
  randomize_batchnorm(h);
  check_gradients(h, {.training = true, .eps = 1e-3, .tol = 1e-2});
}

TEST(BatchNorm2d, BackwardWithoutInputGradient) {
  BatchNorm2dOp op(1e-3f, 0.03f);
  OpHarness h(op, {random_tensor({2, 3, 4, 4})}, Mode::train);
  randomize_batchnorm(h);
  h.forward(true);
  const Tensor dy = random_tensor(h.output_shape());
  const auto all = h.backward(dy);
  const auto params_only = h.backward(dy, {false});
  EXPECT_EQ(params_only.params[0].to_vector(), all.params[0].to_vector());
  EXPECT_EQ(params_only.params[1].to_vector(), all.params[1].to_vector());
  // dβ = Σ dy per channel.
  for (int64_t c = 0; c < 3; ++c) {
    double s = 0;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 16; ++i) s += dy.data<float>()[(n * 3 + c) * 16 + i];
    EXPECT_NEAR(all.params[1].data<float>()[c], s, 1e-4);
  }
}

TEST(BatchNorm2d, RejectsBadInputs) {
  graph::Graph g;
  auto x = g.input("x", {2, 3, 8});
  auto y = g.input("y", {Shape::kAny, Shape::kAny, 4, 4});
  EXPECT_THROW(ops::batchnorm2d(x), Error);
  EXPECT_THROW(ops::batchnorm2d(y), Error);  // the channel count sizes the state
  EXPECT_THROW(BatchNorm2dOp(0.0f, 0.1f), Error);
  // One value per channel cannot be normalised in training.
  BatchNorm2dOp op(1e-3f, 0.03f);
  OpHarness h(op, {random_tensor({1, 3, 1, 1})}, Mode::train);
  EXPECT_THROW(h.forward(true), Error);
}

TEST(BatchNorm2d, BuilderKeepsTheBatchSymbolic) {
  graph::Graph g;
  auto x = g.input("x", {Shape::kAny, 8, 20, 20});
  auto y = ops::batchnorm2d(x);
  EXPECT_EQ(y.shape(), (Shape{Shape::kAny, 8, 20, 20}));
  EXPECT_EQ(g.nodes().back().name, "bn");
  EXPECT_EQ(g.nodes().back().op->name(), "ops.batchnorm2d");
}

// BatchNorm → SiLU fused (a training plan's "ops.batchnorm2d_silu").

double silu_ref(double y) { return y / (1.0 + std::exp(-y)); }

std::shared_ptr<const graph::Op> fused_bn_silu(const std::string& prefix = "bn.") {
  const BatchNorm2dOp bn(1e-3f, 0.03f);
  return bn.fuse_with(ops::SiluOp(), Mode::train, prefix, "act.");
}

TEST(BatchNorm2dSilu, FusesOnlyWithSiluInTraining) {
  const BatchNorm2dOp bn(1e-3f, 0.03f);
  EXPECT_EQ(bn.fuse_with(ops::SiluOp(), Mode::inference, "bn.", "act."), nullptr);
  EXPECT_EQ(bn.fuse_with(ops::SigmoidOp(), Mode::train, "bn.", "act."), nullptr);
  auto fused = fused_bn_silu();
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->name(), "ops.batchnorm2d_silu");
  EXPECT_EQ(fused->fuse_with(ops::SiluOp(), Mode::train, "x.", "y."), nullptr);  // SiLU once
  EXPECT_THROW(fused->lower(graph::Backend::cpu, Mode::inference), Error);
}

TEST(BatchNorm2dSilu, StateKeepsTheBatchNormNamesUnderItsPrefix) {
  OpHarness h(*fused_bn_silu("m.bn."), {random_tensor({2, 5, 3, 3})}, Mode::train);
  const char* names[] = {"m.bn.weight", "m.bn.bias", "m.bn.running_mean", "m.bn.running_var",
                         "m.bn.num_batches_tracked"};
  ASSERT_EQ(h.specs().size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(h.specs()[i].name, names[i]);
}

TEST(BatchNorm2dSilu, TrainingForwardIsSiluOfTheBatchNormalisedInput) {
  const float eps = 1e-3f;
  OpHarness h(*fused_bn_silu(), {random_tensor({4, 3, 5, 6}, -2.0f, 3.0f)}, Mode::train);
  randomize_batchnorm(h, "bn.");
  const Tensor z = h.forward(true);
  const auto s = batch_stats(h.inputs[0]);
  auto ref = normalize_ref(h.inputs[0], s.mean, s.var, h.param("bn.weight"), h.param("bn.bias"), eps);
  for (double& v : ref) v = silu_ref(v);
  EXPECT_LT(rel_error(z.to_vector(), ref), 1e-5);
  EXPECT_LT(max_abs_error(z.to_vector(), ref), 1e-5);
  ASSERT_EQ(h.saved.size(), 2u);
  EXPECT_LT(rel_error(h.saved[0].to_vector(), s.mean), 1e-5);
  EXPECT_LT(rel_error(h.saved[1].to_vector(), s.var), 1e-5);
  EXPECT_EQ(h.param("bn.num_batches_tracked").data<int64_t>()[0], 1);
}

TEST(BatchNorm2dSilu, TrainingBackwardMatchesFiniteDifferences) {
  OpHarness h(*fused_bn_silu(), {random_tensor({3, 2, 3, 3}, -1.0f, 2.0f)}, Mode::train);
  randomize_batchnorm(h, "bn.");
  check_gradients(h, {.training = true, .eps = 1e-3, .tol = 1e-2});
}

// The fused op against BatchNorm then SiLU as two ops (the backward chained by hand): the same output and gradients
// to f32 rounding.
TEST(BatchNorm2dSilu, MatchesBatchNormThenSilu) {
  const Tensor x = random_tensor({2, 4, 5, 5}, -1.0f, 2.0f);
  OpHarness fused(*fused_bn_silu(), {x}, Mode::train);
  OpHarness bn(BatchNorm2dOp(1e-3f, 0.03f), {x}, Mode::train);
  randomize_batchnorm(bn);
  for (const char* name : {"weight", "bias", "running_mean", "running_var"})
    fused.param(std::string("bn.") + name).copy_from(bn.param(name));
  const Tensor y = bn.forward(true);
  OpHarness act(ops::SiluOp(), {y}, Mode::train);
  const Tensor z_ref = act.forward(true);
  const Tensor z = fused.forward(true);
  EXPECT_LT(max_abs_error(z.to_vector(), to_double(z_ref)), 1e-6);
  const Tensor dz = random_tensor(z.shape());
  const auto g_act = act.backward(dz);
  const auto g_bn = bn.backward(g_act.inputs[0]);
  const auto g = fused.backward(dz);
  EXPECT_LT(rel_error(g.inputs[0].to_vector(), to_double(g_bn.inputs[0])), 1e-5) << "dx";
  EXPECT_LT(rel_error(g.params[0].to_vector(), to_double(g_bn.params[0])), 1e-5) << "dγ";
  EXPECT_LT(rel_error(g.params[1].to_vector(), to_double(g_bn.params[1])), 1e-5) << "dβ";
  // Element by element too: each within 1e-5 of the largest of its tensor.
  for (size_t k = 0; k < 3; ++k) {
    const Tensor& mine = k == 0 ? g.inputs[0] : g.params[k - 1];
    const auto ref = to_double(k == 0 ? g_bn.inputs[0] : g_bn.params[k - 1]);
    double largest = 0;
    for (double v : ref) largest = std::max(largest, std::abs(v));
    EXPECT_LE(max_abs_error(mine.to_vector(), ref), 1e-5 * largest) << "tensor " << k;
  }
}

// SyncBatchNorm (graph::Collective; `vision train --sync-bn`): ranks that each hold a share of the batch, their batch
// statistics taken over every rank, give what one BatchNorm gives on the whole batch — the outputs, the saved and
// running statistics, dx, and dγ, dβ summed over the ranks (as the gradient all-reduce sums them) — and every rank the
// same statistics bit for bit. Without the collective (the control) each rank's statistics are its own.
TEST(BatchNorm2d, SyncBatchNormRanksTogetherAreTheWholeBatch) {
  const int world = 3;
  const int64_t per_rank = 2;
  for (const bool silu : {false, true}) {
    for (const bool synced : {true, false}) {
      SCOPED_TRACE(std::string(silu ? "BatchNorm → SiLU" : "BatchNorm") + (synced ? ", synced" : ", the control"));
      BatchNorm2dOp op(1e-3f, 0.03f, silu);
      const Tensor x = random_tensor({world * per_rank, 5, 6, 7}, -2.0f, 3.0f);
      const Tensor dy = random_tensor({world * per_rank, 5, 6, 7});
      OpHarness whole(op, {x}, Mode::train);
      randomize_batchnorm(whole);
      std::vector<Tensor> initial;
      for (const Tensor& p : whole.params) initial.push_back(p.clone());
      const Tensor y = whole.forward(true);
      const OpHarness::Grads g = whole.backward(dy);

      ThreadRanks ranks(world);
      struct Result {
        Tensor y, dx, mean, var;
        std::vector<Tensor> params, grads;
      };
      std::vector<Result> out(world);
      std::vector<std::thread> threads;
      for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
          OpHarness h(op, {batch_rows(x, r * per_rank, per_rank)}, Mode::train);
          for (size_t i = 0; i < initial.size(); ++i) h.params[i] = initial[i].clone();
          if (synced) h.use_collective(ranks.rank(r, graph::cpu_backend()));
          Result& o = out[static_cast<size_t>(r)];
          o.y = h.forward(true);
          o.mean = h.saved[0].clone(), o.var = h.saved[1].clone();
          o.params = h.params;
          const OpHarness::Grads gr = h.backward(batch_rows(dy, r * per_rank, per_rank));
          o.dx = gr.inputs[0];
          o.grads = gr.params;
        });
      for (std::thread& t : threads) t.join();

      auto joined = [&](Tensor Result::*field) {
        std::vector<float> v;
        for (const Result& o : out) {
          const std::vector<float> part = (o.*field).to_vector();
          v.insert(v.end(), part.begin(), part.end());
        }
        return v;
      };
      const double y_err = rel_error(joined(&Result::y), y.to_vector());
      const double mean_err = rel_error(out[1].mean.to_vector(), whole.saved[0].to_vector());
      if (!synced) {
        EXPECT_GT(mean_err, 1e-3) << "each rank's own batch should give other statistics";
        EXPECT_GT(y_err, 1e-3);
        continue;
      }
      EXPECT_EQ(ranks.gathers(), 3) << "two gathers in the forward (the sums, then the squared deviations), one in the "
                                       "backward";
      EXPECT_LT(y_err, 1e-6) << "the outputs";
      EXPECT_LT(max_abs_error(joined(&Result::y), y.to_vector()), 1e-5 * max_abs(y.to_vector())) << "the outputs";
      EXPECT_LT(rel_error(joined(&Result::dx), g.inputs[0].to_vector()), 1e-5) << "dx";
      EXPECT_LT(max_abs_error(joined(&Result::dx), g.inputs[0].to_vector()), 1e-4 * max_abs(g.inputs[0].to_vector()))
          << "dx";
      for (const char* name : {"weight", "bias"}) {
        const size_t i = whole.param_index(name);
        std::vector<double> sum(static_cast<size_t>(g.params[i].numel()), 0.0);
        for (const Result& o : out)
          for (size_t c = 0; c < sum.size(); ++c) sum[c] += o.grads[i].data<float>()[c];
        EXPECT_LT(rel_error(sum, g.params[i].to_vector()), 1e-5) << "Σ over the ranks of d" << name;
      }
      for (int r = 0; r < world; ++r) {
        const Result& o = out[static_cast<size_t>(r)];
        EXPECT_LT(rel_error(o.mean.to_vector(), whole.saved[0].to_vector()), 1e-6) << "rank " << r << ": batch mean";
        EXPECT_LT(rel_error(o.var.to_vector(), whole.saved[1].to_vector()), 1e-6) << "rank " << r << ": batch variance";
        for (const char* name : {"running_mean", "running_var"}) {
          const size_t i = whole.param_index(name);
          EXPECT_LT(rel_error(o.params[i].to_vector(), whole.params[i].to_vector()), 1e-6) << "rank " << r << ": " << name;
          EXPECT_EQ(o.params[i].to_vector(), out[0].params[i].to_vector()) << "rank " << r << ": " << name
                                                                           << " differs from rank 0's";
        }
        EXPECT_EQ(o.mean.to_vector(), out[0].mean.to_vector()) << "rank " << r;
        EXPECT_EQ(o.var.to_vector(), out[0].var.to_vector()) << "rank " << r;
      }
    }
  }
}

// A world of one through the collective: the forward is the plain BatchNorm's bit for bit (the backward takes the
// synchronised arithmetic, float64 sums, instead of oneDNN's).
TEST(BatchNorm2d, SyncBatchNormOfOneRankIsThePlainForward) {
  BatchNorm2dOp op(1e-3f, 0.03f);
  OpHarness plain(op, {random_tensor({3, 4, 5, 6}, -1.0f, 2.0f)}, Mode::train);
  randomize_batchnorm(plain);
  OpHarness one(op, plain, graph::cpu_backend());
  ThreadRanks ranks(1);
  one.use_collective(ranks.rank(0, graph::cpu_backend()));
  EXPECT_EQ(one.forward(true).to_vector(), plain.forward(true).to_vector());
  for (size_t i = 0; i < plain.params.size(); ++i)
    if (plain.params[i].dtype() == DType::f32)
      EXPECT_EQ(one.params[i].to_vector(), plain.params[i].to_vector()) << plain.specs()[i].name;
  const Tensor dy = random_tensor({3, 4, 5, 6});
  const std::vector<float> synced = one.backward(dy).inputs[0].to_vector(), ref = plain.backward(dy).inputs[0].to_vector();
  EXPECT_LT(rel_error(synced, ref), 1e-6);
  EXPECT_LT(max_abs_error(synced, ref), 1e-5 * max_abs(ref));
}

}  // namespace
}  // namespace vision::test
