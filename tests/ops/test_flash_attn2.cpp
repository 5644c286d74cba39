// Tests of FlashAttention-2 on the CPU: the CPU twin against a float64 reference (forward and gradients), finite
// differences, and the graph op through the executor.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <vector>

#include "graph/test_ops.h"
#include "models/yolo/attention_reference.h"
#include "nvrtc_library.h"
#include "test_util.h"
#include "vision/graph/executor.h"
#include "vision/ops/attention/flash_attn2.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_flash_attn2_cpp {

using namespace vision;
using namespace vision::graph;
using namespace vision::ops::attention;
using vision::test::attention_reference;
using vision::test::AttentionReference;
using vision::test::max_abs_error;
using vision::test::poisoned;
using vision::test::random_tensor;
using vision::test::rel_error;
using vision::test::to_double;

namespace {

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

// Everything the CPU twin computes for one problem.
struct TwinResult {
  Tensor o, lse, delta, dq, dk, dv;
};

TwinResult run_twin(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_o, float scale) {
  const AttentionSizes s = attention_sizes(q.shape(), k.shape(), v.shape());
  TwinResult r{poisoned(Shape{s.batch_heads, s.n_q, s.d_v}), poisoned(Shape{s.batch_heads, s.n_q}),
               poisoned(Shape{s.batch_heads, s.n_q}),           poisoned(q.shape()),
               poisoned(k.shape()),                             poisoned(v.shape())};
  flash_attention2_forward_cpu(q, k, v, scale, r.o, r.lse);
  if (!grad_o.defined()) return r;
  flash_attention2_backward_preprocess_cpu(r.o, grad_o, r.delta);
  flash_attention2_backward_dq_cpu(q, k, v, grad_o, r.lse, r.delta, scale, r.dq);
  flash_attention2_backward_dkv_cpu(q, k, v, grad_o, r.lse, r.delta, scale, r.dk, r.dv);
  return r;
}

// ---------------------------------------------------------------------------------------------------------------
// The CPU twin against the float64 reference.

struct Case {
  int64_t bh, n_q, n_k, d, d_v;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "bh" + std::to_string(c.bh) + "_nq" + std::to_string(c.n_q) + "_nk" + std::to_string(c.n_k) + "_d" +
         std::to_string(c.d) + "_dv" + std::to_string(c.d_v);
}

// The full product of N ∈ {1, 7, 97, 400}, BH ∈ {1, 3}, d ∈ {16, 32, 64, 128}, d_v ∈ {d, 2d}; N = 1025 with BH = 1
// for every (d, d_v) and BH = 3 for YOLO26's (32, 64) (the float64 reference dominates the run time); N_q ≠ N_k;
// head sizes that are not powers of two (the CPU twin takes any).
std::vector<Case> cases() {
  std::vector<Case> c;
  for (int64_t n : {1, 7, 97})
    for (int64_t bh : {1, 3})
      for (int64_t d : {16, 32, 64, 128})
        for (int64_t dv : {d, 2 * d}) c.push_back({bh, n, n, d, dv});
  for (int64_t bh : {1, 3})
    for (int64_t d : {16, 32, 64, 128})
      for (int64_t dv : {d, 2 * d}) c.push_back({bh, 400, 400, d, dv});
  for (int64_t d : {16, 32, 64, 128})
    for (int64_t dv : {d, 2 * d}) c.push_back({1, 1025, 1025, d, dv});
  c.push_back({3, 1025, 1025, 32, 64});
  // N_q ≠ N_k.
  c.push_back({3, 1, 97, 32, 64});
  c.push_back({1, 97, 1, 64, 64});
  c.push_back({3, 7, 400, 16, 32});
  c.push_back({1, 400, 7, 128, 256});
  c.push_back({1, 1025, 97, 32, 64});
  c.push_back({3, 65, 129, 64, 128});
  // Head sizes other than powers of two.
  c.push_back({3, 33, 70, 5, 3});
  c.push_back({1, 100, 130, 24, 40});
  return c;
}

class FlashAttention2Cpu : public testing::TestWithParam<Case> {};

TEST_P(FlashAttention2Cpu, MatchesFloat64ReferenceForwardAndGradients) {
  const Case& c = GetParam();
  const Tensor q = random_tensor(Shape{c.bh, c.n_q, c.d});
  const Tensor k = random_tensor(Shape{c.bh, c.n_k, c.d});
  const Tensor v = random_tensor(Shape{c.bh, c.n_k, c.d_v});
  const Tensor grad_o = random_tensor(Shape{c.bh, c.n_q, c.d_v});
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  const TwinResult t = run_twin(q, k, v, grad_o, scale);

  const AttentionSizes s = attention_sizes(q.shape(), k.shape(), v.shape());
  const std::vector<double> go = to_double(grad_o);
  const AttentionReference r = attention_reference(to_double(q), to_double(k), to_double(v), &go, s, scale);
  // delta = rowsum(dO ∘ O) against the reference O, relative to rowsum(|dO ∘ O|) (a single row's sum may cancel).
  std::vector<double> delta_ref(static_cast<size_t>(c.bh * c.n_q)), delta_abs(delta_ref.size());
  for (size_t i = 0; i < delta_ref.size(); ++i)
    for (size_t j = 0; j < static_cast<size_t>(c.d_v); ++j) {
      const double x = go[i * static_cast<size_t>(c.d_v) + j] * r.o[i * static_cast<size_t>(c.d_v) + j];
      delta_ref[i] += x;
      delta_abs[i] += std::abs(x);
    }
  const auto delta = t.delta.to_vector();
  std::vector<double> delta_err(delta.size());
  for (size_t i = 0; i < delta.size(); ++i) delta_err[i] = delta[i] - delta_ref[i];

  EXPECT_LT(rel_error(t.o.to_vector(), r.o), 1e-5) << "o";
  // lse is a log (any sign, possibly ≈ 0 for a single key): an absolute bound.
  EXPECT_LT(max_abs_error(t.lse.to_vector(), r.lse), 1e-5) << "lse";
  EXPECT_LT(norm(delta_err) / norm(delta_abs), 1e-5) << "delta";  // false for NaN
  EXPECT_LT(rel_error(t.dq.to_vector(), r.dq), 1e-5) << "dq";
  EXPECT_LT(rel_error(t.dk.to_vector(), r.dk), 1e-5) << "dk";
  EXPECT_LT(rel_error(t.dv.to_vector(), r.dv), 1e-5) << "dv";
}

INSTANTIATE_TEST_SUITE_P(Grid, FlashAttention2Cpu, testing::ValuesIn(cases()), case_name);

// ---------------------------------------------------------------------------------------------------------------
// Finite differences.

// loss = Σ o ∘ R for a fixed random projection R, so grad_o = R.
double projection_loss(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& r, float scale) {
  const TwinResult t = run_twin(q, k, v, Tensor(), scale);
  const auto o = t.o.to_vector(), rv = r.to_vector();
  double loss = 0;
  for (size_t i = 0; i < o.size(); ++i) loss += double(o[i]) * rv[i];
  return loss;
}

TEST(FlashAttention2CpuFiniteDifferences, GradientsOfAProjectionLoss) {
  const int64_t bh = 2, nq = 5, nk = 6, d = 4, dv = 3;
  const float scale = 0.7f;
  Tensor q = random_tensor(Shape{bh, nq, d}), k = random_tensor(Shape{bh, nk, d}), v = random_tensor(Shape{bh, nk, dv});
  const Tensor r = random_tensor(Shape{bh, nq, dv});
  const TwinResult t = run_twin(q, k, v, r, scale);
  const std::pair<Tensor*, const Tensor*> pairs[] = {{&q, &t.dq}, {&k, &t.dk}, {&v, &t.dv}};
  for (const auto& [x, grad] : pairs) {
    std::vector<double> fd(static_cast<size_t>(x->numel()));
    for (int64_t i = 0; i < x->numel(); ++i) {
      float* p = x->data<float>() + i;
      const float saved = *p, h = 1e-2f;
      *p = saved + h;
      const double up = projection_loss(q, k, v, r, scale);
      *p = saved - h;
      const double down = projection_loss(q, k, v, r, scale);
      *p = saved;
      fd[static_cast<size_t>(i)] = (up - down) / (2.0 * static_cast<double>(h));
    }
    EXPECT_LT(rel_error(grad->to_vector(), fd), 1e-3) << (x == &q ? "dq" : x == &k ? "dk" : "dv");
  }
}

// The float64 reference's own gradients against float64 finite differences (so the reference can be trusted).
TEST(FlashAttention2CpuFiniteDifferences, ReferenceGradientsInFloat64) {
  const AttentionSizes s{2, 5, 7, 4, 6};
  const double scale = 0.6;
  auto rnd = [](int64_t n) {
    auto f = vision::test::random_values(static_cast<size_t>(n));
    return std::vector<double>(f.begin(), f.end());
  };
  std::vector<double> q = rnd(s.batch_heads * s.n_q * s.d_qk), k = rnd(s.batch_heads * s.n_k * s.d_qk),
                      v = rnd(s.batch_heads * s.n_k * s.d_v), r = rnd(s.batch_heads * s.n_q * s.d_v);
  const AttentionReference ref = attention_reference(q, k, v, &r, s, scale);
  auto loss = [&] {
    const AttentionReference f = attention_reference(q, k, v, nullptr, s, scale);
    double l = 0;
    for (size_t i = 0; i < f.o.size(); ++i) l += f.o[i] * r[i];
    return l;
  };
  const std::pair<std::vector<double>*, const std::vector<double>*> pairs[] = {
      {&q, &ref.dq}, {&k, &ref.dk}, {&v, &ref.dv}};
  for (const auto& [x, grad] : pairs) {
    std::vector<double> fd(x->size());
    for (size_t i = 0; i < x->size(); ++i) {
      const double saved = (*x)[i], h = 1e-5;
      (*x)[i] = saved + h;
      const double up = loss();
      (*x)[i] = saved - h;
      const double down = loss();
      (*x)[i] = saved;
      fd[i] = (up - down) / (2 * h);
    }
    EXPECT_LT(rel_error(*grad, fd), 1e-8);
  }
}

TEST(FlashAttention2CpuFiniteDifferences, LseIsTheLogSumExpOfScaledScores) {
  const Tensor q = random_tensor(Shape{1, 3, 8}), k = random_tensor(Shape{1, 4, 8}), v = random_tensor(Shape{1, 4, 2});
  const TwinResult t = run_twin(q, k, v, Tensor(), 0.5f);
  const auto qv = q.to_vector(), kv = k.to_vector(), lse = t.lse.to_vector();
  for (int i = 0; i < 3; ++i) {
    double sum = 0;
    for (int j = 0; j < 4; ++j) {
      double dot = 0;
      for (int c = 0; c < 8; ++c) dot += double(qv[i * 8 + c]) * kv[j * 8 + c];
      sum += std::exp(0.5 * dot);
    }
    EXPECT_NEAR(lse[i], std::log(sum), 1e-6);
  }
}

TEST(FlashAttention2CpuErrors, MismatchedShapesAndDtypesAreErrors) {
  const Tensor q = random_tensor(Shape{2, 5, 8}), k = random_tensor(Shape{2, 6, 8}), v = random_tensor(Shape{2, 6, 4});
  Tensor o = poisoned(Shape{2, 5, 4});
  EXPECT_NO_THROW(flash_attention2_forward_cpu(q, k, v, 0.3f, o, Tensor()));
  EXPECT_THROW(flash_attention2_forward_cpu(q, random_tensor(Shape{2, 6, 7}), v, 0.3f, o, Tensor()), Error);
  EXPECT_THROW(flash_attention2_forward_cpu(q, k, random_tensor(Shape{2, 5, 4}), 0.3f, o, Tensor()), Error);
  EXPECT_THROW(flash_attention2_forward_cpu(q, k, random_tensor(Shape{1, 6, 4}), 0.3f, o, Tensor()), Error);
  EXPECT_THROW(flash_attention2_forward_cpu(q, k, v, 0.3f, poisoned(Shape{2, 5, 5}), Tensor()), Error);
  EXPECT_THROW(flash_attention2_forward_cpu(q, k, v, 0.3f, o, poisoned(Shape{2, 6})), Error);
  EXPECT_THROW(flash_attention2_forward_cpu(q, k, v, 0.3f, Tensor::zeros(Shape{2, 5, 4}, DType::f16), Tensor()),
               Error);
  EXPECT_THROW(flash_attention2_forward_cpu(random_tensor(Shape{2, 5}), k, v, 0.3f, o, Tensor()), Error);
}

// ---------------------------------------------------------------------------------------------------------------
// The graph op through the executor.

// y[r, :] = x[r, :] · W for rows r of a [BH, N, C_in] tensor, W [C_in, C_out] a trainable parameter "weight".
class LinearRuntime : public RuntimeOp {
 public:
  explicit LinearRuntime(int64_t c_out) : c_out_(c_out) {}
  std::string name() const override { return "test.linear"; }
  int n_activation_inputs() const override { return 1; }
  std::vector<ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    return {{"weight", Shape{in[0][2], c_out_}}};
  }
  std::vector<std::byte> param_init_data(size_t, const std::vector<Shape>& in, const Shape&,
                                         uint64_t seed) const override {
    return bytes_of(uniform_init(Shape{in[0][2], c_out_}, 1.0f, seed));
  }
  void forward(ForwardCtx& ctx) override {
    const Tensor &x = ctx.inputs[0], &w = ctx.params[0];
    const int64_t rows = x.dim(0) * x.dim(1), cin = x.dim(2);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < c_out_; ++o) {
        double s = 0;
        for (int64_t i = 0; i < cin; ++i) s += double(x.data<float>()[r * cin + i]) * w.data<float>()[i * c_out_ + o];
        ctx.output.data<float>()[r * c_out_ + o] = static_cast<float>(s);
      }
  }
  bool has_backward() const override { return true; }
  void backward(BackwardCtx& ctx) override {
    const Tensor &x = ctx.inputs[0], &w = ctx.params[0], &gy = ctx.grad_output;
    const int64_t rows = x.dim(0) * x.dim(1), cin = x.dim(2);
    if (ctx.grad_inputs[0].defined())
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < cin; ++i) {
          double s = 0;
          for (int64_t o = 0; o < c_out_; ++o) s += double(gy.data<float>()[r * c_out_ + o]) * w.data<float>()[i * c_out_ + o];
          ctx.grad_inputs[0].data<float>()[r * cin + i] = static_cast<float>(s);
        }
    for (int64_t i = 0; i < cin; ++i)
      for (int64_t o = 0; o < c_out_; ++o) {
        double s = 0;
        for (int64_t r = 0; r < rows; ++r) s += double(x.data<float>()[r * cin + i]) * gy.data<float>()[r * c_out_ + o];
        ctx.grad_params[0].data<float>()[i * c_out_ + o] = static_cast<float>(s);
      }
  }

 private:
  int64_t c_out_;
};

