#include "vision/eval/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "vision/core/error.h"

namespace vision::eval {
namespace {

constexpr double kEps = 1e-16;
constexpr int kCurvePoints = 1000;
constexpr int kApPoints = 101;

// numpy's linspace(start, stop, num): start + i·((stop − start)/(num − 1)), the last point exactly stop.
std::vector<double> linspace(double start, double stop, int num) {
  std::vector<double> y(static_cast<size_t>(num));
  const double step = (stop - start) / (num - 1);
  for (int i = 0; i < num; ++i) y[static_cast<size_t>(i)] = static_cast<double>(i) * step + start;
  y.back() = stop;
  return y;
}

// np.interp(x, xp, fp, left, right) for a nondecreasing xp (see the header comment for the tie rule).
double interp(double x, std::span<const double> xp, std::span<const double> fp, double left, double right) {
  const size_t n = xp.size();
  if (x > xp[n - 1]) return right;
  if (x < xp[0]) return left;
  const size_t j = static_cast<size_t>(std::upper_bound(xp.begin(), xp.end(), x) - xp.begin()) - 1;
  if (j == n - 1 || xp[j] == x) return fp[j];
  const double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
  return slope * (x - xp[j]) + fp[j];
}

}  // namespace

std::array<double, kNumIouThresholds> iou_thresholds() {
  const std::vector<double> t = linspace(0.5, 0.95, kNumIouThresholds);
  std::array<double, kNumIouThresholds> out;
  std::copy(t.begin(), t.end(), out.begin());
  return out;
}

double box_iou(const std::array<float, 4>& a, const std::array<float, 4>& b) {
  const double w = std::max(0.0, std::min<double>(a[2], b[2]) - std::max<double>(a[0], b[0]));
  const double h = std::max(0.0, std::min<double>(a[3], b[3]) - std::max<double>(a[1], b[1]));
  const double inter = w * h;
  const double area_a = (static_cast<double>(a[2]) - a[0]) * (static_cast<double>(a[3]) - a[1]);
  const double area_b = (static_cast<double>(b[2]) - b[0]) * (static_cast<double>(b[3]) - b[1]);
  const double uni = area_a + area_b - inter;
  return uni > 0 ? inter / uni : 0.0;
}

std::vector<std::array<bool, kNumIouThresholds>> match_detections(std::span<const data::Detection> preds,
                                                                   std::span<const GroundTruth> labels) {
  const size_t nd = preds.size(), nl = labels.size();
  std::vector<std::array<bool, kNumIouThresholds>> tp(nd, std::array<bool, kNumIouThresholds>{});
  if (nd == 0 || nl == 0) return tp;
  std::vector<double> iou(nl * nd, 0.0);  // labels × detections, 0 where the classes differ
  for (size_t l = 0; l < nl; ++l)
    for (size_t d = 0; d < nd; ++d)
      if (labels[l].cls == preds[d].cls) iou[l * nd + d] = box_iou(labels[l].box, preds[d].box);
  const auto thresholds = iou_thresholds();
  std::vector<int64_t> best(nd);       // per detection: its kept label, or −1
  std::vector<int64_t> taken(nl);      // per label: its kept detection, or −1
  for (int t = 0; t < kNumIouThresholds; ++t) {
    // Step 1: each detection keeps its first pair in (IoU descending, later (label, detection) first on ties)
    // order: its highest IoU ≥ t, the highest label index on a tie.
    for (size_t d = 0; d < nd; ++d) {
      best[d] = -1;
      double best_iou = 0;
      for (size_t l = 0; l < nl; ++l) {
        const double v = iou[l * nd + d];
        if (v >= thresholds[static_cast<size_t>(t)] && (best[d] < 0 || v >= best_iou)) {
          best[d] = static_cast<int64_t>(l);
          best_iou = v;
        }
      }
    }
    // Step 2: the remaining pairs are in detection order; each label keeps its first: the lowest detection index.
    std::fill(taken.begin(), taken.end(), -1);
    for (size_t d = 0; d < nd; ++d) {
      if (best[d] < 0) continue;
      int64_t& k = taken[static_cast<size_t>(best[d])];
      if (k < 0) {
        k = static_cast<int64_t>(d);
        tp[d][static_cast<size_t>(t)] = true;
      }
    }
  }
  return tp;
}

DetectionMetrics::DetectionMetrics(int64_t nc)
    : nc_(nc), instances_(static_cast<size_t>(std::max<int64_t>(nc, 0)), 0),
      class_images_(static_cast<size_t>(std::max<int64_t>(nc, 0)), 0) {
  VISION_CHECK(nc > 0, "DetectionMetrics: the number of classes must be positive (got {})", nc);
}

void DetectionMetrics::add_image(std::span<const data::Detection> preds, std::span<const GroundTruth> labels) {
  for (const auto& p : preds)
    VISION_CHECK(p.cls >= 0 && p.cls < nc_, "DetectionMetrics: a detection's class {} is outside [0, {})", p.cls, nc_);
  std::vector<bool> seen(static_cast<size_t>(nc_), false);
  for (const auto& g : labels) {
    VISION_CHECK(g.cls >= 0 && g.cls < nc_, "DetectionMetrics: a label's class {} is outside [0, {})", g.cls, nc_);
    ++instances_[static_cast<size_t>(g.cls)];
    seen[static_cast<size_t>(g.cls)] = true;
  }
  for (int64_t c = 0; c < nc_; ++c)
    if (seen[static_cast<size_t>(c)]) ++class_images_[static_cast<size_t>(c)];
  const auto tp = match_detections(preds, labels);
  for (size_t d = 0; d < preds.size(); ++d) records_.push_back({preds[d].score, preds[d].cls, tp[d]});
  ++images_;
}

std::vector<double> smooth_box(std::span<const double> y, double fraction) {
  const size_t n = y.size();
  if (n == 0) return {};
  const auto nf = static_cast<size_t>(std::nearbyint(static_cast<double>(n) * fraction * 2)) / 2 + 1;
  const size_t half = nf / 2;
  std::vector<double> padded;
  padded.reserve(n + 2 * half);
  padded.insert(padded.end(), half, y.front());
  padded.insert(padded.end(), y.begin(), y.end());
  padded.insert(padded.end(), half, y.back());
  const double w = 1.0 / static_cast<double>(nf);
  std::vector<double> out(padded.size() - nf + 1);
  for (size_t i = 0; i < out.size(); ++i) {
    double s = 0;
    for (size_t k = 0; k < nf; ++k) s += padded[i + k] * w;
    out[i] = s;
  }
  return out;
}

namespace {
// The padded recall and its precision envelope: recall [0, r…, 1], precision [1, p…, 0] made non-increasing.
std::pair<std::vector<double>, std::vector<double>> envelope(std::span<const double> recall,
                                                             std::span<const double> precision) {
  std::vector<double> mrec, mpre;
  mrec.reserve(recall.size() + 2);
  mpre.reserve(precision.size() + 2);
  mrec.push_back(0.0);
  mrec.insert(mrec.end(), recall.begin(), recall.end());
  mrec.push_back(1.0);
  mpre.push_back(1.0);
  mpre.insert(mpre.end(), precision.begin(), precision.end());
  mpre.push_back(0.0);
  for (size_t i = mpre.size() - 1; i-- > 0;) mpre[i] = std::max(mpre[i], mpre[i + 1]);  // envelope
  return {mrec, mpre};
}
}  // namespace

double average_precision(std::span<const double> recall, std::span<const double> precision) {
  const auto [mrec, mpre] = envelope(recall, precision);
  const std::vector<double> x = linspace(0.0, 1.0, kApPoints);
  double prev = interp(x[0], mrec, mpre, 0.0, 0.0), ap = 0;
  for (size_t i = 1; i < x.size(); ++i) {
    const double cur = interp(x[i], mrec, mpre, 0.0, 0.0);
    ap += (x[i] - x[i - 1]) * (cur + prev) / 2.0;
    prev = cur;
  }
  return ap;
}

MetricsResult DetectionMetrics::compute() const {
  MetricsResult r;
  r.images = images_;
  for (int64_t c = 0; c < nc_; ++c) {
    if (instances_[static_cast<size_t>(c)] == 0) continue;
    ClassMetrics m;
    m.cls = c;
    m.images = class_images_[static_cast<size_t>(c)];
    m.instances = instances_[static_cast<size_t>(c)];
    r.instances += m.instances;
    r.classes.push_back(m);
  }
  if (r.classes.empty()) return r;

  std::vector<size_t> order(records_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return records_[a].score > records_[b].score; });

