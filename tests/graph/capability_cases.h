// Graph capabilities checked the same way on any backend (built-in ops only): several outputs, views and
// in-place concat, shape ops on every axis, scalar inputs, detach, outputs per mode, deterministic backward.
// The CPU tests run them on the CPU backend; tests/cuda runs them on CUDA and against the CPU.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "test_util.h"
#include "vision/graph/executor.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/reduce.h"
#include "vision/ops/shape_ops.h"

namespace vision::test {

using core::DType;
using core::Shape;
using core::Tensor;
using graph::Executor;
using graph::Graph;
using graph::Mode;
using graph::SymTensor;

inline std::vector<float> host_values(Executor& ex, const Tensor& t) { return ex.backend().download(t).to_vector(); }

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Float64 reference of concat along axis of row-major tensors.
inline std::vector<double> concat_reference(const std::vector<Tensor>& xs, size_t axis) {
  std::vector<double> out;
  int64_t outer = 1;
  for (size_t d = 0; d < axis; ++d) outer *= xs[0].shape()[d];
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor& x : xs) {
      const int64_t run = x.numel() / outer;
      const auto v = x.to_vector();
      for (int64_t i = 0; i < run; ++i) out.push_back(v[static_cast<size_t>(o * run + i)]);
    }
  return out;
}

// A convolution (a parameter, so gradients flow) → split along `axis` into {1, 2} → part 1 squared, part 0 kept →
// concat back along the same axis → Σ½x². Outputs: the loss (seeded) and, when `logged`, part 0's ½Σx² (logged).
inline std::shared_ptr<Graph> split_concat_graph(int64_t batch, int64_t axis, bool logged) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{batch, 2, 3, 4});
  auto y = ops::conv2d(x, {.in_channels = 2, .out_channels = 3, .kernel = 3, .bias = true}, "conv");
  auto parts = ops::split(y, {1, 2}, axis, "split");
  auto squared = ops::mul(parts[1], parts[1], "square");
  auto joined = ops::concat({parts[0], squared}, axis, "cat");
  auto loss = ops::sum_squares(joined, "loss");
  g->mark_output(loss);
  if (logged) g->mark_output(ops::sum_squares(parts[0], "part0"), graph::kTrainingLogged);
  return g;
}

// Forward and parameter gradients of split_concat_graph on `backend` against finite differences on the CPU.
inline void check_split_concat(std::shared_ptr<graph::BackendContext> backend, int64_t batch, int64_t axis) {
  SCOPED_TRACE(fmt::format("batch {} axis {}", batch, axis));
  auto g = split_concat_graph(batch, axis, true);
  Executor ex(g, backend), cpu(g, graph::cpu_backend());
  const Tensor x = random_tensor(Shape{batch, 2, 3, 4});
  cpu.state({x.shape()});
  ex.state({x.shape()});
  for (auto& [key, t] : cpu.state().to_host()) ex.state().set_from_host(key, t);
  const auto out = ex.forward_train({x});
  ASSERT_EQ(out.size(), 2u);
  ex.backward();
  const auto grads = host_values(ex, ex.state().flat_grads());
  // Finite differences of the loss on the CPU (inference plan: the loss is an output of both modes).
  Tensor params = cpu.state().flat_params();
  for (int64_t i = 0; i < params.numel(); ++i) {
    float* p = params.data<float>() + i;
    const float saved = *p, h = 1e-2f;
    *p = saved + h;
    cpu.state().mark_updated();
    const double up = cpu.forward({x})[0].data<float>()[0];
    *p = saved - h;
    cpu.state().mark_updated();  // a direct write: plans refresh what they keep from the state (packed weights)
    const double down = cpu.forward({x})[0].data<float>()[0];
    *p = saved;
    const double fd = (up - down) / (2 * h);
    EXPECT_NEAR(grads[static_cast<size_t>(i)], fd, 3e-3 * std::abs(fd) + 2e-3) << "parameter " << i;
  }
  // The logged component gets no gradient seed: the total's gradient alone (its own would add Σ over part 0).
  Executor ref(split_concat_graph(batch, axis, false), backend);
  ref.state({x.shape()});
  for (auto& [key, t] : cpu.state().to_host()) ref.state().set_from_host(key, t);
  ref.forward_train({x});
  ref.backward();
  EXPECT_TRUE(bitwise_equal(host_values(ref, ref.state().flat_grads()), grads));
}

