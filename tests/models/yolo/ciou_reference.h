// Float64 reference of YOLO26's CIoU (YOLO26.md, Loss; eps 1e-7 on the height only) and random box sets for the
// CIoU loss tests (CPU and GPU).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "test_util.h"

namespace vision::test {

struct CiouRef {
  double loss = 0, iou = 0, v = 0, alpha = 0;
};

// One box pair, pred b1 and target b2, each (x1, y1, x2, y2) or (cx, cy, w, h) when xywh; loss = (1 − CIoU)·weight.
// frozen_alpha: use this alpha instead of computing it (the constant-alpha derivative's function).
inline CiouRef ciou_reference(const double pred[4], const double target[4], double weight, bool xywh,
                              const double* frozen_alpha = nullptr) {
  constexpr double eps = 1e-7, pi = 3.14159265358979323846;
  auto corners = [&](const double* b, double c[4]) {
    if (xywh) {
      c[0] = b[0] - b[2] / 2, c[1] = b[1] - b[3] / 2, c[2] = b[0] + b[2] / 2, c[3] = b[1] + b[3] / 2;
    } else {
      for (int k = 0; k < 4; ++k) c[k] = b[k];
    }
  };
  double p[4], t[4];
  corners(pred, p);
  corners(target, t);
  const double w1 = p[2] - p[0], h1 = p[3] - p[1] + eps, w2 = t[2] - t[0], h2 = t[3] - t[1] + eps;
  const double inter = std::max(std::min(p[2], t[2]) - std::max(p[0], t[0]), 0.0) *
                       std::max(std::min(p[3], t[3]) - std::max(p[1], t[1]), 0.0);
  const double uni = w1 * h1 + w2 * h2 - inter + eps;
  CiouRef r;
  r.iou = inter / uni;
  const double cw = std::max(p[2], t[2]) - std::min(p[0], t[0]), ch = std::max(p[3], t[3]) - std::min(p[1], t[1]);
  const double c2 = cw * cw + ch * ch + eps;
  const double rho2 = (std::pow(t[0] + t[2] - p[0] - p[2], 2) + std::pow(t[1] + t[3] - p[1] - p[3], 2)) / 4;
  auto at = [&](double w, double h) { return h != 0 ? std::atan(w / h) : (w > 0 ? pi / 2 : w < 0 ? -pi / 2 : 0.0); };
  r.v = 4 / (pi * pi) * std::pow(at(w2, h2) - at(w1, h1), 2);
  r.alpha = frozen_alpha ? *frozen_alpha : r.v / (r.v - r.iou + (1 + eps));
  const double ciou = r.iou - (rho2 / c2 + r.v * r.alpha);
  r.loss = (1 - ciou) * weight;
  return r;
}

// A batch of box pairs in [B, 4, A] planes (grid units, as the loss sees them), targets of 0.5–20 cells inside an
// 80×80 grid, predictions jittered around them (a few far off, so some do not overlap), weights in [0.05, 1] on a
// fraction `positive` of the anchors and 0 elsewhere. In xywh the planes hold cx, cy, w, h.
struct CiouBatch {
  int64_t batch = 0, anchors = 0;
  std::vector<float> pred, target, weight;
};

inline CiouBatch random_ciou_batch(int64_t batch, int64_t anchors, double positive, bool xywh) {
  CiouBatch c{batch, anchors, std::vector<float>(static_cast<size_t>(batch * 4 * anchors)),
              std::vector<float>(static_cast<size_t>(batch * 4 * anchors)),
              std::vector<float>(static_cast<size_t>(batch * anchors))};
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> nrm(0.0, 1.0);
  auto& r = rng();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t a = 0; a < anchors; ++a) {
      const double tw = 0.5 + 19.5 * u(r) * u(r), th = 0.5 + 19.5 * u(r) * u(r);
      const double tx = tw / 2 + (80 - tw) * u(r), ty = th / 2 + (80 - th) * u(r);
      const bool far = u(r) < 0.1;
      const double px = tx + (far ? 30 : 0.3 * tw) * nrm(r), py = ty + (far ? 30 : 0.3 * th) * nrm(r);
      const double pw = tw * std::exp(0.4 * nrm(r)), ph = th * std::exp(0.4 * nrm(r));
      const double tb[4] = {tx, ty, tw, th}, pb[4] = {px, py, pw, ph};
      for (int k = 0; k < 4; ++k) {
        const size_t i = static_cast<size_t>((b * 4 + k) * anchors + a);
        if (xywh) {
          c.target[i] = static_cast<float>(tb[k]);
          c.pred[i] = static_cast<float>(pb[k]);
        } else {  // corners: x1 = cx − w/2, …
          const int axis = k % 2;
          const double sgn = k < 2 ? -0.5 : 0.5;
          c.target[i] = static_cast<float>(tb[axis] + sgn * tb[2 + axis]);
          c.pred[i] = static_cast<float>(pb[axis] + sgn * pb[2 + axis]);
        }
      }
      c.weight[static_cast<size_t>(b * anchors + a)] = u(r) < positive ? static_cast<float>(0.05 + 0.95 * u(r)) : 0.0f;
    }
  return c;
}

// The reference of every box of a batch (f32 values read exactly; xywh converted to corners in f32 as the op does).
inline std::vector<CiouRef> ciou_reference_all(const CiouBatch& c, bool xywh) {
  std::vector<CiouRef> out(static_cast<size_t>(c.batch * c.anchors));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t a = 0; a < c.anchors; ++a) {
      float pf[4], tf[4];
      for (int k = 0; k < 4; ++k) {
        const size_t i = static_cast<size_t>((b * 4 + k) * c.anchors + a);
        pf[k] = c.pred[i], tf[k] = c.target[i];
      }
      // xywh: the corners as the op computes them in f32 (cx − w·0.5f, …); their rounding belongs to the input.
      double p[4], t[4];
      for (auto [s, d] : {std::make_pair(pf, p), std::make_pair(tf, t)}) {
        if (xywh) {
          const float hw = s[2] * 0.5f, hh = s[3] * 0.5f;
          d[0] = s[0] - hw, d[1] = s[1] - hh, d[2] = s[0] + hw, d[3] = s[1] + hh;
        } else {
          for (int k = 0; k < 4; ++k) d[k] = s[k];
        }
      }
      const double w = c.weight[static_cast<size_t>(b * c.anchors + a)];
      out[static_cast<size_t>(b * c.anchors + a)] = w != 0 ? ciou_reference(p, t, w, false) : CiouRef{};
    }
  return out;
}

}  // namespace vision::test
