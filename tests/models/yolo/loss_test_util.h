// YOLO26's E2ELoss in tests: the loss graph with probed head outputs (their gradients readable), inputs from the
// PyTorch fixture (tools/reference/make_loss_fixture.py: float64 results and the reference's own float32 ones) or
// random batches, one forward + backward on any backend, and the comparisons against the fixture.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "error_bounds.h"
#include "graph/grad_probe.h"
#include "models/yolo/assigner_reference.h"
#include "test_util.h"
#include "vision/core/safetensors.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/loss.h"

namespace vision::test::loss {

using core::DType;
using core::Shape;
using core::Tensor;

constexpr const char* kHeads[2] = {"o2m", "o2o"};

// ---------------------------------------------------------------------------------------------------------------
// The fixture

inline const core::SafetensorsFile& fixture() {
  static const core::SafetensorsFile f =
      core::read_safetensors(std::string(VISION_FIXTURE_DIR) + "/yolo26_loss.safetensors");
  return f;
}
inline const Tensor& get(const std::string& name) { return fixture().at(name); }
// A float64 result of the fixture (stored as two f32 parts).
inline std::vector<double> ref64(const std::string& name) {
  const auto hi = get("ref64." + name + ".hi").to_vector(), lo = get("ref64." + name + ".lo").to_vector();
  std::vector<double> out(hi.size());
  for (size_t i = 0; i < hi.size(); ++i) out[i] = double(hi[i]) + double(lo[i]);
  return out;
}
// The same result of the reference run in float32.
inline std::vector<float> ref32(const std::string& name) { return get("ref32." + name).to_vector(); }
inline std::vector<int32_t> ints(const Tensor& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.raw(), v.size() * sizeof(int32_t));
  return v;
}

// ---------------------------------------------------------------------------------------------------------------
// The graph and its inputs

// E2ELoss over graph inputs o2m.ltrb, o2m.logits, o2o.ltrb, o2o.logits ([?, 4 | nc, A]), targets [?, M, 5], count [?]
// i32, weights [2], and the level maps P3, P4, P5 [?, 1, H/s, W/s]; the head outputs go through grad probes.
struct LossGraph {
  std::shared_ptr<graph::Graph> graph;
  std::array<models::yolo::HeadOutputs, 2> heads;  // the probed values: Plan::value_grad gives their gradients
  models::yolo::E2ELossTensors loss;
};

// With inference_outputs, the total and the components are outputs of inference plans too (a loss evaluated without
// backward, captured in a CUDA graph).
inline LossGraph e2e_loss_graph(int64_t nc, int64_t m, int64_t image_h, int64_t image_w,
                                bool inference_outputs = false) {
  LossGraph r;
  r.graph = std::make_shared<graph::Graph>();
  graph::Graph& g = *r.graph;
  const int64_t n = models::yolo::kernels::detect_anchor_count(image_h, image_w), B = Shape::kAny;
  std::array<graph::SymTensor, 4> raw;
  for (size_t h = 0; h < 2; ++h) {
    raw[2 * h] = g.input(std::string(kHeads[h]) + ".ltrb", Shape{B, 4, n});
    raw[2 * h + 1] = g.input(std::string(kHeads[h]) + ".logits", Shape{B, nc, n});
  }
  models::yolo::LossTargets t;
  t.targets = g.input("targets", Shape{B, m, 5});
  t.count = g.input("count", Shape{B}, DType::i32);
  auto weights = g.input("weights", Shape{2});
  for (size_t i = 0; i < 3; ++i) {
    const int64_t s = models::yolo::kernels::kDetectStrides[i];
    t.levels[i] = g.input("p" + std::to_string(i + 3), Shape{B, 1, image_h / s, image_w / s});
  }
  for (size_t h = 0; h < 2; ++h)
    r.heads[h] = {grad_probe(raw[2 * h], std::string(kHeads[h]) + ".ltrb_probe"),
                  grad_probe(raw[2 * h + 1], std::string(kHeads[h]) + ".logits_probe")};
  r.loss = models::yolo::e2e_loss(r.heads[0], r.heads[1], t, weights, "loss", !inference_outputs);
  if (inference_outputs) {
    g.mark_output(r.loss.total, {.inference = true, .train = true, .seed_gradient = true});
    g.mark_output(r.loss.components, {.inference = true, .train = true, .seed_gradient = false});
  }
  return r;
}

struct LossInputs {
  std::array<Tensor, 2> ltrb, logits;  // per head
  Tensor targets, count, weights;
  int64_t image_h = 0, image_w = 0;

  int64_t batch() const { return targets.dim(0); }
  int64_t classes() const { return logits[0].dim(1); }
  int64_t rows() const { return targets.dim(1); }
  // In the graph's input order; the level maps random (only their shapes matter).
  std::vector<Tensor> list() const {
    std::vector<Tensor> in = {ltrb[0], logits[0], ltrb[1], logits[1], targets, count, weights};
    for (int64_t s : models::yolo::kernels::kDetectStrides)
      in.push_back(random_tensor(Shape{batch(), 1, image_h / s, image_w / s}));
    return in;
  }
};

