// CIoU loss on the CPU: the twin's forward (loss, iou, v, alpha) against the float64 reference of YOLO26.md's
// formula, its backward against finite differences of that reference in both alpha modes (constant alpha: the
// difference quotient of the loss with alpha frozen at its value), degenerate boxes (finite, and equal to the
// reference), zero-weight anchors (zeros whatever they hold), xywh against xyxy after conversion, and the graph op
// "yolo.ciou_loss" training a parameter through an Executor.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include "graph/test_ops.h"
#include "models/yolo/ciou_reference.h"
#include "test_util.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/loss/ciou.h"
#include "vision/ops/reduce.h"

using namespace vision;
using namespace vision::test;
using namespace vision::models::yolo::kernels::loss;
using core::Shape;
using core::Tensor;

namespace {

struct TwinOut {
  std::vector<float> loss, iou, v, alpha;
};

TwinOut twin_forward(const CiouBatch& c, BoxFormat format) {
  const Shape boxes{c.batch, 4, c.anchors}, ba{c.batch, c.anchors};
  Tensor loss = poisoned(ba), iou = poisoned(ba), v = poisoned(ba), alpha = poisoned(ba);
  ciou_forward_cpu(Tensor::from_vector(boxes, c.pred), Tensor::from_vector(boxes, c.target),
                   Tensor::from_vector(ba, c.weight), format, loss, iou, v, alpha);
  return {loss.to_vector(), iou.to_vector(), v.to_vector(), alpha.to_vector()};
}

std::vector<float> twin_backward(const CiouBatch& c, const std::vector<float>& d_loss, const CiouOptions& o) {
  const Shape boxes{c.batch, 4, c.anchors}, ba{c.batch, c.anchors};
  Tensor pred = Tensor::from_vector(boxes, c.pred), target = Tensor::from_vector(boxes, c.target);
  Tensor weight = Tensor::from_vector(ba, c.weight);
  Tensor loss = poisoned(ba), iou = poisoned(ba), v = poisoned(ba), alpha = poisoned(ba);
  ciou_forward_cpu(pred, target, weight, o.format, loss, iou, v, alpha);
  Tensor d_pred = poisoned(boxes);
  ciou_backward_cpu(pred, target, weight, iou, v, alpha, Tensor::from_vector(ba, d_loss), o, d_pred);
  return d_pred.to_vector();
}

std::vector<double> field(const std::vector<CiouRef>& r, double CiouRef::*m) {
  std::vector<double> out;
  for (const auto& x : r) out.push_back(x.*m);
  return out;
}

// Central differences of Σ d_loss·loss_ref with respect to every pred coordinate, in float64 from the f32 inputs;
// with frozen alpha the reference keeps each box's alpha at its unperturbed value.
std::vector<double> finite_differences(const CiouBatch& c, const std::vector<float>& d_loss, bool xywh,
                                       bool frozen) {
  std::vector<double> fd(c.pred.size(), 0.0);
  const double h = 1e-6;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t a = 0; a < c.anchors; ++a) {
      const size_t ia = static_cast<size_t>(b * c.anchors + a);
      const double w = c.weight[ia];
      if (w == 0) continue;
      double p[4], t[4];
      for (int k = 0; k < 4; ++k) {
        const size_t i = static_cast<size_t>((b * 4 + k) * c.anchors + a);
        p[k] = c.pred[i], t[k] = c.target[i];
      }
      const double alpha0 = ciou_reference(p, t, w, xywh).alpha;
      for (int k = 0; k < 4; ++k) {
        const double keep = p[k];
        p[k] = keep + h;
        const double up = ciou_reference(p, t, w, xywh, frozen ? &alpha0 : nullptr).loss;
        p[k] = keep - h;
        const double down = ciou_reference(p, t, w, xywh, frozen ? &alpha0 : nullptr).loss;
        p[k] = keep;
        fd[static_cast<size_t>((b * 4 + k) * c.anchors + a)] = d_loss[ia] * (up - down) / (2 * h);
      }
    }
  return fd;
}