class LinearOp : public Op {
 public:
  explicit LinearOp(int64_t c_out) : c_out_(c_out) {}
  std::string name() const override { return "test.linear"; }
  Shape infer_output_shape(const std::vector<Shape>& in) const override {
    return Shape{in.at(0)[0], in.at(0)[1], c_out_};
  }
  std::unique_ptr<RuntimeOp> lower(Backend, Mode) const override { return std::make_unique<LinearRuntime>(c_out_); }

 private:
  int64_t c_out_;
};

struct AttentionGraph {
  std::shared_ptr<Graph> graph;
  SymTensor q, k, v, o;
};

// x [?, N, C] → q = x·Wq, k = x·Wk (or k = q), v = x·Wv → o = attention(q, k, v) → loss = Σ o².
AttentionGraph attention_graph(int64_t n, int64_t c, int64_t d, int64_t dv, float scale, bool shared_qk) {
  AttentionGraph a;
  a.graph = std::make_shared<Graph>();
  Graph& g = *a.graph;
  auto x = g.input("x", Shape{Shape::kAny, n, c});
  auto _ = g.scope("block");
  a.q = g.apply(std::make_shared<LinearOp>(d), {x}, "q");
  a.k = shared_qk ? a.q : g.apply(std::make_shared<LinearOp>(d), {x}, "k");
  a.v = g.apply(std::make_shared<LinearOp>(dv), {x}, "v");
  a.o = flash_attention2(a.q, a.k, a.v, scale);
  g.mark_output(g.apply(std::make_shared<test::SquareSumOp>(), {a.o}, "loss"));
  return a;
}

