// Helpers for the postprocess tests: running a PostprocessOp's RuntimeOp on a backend with poisoned outputs and
// workspace; independent references (the end-to-end result as the top k of all A × nc pairs, NMS as the plain greedy
// loop); hand-computed cases with their expected rows; comparisons of rows (with the reference, and GPU against the
// CPU twin as sets with near-ties allowed).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.h"
#include "vision/graph/backend.h"
#include "vision/models/yolo/kernels/postprocess.h"

namespace vision::test::postprocess {

using core::DType;
using core::Shape;
using core::Tensor;
using models::yolo::kernels::PostprocessMethod;
using models::yolo::kernels::PostprocessOp;
using models::yolo::kernels::PostprocessOptions;

// ---------------------------------------------------------------------------------------------------------------
// Running the op

struct OpResult {
  Tensor detections;  // host f32 [B, max_det, 6]
  Tensor count;       // host i32 [B]
  int32_t count_of(int64_t b) const { return count.data<int32_t>()[b]; }
  const float* row(int64_t b, int64_t r) const {
    return detections.data<float>() + (b * detections.dim(1) + r) * 6;
  }
};

// A host f32 tensor as `dtype` holds it (rounded to nearest even), still a host tensor.
inline Tensor as_dtype(const Tensor& host, DType dtype) {
  if (dtype == DType::f32) return host.clone();
  Tensor out = Tensor::zeros(host.shape(), dtype);
  graph::cpu_backend()->convert(out, host);
  return out;
}
// The values a device sees of a host f32 tensor given as `dtype`, back in f32.
inline Tensor rounded_as(const Tensor& host, DType dtype) {
  if (dtype == DType::f32) return host.clone();
  Tensor out = Tensor::zeros(host.shape());
  graph::cpu_backend()->convert(out, as_dtype(host, dtype));
  return out;
}

// A tensor of the backend with every byte 0xff (NaN in f32, −1 in i32).
inline Tensor poisoned_on(graph::BackendContext& b, const Shape& shape, DType dtype) {
  Tensor host = Tensor::zeros(shape, dtype);
  if (host.nbytes() > 0) std::memset(host.raw(), 0xff, host.nbytes());
  return b.upload(host);
}

// Lowers op for backend b in `dtype`, uploads boxes and logits (host f32, given to the op as `dtype`), runs forward
// into poisoned outputs with a poisoned workspace and returns the outputs on the host.
inline OpResult run_op(const PostprocessOp& op, const Tensor& boxes, const Tensor& logits, graph::BackendContext& b,
                  DType dtype = DType::f32) {
  const std::vector<Shape> in = {boxes.shape(), logits.shape()};
  const std::vector<Shape> out = op.infer_output_shapes(in);
  const std::vector<DType> out_dtypes = op.infer_output_dtypes({dtype, dtype});
  auto rt = op.lower(b.backend(), graph::Mode::inference);
  const graph::Format format{dtype, core::Layout::nchw};
  if (!rt->supports(format)) throw Error(op.name() + " does not run in " + graph::format_name(format));
  rt->set_format(format);
  graph::ForwardCtx ctx;
  ctx.backend = &b;
  ctx.inputs = {b.upload(as_dtype(boxes, dtype)), b.upload(as_dtype(logits, dtype))};
  for (size_t k = 0; k < out.size(); ++k) ctx.outputs.push_back(poisoned_on(b, out[k], out_dtypes[k]));
  ctx.output = ctx.outputs.at(0);
  const auto specs = rt->param_specs(in, out[0]);
  for (size_t i = 0; i < specs.size(); ++i) {
    Tensor t = Tensor::zeros(specs[i].shape, specs[i].dtype);
    const auto bytes = rt->param_init_data(i, in, out[0], 0);
    EXPECT_EQ(bytes.size(), t.nbytes()) << specs[i].name;
    if (bytes.size() == t.nbytes() && !bytes.empty()) std::memcpy(t.raw(), bytes.data(), bytes.size());
    ctx.params.push_back(b.upload(t));
  }
  if (const size_t ws = rt->workspace_bytes({&b, graph::Mode::inference, false}, in, out[0]))
    ctx.workspace = poisoned_on(b, Shape{static_cast<int64_t>(ws)}, DType::u8);
  rt->forward(ctx);
  return {b.download(ctx.outputs[0]), b.download(ctx.outputs[1])};
}

// ---------------------------------------------------------------------------------------------------------------
// References

inline double sigmoid_d(float x) { return 1.0 / (1.0 + std::exp(-static_cast<double>(x))); }
inline float no_nan(float x) { return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x; }

struct RefRow {
  int64_t anchor = 0;
  int32_t cls = 0;
  float logit = 0;
};

inline bool passes(float logit, int32_t cls, const PostprocessOptions& o) {
  if (!(sigmoid_d(no_nan(logit)) > static_cast<double>(o.conf))) return false;
  return o.classes.empty() || std::find(o.classes.begin(), o.classes.end(), cls) != o.classes.end();
}

// Image b of boxes [B, 4, A] as (x1, y1, x2, y2) of anchor a.
inline std::array<float, 4> box_of(const Tensor& boxes, int64_t b, int64_t a) {
  const int64_t n = boxes.dim(2);
  const float* p = boxes.data<float>() + b * 4 * n + a;
  return {p[0], p[n], p[2 * n], p[3 * n]};
}
inline float logit_of(const Tensor& logits, int64_t b, int64_t c, int64_t a) {
  return logits.data<float>()[(b * logits.dim(1) + c) * logits.dim(2) + a];
}

// End-to-end: the top k = min(max_det, A) of all A × nc pairs by (logit desc, anchor asc, class asc), then the
// filters. (postprocess.h explains why this equals the two-stage selection.)
inline std::vector<RefRow> reference_e2e(const Tensor& boxes, const Tensor& logits, int64_t b,
                                         const PostprocessOptions& o) {
  const int64_t n = logits.dim(2), nc = logits.dim(1);
  std::vector<RefRow> pairs;
  for (int64_t a = 0; a < n; ++a)
    for (int64_t c = 0; c < nc; ++c) pairs.push_back({a, static_cast<int32_t>(c), no_nan(logit_of(logits, b, c, a))});
  std::sort(pairs.begin(), pairs.end(), [](const RefRow& x, const RefRow& y) {
    if (x.logit != y.logit) return x.logit > y.logit;
    return std::tie(x.anchor, x.cls) < std::tie(y.anchor, y.cls);
  });
  pairs.resize(static_cast<size_t>(std::min(o.max_det, n)));
  std::vector<RefRow> out;
  for (const RefRow& r : pairs)
    if (passes(r.logit, r.cls, o)) out.push_back(r);
  (void)boxes;
  return out;
}

// IoU in f32, torchvision's formula.
inline float reference_iou(const std::array<float, 4>& a, const std::array<float, 4>& b) {
  const float w = std::fmax(std::fmin(a[2], b[2]) - std::fmax(a[0], b[0]), 0.0f);
  const float h = std::fmax(std::fmin(a[3], b[3]) - std::fmax(a[1], b[1]), 0.0f);
  const float inter = w * h;
  const float sa = (a[2] - a[0]) * (a[3] - a[1]), sb = (b[2] - b[0]) * (b[3] - b[1]);
  return inter / ((sa + sb) - inter);
}

// NMS: each anchor with its best class (lowest on ties) when it passes the filters; by (logit desc, anchor asc); the
// first max_nms; greedy class-aware suppression (IoU > iou); the first max_det kept.
inline std::vector<RefRow> reference_nms(const Tensor& boxes, const Tensor& logits, int64_t b,
                                         const PostprocessOptions& o) {
  const int64_t n = logits.dim(2), nc = logits.dim(1);
  std::vector<RefRow> cand;
  for (int64_t a = 0; a < n; ++a) {
    RefRow best{a, 0, no_nan(logit_of(logits, b, 0, a))};
    for (int64_t c = 1; c < nc; ++c)
      if (no_nan(logit_of(logits, b, c, a)) > best.logit) best = {a, static_cast<int32_t>(c), logit_of(logits, b, c, a)};
    if (passes(best.logit, best.cls, o)) cand.push_back(best);
  }
  std::sort(cand.begin(), cand.end(), [](const RefRow& x, const RefRow& y) {
    return x.logit != y.logit ? x.logit > y.logit : x.anchor < y.anchor;
  });
  if (static_cast<int64_t>(cand.size()) > o.max_nms) cand.resize(static_cast<size_t>(o.max_nms));
  std::vector<RefRow> kept;
  for (const RefRow& r : cand) {
    if (static_cast<int64_t>(kept.size()) == o.max_det) break;
    bool suppressed = false;
    for (const RefRow& k : kept)
      suppressed = suppressed ||
                   (k.cls == r.cls && reference_iou(box_of(boxes, b, k.anchor), box_of(boxes, b, r.anchor)) > o.iou);
    if (!suppressed) kept.push_back(r);
  }
  return kept;
}

inline std::vector<RefRow> reference(PostprocessMethod m, const Tensor& boxes, const Tensor& logits, int64_t b,
                                     const PostprocessOptions& o) {
  return m == PostprocessMethod::end_to_end ? reference_e2e(boxes, logits, b, o) : reference_nms(boxes, logits, b, o);
}

// ---------------------------------------------------------------------------------------------------------------
// Comparisons

// |f32 σ − σ| of a device: a few ulp of 1.
constexpr double kScoreTolerance = 4.0 * 0x1p-24;

// Rows of image b after count[b] are all exactly zero (the output was poisoned before the run).
inline void expect_zero_after_count(const OpResult& run, int64_t b, const std::string& what) {
  const int64_t rows = run.detections.dim(1);
  const int32_t n = run.count_of(b);
  ASSERT_TRUE(n >= 0 && n <= rows) << what << ": image " << b << " count " << n;
  int64_t bad = 0;
  for (int64_t r = n; r < rows; ++r)
    for (int q = 0; q < 6; ++q) bad += !(run.row(b, r)[q] == 0.0f);
  EXPECT_EQ(bad, 0) << what << ": image " << b << " has nonzero (or NaN) values in rows " << n << ".." << rows - 1;
}

// Image b of a run against reference rows (boxes taken from `boxes`): the same count, boxes and classes exactly,
// scores within kScoreTolerance of σ in float64; zero rows after.
inline void expect_rows(const OpResult& run, int64_t b, const Tensor& boxes, const std::vector<RefRow>& ref,
                        const std::string& what) {
  expect_zero_after_count(run, b, what);
  ASSERT_EQ(run.count_of(b), static_cast<int32_t>(ref.size())) << what << ": count of image " << b;
  for (size_t r = 0; r < ref.size(); ++r) {
    const float* row = run.row(b, static_cast<int64_t>(r));
    const auto box = box_of(boxes, b, ref[r].anchor);
    EXPECT_TRUE(row[0] == box[0] && row[1] == box[1] && row[2] == box[2] && row[3] == box[3] &&
                row[5] == static_cast<float>(ref[r].cls) &&
                std::abs(row[4] - sigmoid_d(ref[r].logit)) <= kScoreTolerance)
        << what << ": image " << b << " row " << r << " is (" << row[0] << ", " << row[1] << ", " << row[2] << ", "
        << row[3] << ", " << row[4] << ", " << row[5] << "), expected anchor " << ref[r].anchor << " (" << box[0]
        << ", " << box[1] << ", " << box[2] << ", " << box[3] << "), score " << sigmoid_d(ref[r].logit) << ", class "
        << ref[r].cls;
  }
}

// The GPU's rows of image b against the CPU twin's. As the test convention asks: the same count; the scores,
// sorted, within tol; the rows as sets with near-ties allowed (each GPU row matches a distinct CPU row of the same
// box and class with a score within tol). Then the stricter check the design allows (both devices rank by the same
// logits with the same tie-breaks): the same rows in the same order, boxes and classes exactly.
inline void expect_same_detections(const OpResult& gpu, const OpResult& cpu, int64_t b, const std::string& what,
                                   double tol = kScoreTolerance) {
  expect_zero_after_count(gpu, b, what + " (GPU)");
  const int32_t n = cpu.count_of(b);
  ASSERT_EQ(gpu.count_of(b), n) << what << ": count of image " << b;
  std::vector<float> sg, sc;
  for (int32_t r = 0; r < n; ++r) sg.push_back(gpu.row(b, r)[4]), sc.push_back(cpu.row(b, r)[4]);
  std::sort(sg.begin(), sg.end(), std::greater<>());
  std::sort(sc.begin(), sc.end(), std::greater<>());
  int64_t score_bad = 0;
  for (int32_t r = 0; r < n; ++r) score_bad += !(std::abs(sg[r] - sc[r]) <= tol);
  EXPECT_EQ(score_bad, 0) << what << ": image " << b << " sorted scores differ beyond " << tol;
  std::vector<bool> used(static_cast<size_t>(n), false);
  int64_t unmatched = 0, out_of_order = 0;
  for (int32_t r = 0; r < n; ++r) {
    const float* g = gpu.row(b, r);
    bool found = false;
    for (int32_t s = 0; s < n && !found; ++s) {
      const float* c = cpu.row(b, s);
      if (used[static_cast<size_t>(s)] || !(g[0] == c[0] && g[1] == c[1] && g[2] == c[2] && g[3] == c[3] &&
                                            g[5] == c[5] && std::abs(g[4] - c[4]) <= tol))
        continue;
      used[static_cast<size_t>(s)] = found = true;
    }
    if (!found && unmatched++ < 3)
      ADD_FAILURE() << what << ": image " << b << " GPU row " << r << " (" << g[0] << ", " << g[1] << ", " << g[2]
                    << ", " << g[3] << ", " << g[4] << ", " << g[5] << ") is not among the CPU twin's rows";
    const float* c = cpu.row(b, r);
    out_of_order += !(g[0] == c[0] && g[1] == c[1] && g[2] == c[2] && g[3] == c[3] && g[5] == c[5]);
  }
  EXPECT_EQ(unmatched, 0) << what << ": image " << b;
  EXPECT_EQ(out_of_order, 0) << what << ": image " << b << ": rows in another order than the CPU twin's";
}

// ---------------------------------------------------------------------------------------------------------------
// Inputs

// boxes [B, 4, A] from per-anchor xyxy boxes (the same for every image, shifted by `shift`·b pixels) and logits
// [B, nc, A] from [class][anchor] values (minus logit_step·b for image b).
inline Tensor make_boxes(const std::vector<std::array<float, 4>>& per_anchor, int64_t batch, float shift = 0) {
  const auto n = static_cast<int64_t>(per_anchor.size());
  Tensor t = Tensor::zeros(Shape{batch, 4, n});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t a = 0; a < n; ++a)
      for (int q = 0; q < 4; ++q)
        t.data<float>()[(b * 4 + q) * n + a] = per_anchor[static_cast<size_t>(a)][static_cast<size_t>(q)] + shift * b;
  return t;
}
inline Tensor make_logits(const std::vector<std::vector<float>>& per_class, int64_t batch, float logit_step = 0) {
  const auto nc = static_cast<int64_t>(per_class.size()), n = static_cast<int64_t>(per_class.at(0).size());
  Tensor t = Tensor::zeros(Shape{batch, nc, n});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t a = 0; a < n; ++a)
        t.data<float>()[(b * nc + c) * n + a] = per_class[static_cast<size_t>(c)][static_cast<size_t>(a)] - logit_step * b;
  return t;
}

