#include "vision/track/mot_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "vision/core/error.h"
#include "vision/track/assignment.h"

namespace vision::track {

namespace {

constexpr double kEps = std::numeric_limits<double>::epsilon();

struct Frame {
  std::vector<int64_t> gt, tr;              // dense ids
  std::vector<std::array<double, 4>> gt_box, tr_box;
  std::vector<double> iou;                  // gt × tr
};

double box_iou(const std::array<double, 4>& a, const std::array<double, 4>& b) {
  const double iw = std::max(0.0, std::min(a[2], b[2]) - std::max(a[0], b[0]));
  const double ih = std::max(0.0, std::min(a[3], b[3]) - std::max(a[1], b[1]));
  const double inter = iw * ih;
  const double uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return uni > 0 ? inter / uni : 0.0;
}

// Dense ids of the boxes' ids (in ascending order), and a check of each box.
std::map<int64_t, int64_t> dense_ids(const std::vector<MotBox>& boxes, const char* what) {
  std::map<int64_t, int64_t> ids;
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const MotBox& b : boxes) {
    VISION_CHECK_INPUT(b.frame >= 1, "MOT {}: frame {} (frames count from 1)", what, b.frame);
    VISION_CHECK_INPUT(std::all_of(b.xyxy.begin(), b.xyxy.end(), [](double v) { return std::isfinite(v); }) &&
                           b.xyxy[2] > b.xyxy[0] && b.xyxy[3] > b.xyxy[1],
                       "MOT {}: frame {} id {} has a box of non-positive size or a non-finite coordinate", what,
                       b.frame, b.id);
    VISION_CHECK_INPUT(seen.emplace(b.frame, b.id).second, "MOT {}: id {} appears twice in frame {}", what, b.id,
                       b.frame);
    ids.emplace(b.id, 0);
  }
  int64_t next = 0;
  for (auto& [id, dense] : ids) dense = next++;
  return ids;
}

// The matching of one frame's gt (rows) and tracks (columns) maximising score (pairs of score ≤ 0 never made).
std::vector<std::pair<int64_t, int64_t>> best_matching(const std::vector<double>& score, size_t rows, size_t cols) {
  std::vector<double> cost(score.size());
  for (size_t i = 0; i < score.size(); ++i) cost[i] = -score[i];
  return linear_assignment(cost, static_cast<int64_t>(rows), static_cast<int64_t>(cols), 0.0).matches;
}

}  // namespace