// Row-major [rows, cin] · [cin, cout] in float64.
std::vector<double> matmul(const std::vector<double>& x, const std::vector<double>& w, int64_t rows, int64_t cin,
                           int64_t cout) {
  std::vector<double> y(static_cast<size_t>(rows * cout));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cin; ++i)
      for (int64_t o = 0; o < cout; ++o) y[r * cout + o] += x[r * cin + i] * w[i * cout + o];
  return y;
}
// xᵀ · g: the weight gradient of a linear layer.
std::vector<double> weight_grad(const std::vector<double>& x, const std::vector<double>& g, int64_t rows, int64_t cin,
                                int64_t cout) {
  std::vector<double> gw(static_cast<size_t>(cin * cout));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cin; ++i)
      for (int64_t o = 0; o < cout; ++o) gw[i * cout + o] += x[r * cin + i] * g[r * cout + o];
  return gw;
}

// float64 forward of attention_graph with the executor's weights: x, q, k, v as used, o, and the loss Σ o².
struct GraphReference {
  std::vector<double> x, q, k, v;
  AttentionSizes sizes;
  AttentionReference forward;
  double loss = 0;
};
GraphReference graph_reference(Executor& ex, const Tensor& x, int64_t d, int64_t dv, float scale, bool shared_qk) {
  const int64_t bh = x.dim(0), n = x.dim(1), c = x.dim(2);
  const auto wq = to_double(ex.state().tensor("block.q.weight"));
  const auto wk = shared_qk ? wq : to_double(ex.state().tensor("block.k.weight"));
  const auto wv = to_double(ex.state().tensor("block.v.weight"));
  GraphReference g;
  g.x = to_double(x);
  g.q = matmul(g.x, wq, bh * n, c, d);
  g.k = matmul(g.x, wk, bh * n, c, d);
  g.v = matmul(g.x, wv, bh * n, c, dv);
  g.sizes = AttentionSizes{bh, n, n, d, dv};
  g.forward = attention_reference(g.q, g.k, g.v, nullptr, g.sizes, scale);
  for (double o : g.forward.o) g.loss += o * o;
  return g;
}

