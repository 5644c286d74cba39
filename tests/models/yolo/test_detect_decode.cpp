// Detect decode on the CPU: the anchor grid at 640×640, 320×320 and 640×384; the three modes against a float64
// reference with poisoned outputs; the grid mode's backward against finite differences and inside a training plan
// (a convolution before it); the op in one graph at two input sizes; and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "graph/test_ops.h"
#include "models/yolo/decode_reference.h"
#include "ops/op_harness.h"
#include "test_util.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/shape_ops.h"

using namespace vision;
using namespace vision::graph;
using namespace vision::models::yolo::kernels;
using vision::test::error_of;
using vision::test::max_abs_error;
using vision::test::OpHarness;
using vision::test::random_tensor;
using vision::test::reference_anchor;
using vision::test::reference_decode;
using vision::test::rel_error;

namespace {

constexpr DecodeMode kModes[] = {DecodeMode::pixels, DecodeMode::grid, DecodeMode::cxcywh};

// The level maps [B, 1, H/s, W/s] of an H×W input (only their shapes matter to the op).
std::vector<Tensor> levels(int64_t batch, int64_t h, int64_t w) {
  std::vector<Tensor> out;
  for (int64_t s : {8, 16, 32}) out.push_back(random_tensor(Shape{batch, 1, h / s, w / s}));
  return out;
}
std::vector<Tensor> decode_inputs(const Tensor& ltrb, int64_t h, int64_t w) {
  std::vector<Tensor> in = {ltrb};
  for (const Tensor& l : levels(ltrb.dim(0), h, w)) in.push_back(l);
  return in;
}

// Per element: |out − ref| ≤ 4 ulp of the largest magnitude in the f32 computation (|anchor| + |distance|, with the
// distances in [0, 6] used here, times stride), so that a wrong anchor, stride or plane fails and rounding does not.
void expect_decoded(const Tensor& out, const Tensor& ltrb, int64_t h, int64_t w, DecodeMode mode) {
  const int64_t batch = ltrb.dim(0), n = ltrb.dim(2);
  const auto ref = reference_decode(ltrb.to_vector(), batch, n, h, w, static_cast<int>(mode));
  const auto o = out.to_vector();
  ASSERT_EQ(o.size(), ref.size());
  size_t bad = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    const int64_t a = static_cast<int64_t>(i) % n;
    const auto anchor = reference_anchor(a, h, w);
    const double scale = (std::max(anchor[0], anchor[1]) + 6.0) * (mode == DecodeMode::grid ? 1.0 : anchor[2]);
    const double bound = 4 * std::ldexp(1.0, -23) * scale * (mode == DecodeMode::cxcywh ? 2 : 1);
    if (!(std::abs(o[i] - ref[i]) <= bound) && bad++ < 5)
      ADD_FAILURE() << decode_mode_name(mode) << " element " << i << ": " << o[i] << " vs " << ref[i];
  }
  EXPECT_EQ(bad, 0u) << decode_mode_name(mode) << " " << h << "x" << w;
}

// ---------------------------------------------------------------------------------------------------------------
// Anchor grid

TEST(DetectDecodeAnchors, Grid640HasThe8400AnchorsOfP3P4P5) {
  EXPECT_EQ(detect_anchor_count(640, 640), 8400);
  const auto g = detect_anchor_grid(640, 640);
  ASSERT_EQ(g.size(), 3u * 8400);
  auto at = [&](int64_t a) { return std::array<float, 3>{g[a], g[8400 + a], g[2 * 8400 + a]}; };
  using A = std::array<float, 3>;
  EXPECT_EQ(at(0), (A{0.5f, 0.5f, 8}));          // P3 first
  EXPECT_EQ(at(1), (A{1.5f, 0.5f, 8}));          // row-major: x runs first
  EXPECT_EQ(at(80), (A{0.5f, 1.5f, 8}));         // second row of P3
  EXPECT_EQ(at(6399), (A{79.5f, 79.5f, 8}));     // P3 last
  EXPECT_EQ(at(6400), (A{0.5f, 0.5f, 16}));      // P4 first
  EXPECT_EQ(at(7999), (A{39.5f, 39.5f, 16}));    // P4 last
  EXPECT_EQ(at(8000), (A{0.5f, 0.5f, 32}));      // P5 first
  EXPECT_EQ(at(8399), (A{19.5f, 19.5f, 32}));    // P5 last
}

