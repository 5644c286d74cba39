// CIoU's per-box arithmetic in f32, one source for the kernels (ciou.cuh) and the CPU twin (ciou.cpp): the corners of
// a box, the forward ((1 − CIoU)·weight with the iou, v and alpha it saves) and the backward (the gradient of the
// corners). The formula and conventions are those of ciou.h.
#pragma once

#include "vision/cuda/host_device.cuh"

namespace vision::models::yolo::kernels::loss::ciou_math {

// Constants as functions: a namespace-scope constant would become a global symbol whose mangled name NVRTC makes unique
// per compilation (the PTX would not be deterministic).
VISION_HD constexpr float eps() { return 1e-7f; }
VISION_HD constexpr float four_over_pi_squared() { return 0.405284735f; }  // 4/π²
VISION_HD constexpr float half_pi() { return 1.57079633f; }

// atan(w/h), ±π/2 (0 for w = 0) where h is exactly 0; w/h with the same convention.
VISION_HD float atan_ratio(float w, float h) {
  return h != 0.0f ? atanf(w / h) : (w > 0.0f ? half_pi() : w < 0.0f ? -half_pi() : 0.0f);
}
VISION_HD float ratio(float w, float h) {
  return h != 0.0f ? w / h : (w > 0.0f ? hd::infinity() : w < 0.0f ? -hd::infinity() : 0.0f);
}
// The share of d min(a, b) that goes to a (PyTorch: ½ at a tie), and of d max(a, b).
VISION_HD float min_share(float a, float b) { return a < b ? 1.0f : a == b ? 0.5f : 0.0f; }
VISION_HD float max_share(float a, float b) { return a > b ? 1.0f : a == b ? 0.5f : 0.0f; }

// Corners (x1, y1, x2, y2) of a box given as its 4 values: xyxy as they are, xywh from centre and size.
VISION_HD void corners(float a, float b, float x, float y, bool xywh, float c[4]) {
  if (xywh) {
    const float hw = x * 0.5f, hh = y * 0.5f;
    c[0] = a - hw, c[1] = b - hh, c[2] = a + hw, c[3] = b + hh;
  } else {
    c[0] = a, c[1] = b, c[2] = x, c[3] = y;
  }
}

struct Geometry {
  float w1, h1, w2, h2, iw_raw, ih_raw, inter, uni, cw, ch, c2, dx, dy, rho2;
};

// p: the prediction's corners, t: the target's.
VISION_HD Geometry geometry(const float p[4], const float t[4]) {
  Geometry g;
  g.w1 = p[2] - p[0], g.h1 = p[3] - p[1] + eps();
  g.w2 = t[2] - t[0], g.h2 = t[3] - t[1] + eps();
  g.iw_raw = fminf(p[2], t[2]) - fmaxf(p[0], t[0]);
  g.ih_raw = fminf(p[3], t[3]) - fmaxf(p[1], t[1]);
  g.inter = fmaxf(g.iw_raw, 0.0f) * fmaxf(g.ih_raw, 0.0f);
  g.uni = g.w1 * g.h1 + g.w2 * g.h2 - g.inter + eps();
  g.cw = fmaxf(p[2], t[2]) - fminf(p[0], t[0]);
  g.ch = fmaxf(p[3], t[3]) - fminf(p[1], t[1]);
  g.c2 = g.cw * g.cw + g.ch * g.ch + eps();
  g.dx = t[0] + t[2] - p[0] - p[2];
  g.dy = t[1] + t[3] - p[1] - p[3];
  // dx² fused, dy² rounded first: the kernels' arithmetic before this header (NVRTC contracted it so there, and the
  // other choice moved the SGD trajectory test's gradient norm at step 19 from 1.6e-6 to 2.2e-3 of the reference).
  g.rho2 = hd::fma_device(g.dx, g.dx, g.dy * g.dy) * 0.25f;
  return g;
}

// One box of weight w ≠ 0: its loss (1 − CIoU)·w, and the iou, v and alpha the backward takes.
VISION_HD void forward(const float p[4], const float t[4], float w, float& iou, float& v, float& alpha, float& loss) {
  const Geometry g = geometry(p, t);
  iou = g.inter / g.uni;
  const float d = atan_ratio(g.w2, g.h2) - atan_ratio(g.w1, g.h1);
  v = four_over_pi_squared() * d * d;
  alpha = v / (v - iou + (1.0f + eps()));
  const float ciou = iou - (g.rho2 / g.c2 + v * alpha);
  loss = (1.0f - ciou) * w;
}

// One box of weight w ≠ 0: the gradient gp of its corners from d_loss and the forward's saved iou, v, alpha;
// full_alpha differentiates through alpha too.
VISION_HD void backward(const float p[4], const float t[4], float w, float s_iou, float s_v, float s_alpha,
                        float d_loss, bool full_alpha, float gp[4]) {
  const Geometry g = geometry(p, t);
  const float gc = -d_loss * w;  // ∂L/∂CIoU
  float g_iou = gc, g_v = -gc * s_alpha;
  if (full_alpha) {
    const float den = s_v - s_iou + (1.0f + eps());
    const float den2 = den * den;
    g_iou -= gc * (s_v * s_v / den2);
    g_v -= gc * (s_v * ((1.0f + eps()) - s_iou) / den2);
  }
  const float g_rho2 = -gc / g.c2;
  const float g_c2 = gc * g.rho2 / (g.c2 * g.c2);
  const float u2 = g.uni * g.uni;
  const float g_inter = g_iou * (g.uni + g.inter) / u2;
  const float g_a1 = -g_iou * g.inter / u2;
  float g_w1 = g_a1 * g.h1, g_h1 = g_a1 * g.w1;
  // v = k·d², d = atan(w2/h2) − atan(w1/h1): |d| from the saved v, its sign from the ratios (atan is increasing).
  const float r1 = ratio(g.w1, g.h1), r2 = ratio(g.w2, g.h2);
  const float sign = r2 > r1 ? 1.0f : r2 < r1 ? -1.0f : 0.0f;
  const float d = sign * sqrtf(s_v / four_over_pi_squared());
  const float n1 = g.w1 * g.w1 + g.h1 * g.h1;
  if (n1 > 0.0f) {
    const float g_t1 = g_v * (-2.0f * four_over_pi_squared() * d);  // ∂/∂atan(w1/h1)
    g_w1 += g_t1 * g.h1 / n1;
    g_h1 -= g_t1 * g.w1 / n1;
  }
  const float g_iw = g.iw_raw >= 0.0f ? g_inter * fmaxf(g.ih_raw, 0.0f) : 0.0f;
  const float g_ih = g.ih_raw >= 0.0f ? g_inter * fmaxf(g.iw_raw, 0.0f) : 0.0f;
  const float g_cw = 2.0f * g.cw * g_c2, g_ch = 2.0f * g.ch * g_c2;
  const float g_cx = -0.5f * g.dx * g_rho2, g_cy = -0.5f * g.dy * g_rho2;  // ∂ρ²/∂x1 = ∂ρ²/∂x2 = −dx/2
  gp[0] = -g_iw * max_share(p[0], t[0]) - g_cw * min_share(p[0], t[0]) + g_cx - g_w1;
  gp[1] = -g_ih * max_share(p[1], t[1]) - g_ch * min_share(p[1], t[1]) + g_cy - g_h1;
  gp[2] = g_iw * min_share(p[2], t[2]) + g_cw * max_share(p[2], t[2]) + g_cx + g_w1;
  gp[3] = g_ih * min_share(p[3], t[3]) + g_ch * max_share(p[3], t[3]) + g_cy + g_h1;
}

// The gradient of a box's 4 stored values from that of its corners gp (corners' chain rule).
VISION_HD void box_gradient(const float gp[4], bool xywh, float g[4]) {
  if (xywh) {
    g[0] = gp[0] + gp[2];
    g[1] = gp[1] + gp[3];
    g[2] = (gp[2] - gp[0]) * 0.5f;
    g[3] = (gp[3] - gp[1]) * 0.5f;
  } else {
    for (int c = 0; c < 4; ++c) g[c] = gp[c];
  }
}

}  // namespace vision::models::yolo::kernels::loss::ciou_math
