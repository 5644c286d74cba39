// PSA data-movement ops on the CPU: pack / extract / merge against float64 index references with poisoned outputs
// (both forms, heads 1 and 2, KEY_DIM 16 and 32, batch 1 and 3, N = 5·7), backward as the exact adjoint, the
// merge(pack's V) = extract_v round trip, the ops in a graph through the Executor with finite-difference gradients,
// and shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/yolo/psa_test_util.h"
#include "test_util.h"
#include "vision/core/error.h"
#include "vision/graph/executor.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/reduce.h"

using namespace vision;
using namespace vision::test;
using namespace vision::test::psa;
using namespace vision::models::yolo::kernels::attention;
using core::Shape;
using core::Tensor;

namespace {

constexpr int64_t kH = 5, kW = 7, kN = kH * kW;

struct Case {
  PsaForm form;
  int64_t heads, key_dim, batch;
  PsaConfig config() const { return {key_dim, heads, form}; }
  std::string str() const {
    return std::string(form == PsaForm::two_pass ? "two_pass" : "one_pass") + " heads " + std::to_string(heads) +
           " key_dim " + std::to_string(key_dim) + " batch " + std::to_string(batch);
  }
};
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (PsaForm f : {PsaForm::two_pass, PsaForm::one_pass})
    for (int64_t h : {1, 2})
      for (int64_t kd : {16, 32})
        for (int64_t b : {1, 3}) cases.push_back({f, h, kd, b});
  return cases;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * double(b[i]);
  return s;
}
// Σ over tensors of ⟨a_k, b_k⟩ in float64.
double dot(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double s = 0;
  for (size_t k = 0; k < a.size(); ++k) s += dot(a[k].to_vector(), b[k].to_vector());
  return s;
}
std::vector<Tensor> random_like(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(random_tensor(t.shape()));
  return out;
}
Shape qkv_shape(const Case& c) { return Shape{c.batch, 4 * c.key_dim * c.heads, kH, kW}; }
std::vector<Tensor> merge_inputs(const Case& c) {
  const PsaConfig cfg = c.config();
  std::vector<Tensor> parts;
  for (int64_t k = 0; k < cfg.v_parts(); ++k)
    parts.push_back(random_tensor(Shape{c.batch * c.heads, kN, cfg.v_part_width()}));
  return parts;
}

// The CPU twin in NHWC (the image tensors' channels innermost) against the same index references, forward and
// backward: the layout changes only where the bytes lie.
TEST(PsaOps, NhwcMatchesTheNchwReferences) {
  auto cpu = graph::cpu_backend();
  const graph::Format nhwc{core::DType::f32, core::Layout::nhwc};
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.str());
    const PsaConfig cfg = c.config();
    const Tensor qkv = random_tensor(qkv_shape(c));
    const auto x = to_double(qkv);
    const OpRun pack = run_op(PsaPackQkvOp(cfg), {qkv}, *cpu, {}, nhwc);
    const auto ref = pack_reference(x, cfg, c.batch, kN);
    for (size_t k = 0; k < ref.size(); ++k) EXPECT_EQ(max_abs_diff(pack.outputs[k].to_vector(), ref[k]), 0.0) << k;
    const OpRun extract = run_op(PsaExtractVOp(cfg), {qkv}, *cpu, {}, nhwc);
    EXPECT_EQ(max_abs_diff(extract.outputs[0].to_vector(), extract_reference(x, cfg, c.batch, kN)), 0.0);
    const std::vector<Tensor> parts = merge_inputs(c);
    std::vector<std::vector<double>> parts_d;
    for (const Tensor& t : parts) parts_d.push_back(to_double(t));
    const OpRun merge = run_op(PsaMergeAttnOp(cfg, kH, kW), parts, *cpu, {}, nhwc);
    EXPECT_EQ(max_abs_diff(merge.outputs[0].to_vector(), merge_reference(parts_d, cfg, c.batch, kN)), 0.0);
    // Backward in NHWC equals backward in NCHW (both returned as NCHW).
    for (const graph::Op* op : std::initializer_list<const graph::Op*>{new PsaPackQkvOp(cfg), new PsaExtractVOp(cfg)}) {
      std::unique_ptr<const graph::Op> owned(op);
      const std::vector<Tensor> y = random_like(run_op(*op, {qkv}, *cpu).outputs);
      EXPECT_EQ(run_op(*op, {qkv}, *cpu, y, nhwc).grad_inputs[0].to_vector(),
                run_op(*op, {qkv}, *cpu, y).grad_inputs[0].to_vector())
          << op->name();
    }
    const std::vector<Tensor> dy = random_like(merge.outputs);
    const OpRun m1 = run_op(PsaMergeAttnOp(cfg, kH, kW), parts, *cpu, dy, nhwc);
    const OpRun m2 = run_op(PsaMergeAttnOp(cfg, kH, kW), parts, *cpu, dy);
    for (size_t k = 0; k < parts.size(); ++k) EXPECT_EQ(m1.grad_inputs[k].to_vector(), m2.grad_inputs[k].to_vector());
  }
}