MotMetrics evaluate_mot(const std::vector<MotBox>& gt, const std::vector<MotBox>& tracker) {
  const std::map<int64_t, int64_t> gid = dense_ids(gt, "ground truth"), tid = dense_ids(tracker, "tracks");
  const size_t g_n = gid.size(), t_n = tid.size();
  int64_t last_frame = 0;
  for (const auto* list : {&gt, &tracker})
    for (const MotBox& b : *list) last_frame = std::max(last_frame, b.frame);
  std::vector<Frame> frames(static_cast<size_t>(last_frame));
  for (const MotBox& b : gt) {
    Frame& f = frames[static_cast<size_t>(b.frame - 1)];
    f.gt.push_back(gid.at(b.id)), f.gt_box.push_back(b.xyxy);
  }
  for (const MotBox& b : tracker) {
    Frame& f = frames[static_cast<size_t>(b.frame - 1)];
    f.tr.push_back(tid.at(b.id)), f.tr_box.push_back(b.xyxy);
  }
  for (Frame& f : frames) {
    f.iou.resize(f.gt.size() * f.tr.size());
    for (size_t i = 0; i < f.gt.size(); ++i)
      for (size_t j = 0; j < f.tr.size(); ++j) f.iou[i * f.tr.size() + j] = box_iou(f.gt_box[i], f.tr_box[j]);
  }

  MotMetrics m;
  m.gt_dets = static_cast<int64_t>(gt.size()), m.tracker_dets = static_cast<int64_t>(tracker.size());
  m.gt_ids = static_cast<int64_t>(g_n), m.tracker_ids = static_cast<int64_t>(t_n);

  // CLEAR.
  constexpr double kThreshold = 0.5;
  std::vector<int64_t> prev_tracker(g_n, -1), prev_step_tracker(g_n, -1);
  double motp_sum = 0;
  for (const Frame& f : frames) {
    if (f.gt.empty()) {
      m.fp += static_cast<int64_t>(f.tr.size());
      continue;
    }
    if (f.tr.empty()) {
      m.fn += static_cast<int64_t>(f.gt.size());
      continue;
    }
    const size_t cols = f.tr.size();
    std::vector<double> score(f.iou.size());
    for (size_t i = 0; i < f.gt.size(); ++i)
      for (size_t j = 0; j < cols; ++j) {
        const double sim = f.iou[i * cols + j];
        const bool continued = prev_step_tracker[static_cast<size_t>(f.gt[i])] == f.tr[j];
        score[i * cols + j] = sim < kThreshold - kEps ? 0.0 : 1000.0 * continued + sim;
      }
    std::vector<std::pair<int64_t, int64_t>> matched;
    for (const auto& [i, j] : best_matching(score, f.gt.size(), cols))
      if (score[static_cast<size_t>(i) * cols + static_cast<size_t>(j)] > kEps) matched.emplace_back(i, j);
    for (const auto& [i, j] : matched) {
      const int64_t g = f.gt[static_cast<size_t>(i)], t = f.tr[static_cast<size_t>(j)];
      if (prev_tracker[static_cast<size_t>(g)] >= 0 && prev_tracker[static_cast<size_t>(g)] != t) ++m.idsw;
      prev_tracker[static_cast<size_t>(g)] = t;
      motp_sum += f.iou[static_cast<size_t>(i) * cols + static_cast<size_t>(j)];
    }
    std::fill(prev_step_tracker.begin(), prev_step_tracker.end(), -1);
    for (const auto& [i, j] : matched) prev_step_tracker[static_cast<size_t>(f.gt[static_cast<size_t>(i)])] = f.tr[static_cast<size_t>(j)];
    const auto n = static_cast<int64_t>(matched.size());
    m.tp += n, m.fn += static_cast<int64_t>(f.gt.size()) - n, m.fp += static_cast<int64_t>(f.tr.size()) - n;
  }
  m.mota = static_cast<double>(m.tp - m.fp - m.idsw) / static_cast<double>(std::max<int64_t>(1, m.gt_dets));
  m.motp = motp_sum / static_cast<double>(std::max<int64_t>(1, m.tp));

  // Identity: a global matching of ids by the frames they overlap at IoU ≥ 0.5.
  std::vector<double> overlap(g_n * t_n, 0.0);
  for (const Frame& f : frames)
    for (size_t i = 0; i < f.gt.size(); ++i)
      for (size_t j = 0; j < f.tr.size(); ++j)
        if (f.iou[i * f.tr.size() + j] >= kThreshold - kEps)
          overlap[static_cast<size_t>(f.gt[i]) * t_n + static_cast<size_t>(f.tr[j])] += 1;
  double idtp = 0;
  for (const auto& [i, j] : best_matching(overlap, g_n, t_n))
    idtp += overlap[static_cast<size_t>(i) * t_n + static_cast<size_t>(j)];
  m.idtp = static_cast<int64_t>(std::llround(idtp));
  m.idfn = m.gt_dets - m.idtp, m.idfp = m.tracker_dets - m.idtp;
  m.idf1 = static_cast<double>(m.idtp) / std::max(1.0, static_cast<double>(m.idtp) + 0.5 * static_cast<double>(m.idfp) +
                                                           0.5 * static_cast<double>(m.idfn));
  m.idr = static_cast<double>(m.idtp) / static_cast<double>(std::max<int64_t>(1, m.idtp + m.idfn));
  m.idp = static_cast<double>(m.idtp) / static_cast<double>(std::max<int64_t>(1, m.idtp + m.idfp));

  // HOTA: the global alignment score of each id pair, then per α the per-frame matchings.
  std::vector<double> potential(g_n * t_n, 0.0), gt_count(g_n, 0.0), tr_count(t_n, 0.0);
  for (const Frame& f : frames) {
    const size_t rows = f.gt.size(), cols = f.tr.size();
    std::vector<double> row_sum(rows, 0.0), col_sum(cols, 0.0);
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j) row_sum[i] += f.iou[i * cols + j], col_sum[j] += f.iou[i * cols + j];
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j) {
        const double denom = row_sum[i] + col_sum[j] - f.iou[i * cols + j];
        if (denom > kEps)
          potential[static_cast<size_t>(f.gt[i]) * t_n + static_cast<size_t>(f.tr[j])] += f.iou[i * cols + j] / denom;
      }
    for (int64_t g : f.gt) gt_count[static_cast<size_t>(g)] += 1;
    for (int64_t t : f.tr) tr_count[static_cast<size_t>(t)] += 1;
  }
  std::vector<double> alignment(g_n * t_n, 0.0);
  for (size_t g = 0; g < g_n; ++g)
    for (size_t t = 0; t < t_n; ++t) {
      const double p = potential[g * t_n + t];
      alignment[g * t_n + t] = p / (gt_count[g] + tr_count[t] - p);
    }
  constexpr size_t kAlphas = 19;
  std::array<double, kAlphas> tp = {}, fn = {}, fp = {}, loc = {};
  std::vector<std::vector<double>> matches(kAlphas, std::vector<double>(g_n * t_n, 0.0));
  for (const Frame& f : frames) {
    const size_t rows = f.gt.size(), cols = f.tr.size();
    if (rows == 0 || cols == 0) {
      for (size_t a = 0; a < kAlphas; ++a) fp[a] += static_cast<double>(cols), fn[a] += static_cast<double>(rows);
      continue;
    }
    std::vector<double> score(rows * cols);
    for (size_t i = 0; i < rows; ++i)
      for (size_t j = 0; j < cols; ++j)
        score[i * cols + j] =
            alignment[static_cast<size_t>(f.gt[i]) * t_n + static_cast<size_t>(f.tr[j])] * f.iou[i * cols + j];
    const auto pairs = best_matching(score, rows, cols);
    for (size_t a = 0; a < kAlphas; ++a) {
      const double alpha = 0.05 * static_cast<double>(a + 1);
      double n = 0;
      for (const auto& [i, j] : pairs) {
        const double sim = f.iou[static_cast<size_t>(i) * cols + static_cast<size_t>(j)];
        if (sim < alpha - kEps) continue;
        n += 1, loc[a] += sim;
        matches[a][static_cast<size_t>(f.gt[static_cast<size_t>(i)]) * t_n + static_cast<size_t>(f.tr[static_cast<size_t>(j)])] += 1;
      }
      tp[a] += n, fn[a] += static_cast<double>(rows) - n, fp[a] += static_cast<double>(cols) - n;
    }
  }
  for (size_t a = 0; a < kAlphas; ++a) {
    double ass = 0;
    for (size_t g = 0; g < g_n; ++g)
      for (size_t t = 0; t < t_n; ++t) {
        const double c = matches[a][g * t_n + t];
        if (c > 0) ass += c * c / std::max(1.0, gt_count[g] + tr_count[t] - c);
      }
    const double assa = ass / std::max(1.0, tp[a]);
    const double deta = tp[a] / std::max(1.0, tp[a] + fn[a] + fp[a]);
    const double loca = std::max(1e-10, loc[a]) / std::max(1e-10, tp[a]);
    m.hota_alpha[a] = std::sqrt(deta * assa);
    m.hota += m.hota_alpha[a] / kAlphas, m.deta += deta / kAlphas, m.assa += assa / kAlphas, m.loca += loca / kAlphas;
  }
  return m;
}

