// YOLO26 loss sums (formulas in loss_sum.h): the per-anchor weight Σ_c target_scores, the box term's normalised sum
// (per-block partial sums of x and w here, then cls.cuh's loss_sum_finalize), and the two scalar combinations of the
// heads' terms, all in f32 values (T is unused: every kernel is registered for f32 only).
// Reductions without atomics, in a fixed order (the block count depends on the element count alone), so results are
// bit-identical from run to run. The scalar kernels run one thread in float64, the operations of the CPU twin's.
#pragma once

#include "vision/cuda/kernel_common.cuh"
#include "vision/models/yolo/kernels/loss/cls.cuh"

namespace vision::models::yolo::kernels::loss {

// weight[b, a] = Σ_c scores[b, c, a] (classes in order) over scores [B, nc, A].
template <typename T>
__global__ void target_score_sum(const float* __restrict__ scores, float* __restrict__ weight, int64_t batch,
                                 int64_t classes, int64_t n_anchors) {
  for (int64_t i = vk::thread_index(); i < batch * n_anchors; i += vk::thread_count()) {
    const int64_t b = i / n_anchors, a = i % n_anchors;
    const float* s = scores + b * classes * n_anchors + a;
    float acc = 0.0f;
    for (int64_t c = 0; c < classes; ++c) acc += s[c * n_anchors];
    weight[i] = acc;
  }
}

// Per block: Σ x and Σ w over its grid-stride share of the n elements (partials[2·block], partials[2·block + 1]).
template <typename T>
__global__ void normalized_sum_partial(const float* __restrict__ x, const float* __restrict__ w,
                                       float* __restrict__ partials, int64_t n) {
  float sx = 0.0f, sw = 0.0f;
  for (int64_t i = vk::thread_index(); i < n; i += vk::thread_count()) {
    sx += x[i];
    sw += w[i];
  }
  block_pair_sum(sx, sw, partials);
}

// grad_x = grad_loss[0] / norm[0] (norm: N, saved by the forward), computed as the CPU twin does (in float64).
template <typename T>
__global__ void normalized_sum_backward(const float* __restrict__ grad_loss, const float* __restrict__ norm,
                                        float* __restrict__ grad_x, int64_t n) {
  const float g = static_cast<float>(static_cast<double>(grad_loss[0]) / static_cast<double>(norm[0]));
  for (int64_t i = vk::thread_index(); i < n; i += vk::thread_count()) grad_x[i] = g;
}

// One thread: loss[0] = B·(g_box·box + g_cls·cls + g_l1·l1), items = (g_box·box, g_cls·cls, g_l1·l1).
template <typename T>
__global__ void detection_loss_forward(const float* __restrict__ box, const float* __restrict__ cls,
                                       const float* __restrict__ l1, float* __restrict__ loss,
                                       float* __restrict__ items, int64_t batch, float g_box, float g_cls,
                                       float g_l1) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const double b = static_cast<double>(g_box) * box[0], c = static_cast<double>(g_cls) * cls[0],
               l = static_cast<double>(g_l1) * l1[0];
  loss[0] = static_cast<float>(static_cast<double>(batch) * (b + c + l));
  items[0] = static_cast<float>(b);
  items[1] = static_cast<float>(c);
  items[2] = static_cast<float>(l);
}

// One thread: d_term = g_term·(B·d_loss + d_items[term]) for each term whose gradient pointer is not null; d_loss and
// d_items may be null (no gradient: 0).
template <typename T>
__global__ void detection_loss_backward(const float* __restrict__ d_loss, const float* __restrict__ d_items,
                                        float* __restrict__ d_box, float* __restrict__ d_cls,
                                        float* __restrict__ d_l1, int64_t batch, float g_box, float g_cls,
                                        float g_l1) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const double dl = d_loss ? static_cast<double>(batch) * d_loss[0] : 0.0;
  float* out[3] = {d_box, d_cls, d_l1};
  const float gains[3] = {g_box, g_cls, g_l1};
  for (int k = 0; k < 3; ++k)
    if (out[k]) out[k][0] = static_cast<float>(gains[k] * (dl + (d_items ? static_cast<double>(d_items[k]) : 0.0)));
}

// One thread: total[0] = w[0]·a[0] + w[1]·b[0].
template <typename T>
__global__ void e2e_loss_sum_forward(const float* __restrict__ a, const float* __restrict__ b,
                                     const float* __restrict__ w, float* __restrict__ total) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  total[0] = static_cast<float>(static_cast<double>(w[0]) * a[0] + static_cast<double>(w[1]) * b[0]);
}

// One thread: d_a = w[0]·dy, d_b = w[1]·dy, d_w = (a·dy, b·dy), each where its pointer is not null.
template <typename T>
__global__ void e2e_loss_sum_backward(const float* __restrict__ a, const float* __restrict__ b,
                                      const float* __restrict__ w, const float* __restrict__ dy,
                                      float* __restrict__ d_a, float* __restrict__ d_b, float* __restrict__ d_w) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const double g = dy[0];
  if (d_a) d_a[0] = static_cast<float>(w[0] * g);
  if (d_b) d_b[0] = static_cast<float>(w[1] * g);
  if (d_w) {
    d_w[0] = static_cast<float>(a[0] * g);
    d_w[1] = static_cast<float>(b[0] * g);
  }
}

}  // namespace vision::models::yolo::kernels::loss
