// CIoU loss — forward (per-box (1 − CIoU)·weight, saving iou, v, alpha) and backward (d_pred) over [B, 4, A] boxes,
// one CTA per tile of BLOCK boxes, one thread per box, all arithmetic in f32. The formula and conventions are those
// of ciou.h; the per-box arithmetic is ciou_math.cuh, which the CPU twin (ciou.cpp) calls too.
// pred and d_pred are of type T (f32, f16, bf16); target, weight, loss, iou, v, alpha and d_loss are f32.
// format: 0 xyxy, 1 xywh (for pred and target). iou, v, alpha may be null in the forward (inference).
#pragma once

#include "vision/cuda/kernel_common.cuh"
#include "vision/models/yolo/kernels/loss/ciou_math.cuh"

namespace vision::models::yolo::kernels::loss {

namespace ciou_detail {

// The corners of the box stored as 4 planes `stride` apart.
template <typename T>
__device__ __forceinline__ void corners(const T* p, int64_t stride, int32_t format, float c[4]) {
  const float a = vk::to_float(p[0]), b = vk::to_float(p[stride]);  // loaded in this order (not an argument list's)
  const float x = vk::to_float(p[2 * stride]), y = vk::to_float(p[3 * stride]);
  ciou_math::corners(a, b, x, y, format == 1, c);
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
    ciou_math::forward(p, t, w, out_iou, out_v, out_alpha, out_loss);
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
  float gp[4], g[4];
  ciou_math::backward(p, t, w, iou[i], v[i], alpha[i], d_loss[i], full_alpha != 0, gp);
  ciou_math::box_gradient(gp, format == 1, g);
  for (int c = 0; c < 4; ++c) out[c * n_anchors] = vk::from_float<T>(g[c]);
}

}  // namespace vision::models::yolo::kernels::loss