TEST(CiouCpu, ForwardMatchesTheFloat64Reference) {
  for (bool xywh : {false, true}) {
    const CiouBatch c = random_ciou_batch(3, 700, 0.5, xywh);
    const TwinOut o = twin_forward(c, xywh ? BoxFormat::xywh : BoxFormat::xyxy);
    const auto ref = ciou_reference_all(c, xywh);
    // f32 arithmetic on coordinates ≤ ~130: a box side of 0.5 cells is known to ulp(128)/2 = 3.8e-6, so a value moves
    // by up to ~2e-5 (relative side errors of 1e-5, twice) on the smallest boxes and ~1e-6 typically: a norm bound
    // of 1e-5 and an element bound of 1e-4.
    struct Check {
      const char* name;
      const std::vector<float>& out;
      double CiouRef::*member;
    };
    for (const Check& k : {Check{"loss", o.loss, &CiouRef::loss}, Check{"iou", o.iou, &CiouRef::iou},
                           Check{"v", o.v, &CiouRef::v}, Check{"alpha", o.alpha, &CiouRef::alpha}}) {
      const auto r = field(ref, k.member);
      EXPECT_LT(rel_error(k.out, r), 1e-5) << k.name << (xywh ? " xywh" : " xyxy");
      EXPECT_LT(max_abs_error(k.out, r), 1e-4 * std::max(1.0, max_abs(r))) << k.name << (xywh ? " xywh" : " xyxy");
    }
    // The loss lies in [0, 2]·weight and is zero exactly where the weight is.
    for (size_t i = 0; i < c.weight.size(); ++i)
      if (c.weight[i] == 0) {
        ASSERT_EQ(o.loss[i], 0.0f) << i;
      } else {
        ASSERT_GT(o.loss[i], 0.0f) << i;
      }
  }
}

TEST(CiouCpu, BackwardMatchesFiniteDifferencesInBothAlphaModes) {
  for (bool xywh : {false, true})
    for (bool full : {false, true}) {
      const CiouBatch c = random_ciou_batch(2, 60, 0.7, xywh);
      const std::vector<float> d_loss = random_values(c.weight.size(), 0.5f, 1.5f);
      const auto g = twin_backward(c, d_loss, {xywh ? BoxFormat::xywh : BoxFormat::xyxy, full});
      const auto fd = finite_differences(c, d_loss, xywh, /*frozen=*/!full);
      const std::string what = std::string(xywh ? "xywh" : "xyxy") + (full ? " full alpha" : " constant alpha");
      EXPECT_LT(rel_error(g, fd), 1e-4) << what;
      EXPECT_LT(max_abs_error(g, fd), 1e-4 * std::max(1.0, max_abs(fd))) << what;
      // The two modes differ (the test can tell them apart): the other mode's differences do not match.
      const auto other = finite_differences(c, d_loss, xywh, /*frozen=*/full);
      EXPECT_GT(rel_error(g, other), 1e-3) << what;
    }
}

TEST(CiouCpu, DegenerateBoxesGiveFiniteValuesEqualToTheReference) {
  // pred, target (xyxy).
  const std::vector<std::array<float, 8>> cases = {
      {2, 2, 2, 6, 1, 1, 5, 5},                // zero-width prediction overlapping the target
      {1, 3, 5, 3, 1, 1, 5, 5},                // zero-height prediction (h = eps)
      {3, 3, 3, 3, 1, 1, 5, 5},                // a point inside the target
      {3, 3, 3, 3, 3, 3, 3, 3},                // two identical points
      {1, 1, 5, 5, 1, 1, 5, 5},                // identical boxes
      {0, 0, 1, 1, 50, 60, 52, 61},            // no overlap, far apart
      {0, 0, 2, 2, 2, 0, 4, 2},                // touching edges (no overlap, clamp at 0)
      {0, 0, 1000, 0.001f, 10, 0, 20, 10},     // extreme aspect ratio, wide and flat
      {0, 0, 0.001f, 1000, 0, 0, 1000, 0.001f},  // extreme ratios both ways
      {5, 5, 1, 1, 1, 1, 5, 5},                // an inverted prediction (x2 < x1, y2 < y1)
  };
  CiouBatch c{1, static_cast<int64_t>(cases.size()), std::vector<float>(4 * cases.size()),
              std::vector<float>(4 * cases.size()), std::vector<float>(cases.size(), 1.0f)};
  for (size_t a = 0; a < cases.size(); ++a)
    for (int k = 0; k < 4; ++k) {
      c.pred[k * cases.size() + a] = cases[a][k];
      c.target[k * cases.size() + a] = cases[a][4 + k];
    }
  const TwinOut o = twin_forward(c, BoxFormat::xyxy);
  const auto ref = ciou_reference_all(c, false);
  for (size_t a = 0; a < cases.size(); ++a) {
    for (float x : {o.loss[a], o.iou[a], o.v[a], o.alpha[a]}) ASSERT_TRUE(std::isfinite(x)) << "case " << a;
    EXPECT_NEAR(o.loss[a], ref[a].loss, 1e-5 * std::max(1.0, std::abs(ref[a].loss))) << "case " << a;
    EXPECT_NEAR(o.iou[a], ref[a].iou, 1e-5) << "case " << a;
    EXPECT_NEAR(o.v[a], ref[a].v, 1e-5) << "case " << a;
    EXPECT_NEAR(o.alpha[a], ref[a].alpha, 1e-5) << "case " << a;
  }
  EXPECT_NEAR(o.loss[4], 0.0, 1e-6) << "identical boxes: CIoU 1";
  for (bool full : {false, true}) {
    const auto g = twin_backward(c, std::vector<float>(cases.size(), 1.0f), {BoxFormat::xyxy, full});
    for (size_t i = 0; i < g.size(); ++i) ASSERT_TRUE(std::isfinite(g[i])) << "element " << i << " full " << full;
    // Identical boxes sit at the loss's minimum: every gradient is 0 there (ties split evenly).
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(g[k * cases.size() + 4], 0.0f, 1e-5) << "identical boxes, coord " << k;
  }
}