TEST(PsaOps, ForwardMatchesIndexReferenceWithPoisonedOutputs) {
  auto cpu = graph::cpu_backend();
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.str());
    const PsaConfig cfg = c.config();
    const Tensor qkv = random_tensor(qkv_shape(c));
    const auto x = to_double(qkv);

    const OpRun pack = run_op(PsaPackQkvOp(cfg), {qkv}, *cpu);
    const auto ref = pack_reference(x, cfg, c.batch, kN);
    ASSERT_EQ(pack.outputs.size(), ref.size());
    for (size_t k = 0; k < ref.size(); ++k) {
      const int64_t w = k < 2 ? c.key_dim : cfg.v_part_width();
      EXPECT_EQ(pack.outputs[k].shape(), (Shape{c.batch * c.heads, kN, w})) << "output " << k;
      EXPECT_EQ(max_abs_diff(pack.outputs[k].to_vector(), ref[k]), 0.0) << "output " << k;
    }

    const OpRun extract = run_op(PsaExtractVOp(cfg), {qkv}, *cpu);
    EXPECT_EQ(extract.outputs[0].shape(), (Shape{c.batch, 2 * c.key_dim * c.heads, kH, kW}));
    EXPECT_EQ(max_abs_diff(extract.outputs[0].to_vector(), extract_reference(x, cfg, c.batch, kN)), 0.0);

    const std::vector<Tensor> parts = merge_inputs(c);
    std::vector<std::vector<double>> parts_d;
    for (const Tensor& t : parts) parts_d.push_back(to_double(t));
    const OpRun merge = run_op(PsaMergeAttnOp(cfg, kH, kW), parts, *cpu);
    EXPECT_EQ(merge.outputs[0].shape(), (Shape{c.batch, 2 * c.key_dim * c.heads, kH, kW}));
    EXPECT_EQ(max_abs_diff(merge.outputs[0].to_vector(), merge_reference(parts_d, cfg, c.batch, kN)), 0.0);
  }
}

// ⟨op(x), y⟩ = ⟨x, op_backward(y)⟩ in float64 for random x and y: backward is the transpose of each copy. The
// gradients are also checked element by element against the transposed reference.
TEST(PsaOps, BackwardIsTheExactAdjoint) {
  auto cpu = graph::cpu_backend();
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.str());
    const PsaConfig cfg = c.config();
    const Tensor qkv = random_tensor(qkv_shape(c));
    {
      const PsaPackQkvOp op(cfg);
      const std::vector<Tensor> y = random_like(run_op(op, {qkv}, *cpu).outputs);
      const OpRun r = run_op(op, {qkv}, *cpu, y);
      const double lhs = dot(r.outputs, y), rhs = dot({qkv}, r.grad_inputs);
      EXPECT_NEAR(lhs, rhs, 1e-12 * (std::abs(lhs) + 1)) << "pack";
      // d_qkv is y scattered back: pack(d_qkv) = y exactly.
      const OpRun again = run_op(op, {r.grad_inputs[0]}, *cpu);
      for (size_t k = 0; k < y.size(); ++k)
        EXPECT_EQ(max_abs_diff(again.outputs[k].to_vector(), to_double(y[k])), 0.0) << "pack backward, output " << k;
    }
    {
      const PsaExtractVOp op(cfg);
      const Tensor y = random_tensor(Shape{c.batch, 2 * c.key_dim * c.heads, kH, kW});
      const OpRun r = run_op(op, {qkv}, *cpu, {y});
      const double lhs = dot(r.outputs, {y}), rhs = dot({qkv}, r.grad_inputs);
      EXPECT_NEAR(lhs, rhs, 1e-12 * (std::abs(lhs) + 1)) << "extract_v";
      // Zero in the Q and K channels, y in V.
      const auto g = r.grad_inputs[0].to_vector();
      std::vector<double> expected(g.size(), 0.0);
      const auto yd = to_double(y);
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t h = 0; h < c.heads; ++h)
          for (int64_t d = 0; d < 2 * c.key_dim; ++d)
            for (int64_t p = 0; p < kN; ++p)
              expected[static_cast<size_t>((b * 4 * c.key_dim * c.heads + h * 4 * c.key_dim + 2 * c.key_dim + d) *
                                               kN + p)] =
                  yd[static_cast<size_t>((b * 2 * c.key_dim * c.heads + h * 2 * c.key_dim + d) * kN + p)];
      EXPECT_EQ(max_abs_diff(g, expected), 0.0) << "extract_v backward";
    }
    {
      const PsaMergeAttnOp op(cfg, kH, kW);
      const std::vector<Tensor> x = merge_inputs(c);
      const Tensor y = random_tensor(Shape{c.batch, 2 * c.key_dim * c.heads, kH, kW});
      const OpRun r = run_op(op, x, *cpu, {y});
      const double lhs = dot(r.outputs, {y}), rhs = dot(x, r.grad_inputs);
      EXPECT_NEAR(lhs, rhs, 1e-12 * (std::abs(lhs) + 1)) << "merge";
      // The inverse gather: merge(d_parts) = y exactly.
      const OpRun again = run_op(op, r.grad_inputs, *cpu);
      EXPECT_EQ(max_abs_diff(again.outputs[0].to_vector(), to_double(y)), 0.0) << "merge backward";
    }
  }
}