// Random xyxy boxes [B, 4, A]: centres in [0, extent)², sides in [min_side, max_side), so that many overlap.
inline Tensor random_boxes(int64_t batch, int64_t n, float extent = 200, float min_side = 8, float max_side = 64) {
  const auto c = random_values(static_cast<size_t>(batch * 2 * n), 0.0f, extent);
  const auto s = random_values(static_cast<size_t>(batch * 2 * n), min_side, max_side);
  Tensor t = Tensor::zeros(Shape{batch, 4, n});
  float* p = t.data<float>();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t a = 0; a < n; ++a) {
      const size_t i = static_cast<size_t>(b * 2 * n + a), j = i + static_cast<size_t>(n);
      p[(b * 4 + 0) * n + a] = c[i] - s[i] / 2;
      p[(b * 4 + 1) * n + a] = c[j] - s[j] / 2;
      p[(b * 4 + 2) * n + a] = c[i] + s[i] / 2;
      p[(b * 4 + 3) * n + a] = c[j] + s[j] / 2;
    }
  return t;
}

// Random logits [B, nc, A] in [lo, hi); with step > 0 rounded to multiples of step (many exact ties).
inline Tensor random_logits(int64_t batch, int64_t nc, int64_t n, float lo, float hi, float step = 0) {
  Tensor t = random_tensor(Shape{batch, nc, n}, lo, hi);
  if (step > 0)
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::round(t.data<float>()[i] / step) * step;
  return t;
}