TEST(DetectDecodeAnchors, SquareAndRectangularGridsMatchTheReference) {
  for (auto [h, w] : {std::pair<int64_t, int64_t>{320, 320}, {640, 384}, {384, 640}, {32, 64}}) {
    const int64_t n = (h / 8) * (w / 8) + (h / 16) * (w / 16) + (h / 32) * (w / 32);
    EXPECT_EQ(detect_anchor_count(h, w), n);
    const auto g = detect_anchor_grid(h, w);
    ASSERT_EQ(g.size(), static_cast<size_t>(3 * n));
    for (int64_t a = 0; a < n; ++a) {
      const auto r = reference_anchor(a, h, w);
      ASSERT_TRUE(g[a] == r[0] && g[n + a] == r[1] && g[2 * n + a] == r[2])
          << h << "x" << w << " anchor " << a << ": (" << g[a] << ", " << g[n + a] << ", " << g[2 * n + a] << ")";
    }
  }
  EXPECT_EQ(detect_anchor_count(320, 320), 1600 + 400 + 100);
  // 640×384 (H×W): P3 80×48 → the last P3 anchor is (47.5, 79.5), P5 20×12.
  const auto g = detect_anchor_grid(640, 384);
  const int64_t n = 80 * 48 + 40 * 24 + 20 * 12;
  EXPECT_EQ(g[80 * 48 - 1], 47.5f);
  EXPECT_EQ(g[n + 80 * 48 - 1], 79.5f);
  EXPECT_EQ(g[n - 1], 11.5f);
  EXPECT_EQ(g[2 * n + n - 1], 32.0f);
}

TEST(DetectDecodeAnchors, SizesNotAMultipleOf32AreRefused) {
  for (auto [h, w] : {std::pair<int64_t, int64_t>{640, 630}, {600, 640}, {0, 640}, {-32, 32}})
    EXPECT_NE(error_of([&] { (void)detect_anchor_count(h, w); }).find("multiple of 32"), std::string::npos)
        << h << "x" << w;
}

// ---------------------------------------------------------------------------------------------------------------
// Forward and backward through the op

TEST(DetectDecodeOp, EveryModeMatchesFloat64OnRandomLtrbWithPoisonedOutputs) {
  for (auto [h, w] : {std::pair<int64_t, int64_t>{640, 640}, {320, 320}, {640, 384}})
    for (DecodeMode mode : kModes) {
      const Tensor ltrb = random_tensor(Shape{2, 4, detect_anchor_count(h, w)}, 0.0f, 6.0f);
      DetectDecodeOp op(mode);
      OpHarness hs(op, decode_inputs(ltrb, h, w));
      ASSERT_EQ(hs.specs().size(), 1u);
      EXPECT_EQ(hs.specs()[0].name, "anchors");
      EXPECT_EQ(hs.specs()[0].kind, StateKind::constant);
      EXPECT_EQ(hs.specs()[0].shape, (Shape{3, ltrb.dim(2)}));
      expect_decoded(hs.forward(), ltrb, h, w, mode);
    }
}

TEST(DetectDecodeOp, GridBackwardMatchesFiniteDifferencesAndOnlyGridHasOne) {
  const Tensor ltrb = random_tensor(Shape{2, 4, detect_anchor_count(64, 96)});
  DetectDecodeOp op(DecodeMode::grid);
  OpHarness h(op, decode_inputs(ltrb, 64, 96), Mode::train);
  EXPECT_TRUE(h.runtime().has_backward());
  vision::test::check_gradients(h, {.training = true, .eps = 1e-2, .tol = 1e-3});
  // Exact signs: dl = −dx1, dt = −dy1, dr = dx2, db = dy2; the level maps get zeros.
  h.forward(true);
  const Tensor g = random_tensor(h.output_shape());
  const auto grads = h.backward(g);
  const int64_t n = ltrb.dim(2);
  for (int64_t i = 0; i < g.numel(); ++i) {
    const float sign = (i / n) % 4 < 2 ? -1.0f : 1.0f;
    ASSERT_EQ(grads.inputs[0].data<float>()[i], sign * g.data<float>()[i]) << i;
  }
  for (size_t l = 1; l < 4; ++l)
    for (float v : grads.inputs[l].to_vector()) ASSERT_EQ(v, 0.0f) << "level " << l;

  for (DecodeMode mode : {DecodeMode::pixels, DecodeMode::cxcywh})
    EXPECT_FALSE(DetectDecodeOp(mode).lower(Backend::cpu, Mode::train)->has_backward()) << decode_mode_name(mode);
}