TEST(PsaOps, MergeOfPackedVEqualsExtractV) {
  auto cpu = graph::cpu_backend();
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(c.str());
    const PsaConfig cfg = c.config();
    const Tensor qkv = random_tensor(qkv_shape(c));
    const OpRun pack = run_op(PsaPackQkvOp(cfg), {qkv}, *cpu);
    const std::vector<Tensor> v(pack.outputs.begin() + 2, pack.outputs.end());
    const OpRun merged = run_op(PsaMergeAttnOp(cfg, kH, kW), v, *cpu);
    const OpRun extracted = run_op(PsaExtractVOp(cfg), {qkv}, *cpu);
    EXPECT_EQ(max_abs_diff(merged.outputs[0].to_vector(), to_double(extracted.outputs[0])), 0.0);
  }
}

// x → 1×1 conv (qkv) → pack → loss. use_v: loss = Σ (merge(V parts) + extract_v(qkv))² (Q and K unused: their
// gradients arrive as zeros); else loss = Σ (Q + K)² (the V parts unused).
std::shared_ptr<graph::Graph> psa_graph(const PsaConfig& cfg, int64_t cin, bool use_v) {
  auto g = std::make_shared<graph::Graph>();
  auto x = g->input("x", Shape{Shape::kAny, cin, kH, kW});
  auto qkv = ops::conv2d(x, ops::Conv2dAttrs{cin, cfg.qkv_channels(), 1, 1, 0, 1, 1, true}, "qkv");
  auto packed = psa_pack_qkv(qkv, cfg);
  graph::SymTensor y;
  if (use_v) {
    const std::vector<graph::SymTensor> v(packed.begin() + 2, packed.end());
    y = ops::add(psa_merge_attn(v, cfg, kH, kW), psa_extract_v(qkv, cfg), "sum");
  } else {
    y = ops::add(packed[0], packed[1], "sum");
  }
  g->mark_output(ops::sum_squares(y, "loss"));
  return g;
}

TEST(PsaOps, GraphGradientsThroughExecutorMatchFiniteDifferences) {
  for (PsaForm form : {PsaForm::two_pass, PsaForm::one_pass})
    for (bool use_v : {true, false}) {
      SCOPED_TRACE(std::string(form == PsaForm::two_pass ? "two_pass" : "one_pass") + (use_v ? " V path" : " QK path"));
      const PsaConfig cfg{16, 2, form};
      const int64_t cin = 3;
      graph::Executor ex(psa_graph(cfg, cin, use_v), graph::cpu_backend());
      const Tensor x = random_tensor(Shape{2, cin, kH, kW});
      const double loss = ex.forward_train({x})[0].data<float>()[0];
      ex.backward();
      EXPECT_GT(loss, 0.0);
      const std::vector<float> grads = ex.state().flat_grads().to_vector();
      Tensor params = ex.state().flat_params();
      ASSERT_EQ(params.numel(), cfg.qkv_channels() * (cin + 1));  // weight and bias of the qkv conv
      // Every weight row of Q/K (offset 0..2·kd per head) gets zero gradient on the V path, V rows on the QK path.
      double unused = 0, used = 0;
      for (int64_t o = 0; o < cfg.qkv_channels(); ++o) {
        const bool is_v = o % (4 * cfg.key_dim) >= 2 * cfg.key_dim;
        for (int64_t i = 0; i < cin; ++i)
          (is_v == use_v ? used : unused) += std::abs(grads[static_cast<size_t>(o * cin + i)]);
      }
      EXPECT_EQ(unused, 0.0);
      EXPECT_GT(used, 0.0);
      // Finite differences (central, float64 sums) on a sample of weights and biases.
      for (int t = 0; t < 24; ++t) {
        const int64_t i = static_cast<int64_t>(rng()() % static_cast<uint64_t>(params.numel()));
        float* p = params.data<float>() + i;
        const float saved = *p, h = 1e-2f;
        *p = saved + h;
        ex.state().mark_updated();
        const double up = ex.forward({x})[0].data<float>()[0];
        *p = saved - h;
        ex.state().mark_updated();
        const double down = ex.forward({x})[0].data<float>()[0];
        *p = saved;
        ex.state().mark_updated();
        const double fd = (up - down) / (2 * double(h));
        EXPECT_NEAR(grads[static_cast<size_t>(i)], fd, 2e-3 * std::abs(fd) + 1e-3 * std::sqrt(loss)) << "parameter " << i;
      }
    }
}