std::vector<MotBox> read_mot_file(const std::filesystem::path& path, bool ground_truth) {
  std::ifstream in(path);
  VISION_CHECK_INPUT(in.good(), "MOT file {}: cannot be opened", path.string());
  std::vector<MotBox> boxes;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream s(line);
    double frame = 0, id = 0, left = 0, top = 0, width = 0, height = 0, conf = 1;
    VISION_CHECK_INPUT(static_cast<bool>(s >> frame >> id >> left >> top >> width >> height),
                       "MOT file {}:{}: expected frame, id, left, top, width, height", path.string(), n);
    if (!(s >> conf)) conf = 1;
    VISION_CHECK_INPUT(std::isfinite(frame) && frame == std::floor(frame) && frame >= 1 && frame < 1e9 &&
                           std::isfinite(id) && id == std::floor(id) && std::abs(id) < 1e15,
                       "MOT file {}:{}: the frame and id must be whole numbers (frames from 1)", path.string(), n);
    VISION_CHECK_INPUT(std::isfinite(left) && std::isfinite(top) && std::isfinite(width) && std::isfinite(height) &&
                           width > 0 && height > 0,
                       "MOT file {}:{}: the box needs a positive width and height", path.string(), n);
    if (ground_truth && conf == 0) continue;  // not to be considered
    boxes.push_back({.frame = static_cast<int64_t>(frame), .id = static_cast<int64_t>(id),
                     .xyxy = {left, top, left + width, top + height}});
  }
  return boxes;
}

}  // namespace vision::track
