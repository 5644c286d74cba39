// YOLO26 BCE classification and L1 distance losses on the CPU: the twins against float64 references (random soft
// targets, logits up to ±80, an all-zero target set whose normaliser clamps to 1), the backward against finite
// differences, the graph ops' shape checks, and both ops in a CPU training plan where the prediction depends on a
// parameter (test.scale), so gradients reach it.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "graph/test_ops.h"
#include "ops/op_harness.h"
#include "test_util.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/kernels/loss/cls.h"

// A namespace of its own: this file's using-directives and helpers stay out of the other test files
// of its unity batch.
namespace test_loss_cls_cpp {

using namespace vision;
using namespace vision::graph;
using namespace vision::models::yolo::kernels;
using namespace vision::models::yolo::kernels::loss;
using vision::test::error_of;
using vision::test::OpHarness;
using vision::test::random_tensor;
using vision::test::random_values;
using vision::test::rel_error;

namespace {

// softplus(x) − x·t, written differently from the twin (log σ terms through softplus of either sign), in long double.
long double ref_bce(long double x, long double t) {
  const long double sp = x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  return sp - x * t;
}
long double ref_sigmoid(long double x) { return 1.0L / (1.0L + std::exp(-x)); }

struct RefLoss {
  double loss;  // divided by N
  double n;
  std::vector<double> grad;  // d loss / d prediction
};

RefLoss ref_bce_loss(const std::vector<float>& x, const std::vector<float>& t) {
  long double s = 0, st = 0;
  for (size_t i = 0; i < x.size(); ++i) s += ref_bce(x[i], t[i]), st += t[i];
  const long double n = std::max(st, 1.0L);
  RefLoss r{static_cast<double>(s / n), static_cast<double>(n), {}};
  for (size_t i = 0; i < x.size(); ++i) r.grad.push_back(static_cast<double>((ref_sigmoid(x[i]) - t[i]) / n));
  return r;
}

// pred, target [B, 4, A], weight [B, A], an H×W input's anchors.
RefLoss ref_l1_loss(const std::vector<float>& p, const std::vector<float>& t, const std::vector<float>& w,
                    int64_t batch, int64_t h, int64_t wd) {
  const auto grid = detect_anchor_grid(h, wd);
  const auto n = static_cast<int64_t>(grid.size() / 3);
  long double s = 0, sw = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t a = 0; a < n; ++a) {
      long double l = 0;
      for (int64_t c = 0; c < 4; ++c) {
        const size_t i = static_cast<size_t>((b * 4 + c) * n + a);
        const long double scale = static_cast<long double>(grid[2 * n + a]) / (c % 2 == 0 ? wd : h);
        l += std::abs(static_cast<long double>(p[i]) * scale - static_cast<long double>(t[i]) * scale);
      }
      s += w[b * n + a] * l / 4;
      sw += w[b * n + a];
    }
  const long double nn = std::max(sw, 1.0L);
  RefLoss r{static_cast<double>(s / nn), static_cast<double>(nn), std::vector<double>(p.size())};
  for (size_t i = 0; i < p.size(); ++i) {
    const int64_t a = static_cast<int64_t>(i) % n, c = (static_cast<int64_t>(i) / n) % 4, b = static_cast<int64_t>(i) / (4 * n);
    const double d = double(p[i]) - t[i];
    const double sg = d > 0 ? 1 : d < 0 ? -1 : 0;
    r.grad[i] = static_cast<double>(w[b * n + a] * (grid[2 * n + a] / double(c % 2 == 0 ? wd : h)) / 4 * sg / nn);
  }
  return r;
}

// Soft targets as the assigner makes them: mostly zero, a few in (0, 1].
std::vector<float> soft_targets(size_t n, double density = 0.05) {
  std::vector<float> t(n);
  const auto u = random_values(n, 0.0f, 1.0f), v = random_values(n, 0.01f, 1.0f);
  for (size_t i = 0; i < n; ++i) t[i] = u[i] < density ? v[i] : 0.0f;
  return t;
}

std::vector<Tensor> levels(int64_t batch, int64_t h, int64_t w) {
  std::vector<Tensor> out;
  for (int64_t s : {8, 16, 32}) out.push_back(random_tensor(Shape{batch, 1, h / s, w / s}));
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// BCE

TEST(BceClsLoss, ForwardAndBackwardMatchFloat64WithSoftTargets) {
  const Shape shape{2, 80, 640};
  const Tensor x = random_tensor(shape, -8.0f, 8.0f);
  const Tensor t = Tensor::from_vector(shape, soft_targets(static_cast<size_t>(shape.numel())));
  BceClsLossOp op;
  OpHarness h(op, {x, t}, Mode::train);
  const float loss = h.forward(true).data<float>()[0];
  const RefLoss ref = ref_bce_loss(x.to_vector(), t.to_vector());
  ASSERT_GT(ref.n, 1.0);  // the normaliser is Σ t, not the clamp
  EXPECT_NEAR(loss, ref.loss, 4e-7 * ref.loss);
  const float g = 0.75f;
  const auto grads = h.backward(Tensor::from_vector(Shape{}, std::vector<float>{g}));
  std::vector<double> want(ref.grad);
  for (double& v : want) v *= g;
  EXPECT_LT(rel_error(grads.inputs[0].to_vector(), want), 1e-6);
  EXPECT_LT(vision::test::max_abs_error(grads.inputs[0].to_vector(), want), 1e-6 * vision::test::max_abs(want));
  for (float v : grads.inputs[1].to_vector()) ASSERT_EQ(v, 0.0f);  // targets are constants
}

TEST(BceClsLoss, LogitsOfPlusMinus80AreFiniteAndExact) {
  // Every sign of x against t = 0, 1 and a soft value: bce(80, 0) = 80 + log1p(e^-80), bce(−80, 1) = 80 + ..., and
  // the confident right answers give e^-80 ≈ 1.8e-35 (far below f32's resolution of the sum, but finite).
  std::vector<float> x, t;
  for (float xv : {80.0f, -80.0f, 79.5f, -79.5f, 0.0f, 30.0f, -30.0f})
    for (float tv : {0.0f, 1.0f, 0.3f}) x.push_back(xv), t.push_back(tv);
  const Shape shape{1, 3, static_cast<int64_t>(x.size() / 3)};
  const Tensor tx = Tensor::from_vector(shape, x), tt = Tensor::from_vector(shape, t);
  const LossSums s = bce_cls_forward_cpu(tx, tt);
  const RefLoss ref = ref_bce_loss(x, t);
  ASSERT_TRUE(std::isfinite(s.loss));
  EXPECT_NEAR(s.loss / loss_normalizer(s.norm), ref.loss, 1e-12 * ref.loss);
  Tensor g = Tensor::zeros(shape);
  bce_cls_backward_cpu(tx, tt, 1.0 / ref.n, g);
  const auto gv = g.to_vector();
  for (size_t i = 0; i < gv.size(); ++i) {
    ASSERT_TRUE(std::isfinite(gv[i])) << i;
    // f32 rounding of the result, plus float64 cancellation in σ(x) − t (2^-53 of σ + t).
    EXPECT_NEAR(gv[i], ref.grad[i], 1e-7 * std::abs(ref.grad[i]) + 1e-15 / ref.n) << "x " << x[i] << " t " << t[i];
  }
  // One term alone: bce(−80, 1) = 80 + log1p(e^-80) = 80 in f64, and σ(−80) − 1 = −1 + 1.8e-35.
  const Tensor one_x = Tensor::from_vector(Shape{1, 1, 1}, std::vector<float>{-80.0f}), one_t = Tensor::from_vector(Shape{1, 1, 1}, std::vector<float>{1.0f});
  EXPECT_EQ(bce_cls_forward_cpu(one_x, one_t).loss, 80.0);
  const Tensor big = Tensor::from_vector(Shape{1, 1, 1}, std::vector<float>{80.0f}), zero = Tensor::from_vector(Shape{1, 1, 1}, std::vector<float>{0.0f});
  Tensor gb = Tensor::zeros(Shape{1, 1, 1});
  bce_cls_backward_cpu(big, zero, 1.0, gb);
  EXPECT_EQ(gb.data<float>()[0], 1.0f);
}

TEST(BceClsLoss, NoTargetsClampTheNormaliserToOne) {
  const Shape shape{2, 4, 50};
  const Tensor x = random_tensor(shape, -4.0f, 4.0f), t = Tensor::zeros(shape);
  BceClsLossOp op;
  OpHarness h(op, {x, t}, Mode::train);
  const RefLoss ref = ref_bce_loss(x.to_vector(), t.to_vector());
  EXPECT_EQ(ref.n, 1.0);
  EXPECT_NEAR(h.forward(true).data<float>()[0], ref.loss, 4e-7 * ref.loss);
}

// Central differences of the twin's float64 sum (so f32 output rounding does not swamp them) against its backward.
TEST(BceClsLoss, BackwardMatchesFiniteDifferences) {
  const Shape shape{2, 3, 7};
  Tensor x = random_tensor(shape, -3.0f, 3.0f);
  const Tensor t = Tensor::from_vector(shape, random_values(static_cast<size_t>(shape.numel()), 0.0f, 1.0f));
  const double n = loss_normalizer(bce_cls_forward_cpu(x, t).norm);
  Tensor grad = Tensor::zeros(shape);
  bce_cls_backward_cpu(x, t, 1.0 / n, grad);
  std::vector<double> fd;
  float* v = x.data<float>();
  for (int64_t i = 0; i < shape.numel(); ++i) {
    const float keep = v[i], hi = keep + 1e-3f, lo = keep - 1e-3f;
    v[i] = hi;
    const double up = bce_cls_forward_cpu(x, t).loss / n;
    v[i] = lo;
    const double down = bce_cls_forward_cpu(x, t).loss / n;
    v[i] = keep;
    fd.push_back((up - down) / (double(hi) - lo));
  }
  EXPECT_LT(rel_error(grad.to_vector(), fd), 1e-5);
  EXPECT_LT(vision::test::max_abs_error(grad.to_vector(), fd), 1e-5 * vision::test::max_abs(fd));
}

TEST(BceClsLoss, ShapeErrorsNameTheProblem) {
  BceClsLossOp op;
  EXPECT_EQ(op.infer_output_shape({Shape{2, 80, 8400}, Shape{2, 80, 8400}}), Shape{});
  EXPECT_EQ(op.infer_output_shape({Shape{Shape::kAny, 80, 8400}, Shape{2, 80, 8400}}), Shape{});
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{2, 80, 8400}, Shape{2, 8400, 80}}); }).find("target"),
            std::string::npos);
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{2, 80 * 8400}, Shape{2, 80 * 8400}}); }).find("[B, nc, A]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{2, 80, 8400}}); }).find("2 inputs"), std::string::npos);
  // The CPU runtime: f32 only; the targets are read in f32 whatever the format.
  const auto rt = op.lower(Backend::cpu, Mode::train);
  EXPECT_TRUE(rt->supports(Format{}));
  EXPECT_FALSE(rt->supports(Format{DType::bf16, core::Layout::nchw}));
  EXPECT_FALSE(rt->input_dtype(0).has_value());
  EXPECT_EQ(rt->input_dtype(1), DType::f32);
}