// ---------------------------------------------------------------------------------------------------------------
// Hand-computed cases (batch 1)

struct HandCase {
  std::string name;
  PostprocessMethod method;
  PostprocessOptions options;
  std::vector<std::array<float, 4>> boxes;  // per anchor
  std::vector<std::vector<float>> logits;   // [class][anchor]
  std::vector<RefRow> expected;             // the rows, in order (anchor, class, logit)
};

inline std::vector<HandCase> hand_cases() {
  using M = PostprocessMethod;
  std::vector<HandCase> cases;
  // Ten anchors, three classes; boxes distinct per anchor (a → (a, 2a, a + 5, 2a + 7)).
  std::vector<std::array<float, 4>> ten;
  for (int a = 0; a < 10; ++a) ten.push_back({float(a), float(2 * a), float(a + 5), float(2 * a + 7)});
  const std::vector<std::vector<float>> e2e_logits = {
      {2.0f, -3.0f, 0.5f, -5.0f, 1.0f, -2.0f, 3.0f, -4.0f, 0.0f, -1.0f},
      {-1.0f, 2.5f, 0.5f, -5.0f, 1.5f, -2.0f, -3.0f, -4.0f, 2.0f, -6.0f},
      {0.0f, 1.0f, 2.2f, -5.0f, -1.0f, 2.8f, 2.9f, -4.0f, 0.1f, -0.5f},
  };
  // Anchor maxima: 6 (3.0), 5 (2.8), 1 (2.5), 2 (2.2), ... Stage 1 keeps 6, 5, 1, 2; their pairs' top 4 are (6, c0)
  // 3.0, (6, c2) 2.9, (5, c2) 2.8, (1, c1) 2.5: anchor 6 twice, anchor 2 (max 2.2) out.
  PostprocessOptions o;
  o.max_det = 4;
  cases.push_back({"e2e_top4", M::end_to_end, o, ten, e2e_logits, {{6, 0, 3.0f}, {6, 2, 2.9f}, {5, 2, 2.8f}, {1, 1, 2.5f}}});
  // conf between σ(2.8) and σ(2.9): two rows, the rest zero.
  o.conf = 0.945f;  // σ(2.85) ≈ 0.9453, σ(2.8) ≈ 0.9427, σ(2.9) ≈ 0.9478
  cases.push_back({"e2e_conf", M::end_to_end, o, ten, e2e_logits, {{6, 0, 3.0f}, {6, 2, 2.9f}}});
  // The class filter applies to the selected rows (as ultralytics filters its 300): class 2 keeps two of the four.
  o = {};
  o.max_det = 4;
  o.classes = {2};
  cases.push_back({"e2e_classes", M::end_to_end, o, ten, e2e_logits, {{6, 2, 2.9f}, {5, 2, 2.8f}}});
  // Every score below conf: no rows.
  o = {};
  o.max_det = 4;
  o.conf = 0.96f;  // σ(3.0) ≈ 0.9526
  cases.push_back({"e2e_all_below_conf", M::end_to_end, o, ten, e2e_logits, {}});
  // Fewer anchors than max_det (5 < 300): k = 5 of the 10 pairs, anchor 4 twice.
  o = {};
  cases.push_back({"e2e_fewer_anchors",
                   M::end_to_end,
                   o,
                   {ten.begin(), ten.begin() + 5},
                   {{0.1f, 2.0f, -1.0f, 0.7f, 3.0f}, {1.5f, -0.5f, 0.9f, 0.2f, 2.5f}},
                   {{4, 0, 3.0f}, {4, 1, 2.5f}, {1, 0, 2.0f}, {0, 1, 1.5f}, {2, 1, 0.9f}}});
  // Ties. Every anchor's max is 1: stage 1 keeps the lowest anchors 0, 1, 2; their pairs at 1 are (0, c0), (1, c0),
  // (2, c1).
  o = {};
  o.max_det = 3;
  cases.push_back({"e2e_anchor_ties",
                   M::end_to_end,
                   o,
                   {ten.begin(), ten.begin() + 6},
                   {{1, 1, 0, 1, 0, 0}, {0, 0, 1, 0, 1, 1}},
                   {{0, 0, 1.0f}, {1, 0, 1.0f}, {2, 1, 1.0f}}});
  // A pair tie across anchors: (0, c0) and (1, c1) both 0.5; the lower anchor first, although anchor 1 ranks first in
  // stage 1 (ultralytics' flattened index would put (1, c1) first). And a class tie within anchor 2: c0 before c2.
  o = {};
  o.max_det = 3;
  cases.push_back({"e2e_pair_ties",
                   M::end_to_end,
                   o,
                   {ten.begin(), ten.begin() + 3},
                   {{0.5f, 0.9f, -2.0f}, {-1.0f, 0.5f, -2.0f}},
                   {{1, 0, 0.9f}, {0, 0, 0.5f}, {1, 1, 0.5f}}});
  o = {};
  o.max_det = 2;
  cases.push_back({"e2e_class_ties",
                   M::end_to_end,
                   o,
                   {ten.begin(), ten.begin() + 2},
                   {{1.0f, -1.0f}, {-1.0f, -1.0f}, {1.0f, -1.0f}},
                   {{0, 0, 1.0f}, {0, 2, 1.0f}}});

  // NMS: eight anchors, two classes; each anchor's best class at the given logit, the other at −4.
  const std::vector<std::array<float, 4>> nb = {
      {0, 0, 10, 10},    // 0: c0 3.0
      {1, 1, 11, 11},    // 1: c0 2.5, IoU with 0 = 81 / 119 ≈ 0.68
      {0, 0, 10, 10},    // 2: c1 2.0, anchor 0's box in another class
      {20, 20, 30, 30},  // 3: c0 1.8, apart
      {21, 20, 31, 30},  // 4: c0 1.6, IoU with 3 = 90 / 110 ≈ 0.82
      {5, 0, 15, 10},    // 5: c0 2.2, IoU with 0 = 50 / 150 ≈ 0.33
      {2, 2, 12, 12},    // 6: c0 1.0, IoU with 0 = 64 / 136 ≈ 0.47, with 1 ≈ 0.68, with 5 = 56 / 144 ≈ 0.39
      {0, 0, 10, 10},    // 7: both classes −3: below conf
  };
  const std::vector<std::vector<float>> nl = {{3.0f, 2.5f, -4.0f, 1.8f, 1.6f, 2.2f, 1.0f, -3.0f},
                                              {-4.0f, -4.0f, 2.0f, -4.0f, -4.0f, -4.0f, -4.0f, -3.0f}};
  // IoU 0.5, greedy: 0 kept; 1 suppressed by 0; 5 kept; 2 kept (class 1); 3 kept; 4 suppressed by 3; 6 kept (its
  // IoU > 0.5 is with 1 only, which was suppressed).
  o = {};
  o.iou = 0.5f;
  cases.push_back({"nms_iou05", M::nms, o, nb, nl, {{0, 0, 3.0f}, {5, 0, 2.2f}, {2, 1, 2.0f}, {3, 0, 1.8f}, {6, 0, 1.0f}}});
  // The default IoU 0.7 keeps 1 (0.68) and still drops 4 (0.82).
  o = {};
  cases.push_back({"nms_iou07",
                   M::nms,
                   o,
                   nb,
                   nl,
                   {{0, 0, 3.0f}, {1, 0, 2.5f}, {5, 0, 2.2f}, {2, 1, 2.0f}, {3, 0, 1.8f}, {6, 0, 1.0f}}});
  o = {};
  o.iou = 0.5f;
  o.max_det = 3;
  cases.push_back({"nms_max_det", M::nms, o, nb, nl, {{0, 0, 3.0f}, {5, 0, 2.2f}, {2, 1, 2.0f}}});
  // max_nms = 2: only anchors 0 and 1 are considered.
  o = {};
  o.iou = 0.5f;
  o.max_nms = 2;
  cases.push_back({"nms_max_nms", M::nms, o, nb, nl, {{0, 0, 3.0f}}});
  o = {};
  o.iou = 0.5f;
  o.classes = {1};
  cases.push_back({"nms_classes", M::nms, o, nb, nl, {{2, 1, 2.0f}}});
  o = {};
  o.conf = 0.99f;
  cases.push_back({"nms_all_below_conf", M::nms, o, nb, nl, {}});
  // Ties: anchors 0 and 1 share box, class and logit: the lower anchor stays, the other goes (IoU 1). Anchor 2's two
  // classes tie: class 0 is its class. Anchor 3 ties anchor 2's logit: after it.
  o = {};
  cases.push_back({"nms_ties",
                   M::nms,
                   o,
                   {{0, 0, 10, 10}, {0, 0, 10, 10}, {40, 40, 50, 50}, {60, 60, 70, 70}},
                   {{1.0f, 1.0f, 0.5f, -2.0f}, {-2.0f, -2.0f, 0.5f, 0.5f}},
                   {{0, 0, 1.0f}, {2, 0, 0.5f}, {3, 1, 0.5f}}});
  // Fewer anchors than max_det: all three apart, all kept.
  o = {};
  cases.push_back({"nms_fewer_anchors",
                   M::nms,
                   o,
                   {{0, 0, 10, 10}, {40, 40, 50, 50}, {60, 60, 70, 70}},
                   {{0.5f, 2.0f, -0.5f}},
                   {{1, 0, 2.0f}, {0, 0, 0.5f}, {2, 0, -0.5f}}});
  return cases;
}

