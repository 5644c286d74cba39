// Detection metrics (vision/eval/metrics.h): hand-worked cases and the float64 numpy reference
// (tools/reference/detection_metrics.py → tests/fixtures/detection_metrics.json).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/eval/metrics.h"

namespace vision::eval {
namespace {

using data::Detection;

Detection det(std::array<float, 4> box, float score, int64_t cls) { return Detection{box, score, cls}; }

// AP of one TP-only class (every label found, every detection a TP), worked by hand for the 101-point trapezoid:
// recall ends at 1 and precision is 1 → padded mrec = [0, …, 1, 1], mpre = [1, 1, …, 1, 0], envelope the same.
// np.interp at x = 0, 0.01, …, 0.99 gives 1 (xp[j] ≤ x < 1 between points of value 1); at x = 1.0 it takes the LAST
// xp equal to 1, the padding, whose value is 0. Trapezoid: 99 intervals of 0.01·(1 + 1)/2 = 0.99, plus the last,
// 0.01·(1 + 0)/2 = 0.005: AP = 0.995 (ultralytics' well-known ceiling), not 1.
constexpr double kPerfectAp = 0.995;
// One label, one FP detection: recall [0], precision [0] → mrec = [0, 0, 1], mpre = [1, 0, 0], envelope [1, 0, 0].
// At x = 0 the last xp ≤ 0 is index 1 (value 0), and every later x interpolates between 0 and 0: AP = 0.
// One label, an FP (score 0.9) then a TP (score 0.8): recall [0, 1], precision [0, 0.5] → mrec = [0, 0, 1, 1],
// mpre = [1, 0, 0.5, 0], envelope [1, 0.5, 0.5, 0]. x = 0 takes index 1 (0.5), 0 < x < 1 interpolates 0.5 → 0.5,
// x = 1 takes the padding 0: 99·0.01·0.5 + 0.01·(0.5 + 0)/2 = 0.495 + 0.0025 = 0.4975.
constexpr double kFpThenTpAp = 0.4975;

constexpr double kTol = 1e-12;

TEST(Metrics, Thresholds) {
  const auto t = iou_thresholds();
  EXPECT_EQ(t[0], 0.5);
  EXPECT_EQ(t[9], 0.95);
  for (int i = 0; i < kNumIouThresholds; ++i) EXPECT_NEAR(t[static_cast<size_t>(i)], 0.5 + 0.05 * i, 1e-15);
}

TEST(Metrics, BoxIou) {
  EXPECT_EQ(box_iou({0, 0, 10, 10}, {0, 0, 10, 6.25f}), 0.625);
  EXPECT_EQ(box_iou({0, 0, 10, 10}, {20, 20, 30, 30}), 0.0);
  EXPECT_EQ(box_iou({0, 0, 10, 10}, {5, 0, 15, 10}), 50.0 / 150.0);
  EXPECT_EQ(box_iou({1, 1, 1, 1}, {1, 1, 1, 1}), 0.0);  // empty union
}

TEST(Metrics, AveragePrecisionByHand) {
  const std::vector<double> one = {1.0}, zero = {0.0};
  EXPECT_NEAR(average_precision(one, one), kPerfectAp, kTol);
  EXPECT_NEAR(average_precision(zero, zero), 0.0, kTol);
  const std::vector<double> r = {0.0, 1.0}, p = {0.0, 0.5};
  EXPECT_NEAR(average_precision(r, p), kFpThenTpAp, kTol);
}

TEST(Metrics, SmoothBox) {
  // n = 1000 → nf = round(200) // 2 + 1 = 101 taps, 50 edge copies a side; a constant stays constant, a step is
  // a ramp of width 101 centred on it.
  std::vector<double> y(1000, 0.0);
  for (size_t i = 500; i < 1000; ++i) y[i] = 1.0;
  const auto s = smooth_box(y);
  ASSERT_EQ(s.size(), 1000u);
  EXPECT_NEAR(s[0], 0.0, kTol);
  EXPECT_NEAR(s[449], 0.0, kTol);
  EXPECT_NEAR(s[450], 1.0 / 101, kTol);
  EXPECT_NEAR(s[500], 51.0 / 101, kTol);
  EXPECT_NEAR(s[550], 1.0, kTol);
  EXPECT_NEAR(s[999], 1.0, kTol);
}

TEST(Metrics, GroundTruthAsPredictions) {
  DetectionMetrics m(4);
  const std::vector<std::vector<GroundTruth>> images = {
      {{{10, 10, 50, 60}, 0}, {{100, 20, 180, 90}, 1}, {{30, 30, 70, 70}, 0}},
      {{{0, 0, 20, 20}, 2}, {{5, 5, 25, 25}, 2}},
      {},
  };
  for (const auto& labels : images) {
    std::vector<Detection> preds;
    for (const auto& g : labels) preds.push_back(det(g.box, 1.0f, g.cls));
    for (const auto& row : match_detections(preds, labels))
      for (bool b : row) EXPECT_TRUE(b);
    m.add_image(preds, labels);
  }
  const MetricsResult r = m.compute();
  ASSERT_EQ(r.classes.size(), 3u);  // class 3 has no labels: no row
  EXPECT_EQ(r.images, 3);
  EXPECT_EQ(r.instances, 5);
  EXPECT_EQ(r.classes[0].instances, 2);
  EXPECT_EQ(r.classes[0].images, 1);
  EXPECT_EQ(r.classes[2].instances, 2);
  for (const auto& c : r.classes) {
    for (double ap : c.ap_per_iou) EXPECT_NEAR(ap, kPerfectAp, kTol);
    EXPECT_NEAR(c.precision, 1.0, kTol);
    EXPECT_NEAR(c.recall, 1.0, kTol);
  }
  EXPECT_NEAR(r.map50, kPerfectAp, kTol);
  EXPECT_NEAR(r.map, kPerfectAp, kTol);
  EXPECT_NEAR(r.mp, 1.0, kTol);
  EXPECT_NEAR(r.mr, 1.0, kTol);
  EXPECT_NEAR(r.fitness, kPerfectAp, kTol);
}

TEST(Metrics, ShiftedBoxIou0625) {
  // IoU 0.625 = 62.5 / 100: a TP at 0.50, 0.55, 0.60 (AP 0.995 each) and an FP at 0.65 … 0.95 (AP 0 each).
  DetectionMetrics m(1);
  const std::vector<GroundTruth> labels = {{{0, 0, 10, 10}, 0}};
  const std::vector<Detection> preds = {det({0, 0, 10, 6.25f}, 0.9f, 0)};
  m.add_image(preds, labels);
  const MetricsResult r = m.compute();
  ASSERT_EQ(r.classes.size(), 1u);
  for (int t = 0; t < kNumIouThresholds; ++t)
    EXPECT_NEAR(r.classes[0].ap_per_iou[static_cast<size_t>(t)], t < 3 ? kPerfectAp : 0.0, kTol) << t;
  EXPECT_NEAR(r.map50, 0.995, kTol);
  EXPECT_NEAR(r.map, 3 * 0.995 / 10, kTol);                        // 0.2985
  EXPECT_NEAR(r.fitness, 0.1 * 0.995 + 0.9 * 0.2985, kTol);        // 0.36815
  EXPECT_NEAR(r.mp, 1.0, kTol);  // P and R are at IoU 0.5: F1 is 1 for every confidence ≤ 0.9, the first maximum
  EXPECT_NEAR(r.mr, 1.0, kTol);
  EXPECT_EQ(r.best_index, 0);
}

TEST(Metrics, FalsePositiveThenTruePositive) {
  DetectionMetrics m(1);
  const std::vector<GroundTruth> labels = {{{0, 0, 10, 10}, 0}};
  const std::vector<Detection> preds = {det({20, 20, 30, 30}, 0.9f, 0), det({0, 0, 10, 10}, 0.8f, 0)};
  m.add_image(preds, labels);
  const MetricsResult r = m.compute();
  ASSERT_EQ(r.classes.size(), 1u);
  for (double ap : r.classes[0].ap_per_iou) EXPECT_NEAR(ap, kFpThenTpAp, kTol);
  // Below confidence 0.8 P = 1/2, R = 1: F1 = 2/3, the plateau where the smoothed mean F1 peaks first.
  EXPECT_NEAR(r.mp, 0.5, kTol);
  EXPECT_NEAR(r.mr, 1.0, kTol);
}

// The PR curve at IoU 0.5: a false positive ranked first, then the true positive: precision 1/2 up to recall 1 (the
// envelope of [1, 0, 1/2, 0] at recalls [0, 0, 1, 1]: [1, 1/2, 1/2, 0]), 0 at recall exactly 1 (the padding); a class
// without detections is all 0.
TEST(Metrics, PrecisionRecallCurve) {
  DetectionMetrics m(2);
  const std::vector<GroundTruth> labels = {{{0, 0, 10, 10}, 0}, {{50, 50, 60, 60}, 1}};
  m.add_image(std::vector<Detection>{det({20, 20, 30, 30}, 0.9f, 0), det({0, 0, 10, 10}, 0.8f, 0)}, labels);
  const MetricsResult r = m.compute();
  ASSERT_EQ(r.classes.size(), 2u);
  const std::vector<double>& c0 = r.classes[0].pr_curve;
  ASSERT_EQ(c0.size(), static_cast<size_t>(kPrCurvePoints));
  EXPECT_DOUBLE_EQ(c0[0], 0.5);  // recall 0 appears twice (padding, the false positive): np.interp takes the last
  EXPECT_DOUBLE_EQ(c0[1], 0.5);
  EXPECT_DOUBLE_EQ(c0[500], 0.5);
  EXPECT_DOUBLE_EQ(c0[998], 0.5);
  EXPECT_DOUBLE_EQ(c0[999], 0.0);
  for (double p : r.classes[1].pr_curve) EXPECT_EQ(p, 0.0);
  EXPECT_EQ(r.classes[1].pr_curve.size(), static_cast<size_t>(kPrCurvePoints));
}

TEST(Metrics, LabelKeepsLowestDetectionIndexNotBestIou) {
  // Both detections' best pair is the label; the label keeps the first in detection order (det 0, IoU 0.625), so the
  // exact box (det 1) is an FP up to 0.60 and the TP from 0.65 on (where det 0 no longer pairs).
  const std::vector<GroundTruth> labels = {{{0, 0, 10, 10}, 0}};
  const std::vector<Detection> preds = {det({0, 0, 10, 6.25f}, 0.9f, 0), det({0, 0, 10, 10}, 0.8f, 0)};
  const auto tp = match_detections(preds, labels);
  for (int t = 0; t < kNumIouThresholds; ++t) {
    EXPECT_EQ(tp[0][static_cast<size_t>(t)], t < 3) << t;
    EXPECT_EQ(tp[1][static_cast<size_t>(t)], t >= 3) << t;
  }
  DetectionMetrics m(1);
  m.add_image(preds, labels);
  const MetricsResult r = m.compute();
  // t < 3: TP then FP → recall [1, 1], precision [1, 0.5]: envelope 1 up to recall 1 → 0.995.
  // t ≥ 3: FP then TP → 0.4975.
  for (int t = 0; t < kNumIouThresholds; ++t)
    EXPECT_NEAR(r.classes[0].ap_per_iou[static_cast<size_t>(t)], t < 3 ? kPerfectAp : kFpThenTpAp, kTol) << t;
}

TEST(Metrics, IouTieGoesToTheHigherLabelIndex) {
  // Two identical labels, two identical detections: every pair has IoU 1. Each detection's first pair (IoU
  // descending, ties: the later (label, detection) pair first) is label 1; label 1 keeps detection 0; detection 1 is an
  // FP although label 0 is free (ultralytics' matching, a stable sort reversed on ties).
  const std::vector<GroundTruth> labels = {{{0, 0, 10, 10}, 0}, {{0, 0, 10, 10}, 0}};
  const std::vector<Detection> preds = {det({0, 0, 10, 10}, 0.9f, 0), det({0, 0, 10, 10}, 0.8f, 0)};
  const auto tp = match_detections(preds, labels);
  for (int t = 0; t < kNumIouThresholds; ++t) {
    EXPECT_TRUE(tp[0][static_cast<size_t>(t)]);
    EXPECT_FALSE(tp[1][static_cast<size_t>(t)]);
  }
}

TEST(Metrics, MissingClassesAndUnlabelledDetections) {
  DetectionMetrics m(3);
  const std::vector<GroundTruth> labels = {{{0, 0, 10, 10}, 0}, {{50, 50, 80, 80}, 1}};
  const std::vector<Detection> preds = {det({100, 100, 120, 120}, 0.95f, 2), det({0, 0, 10, 10}, 0.9f, 0)};
  m.add_image(preds, labels);
  m.add_image({}, {});  // an image with nothing
  const MetricsResult r = m.compute();
  ASSERT_EQ(r.classes.size(), 2u);  // class 2 (detections, no labels) has no row
  EXPECT_EQ(r.classes[0].cls, 0);
  EXPECT_EQ(r.classes[1].cls, 1);
  EXPECT_EQ(r.images, 2);
  EXPECT_EQ(r.instances, 2);
  for (double ap : r.classes[0].ap_per_iou) EXPECT_NEAR(ap, kPerfectAp, kTol);
  for (double ap : r.classes[1].ap_per_iou) EXPECT_EQ(ap, 0.0);  // labels, no detections
  EXPECT_EQ(r.classes[1].precision, 0.0);
  EXPECT_EQ(r.classes[1].recall, 0.0);
  EXPECT_NEAR(r.map50, kPerfectAp / 2, kTol);
  EXPECT_NEAR(r.map, kPerfectAp / 2, kTol);
  EXPECT_NEAR(r.mp, 0.5, kTol);
  EXPECT_NEAR(r.mr, 0.5, kTol);
}

TEST(Metrics, NoLabels) {
  DetectionMetrics m(2);
  const std::vector<Detection> preds = {det({0, 0, 10, 10}, 0.9f, 1)};
  m.add_image(preds, {});
  const MetricsResult r = m.compute();
  EXPECT_TRUE(r.classes.empty());
  EXPECT_EQ(r.map, 0.0);
  EXPECT_EQ(r.mp, 0.0);
  EXPECT_EQ(r.fitness, 0.0);
}

TEST(Metrics, RejectsClassesOutOfRange) {
  DetectionMetrics m(2);
  const std::vector<Detection> bad_pred = {det({0, 0, 1, 1}, 0.5f, 2)};
  const std::vector<GroundTruth> bad_label = {{{0, 0, 1, 1}, -1}};
  EXPECT_THROW(m.add_image(bad_pred, {}), Error);
  EXPECT_THROW(m.add_image({}, bad_label), Error);
  EXPECT_THROW(DetectionMetrics(0), Error);
}

TEST(Metrics, Table) {
  DetectionMetrics m(3);
  const std::vector<GroundTruth> labels = {{{0, 0, 10, 10}, 0}, {{50, 50, 80, 80}, 1}};
  const std::vector<Detection> preds = {det({0, 0, 10, 10}, 0.9f, 0)};
  m.add_image(preds, labels);
  const std::vector<std::string> names = {"person", "bicycle", "car"};
  const std::string table = format_table(m.compute(), names);
  const std::string expected =
      "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95)\n"
      "                   all          1          2        0.5        0.5      0.497      0.497\n"
      "                person          1          1          1          1      0.995      0.995\n"
      "               bicycle          1          1          0          0          0          0\n";
  EXPECT_EQ(table, expected);
  const std::string all_only = format_table(m.compute(), {}, false);
  EXPECT_EQ(all_only, expected.substr(0, expected.find("person") - 16));
}

TEST(Metrics, MatchesFloat64Reference) {
  std::ifstream in(std::string(VISION_FIXTURE_DIR) + "/detection_metrics.json");
  ASSERT_TRUE(in) << "missing tests/fixtures/detection_metrics.json (tools/reference/detection_metrics.py)";
  const nlohmann::json doc = nlohmann::json::parse(in);
  DetectionMetrics m(doc["nc"].get<int64_t>());
  const auto thresholds = iou_thresholds();
  for (int t = 0; t < kNumIouThresholds; ++t)
    EXPECT_EQ(thresholds[static_cast<size_t>(t)], doc["thresholds"][static_cast<size_t>(t)].get<double>());
  size_t image_index = 0;
  for (const auto& im : doc["images"]) {
    std::vector<Detection> preds;
    std::vector<GroundTruth> labels;
    for (const auto& d : im["detections"])
      preds.push_back(det({d[0].get<float>(), d[1].get<float>(), d[2].get<float>(), d[3].get<float>()},
                          d[4].get<float>(), d[5].get<int64_t>()));
    for (const auto& g : im["labels"])
      labels.push_back({{g[0].get<float>(), g[1].get<float>(), g[2].get<float>(), g[3].get<float>()},
                        g[4].get<int64_t>()});
    const auto tp = match_detections(preds, labels);
    ASSERT_EQ(tp.size(), im["tp"].size());
    for (size_t d = 0; d < tp.size(); ++d)
      for (size_t t = 0; t < kNumIouThresholds; ++t)
        EXPECT_EQ(tp[d][t], im["tp"][d][t].get<int>() != 0) << "image " << image_index << " det " << d << " t " << t;
    m.add_image(preds, labels);
    ++image_index;
  }
  const MetricsResult r = m.compute();
  const auto& ref = doc["reference"];
  constexpr double tol = 1e-6;
  ASSERT_EQ(r.classes.size(), ref["classes"].size());
  for (size_t k = 0; k < r.classes.size(); ++k) {
    const auto& c = ref["classes"][k];
    EXPECT_EQ(r.classes[k].cls, c["cls"].get<int64_t>());
    EXPECT_EQ(r.classes[k].images, c["images"].get<int64_t>());
    EXPECT_EQ(r.classes[k].instances, c["instances"].get<int64_t>());
    for (size_t t = 0; t < kNumIouThresholds; ++t)
      EXPECT_NEAR(r.classes[k].ap_per_iou[t], c["ap"][t].get<double>(), tol) << "class " << k << " t " << t;
    EXPECT_NEAR(r.classes[k].precision, c["precision"].get<double>(), tol) << k;
    EXPECT_NEAR(r.classes[k].recall, c["recall"].get<double>(), tol) << k;
  }
  EXPECT_EQ(r.images, ref["images"].get<int64_t>());
  EXPECT_EQ(r.instances, ref["instances"].get<int64_t>());
  EXPECT_EQ(r.best_index, ref["best_index"].get<int64_t>());
  EXPECT_NEAR(r.mp, ref["mp"].get<double>(), tol);
  EXPECT_NEAR(r.mr, ref["mr"].get<double>(), tol);
  EXPECT_NEAR(r.map50, ref["map50"].get<double>(), tol);
  EXPECT_NEAR(r.map, ref["map"].get<double>(), tol);
  EXPECT_NEAR(r.fitness, ref["fitness"].get<double>(), tol);
}

}  // namespace
}  // namespace vision::eval
