// A float64 reference of the task-aligned assigner, written from YOLO26.md's words (Loss: TaskAlignedAssigner, STAL,
// topk2, CIoU, ties toward the lower anchor index) independently of the twin: top-k by a full stable sort over all
// anchors, topk2 likewise. It also reports which gts have a decision within rounding of a tie (fragile), where the f32
// twin may legitimately decide the other way; tests compare the rest exactly. And random cases for the tests.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <numeric>
#include <random>
#include <vector>

#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/kernels/loss/assigner.h"

namespace vision::test {

struct AssignerCase {
  int64_t batch = 0, n_classes = 0, n_anchors = 0, n_max = 0;
  std::vector<float> logits, boxes, anchors, targets;  // [B, nc, A], [B, 4, A] grid units, [3, A], [B, M, 5]
  std::vector<int32_t> count;                          // [B]
};

struct AssignerOutputs {
  std::vector<float> target_boxes, target_scores;
  std::vector<uint8_t> fg_mask;
  std::vector<int32_t> gt_index;
};

struct ReferenceAssignment {
  AssignerOutputs out;
  std::vector<uint8_t> fragile;         // [B, M]
  std::vector<uint8_t> fragile_anchor;  // [B, A]
};

// CIoU of xyxy boxes as YOLO26.md writes it, in float64.
inline double reference_ciou(const std::array<double, 4>& b1, const std::array<double, 4>& b2) {
  const double eps = 1e-7;
  const double w1 = b1[2] - b1[0], h1 = b1[3] - b1[1] + eps, w2 = b2[2] - b2[0], h2 = b2[3] - b2[1] + eps;
  const double inter = std::max(std::min(b1[2], b2[2]) - std::max(b1[0], b2[0]), 0.0) *
                       std::max(std::min(b1[3], b2[3]) - std::max(b1[1], b2[1]), 0.0);
  const double uni = w1 * h1 + w2 * h2 - inter + eps;
  const double iou = inter / uni;
  const double cw = std::max(b1[2], b2[2]) - std::min(b1[0], b2[0]);
  const double ch = std::max(b1[3], b2[3]) - std::min(b1[1], b2[1]);
  const double c2 = cw * cw + ch * ch + eps;
  const double rho2 = (std::pow(b2[0] + b2[2] - b1[0] - b1[2], 2) + std::pow(b2[1] + b2[3] - b1[1] - b1[3], 2)) / 4;
  const double v = 4 / (std::numbers::pi * std::numbers::pi) * std::pow(std::atan(w2 / h2) - std::atan(w1 / h1), 2);
  const double alpha = v / (v - iou + 1 + eps);
  return iou - (rho2 / c2 + v * alpha);
}

namespace assigner_detail {

// Two values of one ranking closer than f32 can tell apart (or one of them lost to f32 underflow).
inline bool near(double x, double y) {
  if (x == 0 && y == 0) return false;
  const double hi = std::max(std::fabs(x), std::fabs(y));
  return hi < 1e-30 || std::fabs(x - y) <= 1e-4 * hi;
}

// Indices of all anchors sorted by value descending, ties to the lower index (a stable sort of 0..A-1).
inline std::vector<int64_t> ranking(const std::vector<double>& value) {
  std::vector<int64_t> order(value.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return value[a] > value[b]; });
  return order;
}

}  // namespace assigner_detail