// Runs a hand case on backend b as a batch of `batch` images: image i has boxes shifted by 100·i px and logits
// lowered by 0.4·i, so the rows of image i are the case's rows whose lowered logit still passes conf (a prefix: the
// ranking and the suppressions do not change).
inline void check_hand_case(const HandCase& hc, graph::BackendContext& b, int64_t batch, DType dtype = DType::f32) {
  constexpr float kShift = 100.0f, kStep = 0.4f;
  const Tensor boxes = make_boxes(hc.boxes, batch, kShift), logits = make_logits(hc.logits, batch, kStep);
  const PostprocessOp op(hc.method, hc.options);
  const OpResult run = run_op(op, boxes, logits, b, dtype);
  ASSERT_EQ(run.detections.shape(), (Shape{batch, hc.options.max_det, 6})) << hc.name;
  ASSERT_EQ(run.count.shape(), (Shape{batch})) << hc.name;
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<RefRow> expected;
    for (RefRow r : hc.expected) {
      r.logit -= kStep * static_cast<float>(i);
      if (passes(r.logit, r.cls, hc.options)) expected.push_back(r);
    }
    expect_rows(run, i, boxes, expected, hc.name + " (batch " + std::to_string(batch) + ")");
  }
}

}  // namespace vision::test::postprocess
