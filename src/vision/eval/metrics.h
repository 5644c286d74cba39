// Detection metrics of `vision val`: matching of detections to ground truth at the ten IoU thresholds
// 0.50:0.05:0.95, per-class AP (101-point trapezoid of the precision envelope), P and R at the confidence of the best
// smoothed mean F1, mAP50, mAP50-95 and fitness, as YOLO26.md "Metrics" states ultralytics computes them.
//
// Usage: DetectionMetrics m(nc); for each image m.add_image(detections, labels); then m.compute() (any number of
// times; it does not change the accumulator) and format_table(result, names).
//
// Choices where YOLO26.md is silent (tools/reference/detection_metrics.py makes the same ones):
// * IoU in double from the float boxes, no epsilon: inter / (area_a + area_b − inter), 0 when the union is 0.
//   Thresholds are numpy's float64 linspace(0.5, 0.95, 10) (0.5 + i·(0.45/9), the last exactly 0.95).
// * Matching ties. Pairs (label l, detection d) with IoU ≥ t are sorted by IoU descending; among equal IoUs the pair
//   that comes later in row-major (label, detection) order comes first — what a stable ascending sort reversed gives,
//   and what numpy's default argsort (kind 'quicksort', no promise on ties; stable insertion sort below 17 elements
//   on the non-SIMD path) followed by [::-1] gives for small inputs. Then each detection keeps its first pair (its best
//   IoU; on a tie the higher label index), which leaves the pairs in detection order, and each label keeps its first
//   remaining pair: the surviving pair with the LOWEST DETECTION INDEX, not the highest IoU. The order of the
//   detections given to add_image therefore matters: pass them as the detector returns them (score descending, as
//   ultralytics' NMS output is).
// * Confidence ties: the detections of all images are sorted by score descending with a stable sort (ties keep the
//   order of add_image calls and, within an image, the given order); numpy's default argsort(-conf) is unstable.
// * np.interp semantics are reproduced exactly: for x in [xp.front, xp.back], j = the last index with xp[j] <= x;
//   the value is fp[j] when xp[j] == x or j is the last index, else fp[j] + slope·(x − xp[j]).
//   Hence a perfect class has AP 0.995, not 1: the padded recall ends [..., 1, 1] and the envelope at recall 1.0 is
//   the padding's 0, so the last trapezoid [0.99, 1] counts half (ultralytics' well-known 0.995).
// * P/R curves (IoU 0.5 column) on 1000 confidences linspace(0, 1, 1000): recall(c) and precision(c) interpolated
//   over −score (left = 0 for recall, 1 for precision; right = the last value), F1 = 2PR / (P + R + 1e−16), mean over
//   the classes present in the labels (a class without detections contributes 0).
// * The 10% box filter: width nf = round(0.1·n·2) // 2 + 1 (= 101 for n = 1000, odd so it is centred), the curve
//   padded with nf // 2 copies of its first and last values, then the mean of each window of nf (valid convolution
//   with weights 1/nf): the result has n points. The best index is the first maximum of the smoothed mean F1.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vision/data/detection.h"

namespace vision::eval {

inline constexpr int kNumIouThresholds = 10;

// One ground-truth object: its box (x1, y1, x2, y2, the same pixels as the detections') and class.
using GroundTruth = data::GroundTruth;

// The ten IoU thresholds, numpy's float64 linspace(0.5, 0.95, 10).
std::array<double, kNumIouThresholds> iou_thresholds();

// IoU of two x1,y1,x2,y2 boxes in double (no epsilon; 0 when the union is empty).
double box_iou(const std::array<float, 4>& a, const std::array<float, 4>& b);

// Per detection: true positive at each threshold. preds in the detector's order (see the header comment).
std::vector<std::array<bool, kNumIouThresholds>> match_detections(std::span<const data::Detection> preds,
                                                                   std::span<const GroundTruth> labels);

struct ClassMetrics {
  int64_t cls = 0;
  int64_t images = 0;     // images with at least one label of this class
  int64_t instances = 0;  // labels of this class
  double precision = 0;   // at the best smoothed-mean-F1 confidence
  double recall = 0;
  double ap50 = 0;
  double ap = 0;  // AP50-95: the mean of ap_per_iou
  std::array<double, kNumIouThresholds> ap_per_iou = {};
  // The precision-recall curve at IoU 0.5 (what ultralytics plots): the precision envelope of the padded curve (see
  // average_precision) at kPrCurvePoints recalls linspace(0, 1); all 0 for a class without detections.
  std::vector<double> pr_curve;
};
inline constexpr int kPrCurvePoints = 1000;

struct MetricsResult {
  std::vector<ClassMetrics> classes;  // the classes present in the labels, ascending
  int64_t images = 0;                 // images added
  int64_t instances = 0;              // labels added
  double mp = 0, mr = 0, map50 = 0, map = 0;
  double fitness = 0;         // 0.1·map50 + 0.9·map
  int64_t best_index = 0;     // index of the max smoothed mean F1 among the 1000 confidences
  double best_confidence = 0; // linspace(0, 1, 1000)[best_index]
};

class DetectionMetrics {
 public:
  explicit DetectionMetrics(int64_t nc);

  // One image: its detections (classes in [0, nc)) and its labels (classes in [0, nc)). Either may be empty.
  void add_image(std::span<const data::Detection> preds, std::span<const GroundTruth> labels);

  MetricsResult compute() const;

  int64_t nc() const { return nc_; }
  int64_t images() const { return images_; }

 private:
  struct Record {
    float score;
    int64_t cls;
    std::array<bool, kNumIouThresholds> tp;
  };
  int64_t nc_;
  int64_t images_ = 0;
  std::vector<Record> records_;
  std::vector<int64_t> instances_;     // per class
  std::vector<int64_t> class_images_;  // per class
};

// The 10% box filter of the F1 curve (see the header comment), exposed for the tests.
std::vector<double> smooth_box(std::span<const double> y, double fraction = 0.1);

// AP of one class at one threshold from its cumulative recall and precision (detections by score descending).
double average_precision(std::span<const double> recall, std::span<const double> precision);

// The validation table, ultralytics' layout: a header, the "all" row, then (per_class) one row per class present.
// names[c] names class c when given (else the index).
std::string format_table(const MetricsResult& result, std::span<const std::string> names = {}, bool per_class = true);

}  // namespace vision::eval