inline Tensor int_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::zeros(Shape{static_cast<int64_t>(v.size())}, DType::i32);
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

inline LossInputs fixture_inputs() {
  LossInputs in;
  for (size_t h = 0; h < 2; ++h) {
    in.ltrb[h] = get(std::string(kHeads[h]) + ".ltrb");
    in.logits[h] = get(std::string(kHeads[h]) + ".logits");
  }
  in.targets = get("targets");
  in.count = get("count");
  in.weights = get("weights");
  in.image_h = std::stoll(fixture().metadata.at("image_h"));
  in.image_w = std::stoll(fixture().metadata.at("image_w"));
  return in;
}

// Raw LTRB distances [B, 4, A] of boxes [B, 4, A] (xyxy, grid units) on the anchor grid of an H×W input.
inline Tensor ltrb_of(const std::vector<float>& boxes, int64_t batch, int64_t image_h, int64_t image_w) {
  const auto grid = models::yolo::kernels::detect_anchor_grid(image_h, image_w);
  const auto n = static_cast<int64_t>(grid.size() / 3);
  std::vector<float> d(boxes.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t a = 0; a < n; ++a) {
      auto at = [&](int64_t c) { return static_cast<size_t>((b * 4 + c) * n + a); };
      const float ax = grid[static_cast<size_t>(a)], ay = grid[static_cast<size_t>(n + a)];
      d[at(0)] = ax - boxes[at(0)], d[at(1)] = ay - boxes[at(1)];
      d[at(2)] = boxes[at(2)] - ax, d[at(3)] = boxes[at(3)] - ay;
    }
  return Tensor::from_vector(Shape{batch, 4, n}, d);
}

// A random batch (assigner_reference.h's cases: predictions jittered around the targets). The one-to-one head predicts
// the one-to-many head's boxes moved by up to ±0.2 grid units per coordinate, with logits of its own.
inline LossInputs random_inputs(int64_t batch, int64_t image_h, int64_t image_w, int64_t nc, int64_t m,
                                int64_t min_boxes, int64_t max_boxes, std::array<float, 2> weights = {0.7f, 0.3f}) {
  const AssignerCase c = random_assigner_case(batch, image_h, image_w, nc, m, min_boxes, max_boxes, rng());
  LossInputs in;
  in.image_h = image_h, in.image_w = image_w;
  std::vector<float> boxes = c.boxes;
  const auto shift = random_values(boxes.size(), -0.2f, 0.2f);
  for (size_t i = 0; i < boxes.size(); ++i) boxes[i] += shift[i];
  in.ltrb = {ltrb_of(c.boxes, batch, image_h, image_w), ltrb_of(boxes, batch, image_h, image_w)};
  in.logits = {Tensor::from_vector(Shape{batch, nc, c.n_anchors}, c.logits),
               random_tensor(Shape{batch, nc, c.n_anchors}, -4.0f, 4.0f)};
  in.targets = Tensor::from_vector(Shape{batch, m, 5}, c.targets);
  in.count = int_tensor(c.count);
  in.weights = Tensor::from_vector(Shape{2}, std::vector<float>{weights[0], weights[1]});
  return in;
}

// ---------------------------------------------------------------------------------------------------------------
// One run

struct LossResult {
  float total = 0;
  std::vector<float> components;                        // [3]
  std::array<std::array<float, 3>, 2> terms{};          // per head: box, cls, l1
  std::array<std::vector<float>, 2> grad_ltrb, grad_logits;
  std::array<std::vector<int32_t>, 2> gt_index;
};