void check_graph_gradients(bool shared_qk) {
  const int64_t bh = 3, n = 37, c = 6, d = 16, dv = 32;
  const float scale = 0.25f;
  AttentionGraph a = attention_graph(n, c, d, dv, scale, shared_qk);
  Executor ex(a.graph, cpu_backend());
  const Tensor x = random_tensor(Shape{bh, n, c});
  const double loss = ex.forward_train({x})[0].data<float>()[0];
  ex.backward();

  // float64 reference of the whole chain with the executor's weights.
  const GraphReference g = graph_reference(ex, x, d, dv, scale, shared_qk);
  const auto& xd = g.x;
  const int64_t rows = bh * n;
  const double loss_ref = g.loss;
  std::vector<double> go(g.forward.o.size());
  for (size_t i = 0; i < go.size(); ++i) go[i] = 2 * g.forward.o[i];
  const AttentionReference r = attention_reference(g.q, g.k, g.v, &go, g.sizes, scale);
  EXPECT_NEAR(loss, loss_ref, 1e-5 * loss_ref);

  // The gradients of q, k, v reach their producers.
  const Plan& plan = *ex.last_train_plan();
  if (shared_qk) {
    std::vector<double> dqk(r.dq.size());
    for (size_t i = 0; i < dqk.size(); ++i) dqk[i] = r.dq[i] + r.dk[i];
    EXPECT_LT(rel_error(plan.value_grad(a.q.id()).to_vector(), dqk), 1e-5) << "dq + dk";
    EXPECT_LT(rel_error(ex.state().grad("block.q.weight").to_vector(), weight_grad(xd, dqk, rows, c, d)), 1e-5);
  } else {
    EXPECT_LT(rel_error(plan.value_grad(a.q.id()).to_vector(), r.dq), 1e-5) << "dq";
    EXPECT_LT(rel_error(plan.value_grad(a.k.id()).to_vector(), r.dk), 1e-5) << "dk";
    EXPECT_LT(rel_error(ex.state().grad("block.q.weight").to_vector(), weight_grad(xd, r.dq, rows, c, d)), 1e-5);
    EXPECT_LT(rel_error(ex.state().grad("block.k.weight").to_vector(), weight_grad(xd, r.dk, rows, c, d)), 1e-5);
  }
  EXPECT_LT(rel_error(plan.value_grad(a.v.id()).to_vector(), r.dv), 1e-5) << "dv";
  EXPECT_LT(rel_error(ex.state().grad("block.v.weight").to_vector(), weight_grad(xd, r.dv, rows, c, dv)), 1e-5);

  // Finite differences on a sample of parameters.
  const std::vector<float> grads = ex.state().flat_grads().to_vector();
  Tensor params = ex.state().flat_params();
  for (int t = 0; t < 24; ++t) {
    const int64_t i = static_cast<int64_t>(vision::test::rng()() % static_cast<uint64_t>(params.numel()));
    float* p = params.data<float>() + i;
    const float saved = *p, h = 1e-2f;
    *p = saved + h;
    const double up = ex.forward({x})[0].data<float>()[0];
    *p = saved - h;
    const double down = ex.forward({x})[0].data<float>()[0];
    *p = saved;
    const double fd = (up - down) / (2 * h);
    EXPECT_NEAR(grads[static_cast<size_t>(i)], fd, 2e-3 * std::abs(fd) + 2e-3 * std::sqrt(loss_ref / double(n)))
        << "parameter " << i;
  }
  // Inference (no saved lse, no workspace) gives the training forward's loss.
  EXPECT_NEAR(ex.forward({x})[0].data<float>()[0], loss, 1e-6 * loss);
}