// Concat along every axis (negative too) of three inputs, and split back, on `backend`: values exact.
inline void check_concat_split_every_axis(std::shared_ptr<graph::BackendContext> backend) {
  for (int64_t axis : {0, 1, 2, 3, -1}) {
    SCOPED_TRACE(fmt::format("axis {}", axis));
    const size_t a = static_cast<size_t>(axis < 0 ? axis + 4 : axis);
    std::vector<Shape> shapes;
    for (int64_t n : {1, 3, 2}) {
      std::vector<int64_t> d{2, 3, 4, 5};
      d[a] = n;
      shapes.push_back(Shape(d));
    }
    auto g = std::make_shared<Graph>();
    std::vector<SymTensor> in;
    for (size_t i = 0; i < shapes.size(); ++i) in.push_back(g->input(fmt::format("x{}", i), shapes[i]));
    auto cat = ops::concat(in, axis, "cat");
    auto parts = ops::split(cat, {1, 3, 2}, axis, "split");
    g->mark_output(cat);
    for (auto& p : parts) g->mark_output(p);
    Executor ex(g, backend);
    std::vector<Tensor> xs;
    for (auto& s : shapes) xs.push_back(random_tensor(s));
    const auto out = ex.forward(xs);
    EXPECT_EQ(rel_error(host_values(ex, out[0]), concat_reference(xs, a)), 0.0);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(host_values(ex, out[1 + i]), xs[i].to_vector()) << "part " << i;
  }
}

// Reshape with kept (0) and inferred (-1) dims, flatten and permute, forward and backward: a permute's
// gradient is the inverse permute of the output's.
inline void check_reshape_permute(std::shared_ptr<graph::BackendContext> backend) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{2, 3, 4, 5});
  auto c = ops::conv2d(x, {.in_channels = 3, .out_channels = 4, .kernel = 1}, "conv");
  auto r = ops::reshape(c, {0, 4, -1}, "r");          // [2, 4, 20]
  auto p = ops::permute(r, {0, 2, 1}, "p");          // [2, 20, 4]
  auto f = ops::flatten(p, 1, -1, "f");              // [2, 80]
  EXPECT_EQ(r.shape(), (Shape{2, 4, 20}));
  EXPECT_EQ(f.shape(), (Shape{2, 80}));
  auto loss = ops::sum_squares(ops::mul(f, f, "sq"), "loss");  // ¼·Σ c⁴ … a non-linear loss
  g->mark_output(p, graph::kInferenceOutput);
  g->mark_output(loss, graph::kTrainingLoss);
  Executor ex(g, backend), cpu(g, graph::cpu_backend());
  const Tensor xt = random_tensor(Shape{2, 3, 4, 5});
  cpu.state({xt.shape()});
  ex.state({xt.shape()});
  for (auto& [key, t] : cpu.state().to_host()) ex.state().set_from_host(key, t);
  // Inference: p[b, s, k] = conv[b, k, s].
  const auto pv = host_values(ex, ex.forward({xt})[0]);
  const auto cv = host_values(cpu, cpu.forward({xt})[0]);  // the CPU's permute, checked by index below
  std::vector<double> ref(40 * 4);
  {
    // conv of a 1×1 kernel: c[b, k, s] = Σ_i w[k, i] x[b, i, s]
    const auto w = cpu.state().tensor("conv.weight").to_vector();
    const auto xv = xt.to_vector();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t k = 0; k < 4; ++k)
        for (int64_t s = 0; s < 20; ++s) {
          double acc = 0;
          for (int64_t i = 0; i < 3; ++i) acc += double(w[size_t(k * 3 + i)]) * xv[size_t((b * 3 + i) * 20 + s)];
          ref[size_t((b * 20 + s) * 4 + k)] = acc;
        }
  }
  EXPECT_LT(rel_error(pv, ref), 1e-6);
  EXPECT_LT(rel_error(cv, ref), 1e-6);
  // Training: the weight gradient through reshape/permute/flatten equals the one computed by hand:
  // loss = ½Σ(c²)² → dL/dc = 2c³; dL/dw[k,i] = Σ_{b,s} 2c³ x.
  ex.forward_train({xt});
  ex.backward();
  const auto gw = host_values(ex, ex.state().grad("conv.weight"));
  std::vector<double> gref(12, 0.0);
  const auto xv = xt.to_vector();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 20; ++s)
      for (int64_t k = 0; k < 4; ++k) {
        const double cc = ref[size_t((b * 20 + s) * 4 + k)];
        for (int64_t i = 0; i < 3; ++i) gref[size_t(k * 3 + i)] += 2 * cc * cc * cc * xv[size_t((b * 3 + i) * 20 + s)];
      }
  EXPECT_LT(rel_error(gw, gref), 1e-5);
}

