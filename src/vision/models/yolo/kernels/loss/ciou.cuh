// CIoU loss — forward (per-box (1 − CIoU)·weight, saving iou, v, alpha) and backward (d_pred) over [B, 4, A] boxes,
// one CTA per tile of BLOCK boxes, one thread per box, all arithmetic in f32. The formula and conventions are those
// of ciou.h; the CPU twin (ciou.cpp) does the same operations in the same order.
// pred and d_pred are of type T (f32, f16, bf16); target, weight, loss, iou, v, alpha and d_loss are f32.
// format: 0 xyxy, 1 xywh (for pred and target). iou, v, alpha may be null in the forward (inference).
#pragma once

#include "vision/cuda/kernel_common.cuh"

namespace vision::models::yolo::kernels::loss {

namespace ciou_detail {

// Constants as functions: a namespace-scope constant would become a global symbol whose mangled name NVRTC makes unique
// per compilation (the PTX would not be deterministic).
__device__ __forceinline__ constexpr float eps() { return 1e-7f; }
__device__ __forceinline__ constexpr float four_over_pi_squared() { return 0.405284735f; }  // 4/π²
__device__ __forceinline__ constexpr float half_pi() { return 1.57079633f; }

__device__ __forceinline__ float atan_ratio(float w, float h) {
  return h != 0.0f ? atanf(w / h) : (w > 0.0f ? half_pi() : w < 0.0f ? -half_pi() : 0.0f);
}
__device__ __forceinline__ float ratio(float w, float h) {
  return h != 0.0f ? w / h : (w > 0.0f ? vk::infinity() : w < 0.0f ? -vk::infinity() : 0.0f);
}
__device__ __forceinline__ float min_share(float a, float b) { return a < b ? 1.0f : a == b ? 0.5f : 0.0f; }
__device__ __forceinline__ float max_share(float a, float b) { return a > b ? 1.0f : a == b ? 0.5f : 0.0f; }

template <typename T>
__device__ __forceinline__ void corners(const T* p, int64_t stride, int32_t format, float c[4]) {
  const float a = vk::to_float(p[0]), b = vk::to_float(p[stride]);
  const float x = vk::to_float(p[2 * stride]), y = vk::to_float(p[3 * stride]);
  if (format == 1) {
    const float hw = x * 0.5f, hh = y * 0.5f;
    c[0] = a - hw, c[1] = b - hh, c[2] = a + hw, c[3] = b + hh;
  } else {
    c[0] = a, c[1] = b, c[2] = x, c[3] = y;
  }
}

struct Geometry {
  float w1, h1, w2, h2, iw_raw, ih_raw, inter, uni, cw, ch, c2, dx, dy, rho2;
};

__device__ __forceinline__ Geometry geometry(const float p[4], const float t[4]) {
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
  g.rho2 = (g.dx * g.dx + g.dy * g.dy) * 0.25f;
  return g;
}

}  // namespace ciou_detail

// loss, iou, v, alpha [B, A]: one thread per box; boxes whose weight is 0 get zeros without being read.
template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
    ciou_forward(const T* __restrict__ pred, const float* __restrict__ target, const float* __restrict__ weight,
                 float* __restrict__ loss, float* __restrict__ iou, float* __restrict__ v, float* __restrict__ alpha,
                 int64_t batch, int64_t n_anchors, int32_t format) {
  using namespace ciou_detail;
  const int64_t i = int64_t(blockIdx.x) * BLOCK + threadIdx.x;
  if (i >= batch * n_anchors) return;
  const int64_t b = i / n_anchors, a = i % n_anchors;
  const float w = weight[i];
  float out_iou = 0.0f, out_v = 0.0f, out_alpha = 0.0f, out_loss = 0.0f;
  if (w != 0.0f) {
    float p[4], t[4];
    corners(pred + b * 4 * n_anchors + a, n_anchors, format, p);
    corners(target + b * 4 * n_anchors + a, n_anchors, format, t);
    const Geometry g = geometry(p, t);
    out_iou = g.inter / g.uni;
    const float d = atan_ratio(g.w2, g.h2) - atan_ratio(g.w1, g.h1);
    out_v = four_over_pi_squared() * d * d;
    out_alpha = out_v / (out_v - out_iou + (1.0f + eps()));
    const float ciou = out_iou - (g.rho2 / g.c2 + out_v * out_alpha);
    out_loss = (1.0f - ciou) * w;
  }
  loss[i] = out_loss;
  if (iou) iou[i] = out_iou;
  if (v) v[i] = out_v;
  if (alpha) alpha[i] = out_alpha;
}

// d_pred [B, 4, A] from d_loss [B, A] and the saved iou, v, alpha; full_alpha != 0 differentiates through alpha.
template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
    ciou_backward(const T* __restrict__ pred, const float* __restrict__ target, const float* __restrict__ weight,
                  const float* __restrict__ iou, const float* __restrict__ v, const float* __restrict__ alpha,
                  const float* __restrict__ d_loss, T* __restrict__ d_pred, int64_t batch, int64_t n_anchors,
                  int32_t format, int32_t full_alpha) {
  using namespace ciou_detail;
  const int64_t i = int64_t(blockIdx.x) * BLOCK + threadIdx.x;
  if (i >= batch * n_anchors) return;
  const int64_t b = i / n_anchors, a = i % n_anchors;
  T* out = d_pred + b * 4 * n_anchors + a;
  const float w = weight[i];
  if (w == 0.0f) {
    for (int c = 0; c < 4; ++c) out[c * n_anchors] = vk::from_float<T>(0.0f);
    return;
  }
  float p[4], t[4];
  corners(pred + b * 4 * n_anchors + a, n_anchors, format, p);
  corners(target + b * 4 * n_anchors + a, n_anchors, format, t);
  const Geometry g = geometry(p, t);
  const float s_iou = iou[i], s_v = v[i], s_alpha = alpha[i];
  const float gc = -d_loss[i] * w;  // ∂L/∂CIoU
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
    const float g_t1 = g_v * (-2.0f * four_over_pi_squared() * d);
    g_w1 += g_t1 * g.h1 / n1;
    g_h1 -= g_t1 * g.w1 / n1;
  }
  const float g_iw = g.iw_raw >= 0.0f ? g_inter * fmaxf(g.ih_raw, 0.0f) : 0.0f;
  const float g_ih = g.ih_raw >= 0.0f ? g_inter * fmaxf(g.iw_raw, 0.0f) : 0.0f;
  const float g_cw = 2.0f * g.cw * g_c2, g_ch = 2.0f * g.ch * g_c2;
  const float g_cx = -0.5f * g.dx * g_rho2, g_cy = -0.5f * g.dy * g_rho2;
  float gp[4];
  gp[0] = -g_iw * max_share(p[0], t[0]) - g_cw * min_share(p[0], t[0]) + g_cx - g_w1;
  gp[1] = -g_ih * max_share(p[1], t[1]) - g_ch * min_share(p[1], t[1]) + g_cy - g_h1;
  gp[2] = g_iw * min_share(p[2], t[2]) + g_cw * max_share(p[2], t[2]) + g_cx + g_w1;
  gp[3] = g_ih * min_share(p[3], t[3]) + g_ch * max_share(p[3], t[3]) + g_cy + g_h1;
  if (format == 1) {
    out[0] = vk::from_float<T>(gp[0] + gp[2]);
    out[n_anchors] = vk::from_float<T>(gp[1] + gp[3]);
    out[2 * n_anchors] = vk::from_float<T>((gp[2] - gp[0]) * 0.5f);
    out[3 * n_anchors] = vk::from_float<T>((gp[3] - gp[1]) * 0.5f);
  } else {
    for (int c = 0; c < 4; ++c) out[c * n_anchors] = vk::from_float<T>(gp[c]);
  }
}

}  // namespace vision::models::yolo::kernels::loss