TEST(PsaOps, ShapeErrorsAreClear) {
  graph::Graph g;
  const PsaConfig cfg{32, 2, PsaForm::two_pass};
  auto bad = g.input("bad", Shape{Shape::kAny, 200, 5, 7});
  auto good = g.input("good", Shape{Shape::kAny, 256, 5, 7});
  auto flat = g.input("flat", Shape{2, 256});
  try {
    psa_pack_qkv(bad, cfg);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("256 channels"), std::string::npos) << e.what();
  }
  EXPECT_THROW(psa_extract_v(bad, cfg), Error);
  EXPECT_THROW(psa_pack_qkv(flat, cfg), Error);
  EXPECT_THROW(PsaPackQkvOp(PsaConfig{0, 2, PsaForm::two_pass}), Error);
  EXPECT_THROW(PsaMergeAttnOp(cfg, 0, 7), Error);

  // Symbolic batch: B·heads stays symbolic; merge infers B back.
  auto packed = psa_pack_qkv(good, cfg);
  ASSERT_EQ(packed.size(), 4u);
  EXPECT_EQ(packed[0].shape().str(), "[?, 35, 32]");
  EXPECT_EQ(psa_pack_qkv(good, PsaConfig{32, 2, PsaForm::one_pass}, "p1")[2].shape().str(), "[?, 35, 64]");
  EXPECT_EQ(psa_extract_v(good, cfg).shape().str(), "[?, 128, 5, 7]");
  EXPECT_EQ(psa_merge_attn({packed[2], packed[3]}, cfg, 5, 7).shape().str(), "[?, 128, 5, 7]");
  EXPECT_THROW(psa_merge_attn({packed[2]}, cfg, 5, 7, "one_part"), Error);          // two_pass takes two
  EXPECT_THROW(psa_merge_attn({packed[2], packed[3]}, cfg, 7, 7, "bad_hw"), Error);  // N ≠ H·W
  EXPECT_THROW(psa_merge_attn({packed[2], packed[3]}, PsaConfig{32, 2, PsaForm::one_pass}, 5, 7, "bad_form"), Error);
  auto odd = g.input("odd", Shape{3, 35, 32});
  EXPECT_THROW(psa_merge_attn({odd, odd}, cfg, 5, 7, "odd"), Error);  // B·heads = 3 with 2 heads
}

// The size-input form takes H and W from one more input, whose values it never reads: one graph for every size.
TEST(PsaOps, MergeTakesItsSizeFromAnInput) {
  const PsaConfig cfg{32, 2, PsaForm::two_pass};
  const PsaMergeAttnOp op(cfg);
  EXPECT_TRUE(op.size_input());
  EXPECT_EQ(op.infer_output_shape({Shape{4, 35, 32}, Shape{4, 35, 32}, Shape{2, 9, 5, 7}}), (Shape{2, 128, 5, 7}));
  constexpr int64_t any = Shape::kAny;
  EXPECT_EQ(op.infer_output_shape({Shape{any, any, 32}, Shape{any, any, 32}, Shape{any, 3, any, any}}).str(),
            "[?, 128, ?, ?]");
  EXPECT_THROW(op.infer_output_shape({Shape{4, 35, 32}, Shape{4, 35, 32}}), Error);                    // no size
  EXPECT_THROW(op.infer_output_shape({Shape{4, 36, 32}, Shape{4, 36, 32}, Shape{2, 9, 5, 7}}), Error);  // N ≠ H·W
  EXPECT_THROW(op.infer_output_shape({Shape{4, 35, 32}, Shape{4, 35, 32}, Shape{3, 9, 5, 7}}), Error);  // batch
  const auto rt = op.lower(graph::Backend::cpu, graph::Mode::train);
  EXPECT_EQ(rt->n_activation_inputs(), 3);
  EXPECT_TRUE(rt->reads_input(0) && rt->reads_input(1));
  EXPECT_FALSE(rt->reads_input(2));
}

}  // namespace