TEST(DetectDecodeOp, ShapeErrorsNameTheProblem) {
  DetectDecodeOp op(DecodeMode::pixels);
  const Shape p3{1, 8, 80, 80}, p4{1, 8, 40, 40}, p5{1, 8, 20, 20};
  EXPECT_EQ(op.infer_output_shape({Shape{1, 4, 8400}, p3, p4, p5}), (Shape{1, 4, 8400}));
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{1, 5, 8400}, p3, p4, p5}); }).find("[B, 4, A]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{4, 8400}, p3, p4, p5}); }).find("[B, 4, A]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{1, 4, 8401}, p3, p4, p5}); }).find("has 8400"),
            std::string::npos);
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{1, 4, 8400}, p3, p4}); }).find("4 inputs"),
            std::string::npos);
  // Levels of an input that is not a multiple of 32 (P3 of 600 / 8 = 75 rows), or not halving level to level.
  const std::string odd = error_of([&] {
    op.infer_output_shape({Shape{1, 4, 75 * 80 + 38 * 40 + 19 * 20}, Shape{1, 8, 75, 80}, Shape{1, 8, 38, 40},
                           Shape{1, 8, 19, 20}});
  });
  EXPECT_NE(odd.find("multiple of 32"), std::string::npos) << odd;
  EXPECT_NE(error_of([&] { op.infer_output_shape({Shape{1, 4, 8400}, p3, p5, p4}); }).find("P4"), std::string::npos);
  // Symbolic sizes pass shape inference; the plan's concrete shapes are checked when it is built.
  const Shape any{Shape::kAny, 8, Shape::kAny, Shape::kAny};
  EXPECT_EQ(op.infer_output_shape({Shape{Shape::kAny, 4, Shape::kAny}, any, any, any}),
            (Shape{Shape::kAny, 4, Shape::kAny}));
}

// ---------------------------------------------------------------------------------------------------------------
// In a graph

// ltrb [?, 4, ?] and the level maps [?, 1, ?, ?] as graph inputs → boxes.
TEST(DetectDecodeGraph, OneGraphTwoInputSizesTwoPlansTwoGrids) {
  auto g = std::make_shared<Graph>();
  auto ltrb = g->input("ltrb", Shape{Shape::kAny, 4, Shape::kAny});
  std::vector<SymTensor> lv;
  for (const char* name : {"p3", "p4", "p5"})
    lv.push_back(g->input(name, Shape{Shape::kAny, 1, Shape::kAny, Shape::kAny}));
  g->mark_output(detect_decode(ltrb, lv[0], lv[1], lv[2], DecodeMode::pixels));
  Executor ex(g, cpu_backend());
  for (auto [h, w] : {std::pair<int64_t, int64_t>{640, 384}, {320, 320}}) {
    const Tensor x = random_tensor(Shape{2, 4, detect_anchor_count(h, w)}, 0.0f, 6.0f);
    expect_decoded(ex.forward(decode_inputs(x, h, w))[0], x, h, w, DecodeMode::pixels);
  }
  EXPECT_EQ(ex.cached_plans(), 2u);
  // A plan whose A does not match its levels is refused when it is built.
  const Tensor wrong = random_tensor(Shape{2, 4, detect_anchor_count(320, 320) + 1});
  EXPECT_NE(error_of([&] { ex.forward(decode_inputs(wrong, 320, 320)); }).find("anchors"), std::string::npos);
}

// x [?, 3, ?, ?] → per level s: conv k1 stride s (3 → 4) = ltrb_s, flattened and concatenated → decode → Σ boxes².
struct TrainGraph {
  std::shared_ptr<Graph> graph;
  SymTensor ltrb, boxes;
};
TrainGraph train_graph(DecodeMode mode) {
  TrainGraph t;
  t.graph = std::make_shared<Graph>();
  auto x = t.graph->input("x", Shape{Shape::kAny, 3, Shape::kAny, Shape::kAny});
  std::vector<SymTensor> maps, flat;
  for (int64_t s : {8, 16, 32}) {
    ops::Conv2dAttrs a;
    a.in_channels = 3, a.out_channels = 4, a.kernel = 1, a.stride = s, a.bias = true;
    maps.push_back(ops::conv2d(x, a, "cv" + std::to_string(s)));
    flat.push_back(ops::flatten(maps.back(), 2));
  }
  t.ltrb = ops::concat(flat, 2, "ltrb");
  t.boxes = detect_decode(t.ltrb, maps[0], maps[1], maps[2], mode);
  t.graph->mark_output(t.graph->apply(std::make_shared<test::SquareSumOp>(), {t.boxes}, "loss"));
  return t;
}