TEST(FlashAttention2Graph, ExecutorGradientsReachParametersAndMatchFloat64AndFiniteDifferences) {
  check_graph_gradients(/*shared_qk=*/false);
}

TEST(FlashAttention2Graph, SharedQueryAndKeyTensorAccumulatesBothGradients) {
  check_graph_gradients(/*shared_qk=*/true);
}

TEST(FlashAttention2Graph, SymbolicBatchHeadsShapeErrorsAndCudaLowering) {
  Graph g;
  auto q = g.input("q", Shape{Shape::kAny, 10, 32});
  auto k = g.input("k", Shape{Shape::kAny, 20, 32});
  auto v = g.input("v", Shape{Shape::kAny, 20, 64});
  auto k_bad_d = g.input("k_bad_d", Shape{Shape::kAny, 20, 16});
  auto v_bad_n = g.input("v_bad_n", Shape{Shape::kAny, 21, 64});
  auto v_bad_bh = g.input("v_bad_bh", Shape{2, 20, 64});
  auto k_bh = g.input("k_bh", Shape{3, 20, 32});
  auto flat = g.input("flat", Shape{20, 64});
  auto o = flash_attention2(q, k, v, 0.1f);
  EXPECT_EQ(o.shape().str(), "[?, 10, 64]");
  EXPECT_EQ(g.nodes().back().name, "attn");
  EXPECT_EQ(g.nodes().back().op->name(), "ops.flash_attention2");
  EXPECT_EQ(flash_attention2(q, k_bh, v, 0.1f, "a2").shape().str(), "[3, 10, 64]");
  EXPECT_THROW(flash_attention2(q, k_bad_d, v, 0.1f, "bad"), Error);
  EXPECT_THROW(flash_attention2(q, k, v_bad_n, 0.1f, "bad"), Error);
  EXPECT_THROW(flash_attention2(q, k_bh, v_bad_bh, 0.1f, "bad"), Error);
  EXPECT_THROW(flash_attention2(q, k, flat, 0.1f, "bad"), Error);
  EXPECT_THROW(FlashAttention2Op(0.0f), Error);
  EXPECT_THROW(FlashAttention2Op(std::nanf("")), Error);
#ifdef VISION_HAS_CUDA
  // The CUDA RuntimeOp is made without touching the GPU; its state specs are the CPU twin's. Its workspace holds
  // delta (256-byte aligned) and room for a dK or dV no input needs; head sizes the kernels do not take fail when a
  // plan asks for it.
  const auto rt = FlashAttention2Op(0.1f).lower(Backend::cuda, Mode::train);
  EXPECT_EQ(rt->name(), "ops.flash_attention2");
  EXPECT_EQ(rt->n_activation_inputs(), 3);
  EXPECT_TRUE(rt->has_backward());
  EXPECT_FALSE(rt->kernels().empty());  // nothing run yet: every registered FA2 kernel (tests/cuda/test_op_kernels.cpp)
  const std::vector<Shape> in{Shape{2, 10, 32}, Shape{2, 20, 32}, Shape{2, 20, 64}};
  const auto saved = rt->saved_specs(in, Shape{2, 10, 64});
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].shape, (Shape{2, 10}));
  EXPECT_EQ(saved[0].dtype, DType::f32);
  // delta (BH·n_q f32, 256-aligned) and a dK/dV scratch; a plan that need not be deterministic also gets the
  // fused backward's dQ accumulator (BH·n_q·d f32).
  const graph::PlanContext deterministic{nullptr, Mode::train, true}, fast{nullptr, Mode::train, false};
  EXPECT_EQ(rt->workspace_bytes(deterministic, in, Shape{2, 10, 64}), size_t{256 + 2 * 20 * 64 * 4});
  EXPECT_EQ(rt->workspace_bytes(fast, in, Shape{2, 10, 64}), size_t{256 + 2 * 20 * 64 * 4 + 2 * 10 * 32 * 4});
  EXPECT_EQ(FlashAttention2Op(0.1f).lower(Backend::cuda, Mode::inference)->workspace_bytes(fast, in, Shape{2, 10, 64}),
            0u);
  EXPECT_THROW(rt->workspace_bytes(fast, {Shape{2, 10, 24}, Shape{2, 20, 24}, Shape{2, 20, 64}}, Shape{2, 10, 64}),
               Error);