// A scalar input (a loss weight) that changes between runs: same plan, the loss and its gradient scale.
inline void check_scalar_input(std::shared_ptr<graph::BackendContext> backend) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{1, 2, 4, 4});
  auto w = g->input("w", Shape{});
  auto y = ops::conv2d(x, {.in_channels = 2, .out_channels = 2, .kernel = 3}, "conv");
  g->mark_output(ops::mul(ops::mean(y, "mean"), w, "weighted"));
  Executor ex(g, backend);
  const Tensor xt = random_tensor(Shape{1, 2, 4, 4});
  Tensor wt = Tensor::zeros(Shape{});
  wt.fill(1.0f);
  const float l1 = host_values(ex, ex.forward_train({xt, wt})[0])[0];
  ex.backward();
  const auto g1 = host_values(ex, ex.state().flat_grads());
  wt.fill(-2.5f);
  const float l2 = host_values(ex, ex.forward_train({xt, wt})[0])[0];
  ex.backward();
  const auto g2 = host_values(ex, ex.state().flat_grads());
  EXPECT_NE(l1, 0.0f);
  EXPECT_FLOAT_EQ(l2, -2.5f * l1);
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(g2[i], -2.5f * g1[i], 1e-6f * std::abs(g1[i]) + 1e-7f);
  // Inference with replay (CUDA): the scalar is an input copied before each run, so a replay sees a new one. The
  // inference plan computes the convolution its own way (fused bias, blocked layouts on the CPU), so the mean of 32
  // O(1) values it averages may differ from the training plan's in the last bits: 1e-5 absolute, scaled by v.
  for (float v : {0.5f, 3.0f, -1.0f}) {
    wt.fill(v);
    EXPECT_NEAR(host_values(ex, ex.forward({xt, wt})[0])[0], v * l1, 1e-5f * std::abs(v) * (1.0f + std::abs(l1)));
  }
  EXPECT_EQ(ex.cached_plans(), 2u);  // one training plan, one inference plan
}

// Stop-gradient: the branch after a detach trains its own weights, nothing flows into the conv before it.
inline void check_detach(std::shared_ptr<graph::BackendContext> backend) {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{2, 2, 4, 4});
  auto a = ops::conv2d(x, {.in_channels = 2, .out_channels = 2, .kernel = 3}, "a");
  auto b = ops::conv2d(ops::detach(a, "stop"), {.in_channels = 2, .out_channels = 2, .kernel = 3}, "b");
  g->mark_output(ops::sum_squares(b, "loss"));
  // The same loss with a's output as an input: b's gradient must match it exactly.
  auto h = std::make_shared<Graph>();
  auto ah = h->input("a", Shape{2, 2, 4, 4});
  h->mark_output(ops::sum_squares(ops::conv2d(ah, {.in_channels = 2, .out_channels = 2, .kernel = 3}, "b"), "loss"));
  Executor ex(g, backend), ref(h, backend);
  const Tensor xt = random_tensor(Shape{2, 2, 4, 4});
  ex.forward_train({xt});
  const Tensor a_value = ex.backend().download(ex.last_train_plan()->value(a.id()));
  // The detached value is a view of a: no copy.
  EXPECT_EQ(ex.last_train_plan()->value(a.id()).raw(),
            ex.last_train_plan()->value(g->nodes()[1].outputs[0]).raw());
  ex.backward();
  ref.state({a_value.shape()});
  ref.state().set_from_host("b.weight", ex.backend().download(ex.state().tensor("b.weight")));
  ref.forward_train({a_value});
  ref.backward();
  EXPECT_TRUE(bitwise_equal(host_values(ex, ex.state().grad("b.weight")), host_values(ref, ref.state().grad("b.weight"))));
  const auto ga = host_values(ex, ex.state().grad("a.weight"));
  for (float v : ga) EXPECT_EQ(v, 0.0f);
  EXPECT_FALSE(ex.last_train_plan()->value_grad(a.id()).defined());  // no gradient buffer behind the detach
}

// A deterministic plan: forward + backward twice on the same state and inputs, bit-identical gradients.
inline std::shared_ptr<Graph> conv_bn_graph() {
  auto g = std::make_shared<Graph>();
  auto x = g->input("x", Shape{4, 3, 12, 12});
  auto y = ops::conv2d(x, {.in_channels = 3, .out_channels = 16, .kernel = 3}, "c1");
  y = ops::silu(ops::batchnorm2d(y, 1e-3f, 0.03f, "bn1"), "act1");
  y = ops::conv2d(y, {.in_channels = 16, .out_channels = 32, .kernel = 3, .stride = 2}, "c2");
  y = ops::silu(ops::batchnorm2d(y, 1e-3f, 0.03f, "bn2"), "act2");
  g->mark_output(ops::mean(ops::mul(y, y, "sq"), "loss"));
  return g;
}