inline ReferenceAssignment reference_assign(const AssignerCase& c,
                                            const models::yolo::kernels::loss::AssignerOptions& o) {
  using assigner_detail::near;
  const int64_t B = c.batch, A = c.n_anchors, nc = c.n_classes, M = c.n_max;
  ReferenceAssignment r;
  r.out.target_boxes.assign(static_cast<size_t>(B * 4 * A), 0.0f);
  r.out.target_scores.assign(static_cast<size_t>(B * nc * A), 0.0f);
  r.out.fg_mask.assign(static_cast<size_t>(B * A), 0);
  r.out.gt_index.assign(static_cast<size_t>(B * A), -1);
  r.fragile.assign(static_cast<size_t>(B * M), 0);
  r.fragile_anchor.assign(static_cast<size_t>(B * A), 0);
  const int64_t k = std::min<int64_t>(o.topk, A);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t G = c.count[static_cast<size_t>(b)];
    auto target = [&](int64_t g, int q) {
      return static_cast<double>(c.targets[static_cast<size_t>((b * M + g) * 5 + q)]);
    };
    // mask_pos as claims: per gt, the anchors of its top k that are candidates, with align and overlap.
    std::vector<std::vector<int64_t>> claims(static_cast<size_t>(G));
    std::vector<std::vector<double>> align(static_cast<size_t>(G)), overlap(static_cast<size_t>(G));
    for (int64_t g = 0; g < G; ++g) {
      uint8_t& fragile = r.fragile[static_cast<size_t>(b * M + g)];
      const std::array<double, 4> gt = {target(g, 1), target(g, 2), target(g, 3), target(g, 4)};
      const auto cls = static_cast<int64_t>(target(g, 0));
      // STAL: a side shorter than 8 px becomes 16 px about the centre, for the candidate test only.
      std::array<double, 4> region{};
      for (int d = 0; d < 2; ++d) {
        const double centre = (gt[d] + gt[d + 2]) / 2;
        double side = gt[d + 2] - gt[d];
        if (std::fabs(side - o.small_side) < 1e-3) fragile = 1;
        if (side < o.small_side) side = o.widened_side;
        region[d] = centre - side / 2;
        region[d + 2] = centre + side / 2;
      }
      std::vector<double>& al = align[static_cast<size_t>(g)];
      std::vector<double>& ov = overlap[static_cast<size_t>(g)];
      al.assign(static_cast<size_t>(A), 0.0);
      ov.assign(static_cast<size_t>(A), 0.0);
      std::vector<uint8_t> candidate(static_cast<size_t>(A), 0);
      for (int64_t a = 0; a < A; ++a) {
        const double s = c.anchors[static_cast<size_t>(2 * A + a)];
        const double x = c.anchors[static_cast<size_t>(a)] * s, y = c.anchors[static_cast<size_t>(A + a)] * s;
        const double dmin = std::min({x - region[0], y - region[1], region[2] - x, region[3] - y});
        if (std::fabs(dmin) < 1e-3) fragile = 1;
        if (!(dmin > o.eps)) continue;
        candidate[static_cast<size_t>(a)] = 1;
        std::array<double, 4> pred{};
        for (int q = 0; q < 4; ++q) pred[q] = c.boxes[static_cast<size_t>((b * 4 + q) * A + a)] * s;
        const double ciou = reference_ciou(gt, pred);
        ov[static_cast<size_t>(a)] = std::max(ciou, 0.0);
        if (std::fabs(ciou) < 1e-5) fragile = 1;
        const double score =
            1 / (1 + std::exp(-static_cast<double>(c.logits[static_cast<size_t>((b * nc + cls) * A + a)])));
        al[static_cast<size_t>(a)] = std::pow(score, o.alpha) * std::pow(ov[static_cast<size_t>(a)], o.beta);
      }
      const std::vector<int64_t> order = assigner_detail::ranking(al);
      if (k < A && near(al[static_cast<size_t>(order[k - 1])], al[static_cast<size_t>(order[k])])) fragile = 1;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t a = order[static_cast<size_t>(j)];
        if (candidate[static_cast<size_t>(a)]) claims[static_cast<size_t>(g)].push_back(a);
        if (al[static_cast<size_t>(a)] > 0 && al[static_cast<size_t>(a)] < 1e-30) fragile = 1;
      }
    }
    // Shared anchors, as ultralytics' select_highest_overlaps: an anchor claimed by one gt stays with it; one claimed
    // by two or more goes to the argmax over ALL gts of the overlap (0 off a gt's candidates), the first maximum (gt 0
    // when every overlap is 0), whether or not that gt claimed it.
    std::vector<int64_t> claimers(static_cast<size_t>(A), 0), owner(static_cast<size_t>(A), -1);
    for (int64_t g = 0; g < G; ++g)
      for (int64_t a : claims[static_cast<size_t>(g)]) {
        ++claimers[static_cast<size_t>(a)];
        owner[static_cast<size_t>(a)] = g;
      }
    for (int64_t a = 0; a < A; ++a) {
      if (claimers[static_cast<size_t>(a)] < 2) continue;
      int64_t w = 0, second = -1;
      for (int64_t g = 1; g < G; ++g) {
        const double og = overlap[static_cast<size_t>(g)][static_cast<size_t>(a)];
        if (og > overlap[static_cast<size_t>(w)][static_cast<size_t>(a)]) {
          second = w;
          w = g;
        } else if (second < 0 || og > overlap[static_cast<size_t>(second)][static_cast<size_t>(a)]) {
          second = g;
        }
      }
      owner[static_cast<size_t>(a)] = w;
      if (second >= 0 && near(overlap[static_cast<size_t>(w)][static_cast<size_t>(a)],
                              overlap[static_cast<size_t>(second)][static_cast<size_t>(a)])) {
        r.fragile[static_cast<size_t>(b * M + w)] = r.fragile[static_cast<size_t>(b * M + second)] = 1;
        r.fragile_anchor[static_cast<size_t>(b * A + a)] = 1;
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      std::vector<int64_t> pos;
      for (int64_t a = 0; a < A; ++a)
        if (owner[static_cast<size_t>(a)] == g) pos.push_back(a);
      if (o.topk2 > 0 && o.topk2 != o.topk) {
        // Each gt keeps its top topk2 of align · mask_pos over all anchors.
        std::vector<double> masked(static_cast<size_t>(A), 0.0);
        for (int64_t a : pos) masked[static_cast<size_t>(a)] = align[static_cast<size_t>(g)][static_cast<size_t>(a)];
        const std::vector<int64_t> order = assigner_detail::ranking(masked);
        if (o.topk2 < A &&
            near(masked[static_cast<size_t>(order[o.topk2 - 1])], masked[static_cast<size_t>(order[o.topk2])]))
          r.fragile[static_cast<size_t>(b * M + g)] = 1;
        std::vector<int64_t> kept;
        for (int64_t j = 0; j < o.topk2; ++j)
          if (std::find(pos.begin(), pos.end(), order[static_cast<size_t>(j)]) != pos.end())
            kept.push_back(order[static_cast<size_t>(j)]);
        pos = kept;
      }
      double max_align = 0, max_overlap = 0;
      for (int64_t a : pos) {
        max_align = std::max(max_align, align[static_cast<size_t>(g)][static_cast<size_t>(a)]);
        max_overlap = std::max(max_overlap, overlap[static_cast<size_t>(g)][static_cast<size_t>(a)]);
      }
      const auto cls = static_cast<int64_t>(target(g, 0));
      for (int64_t a : pos) {
        const double s = c.anchors[static_cast<size_t>(2 * A + a)];
        r.out.gt_index[static_cast<size_t>(b * A + a)] = static_cast<int32_t>(g);
        r.out.fg_mask[static_cast<size_t>(b * A + a)] = 1;
        for (int q = 0; q < 4; ++q)
          r.out.target_boxes[static_cast<size_t>((b * 4 + q) * A + a)] = static_cast<float>(target(g, 1 + q) / s);
        r.out.target_scores[static_cast<size_t>((b * nc + cls) * A + a)] = static_cast<float>(
            align[static_cast<size_t>(g)][static_cast<size_t>(a)] * max_overlap / (max_align + o.eps));
      }
    }
  }
  return r;
}