#else
  try {
    FlashAttention2Op(0.1f).lower(Backend::cuda, Mode::train);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no cuda implementation"), std::string::npos) << e.what();
  }
#endif
}

TEST(FlashAttention2Graph, PlansPerBatchHeadsCount) {
  AttentionGraph a = attention_graph(9, 4, 8, 8, 0.3f, false);
  Executor ex(a.graph, cpu_backend());
  for (int64_t bh : {1, 4}) {
    const Tensor x = random_tensor(Shape{bh, 9, 4});
    const double loss = ex.forward({x})[0].data<float>()[0];
    // Each plan computes its own batch's loss: the float64 value of the same chain, within the 1e-5 of the other graph
    // tests (f32 throughout, sums of at most a few hundred terms).
    const double loss_ref = graph_reference(ex, x, 8, 8, 0.3f, false).loss;
    EXPECT_NEAR(loss, loss_ref, 1e-5 * loss_ref) << "BH " << bh;
  }
  EXPECT_EQ(ex.cached_plans(), 2u);
}

// An inference plan on the CPU runs the attention as oneDNN's matmuls and softmax over chunks of (b, h) pairs whose
// scores fit a 2^22-float workspace, and the blocked loop of the twin where one pair's scores would not: against the
// float64 reference in each regime — one chunk (YOLO26n's PSA at 640: N = 400), chunks with a tail (N = 1100: 3 pairs
// a chunk, BH = 4), and past the budget (N_q · N_k = 2100 · 2000 > 2^22, no workspace asked for).
TEST(FlashAttention2Graph, InferencePlanMatchesFloat64InEveryRegime) {
  struct Regime {
    int64_t bh, n_q, n_k, d, d_v;
    bool scratch;
  };
  for (const Regime c : {Regime{16, 400, 400, 32, 64, true}, Regime{4, 1100, 1100, 16, 32, true},
                         Regime{1, 2100, 2000, 16, 16, false}}) {
    auto g = std::make_shared<Graph>();
    auto q = g->input("q", Shape{c.bh, c.n_q, c.d});
    auto k = g->input("k", Shape{c.bh, c.n_k, c.d});
    auto v = g->input("v", Shape{c.bh, c.n_k, c.d_v});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    g->mark_output(flash_attention2(q, k, v, scale));
    const auto rt = FlashAttention2Op(scale).lower(Backend::cpu, Mode::inference);
    const graph::PlanContext plan{nullptr, Mode::inference, false};
    const size_t ws = rt->workspace_bytes(plan, {q.shape(), k.shape(), v.shape()}, Shape{c.bh, c.n_q, c.d_v});
    const int64_t per = c.n_q * c.n_k, chunk = std::min<int64_t>(c.bh, (int64_t{1} << 22) / per);
    EXPECT_EQ(ws, c.scratch ? static_cast<size_t>(chunk * per) * 4 : 0u) << c.n_q;
    Executor ex(g, cpu_backend());
    const Tensor tq = random_tensor(q.shape()), tk = random_tensor(k.shape()), tv = random_tensor(v.shape());
    std::vector<Tensor> out;
    for (int run = 0; run < 2; ++run) out = ex.forward({tq, tk, tv});  // the second run reuses the primitives
    const AttentionSizes s = attention_sizes(q.shape(), k.shape(), v.shape());
    const AttentionReference r = attention_reference(to_double(tq), to_double(tk), to_double(tv), nullptr, s, scale);
    // f32 sums of up to 2,100 terms: u·√N ≈ 3e-6 (measured 3.7e-7 to 7.7e-7). And element by element, where a single
    // wrong row would hide in the norm of 10^5–10^6 elements: each output averages values of V in [−1, 1], so 1e-6
    // absolute (measured at most 1.3e-7 over three seeds; the outputs reach 0.04–0.13).
    const auto o = out.at(0).to_vector();
    EXPECT_LT(rel_error(o, r.o), 4e-6) << "N_q " << c.n_q;
    EXPECT_LT(max_abs_error(o, r.o), 1e-6) << "N_q " << c.n_q;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// GPU kernel configuration and the NVRTC compile check of every instantiation (no GPU needed).

constexpr FlashAttention2Kernel kAllKernels[] = {FlashAttention2Kernel::forward, FlashAttention2Kernel::backward_dq,
                                                 FlashAttention2Kernel::backward_dkv,
                                                 FlashAttention2Kernel::backward_dkv_dq,
                                                 FlashAttention2Kernel::forward_sm90,
                                                 FlashAttention2Kernel::backward_sm90};

TEST(FlashAttention2Kernels, TilesNamesSharedMemoryAndLaunchGeometry) {
  const FlashAttention2Tiles t = flash_attention2_tiles(FlashAttention2Kernel::forward, DType::f16, 32, 64);
  EXPECT_EQ(flash_attention2_kernel_name(FlashAttention2Kernel::forward, DType::f16, 32, 64, t),
            "vision::ops::attention::flash_attention2_forward<__half, 32, 64, 64, 64, 4>");
  EXPECT_EQ(flash_attention2_kernel_name(FlashAttention2Kernel::backward_preprocess, DType::bf16, 32, 64,
                                         flash_attention2_tiles(FlashAttention2Kernel::backward_preprocess,
                                                                DType::bf16, 32, 64)),
            "vision::ops::attention::flash_attention2_backward_preprocess<__nv_bfloat16, 64, 8>");
  // Pinned sizes (the NVRTC test checks the device-side formula against the host one for every instantiation).
  EXPECT_EQ(flash_attention2_smem_bytes(FlashAttention2Kernel::forward, DType::f16, 32, 64, {64, 64, 4}),
            size_t{(64 * 40 + 64 * 40 + 64 * 72) * 2});
  EXPECT_EQ(flash_attention2_smem_bytes(FlashAttention2Kernel::backward_dkv, DType::f32, 32, 64, {32, 32, 4}),
            size_t{(32 * 33 + 32 * 65 + 32 * 33 + 32 * 65 + 2 * 32 * 33 + 2 * 32) * 4});
  const FlashAttention2Launch l =
      flash_attention2_launch(FlashAttention2Kernel::backward_dkv, DType::bf16, AttentionSizes{6, 400, 130, 32, 64},
                              flash_attention2_tiles(FlashAttention2Kernel::backward_dkv, DType::bf16, 32, 64));
  EXPECT_EQ(l.grid[0], 3u);  // ceil(130 / 64) key blocks
  EXPECT_EQ(l.grid[1], 6u);
  EXPECT_EQ(l.threads, 128u);
  EXPECT_THROW(flash_attention2_tiles(FlashAttention2Kernel::forward, DType::f16, 24, 48), Error);
  EXPECT_THROW(flash_attention2_tiles(FlashAttention2Kernel::forward, DType::f16, 32, 40), Error);
  EXPECT_THROW(flash_attention2_tiles(FlashAttention2Kernel::forward, DType::i32, 32, 32), Error);
  EXPECT_THROW(flash_attention2_kernel_name(FlashAttention2Kernel::forward, DType::f16, 32, 32, {32, 64, 4}), Error);
  EXPECT_THROW(flash_attention2_launch(FlashAttention2Kernel::forward, DType::f16, AttentionSizes{70000, 4, 4, 32, 32},
                                       {64, 64, 4}),
               Error);
  // Every instantiation the engine uses fits a Hopper SM (227 KiB of shared memory per CTA).
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int d : {16, 32, 64, 128})
      for (int dv : {d, 2 * d})
        for (FlashAttention2Kernel k : kAllKernels)
          if (flash_attention2_kernel_exists(k, dt, d, dv))
            EXPECT_LE(flash_attention2_smem_bytes(k, dt, d, dv, flash_attention2_tiles(k, dt, d, dv)), 227u * 1024u);
  EXPECT_EQ(flash_attention2_kernel_name(FlashAttention2Kernel::forward_sm90, DType::bf16, 32, 64,
                                         flash_attention2_tiles(FlashAttention2Kernel::forward_sm90, DType::bf16, 32,
                                                                64)),
            "vision::ops::attention::flash_attention2_forward_sm90<__nv_bfloat16, 32, 64, 64, 1>");
  EXPECT_EQ(flash_attention2_smem_bytes(FlashAttention2Kernel::forward_sm90, DType::f16, 32, 64, {64, 128, 4}),
            size_t{(64 * 32 + 2 * 128 * (32 + 64)) * 2});
  EXPECT_FALSE(flash_attention2_kernel_exists(FlashAttention2Kernel::forward_sm90, DType::f16, 128, 256));
  EXPECT_FALSE(flash_attention2_kernel_exists(FlashAttention2Kernel::backward_dkv_dq, DType::f32, 32, 64));
  EXPECT_THROW(flash_attention2_kernel_name(FlashAttention2Kernel::forward_sm90, DType::f32, 32, 64, {128, 128, 8}),
               Error);
}

// The instantiations of every kernel, with the engine's tiles, compile to sm_90a cubins (ptxas checks the inline PTX,
// wgmma included), and for every (dtype, d, d_v = d or 2d) the device-side shared-memory formula equals the host
// mirror.
TEST(FlashAttention2Kernels, InstantiationsCompileWithNvrtcForSm90a) {
  std::string why;
  const auto nvrtc = vision::test::NvrtcLibrary::load(&why);
  if (!nvrtc) VISION_SKIP_OR_FAIL(why);
  // flash_attn2_sm90.cuh includes flash_attn2.cuh: one program holds every kernel.
  const std::filesystem::path cuh =
      std::filesystem::path(VISION_SOURCE_DIR) / "src/vision/ops/attention/flash_attn2_sm90.cuh";
  const std::string text = vision::test::read_file(cuh);
  ASSERT_FALSE(text.empty()) << "cannot read " << cuh;
  const std::string inc = vision::test::NvrtcLibrary::cuda_home() + "/include";
  const std::vector<std::string> options = {"--gpu-architecture=sm_90a", "--std=c++17", "-I" + inc,
                                            "-I" + inc + "/cccl",
                                            "-I" + (std::filesystem::path(VISION_SOURCE_DIR) / "src").string()};

  // Every head-size pair takes ~30 s on two cores: by default only YOLO26's pair (32, 64) is compiled (the code paths
  // differ only in constants), with VISION_TEST_ALL_KERNELS=1 all of them. The shared-memory checks always cover all.
  const char* all_env = std::getenv("VISION_TEST_ALL_KERNELS");
  const bool all = all_env && std::string(all_env) == "1";
  auto compiled = [&](int d, int dv) {
    return all || (d == 32 && dv == 64);
  };
  std::atomic<int> count{0};
  auto compile_dtype = [&](DType dt) {
    std::string source = text + "\n";
    std::vector<std::string> names;
    for (int d : {16, 32, 64, 128})
      for (int dv : {d, 2 * d}) {
        for (FlashAttention2Kernel k : kAllKernels) {
          if (!flash_attention2_kernel_exists(k, dt, d, dv)) continue;
          const FlashAttention2Tiles t = flash_attention2_tiles(k, dt, d, dv);
          const std::string name = flash_attention2_kernel_name(k, dt, d, dv, t);
          if (compiled(d, dv)) names.push_back(name);
          const std::string type = name.substr(name.find('<') + 1, name.find(',') - name.find('<') - 1);
          const bool sm90 = k == FlashAttention2Kernel::forward_sm90 || k == FlashAttention2Kernel::backward_sm90;
          const std::string device_bytes =
              sm90 ? "FlashAttention2Sm90Smem<" + type + ", " + std::to_string(d) + ", " + std::to_string(dv) + ", " +
                         std::to_string(t.block_n) + ", " + std::to_string(t.warps / 4) +
                         (k == FlashAttention2Kernel::forward_sm90 ? ">::bytes" : ">::backward")
                  : "FlashAttention2Smem<" + type + ", " + std::to_string(d) + ", " + std::to_string(dv) + ", " +
                        std::to_string(t.block_m) + ", " + std::to_string(t.block_n) +
                        ">::" + std::string(flash_attention2_kernel_label(k));
          source += "static_assert(vision::ops::attention::fa2::" + device_bytes + " == " +
                    std::to_string(flash_attention2_smem_bytes(k, dt, d, dv, t)) +
                    ", \"shared memory: device and host formulas differ\");\n";
        }
      }
    for (int dv : {16, 32, 64, 128, 256}) {
      const FlashAttention2Tiles t = flash_attention2_tiles(FlashAttention2Kernel::backward_preprocess, dt, 16, dv);
      const std::string name = flash_attention2_kernel_name(FlashAttention2Kernel::backward_preprocess, dt, 16, dv, t);
      names.push_back(name);
      // The rows a CTA covers: the host's tile (the grid follows it) against the kernel's layout.
      const std::string type = name.substr(name.find('<') + 1, name.find(',') - name.find('<') - 1);
      source += "static_assert(" + std::to_string(t.warps) +
                " * vision::ops::attention::fa2::PreprocessShape<" + type + ", " +
                std::to_string(dv) + ">::kRowsPerWarp == " + std::to_string(t.block_m) +
                ", \"preprocess rows per CTA: device and host differ\");\n";
    }
    if (dt != DType::f32)
      names.push_back(flash_attention2_kernel_name(
          FlashAttention2Kernel::backward_dq_convert, dt, 16, 16,
          flash_attention2_tiles(FlashAttention2Kernel::backward_dq_convert, dt, 16, 16)));
    count += static_cast<int>(names.size());
    return nvrtc->compile(source, "flash_attn2_" + std::string(core::dtype_name(dt)) + ".cu", names, options);
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::future<std::string>> jobs;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    jobs.push_back(std::async(std::launch::async, compile_dtype, dt));
  for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(jobs[i].get(), "") << "dtype #" << i;
  std::printf("NVRTC compiled %d instantiations for sm_90a in %.1f s\n", count.load(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

}  // namespace test_flash_attn2_cpp