// ---------------------------------------------------------------------------------------------------------------
// L1

struct L1Inputs {
  Tensor pred, target, weight;
  std::vector<Tensor> all;  // pred, target, weight, P3, P4, P5
};
// Rectangular 64×96 input (H×W), so that l/r and t/b scale differently; weights zero off ~30% positives.
L1Inputs l1_inputs(int64_t batch, int64_t h, int64_t w) {
  const int64_t n = detect_anchor_count(h, w);
  L1Inputs in;
  in.pred = random_tensor(Shape{batch, 4, n}, 0.0f, 6.0f);
  in.target = random_tensor(Shape{batch, 4, n}, 0.0f, 6.0f);
  auto wv = random_values(static_cast<size_t>(batch * n), 0.0f, 1.0f);
  const auto keep = random_values(wv.size(), 0.0f, 1.0f);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = keep[i] < 0.3f ? wv[i] + 0.05f : 0.0f;
  in.weight = Tensor::from_vector(Shape{batch, n}, wv);
  in.all = {in.pred, in.target, in.weight};
  for (const Tensor& l : levels(batch, h, w)) in.all.push_back(l);
  return in;
}

TEST(L1DistanceLoss, ForwardAndBackwardMatchFloat64OnARectangularInput) {
  const int64_t batch = 2, h = 64, w = 96;
  L1Inputs in = l1_inputs(batch, h, w);
  L1DistanceLossOp op;
  OpHarness hs(op, in.all, Mode::train);
  ASSERT_EQ(hs.specs().size(), 1u);
  EXPECT_EQ(hs.specs()[0].name, "anchors");
  EXPECT_EQ(hs.specs()[0].kind, StateKind::constant);
  const float loss = hs.forward(true).data<float>()[0];
  const RefLoss ref =
      ref_l1_loss(in.pred.to_vector(), in.target.to_vector(), in.weight.to_vector(), batch, h, w);
  ASSERT_GT(ref.n, 1.0);
  EXPECT_NEAR(loss, ref.loss, 4e-7 * ref.loss);
  const auto grads = hs.backward(Tensor::from_vector(Shape{}, std::vector<float>{1.5f}));
  std::vector<double> want(ref.grad);
  for (double& v : want) v *= 1.5;
  EXPECT_LT(rel_error(grads.inputs[0].to_vector(), want), 1e-6);
  EXPECT_LT(vision::test::max_abs_error(grads.inputs[0].to_vector(), want), 1e-6 * vision::test::max_abs(want));
  for (size_t i = 1; i < 6; ++i)
    for (float v : grads.inputs[i].to_vector()) ASSERT_EQ(v, 0.0f) << "input " << i;
}