// forward_train + backward on ex (an executor of g.graph) with in, everything read back to the host.
inline LossResult run_loss(graph::Executor& ex, const LossGraph& g, const LossInputs& in) {
  const auto out = ex.forward_train(in.list());
  ex.backward();
  const graph::Plan& plan = *ex.last_train_plan();
  auto host = [&](const Tensor& t) { return ex.backend().download(t); };
  LossResult r;
  r.total = host(out.at(0)).to_vector().at(0);
  r.components = host(out.at(1)).to_vector();
  const std::array<const models::yolo::Yolo26LossTensors*, 2> heads = {&g.loss.one_to_many, &g.loss.one_to_one};
  for (size_t h = 0; h < 2; ++h) {
    const models::yolo::Yolo26LossTensors& t = *heads[h];
    r.terms[h] = {host(plan.value(t.box.id())).to_vector().at(0), host(plan.value(t.cls.id())).to_vector().at(0),
                  host(plan.value(t.l1.id())).to_vector().at(0)};
    r.grad_ltrb[h] = host(plan.value_grad(g.heads[h].ltrb.id())).to_vector();
    r.grad_logits[h] = host(plan.value_grad(g.heads[h].logits.id())).to_vector();
    r.gt_index[h] = ints(host(plan.value(t.assignment.gt_index.id())));
  }
  return r;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Two runs with bit-identical results: total, components, gradients and assignments.
inline void expect_bitwise_equal(const LossResult& a, const LossResult& b) {
  EXPECT_TRUE(bitwise_equal({a.total}, {b.total}));
  EXPECT_TRUE(bitwise_equal(a.components, b.components));
  for (size_t h = 0; h < 2; ++h) {
    EXPECT_TRUE(bitwise_equal(a.grad_ltrb[h], b.grad_ltrb[h])) << kHeads[h];
    EXPECT_TRUE(bitwise_equal(a.grad_logits[h], b.grad_logits[h])) << kHeads[h];
    EXPECT_EQ(a.gt_index[h], b.gt_index[h]) << kHeads[h];
  }
}

// A deterministic plan on `backend` run twice, and another executor's: bit-identical results. Returns the first run.
inline LossResult expect_deterministic(std::shared_ptr<graph::BackendContext> backend, const LossInputs& in) {
  const LossGraph g = e2e_loss_graph(in.classes(), in.rows(), in.image_h, in.image_w);
  graph::Executor a(g.graph, backend, {.deterministic = true});
  graph::Executor b(g.graph, backend, {.deterministic = true});
  const LossResult first = run_loss(a, g, in);
  expect_bitwise_equal(first, run_loss(a, g, in));
  expect_bitwise_equal(first, run_loss(b, g, in));
  return first;
}

// ---------------------------------------------------------------------------------------------------------------
// Comparisons with the fixture

// The positive anchors and their targets as a set of (image, anchor, gt).
inline std::set<std::tuple<int64_t, int64_t, int32_t>> assignment_set(const std::vector<int32_t>& gt_index,
                                                                       int64_t n_anchors) {
  std::set<std::tuple<int64_t, int64_t, int32_t>> s;
  for (size_t i = 0; i < gt_index.size(); ++i)
    if (gt_index[i] >= 0)
      s.emplace(static_cast<int64_t>(i) / n_anchors, static_cast<int64_t>(i) % n_anchors, gt_index[i]);
  return s;
}

inline void expect_assignments_match_fixture(const LossResult& r) {
  const int64_t n = get("o2m.ltrb").dim(2);
  for (size_t h = 0; h < 2; ++h) {
    const auto want = assignment_set(ints(get(std::string("assign.") + kHeads[h] + ".gt_index")), n);
    EXPECT_GT(want.size(), 20u) << kHeads[h] << ": the fixture has positives";
    EXPECT_EQ(assignment_set(r.gt_index[h], n), want) << kHeads[h] << " head's assignment";
  }
}

// Our f32 result against the fixture's float64 one, bounded by 2× the reference's own float32 error, in norm and
// element-wise (max |·|, so that one wrong element cannot hide in the norm), never above 1e-4 relative. The bounds are
// floored at `floor` (relative to the result's norm, or to its max element-wise) where one sample of the reference's
// rounding is no measure of f32's: a scalar (or 3-vector) whose f32 error can come out near zero by luck.
inline void expect_within_reference_error(const std::vector<float>& ours, const std::string& name, double floor) {
  const std::vector<double> ref = ref64(name);
  const std::vector<float> r32 = ref32(name);
  ASSERT_EQ(ours.size(), ref.size()) << name;
  const double scale = max_abs(ref);
  const double norm_bound = std::min(std::max(2 * rel_error(r32, ref), floor), 1e-4);
  const double max_bound = std::min(std::max(2 * max_abs_error(r32, ref), floor * scale), 1e-4 * scale);
  const double err = rel_error(ours, ref), max_err = max_abs_error(ours, ref);
  EXPECT_LE(err, norm_bound) << name << ": ‖ours − ref64‖/‖ref64‖ (the float32 reference's: " << rel_error(r32, ref)
                             << ")";
  EXPECT_LE(max_err, max_bound) << name << ": max |ours − ref64| (the float32 reference's: "
                                << max_abs_error(r32, ref) << ", max |ref64| " << scale << ")";
}

// A few f32 roundings (8 ulps relative): the floor of the scalar bounds.
constexpr double kScalarFloor = 8 * kF32Epsilon;

// The loss, its components and both heads' terms (floored at kScalarFloor), and the gradients (floored at
// gradient_floor: 0 on the CPU, whose twins sum in float64, so that the gradients meet 2× the reference's error
// exactly; the GPU tests pass kScalarFloor, for the few ulps of the GPU's f32 expf/atanf and f32 partial sums).
inline void expect_matches_fixture(const LossResult& r, double gradient_floor) {
  expect_within_reference_error({r.total}, "loss.total", kScalarFloor);
  expect_within_reference_error(r.components, "loss.components", kScalarFloor);
  const char* terms[3] = {"box", "cls", "l1"};
  for (size_t h = 0; h < 2; ++h) {
    for (size_t k = 0; k < 3; ++k)
      expect_within_reference_error({r.terms[h][k]}, std::string(kHeads[h]) + "." + terms[k], kScalarFloor);
    expect_within_reference_error(r.grad_ltrb[h], std::string("grad.") + kHeads[h] + ".ltrb", gradient_floor);
    expect_within_reference_error(r.grad_logits[h], std::string("grad.") + kHeads[h] + ".logits", gradient_floor);
  }
}

}  // namespace vision::test::loss