  const std::vector<double> conf_grid = linspace(0.0, 1.0, kCurvePoints);
  const size_t nk = r.classes.size();
  std::vector<std::vector<double>> p_curve(nk, std::vector<double>(kCurvePoints, 0.0));
  std::vector<std::vector<double>> r_curve(nk, std::vector<double>(kCurvePoints, 0.0));
  for (size_t k = 0; k < nk; ++k) {
    ClassMetrics& m = r.classes[k];
    std::vector<size_t> idx;
    for (size_t i : order)
      if (records_[i].cls == m.cls) idx.push_back(i);
    m.pr_curve.assign(kPrCurvePoints, 0.0);
    if (idx.empty()) continue;  // AP 0, P = R = 0
    const size_t np = idx.size();
    const double nl = static_cast<double>(m.instances);
    std::vector<double> neg_conf(np), recall(np), precision(np);
    for (size_t j = 0; j < np; ++j) neg_conf[j] = -static_cast<double>(records_[idx[j]].score);
    for (int t = 0; t < kNumIouThresholds; ++t) {
      double tpc = 0;
      for (size_t j = 0; j < np; ++j) {
        tpc += records_[idx[j]].tp[static_cast<size_t>(t)] ? 1.0 : 0.0;
        const double fpc = static_cast<double>(j + 1) - tpc;
        recall[j] = tpc / (nl + kEps);
        precision[j] = tpc / (tpc + fpc);
      }
      m.ap_per_iou[static_cast<size_t>(t)] = average_precision(recall, precision);
      if (t == 0) {
        const auto [mrec, mpre] = envelope(recall, precision);
        const std::vector<double> rx = linspace(0.0, 1.0, kPrCurvePoints);
        m.pr_curve.resize(kPrCurvePoints);
        for (int i = 0; i < kPrCurvePoints; ++i)
          m.pr_curve[static_cast<size_t>(i)] = interp(rx[static_cast<size_t>(i)], mrec, mpre, 0.0, 0.0);
        for (int i = 0; i < kCurvePoints; ++i) {
          const double x = -conf_grid[static_cast<size_t>(i)];
          r_curve[k][static_cast<size_t>(i)] = interp(x, neg_conf, recall, 0.0, recall.back());
          p_curve[k][static_cast<size_t>(i)] = interp(x, neg_conf, precision, 1.0, precision.back());
        }
      }
    }
  }