// Central differences of the twin's float64 sum: exact away from the kinks |p − t| = 0 (the loss is piecewise linear),
// so the step stays below the distance to the kink.
TEST(L1DistanceLoss, BackwardMatchesFiniteDifferences) {
  const int64_t h = 32, w = 64;
  L1Inputs in = l1_inputs(1, h, w);
  const Tensor anchors = Tensor::from_vector(Shape{3, in.pred.dim(2)}, detect_anchor_grid(h, w));
  const double n = loss_normalizer(l1_distance_forward_cpu(in.pred, in.target, in.weight, anchors, h, w).norm);
  Tensor grad = Tensor::zeros(in.pred.shape());
  l1_distance_backward_cpu(in.pred, in.target, in.weight, anchors, h, w, 1.0 / n, grad);
  std::vector<double> fd;
  float* v = in.pred.data<float>();
  const float* t = in.target.data<float>();
  for (int64_t i = 0; i < in.pred.numel(); ++i) {
    const float eps = std::min(1e-3f, 0.5f * std::abs(v[i] - t[i]));
    const float keep = v[i], hi = keep + eps, lo = keep - eps;
    v[i] = hi;
    const double up = l1_distance_forward_cpu(in.pred, in.target, in.weight, anchors, h, w).loss / n;
    v[i] = lo;
    const double down = l1_distance_forward_cpu(in.pred, in.target, in.weight, anchors, h, w).loss / n;
    v[i] = keep;
    fd.push_back(hi > lo ? (up - down) / (double(hi) - lo) : 0.0);
  }
  EXPECT_LT(rel_error(grad.to_vector(), fd), 1e-5);
  EXPECT_LT(vision::test::max_abs_error(grad.to_vector(), fd), 1e-5 * vision::test::max_abs(fd));
}