inline void check_deterministic_backward(std::shared_ptr<graph::BackendContext> backend) {
  auto g = conv_bn_graph();
  const Tensor xt = random_tensor(Shape{4, 3, 12, 12});
  std::vector<std::vector<float>> runs;
  std::vector<std::pair<std::string, Tensor>> initial;
  for (int run = 0; run < 2; ++run) {
    Executor ex(g, backend, {.deterministic = true});
    ex.state({xt.shape()});
    if (run == 0) initial = ex.state().to_host();
    for (auto& [key, t] : initial) ex.state().set_from_host(key, t);
    ex.forward_train({xt});
    ex.backward();
    runs.push_back(host_values(ex, ex.state().flat_grads()));
    EXPECT_TRUE(ex.last_train_plan()->options().deterministic);
  }
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1]));
  double norm = 0;
  for (float v : runs[0]) norm += double(v) * v;
  EXPECT_GT(norm, 0.0);
}

// BatchNorm → SiLU fused in a training plan (PlanOptions::fuse_training, on by default) against the same ops run one
// by one (off): the fused plan has one "ops.batchnorm2d_silu" step per pair and no SiLU step left, and the loss,
// every parameter gradient and the running statistics agree within `tol` relative (the fused backward recomputes the
// normalised value from x where the unfused one reads it back; on CUDA the fused forward never rounds it to the
// compute dtype). Random γ and β, so that SiLU's curvature matters.
inline void check_batchnorm_silu_fusion(std::shared_ptr<graph::BackendContext> backend, graph::PlanOptions options,
                                        double tol) {
  auto g = conv_bn_graph();
  const Tensor xt = random_tensor(Shape{4, 3, 12, 12}, -1.0f, 2.0f);
  std::vector<std::pair<std::string, Tensor>> initial;
  struct Run {
    std::vector<float> loss, grads, running;
    size_t fused = 0, silu = 0;
  } runs[2];
  for (int fuse = 0; fuse < 2; ++fuse) {
    options.fuse_training = fuse == 1;
    Executor ex(g, backend, options);
    ex.state({xt.shape()});
    if (fuse == 0) {
      initial = ex.state().to_host();
      for (auto& [key, t] : initial)
        if (key.ends_with(".bias") && key.starts_with("bn"))
          t = random_tensor(t.shape(), -1.0f, 1.0f);
        else if (key.ends_with(".weight") && key.starts_with("bn"))
          t = random_tensor(t.shape(), 0.5f, 1.5f);
    }
    for (auto& [key, t] : initial) ex.state().set_from_host(key, t);
    Run& r = runs[fuse];
    r.loss = host_values(ex, ex.forward_train({xt})[0]);
    ex.backward();
    r.grads = host_values(ex, ex.state().flat_grads());
    for (const char* key : {"bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"})
      for (float v : host_values(ex, ex.state().tensor(key))) r.running.push_back(v);
    for (const auto& step : ex.last_train_plan()->steps()) {
      r.fused += step.op->name() == "ops.batchnorm2d_silu";
      r.silu += step.op->name() == "ops.silu";
    }
  }
  EXPECT_EQ(runs[0].fused, 0u);
  EXPECT_EQ(runs[0].silu, 2u);
  EXPECT_EQ(runs[1].fused, 2u);
  EXPECT_EQ(runs[1].silu, 0u);
  EXPECT_LT(rel_error(runs[1].loss, to_double(runs[0].loss)), tol) << "loss";
  EXPECT_LT(rel_error(runs[1].grads, to_double(runs[0].grads)), tol) << "gradients";
  EXPECT_LT(rel_error(runs[1].running, to_double(runs[0].running)), tol) << "running statistics";
  // Element by element too: no gradient off by more than tol of the largest.
  double largest = 0;
  for (float v : runs[0].grads) largest = std::max(largest, std::abs(double(v)));
  EXPECT_LE(max_abs_error(runs[1].grads, to_double(runs[0].grads)), tol * largest) << "largest gradient error";
  double norm = 0;
  for (float v : runs[1].grads) norm += double(v) * v;
  EXPECT_GT(norm, 0.0);
}

}  // namespace vision::test