TEST(CiouCpu, ZeroWeightAnchorsAreZerosWhateverTheyHold) {
  CiouBatch c = random_ciou_batch(2, 50, 0.3, false);
  for (size_t i = 0; i < c.weight.size(); ++i)
    if (c.weight[i] == 0)
      for (int64_t k = 0; k < 4; ++k)
        c.pred[static_cast<size_t>((static_cast<int64_t>(i) / c.anchors * 4 + k) * c.anchors +
                                   static_cast<int64_t>(i) % c.anchors)] = NAN;
  const TwinOut o = twin_forward(c, BoxFormat::xyxy);
  const auto g = twin_backward(c, random_values(c.weight.size(), 0.5f, 1.5f), {BoxFormat::xyxy, true});
  for (size_t i = 0; i < c.weight.size(); ++i) {
    if (c.weight[i] != 0) {
      ASSERT_TRUE(std::isfinite(o.loss[i])) << i;
      continue;
    }
    EXPECT_EQ(o.loss[i], 0.0f);
    EXPECT_EQ(o.iou[i], 0.0f);
    EXPECT_EQ(o.v[i], 0.0f);
    EXPECT_EQ(o.alpha[i], 0.0f);
    for (int64_t k = 0; k < 4; ++k)
      EXPECT_EQ(g[static_cast<size_t>((static_cast<int64_t>(i) / c.anchors * 4 + k) * c.anchors +
                                      static_cast<int64_t>(i) % c.anchors)],
                0.0f);
  }
}

// xywh boxes give what their corners give in xyxy (the twin converts as x1 = cx − w·0.5, so exactly), and the xywh
// gradient is the xyxy one through the conversion: (dx1 + dx2, dy1 + dy2, (dx2 − dx1)/2, (dy2 − dy1)/2).
TEST(CiouCpu, XywhEqualsXyxyAfterConversion) {
  const CiouBatch wh = random_ciou_batch(2, 300, 0.6, true);
  CiouBatch xy = wh;
  const size_t n = static_cast<size_t>(wh.anchors);
  for (int64_t b = 0; b < wh.batch; ++b)
    for (size_t a = 0; a < n; ++a)
      for (auto pair : {std::make_pair(&wh.pred, &xy.pred), std::make_pair(&wh.target, &xy.target)}) {
        const float* s = pair.first->data() + static_cast<size_t>(b) * 4 * n + a;
        float* d = pair.second->data() + static_cast<size_t>(b) * 4 * n + a;
        const float hw = s[2 * n] * 0.5f, hh = s[3 * n] * 0.5f;
        d[0] = s[0] - hw, d[n] = s[n] - hh, d[2 * n] = s[0] + hw, d[3 * n] = s[n] + hh;
      }
  const TwinOut ow = twin_forward(wh, BoxFormat::xywh), ox = twin_forward(xy, BoxFormat::xyxy);
  EXPECT_EQ(ow.loss, ox.loss);
  EXPECT_EQ(ow.iou, ox.iou);
  EXPECT_EQ(ow.v, ox.v);
  EXPECT_EQ(ow.alpha, ox.alpha);
  const auto d_loss = random_values(wh.weight.size(), 0.5f, 1.5f);
  for (bool full : {false, true}) {
    const auto gw = twin_backward(wh, d_loss, {BoxFormat::xywh, full});
    const auto gx = twin_backward(xy, d_loss, {BoxFormat::xyxy, full});
    for (int64_t b = 0; b < wh.batch; ++b)
      for (size_t a = 0; a < n; ++a) {
        const float* x = gx.data() + static_cast<size_t>(b) * 4 * n + a;
        const float* w = gw.data() + static_cast<size_t>(b) * 4 * n + a;
        ASSERT_EQ(w[0], x[0] + x[2 * n]);
        ASSERT_EQ(w[n], x[n] + x[3 * n]);
        ASSERT_EQ(w[2 * n], (x[2 * n] - x[0]) * 0.5f);
        ASSERT_EQ(w[3 * n], (x[3 * n] - x[n]) * 0.5f);
      }
  }
}