TEST(L1DistanceLoss, ShapeErrorsNameTheProblem) {
  L1DistanceLossOp op;
  const Shape p3{2, 8, 80, 80}, p4{2, 8, 40, 40}, p5{2, 8, 20, 20};
  const Shape d{2, 4, 8400}, wt{2, 8400};
  EXPECT_EQ(op.infer_output_shape({d, d, wt, p3, p4, p5}), Shape{});
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{2, 5, 8400}, d, wt, p3, p4, p5}); }).find("[B, 4, A]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { op.infer_output_shape({d, d, Shape{2, 8401}, p3, p4, p5}); }).find("weight"),
            std::string::npos);
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{2, 4, 8401}, Shape{2, 4, 8401}, Shape{2, 8401}, p3, p4, p5}); })
                .find("has 8400"),
            std::string::npos);
  EXPECT_NE(error_of([&] { op.infer_output_shape({d, d, wt}); }).find("6 inputs"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------------
// In a training plan

// logits [?, nc, A] → test.scale (a parameter per class) → bce_cls_loss with the targets; the same for the distances
// → l1_distance_loss. Both losses are seeded outputs; the gradients reach both scales' weights.
TEST(ClsLossGraph, BothLossesTrainThroughACpuPlan) {
  const int64_t batch = 2, nc = 5, h = 32, w = 64, n = detect_anchor_count(h, w);
  auto g = std::make_shared<Graph>();
  auto logits = g->input("logits", Shape{Shape::kAny, nc, n});
  auto targets = g->input("targets", Shape{Shape::kAny, nc, n});
  auto dist = g->input("dist", Shape{Shape::kAny, 4, n});
  auto tdist = g->input("tdist", Shape{Shape::kAny, 4, n});
  auto weight = g->input("weight", Shape{Shape::kAny, n});
  std::vector<SymTensor> lv;
  for (const char* name : {"p3", "p4", "p5"}) lv.push_back(g->input(name, Shape{Shape::kAny, 1, Shape::kAny, Shape::kAny}));
  auto scaled = g->apply(std::make_shared<test::ScaleOp>(), {logits}, "cls_scale");
  auto scaled_d = g->apply(std::make_shared<test::ScaleOp>(), {dist}, "box_scale");
  g->mark_output(bce_cls_loss(scaled, targets));
  g->mark_output(l1_distance_loss(scaled_d, tdist, weight, lv[0], lv[1], lv[2]));

  const Tensor x = random_tensor(Shape{batch, nc, n}, -3.0f, 3.0f);
  const Tensor t = Tensor::from_vector(Shape{batch, nc, n}, soft_targets(static_cast<size_t>(batch * nc * n), 0.2));
  L1Inputs li = l1_inputs(batch, h, w);
  std::vector<Tensor> inputs = {x, t, li.pred, li.target, li.weight};
  for (const Tensor& l : levels(batch, h, w)) inputs.push_back(l);

  Executor ex(g, cpu_backend());
  const auto out = ex.forward_train(inputs);
  ex.backward();

  // Float64: the scaled predictions from the executor's weights, the losses, and dL/dw_c = Σ dL/dy · x over c.
  const auto ws = ex.state().tensor("cls_scale.weight").to_vector();
  const auto wd = ex.state().tensor("box_scale.weight").to_vector();
  std::vector<float> y(static_cast<size_t>(x.numel())), yd(static_cast<size_t>(li.pred.numel()));
  const auto xv = x.to_vector(), pv = li.pred.to_vector();
  for (size_t i = 0; i < y.size(); ++i) y[i] = ws[(i / n) % nc] * xv[i];
  for (size_t i = 0; i < yd.size(); ++i) yd[i] = wd[(i / n) % 4] * pv[i];
  const RefLoss rc = ref_bce_loss(y, t.to_vector());
  const RefLoss rl = ref_l1_loss(yd, li.target.to_vector(), li.weight.to_vector(), batch, h, w);
  EXPECT_NEAR(out[0].data<float>()[0], rc.loss, 1e-6 * rc.loss);
  EXPECT_NEAR(out[1].data<float>()[0], rl.loss, 1e-6 * rl.loss);
  std::vector<double> dws(static_cast<size_t>(nc)), dwd(4);
  for (size_t i = 0; i < y.size(); ++i) dws[(i / n) % nc] += rc.grad[i] * xv[i];
  for (size_t i = 0; i < yd.size(); ++i) dwd[(i / n) % 4] += rl.grad[i] * pv[i];
  EXPECT_LT(rel_error(ex.state().grad("cls_scale.weight").to_vector(), dws), 1e-5);
  EXPECT_LT(rel_error(ex.state().grad("box_scale.weight").to_vector(), dwd), 1e-5);
}

}  // namespace

}  // namespace test_loss_cls_cpp