// ltrb of train_graph in float64 from the executor's convolution weights: ltrb_s[b, o, y, x] = bias[o] +
// Σ_c W[o, c]·x[b, c, y·s, x·s], levels concatenated along the anchors.
std::vector<double> reference_ltrb(Executor& ex, const Tensor& x) {
  const int64_t batch = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), n = detect_anchor_count(h, w);
  std::vector<double> out(static_cast<size_t>(batch * 4 * n));
  const auto xv = x.to_vector();
  int64_t offset = 0;
  for (int64_t s : {8, 16, 32}) {
    const auto wt = ex.state().tensor("cv" + std::to_string(s) + ".weight").to_vector();
    const auto bias = ex.state().tensor("cv" + std::to_string(s) + ".bias").to_vector();
    const int64_t gh = h / s, gw = w / s;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t o = 0; o < 4; ++o)
        for (int64_t y = 0; y < gh; ++y)
          for (int64_t xx = 0; xx < gw; ++xx) {
            double v = bias[o];
            for (int64_t i = 0; i < c; ++i) v += double(wt[o * c + i]) * xv[((b * c + i) * h + y * s) * w + xx * s];
            out[(b * 4 + o) * n + offset + y * gw + xx] = v;
          }
    offset += gh * gw;
  }
  return out;
}

TEST(DetectDecodeGraph, GridGradientFlowsThroughATrainingPlanAndPixelsModeIsRefused) {
  TrainGraph t = train_graph(DecodeMode::grid);
  Executor ex(t.graph, cpu_backend());
  const int64_t h = 64, w = 96, batch = 2, n = detect_anchor_count(h, w);
  const Tensor x = random_tensor(Shape{batch, 3, h, w});
  const double loss = ex.forward_train({x})[0].data<float>()[0];
  ex.backward();

  // Float64: boxes in grid units from the convolutions' ltrb, loss = Σ boxes², d_ltrb = (−2x1, −2y1, 2x2, 2y2).
  const auto ltrb = reference_ltrb(ex, x);
  std::vector<float> ltrb_f(ltrb.begin(), ltrb.end());
  const auto boxes = reference_decode(ltrb_f, batch, n, h, w, static_cast<int>(DecodeMode::grid));
  double loss_ref = 0;
  std::vector<double> d_ltrb(boxes.size());
  for (size_t i = 0; i < boxes.size(); ++i) {
    loss_ref += boxes[i] * boxes[i];
    d_ltrb[i] = (static_cast<int64_t>(i) / n) % 4 < 2 ? -2 * boxes[i] : 2 * boxes[i];
  }
  EXPECT_NEAR(loss, loss_ref, 1e-5 * loss_ref);
  const Plan& plan = *ex.last_train_plan();
  EXPECT_LT(rel_error(plan.value_grad(t.ltrb.id()).to_vector(), d_ltrb), 1e-5);
  // The gradient reaches the P4 convolution's bias: Σ over its anchors of d_ltrb, per channel.
  const int64_t p3 = (h / 8) * (w / 8), p4 = (h / 16) * (w / 16);
  std::vector<double> d_bias(4);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t o = 0; o < 4; ++o)
      for (int64_t a = p3; a < p3 + p4; ++a) d_bias[o] += d_ltrb[(b * 4 + o) * n + a];
  EXPECT_LT(rel_error(ex.state().grad("cv16.bias").to_vector(), d_bias), 1e-5);

  // Pixels mode has no backward: the training plan names the op.
  TrainGraph p = train_graph(DecodeMode::pixels);
  Executor ep(p.graph, cpu_backend());
  const std::string e = error_of([&] { ep.forward_train({x}); });
  EXPECT_NE(e.find("has no backward"), std::string::npos) << e;
  EXPECT_NE(e.find("yolo.detect_decode"), std::string::npos) << e;
}

}  // namespace