TEST(CiouCpu, OpChecksItsInputs) {
  CiouLossOp op;
  EXPECT_EQ(op.infer_output_shape({Shape{2, 4, 10}, Shape{2, 4, 10}, Shape{2, 10}}), (Shape{2, 10}));
  EXPECT_EQ(op.infer_output_shape({Shape{Shape::kAny, 4, 10}, Shape{2, 4, 10}, Shape{2, 10}}), (Shape{2, 10}));
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{2, 5, 10}, Shape{2, 4, 10}, Shape{2, 10}}); })
                .find("[B, 4, A]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{2, 4, 10}, Shape{2, 4, 10}, Shape{2, 11}}); })
                .find("anchors"),
            std::string::npos);
  EXPECT_EQ(op.infer_output_dtype({core::DType::bf16, core::DType::f32, core::DType::f32}), core::DType::f32);
  const auto rt = op.lower(graph::Backend::cpu, graph::Mode::train);
  EXPECT_TRUE(rt->has_backward());
  EXPECT_FALSE(rt->input_dtype(0).has_value());  // pred: the plan's dtype
  EXPECT_EQ(rt->input_dtype(1), std::optional<core::DType>(core::DType::f32));
  EXPECT_EQ(rt->input_dtype(2), std::optional<core::DType>(core::DType::f32));
  EXPECT_EQ(rt->saved_specs({Shape{2, 4, 10}, Shape{2, 4, 10}, Shape{2, 10}}, Shape{2, 10}).size(), 3u);
}

// A training plan on the CPU: pred = scale(x) (a per-coordinate parameter [4]), loss = mean of the per-box CIoU
// loss. The loss equals the mean of the twin's per-box losses, and the parameter's gradient Σ x·d_pred with d_pred
// the twin's backward for d_loss = 1/(B·A), in both alpha modes; target and weight receive no gradient.
TEST(CiouCpu, GraphOpTrainsAParameterThroughAnExecutor) {
  for (bool full : {false, true}) {
    const CiouBatch c = random_ciou_batch(2, 40, 0.5, false);
    const Shape boxes{c.batch, 4, c.anchors}, ba{c.batch, c.anchors};
    auto g = std::make_shared<graph::Graph>();
    auto x = g->input("x", Shape{Shape::kAny, 4, Shape::kAny});
    auto target = g->input("target", Shape{Shape::kAny, 4, Shape::kAny});
    auto weight = g->input("weight", Shape{Shape::kAny, Shape::kAny});
    auto pred = g->apply(std::make_shared<test::ScaleOp>(), {x}, "scale");
    g->mark_output(ops::mean(ciou_loss(pred, target, weight, {BoxFormat::xyxy, full}), "loss"));
    graph::Executor ex(g, graph::cpu_backend());
    const Tensor xt = Tensor::from_vector(boxes, c.pred);
    const auto out = ex.forward_train({xt, Tensor::from_vector(boxes, c.target), Tensor::from_vector(ba, c.weight)});
    ex.backward();
    const auto scale = ex.state().tensor("scale.weight").to_vector();
    ASSERT_EQ(scale.size(), 4u);
    CiouBatch scaled = c;
    for (size_t i = 0; i < scaled.pred.size(); ++i) scaled.pred[i] *= scale[(i / c.anchors) % 4];
    const TwinOut o = twin_forward(scaled, BoxFormat::xyxy);
    double mean = 0;
    for (float l : o.loss) mean += l;
    mean /= static_cast<double>(o.loss.size());
    EXPECT_NEAR(out.at(0).to_vector().at(0), mean, 1e-6 * std::max(1.0, mean));
    const auto d_pred = twin_backward(scaled, std::vector<float>(o.loss.size(), 1.0f / static_cast<float>(o.loss.size())),
                                      {BoxFormat::xyxy, full});
    std::vector<double> ref(4, 0.0);
    for (size_t i = 0; i < d_pred.size(); ++i) ref[(i / c.anchors) % 4] += double(c.pred[i]) * d_pred[i];
    const auto grad = ex.state().grad("scale.weight").to_vector();
    EXPECT_LT(rel_error(grad, ref), 1e-5) << "full " << full;
    EXPECT_GT(max_abs(ref), 1e-4);  // a gradient that a bug would change
  }
}

}  // namespace