  std::vector<double> mean_f1(kCurvePoints, 0.0);
  for (int i = 0; i < kCurvePoints; ++i) {
    double s = 0;
    for (size_t k = 0; k < nk; ++k) {
      const double p = p_curve[k][static_cast<size_t>(i)], rc = r_curve[k][static_cast<size_t>(i)];
      s += 2 * p * rc / (p + rc + kEps);
    }
    mean_f1[static_cast<size_t>(i)] = s / static_cast<double>(nk);
  }
  const std::vector<double> smoothed = smooth_box(mean_f1, 0.1);
  const auto best = static_cast<size_t>(std::max_element(smoothed.begin(), smoothed.end()) - smoothed.begin());
  r.best_index = static_cast<int64_t>(best);
  r.best_confidence = conf_grid[best];

  double sp = 0, sr = 0, s50 = 0, sall = 0;
  for (size_t k = 0; k < nk; ++k) {
    ClassMetrics& m = r.classes[k];
    m.precision = p_curve[k][best];
    m.recall = r_curve[k][best];
    m.ap50 = m.ap_per_iou[0];
    double s = 0;
    for (double a : m.ap_per_iou) s += a;
    m.ap = s / kNumIouThresholds;
    sp += m.precision;
    sr += m.recall;
    s50 += m.ap50;
    sall += s;
  }
  const double n = static_cast<double>(nk);
  r.mp = sp / n;
  r.mr = sr / n;
  r.map50 = s50 / n;
  r.map = sall / (n * kNumIouThresholds);
  r.fitness = 0.1 * r.map50 + 0.9 * r.map;
  return r;
}

std::string format_table(const MetricsResult& result, std::span<const std::string> names, bool per_class) {
  std::string out = fmt::format("{:>22}{:>11}{:>11}{:>11}{:>11}{:>11}{:>11}\n", "Class", "Images", "Instances", "Box(P",
                                "R", "mAP50", "mAP50-95)");
  auto row = [&](const std::string& name, int64_t images, int64_t instances, double p, double r, double m50,
                 double m) {
    out += fmt::format("{:>22}{:>11}{:>11}{:>11.3g}{:>11.3g}{:>11.3g}{:>11.3g}\n", name, images, instances, p, r, m50,
                       m);
  };
  row("all", result.images, result.instances, result.mp, result.mr, result.map50, result.map);
  if (per_class) {
    for (const ClassMetrics& c : result.classes) {
      const std::string name = c.cls < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(c.cls)]
                                                                          : std::to_string(c.cls);
      row(name, c.images, c.instances, c.precision, c.recall, c.ap50, c.ap);
    }
  }
  return out;
}

}  // namespace vision::eval