// A random batch on an H×W input: count[b] uniform in [min_boxes, max_boxes] (≤ m) boxes per image, classes in
// [0, nc), sides log-uniform in [3, min(H, W) / 3] px (so some are STAL-widened); rows past the count hold garbage.
// Each anchor predicts the box of the gt whose centre is nearest, each coordinate jittered by N(0, 0.15 · side) (30% of
// anchors a random box instead), so alignments are not all zero; logits uniform in [−4, 4].
template <typename Rng>
AssignerCase random_assigner_case(int64_t batch, int64_t h, int64_t w, int64_t nc, int64_t m, int64_t min_boxes,
                                  int64_t max_boxes, Rng& rng) {
  AssignerCase c;
  c.batch = batch, c.n_classes = nc, c.n_max = m;
  c.anchors = models::yolo::kernels::detect_anchor_grid(h, w);
  const auto A = static_cast<int64_t>(c.anchors.size() / 3);
  c.n_anchors = A;
  std::uniform_real_distribution<double> u01(0, 1);
  std::uniform_real_distribution<float> ulogit(-4, 4);
  c.logits.resize(static_cast<size_t>(batch * nc * A));
  for (auto& x : c.logits) x = ulogit(rng);
  c.boxes.resize(static_cast<size_t>(batch * 4 * A));
  c.targets.resize(static_cast<size_t>(batch * m * 5));
  c.count.resize(static_cast<size_t>(batch));
  const double max_side = static_cast<double>(std::min(h, w)) / 3;
  for (int64_t b = 0; b < batch; ++b) {
    const auto n = static_cast<int64_t>(
        min_boxes +
        std::min<int64_t>(max_boxes - min_boxes, static_cast<int64_t>(u01(rng) * (max_boxes - min_boxes + 1))));
    c.count[static_cast<size_t>(b)] = static_cast<int32_t>(n);
    for (int64_t g = 0; g < m; ++g) {
      float* row = c.targets.data() + (b * m + g) * 5;
      if (g >= n) {
        row[0] = 1e6f, row[1] = -5, row[2] = 7, row[3] = 3, row[4] = 1e9f;  // garbage past the count
        continue;
      }
      row[0] = static_cast<float>(std::min<int64_t>(nc - 1, static_cast<int64_t>(u01(rng) * nc)));
      const double bw = 3 * std::pow(max_side / 3, u01(rng)), bh = 3 * std::pow(max_side / 3, u01(rng));
      const double x1 = u01(rng) * (static_cast<double>(w) - bw), y1 = u01(rng) * (static_cast<double>(h) - bh);
      row[1] = static_cast<float>(x1), row[2] = static_cast<float>(y1);
      row[3] = static_cast<float>(x1 + bw), row[4] = static_cast<float>(y1 + bh);
    }
    for (int64_t a = 0; a < A; ++a) {
      const double s = c.anchors[static_cast<size_t>(2 * A + a)];
      const double x = c.anchors[static_cast<size_t>(a)] * s, y = c.anchors[static_cast<size_t>(A + a)] * s;
      std::array<double, 4> p{};
      if (n == 0 || u01(rng) < 0.3) {
        const double cx = u01(rng) * w, cy = u01(rng) * h, bw = 4 + u01(rng) * max_side, bh = 4 + u01(rng) * max_side;
        p = {cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2};
      } else {
        int64_t best = 0;
        double best_d = INFINITY;
        for (int64_t g = 0; g < n; ++g) {
          const float* row = c.targets.data() + (b * m + g) * 5;
          const double dx = (row[1] + row[3]) / 2 - x, dy = (row[2] + row[4]) / 2 - y;
          if (dx * dx + dy * dy < best_d) best_d = dx * dx + dy * dy, best = g;
        }
        const float* row = c.targets.data() + (b * m + best) * 5;
        std::normal_distribution<double> jx(0, 0.15 * (row[3] - row[1])), jy(0, 0.15 * (row[4] - row[2]));
        p = {row[1] + jx(rng), row[2] + jy(rng), row[3] + jx(rng), row[4] + jy(rng)};
        if (p[2] < p[0]) std::swap(p[0], p[2]);
        if (p[3] < p[1]) std::swap(p[1], p[3]);
      }
      for (int q = 0; q < 4; ++q) c.boxes[static_cast<size_t>((b * 4 + q) * A + a)] = static_cast<float>(p[q] / s);
    }
  }
  return c;
}

}  // namespace vision::test
