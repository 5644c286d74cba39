// YOLO26 loss terms — BCE-with-logits classification over [B, nc, A] and the L1 distance term of the reg_max = 1 head
// over [B, 4, A] (formulas in cls.h), forward and backward, computed in f32 whatever T is. The per-element arithmetic
// is cls_math.cuh, which the CPU twin calls too (in f64).
// Reductions without atomics: each forward kernel writes one (loss, normaliser) pair of partial sums per block to a
// workspace; loss_sum_finalize adds them in a fixed order in one block. The number of blocks is a function of the
// element count alone (cls_cuda.cpp), so results are bit-identical from run to run and from GPU to GPU.
#pragma once

#include "vision/cuda/kernel_common.cuh"
#include "vision/models/yolo/kernels/loss/cls_math.cuh"

namespace vision::models::yolo::kernels::loss {

// Threads per block of the partial-sum and finalize kernels (a power of two: the trees below halve it); the launch
// helpers use the same number (kClsLossThreads in cls_cuda.cpp).
enum : int { kClsLossThreads = 256 };  // an enumerator, not a variable: no global symbol in the PTX

// Sums a and b over the block (blockDim.x == kClsLossThreads) in a fixed order; thread 0 writes the pair to
// partials[2·blockIdx.x], partials[2·blockIdx.x + 1].
__device__ __forceinline__ void block_pair_sum(float a, float b, float* __restrict__ partials) {
  __shared__ float sa[kClsLossThreads], sb[kClsLossThreads];
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (unsigned stride = kClsLossThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      sa[threadIdx.x] += sa[threadIdx.x + stride];
      sb[threadIdx.x] += sb[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = sa[0];
    partials[2 * blockIdx.x + 1] = sb[0];
  }
}

// Per block: Σ bce(x, t) and Σ t over its grid-stride share of the n elements of logits and targets [B, nc, A].
template <typename T>
__global__ void bce_cls_forward_partial(const T* __restrict__ logits, const float* __restrict__ targets,
                                        float* __restrict__ partials, int64_t n) {
  float loss = 0.0f, norm = 0.0f;
  for (int64_t i = vk::thread_index(); i < n; i += vk::thread_count()) {
    const float x = vk::to_float(logits[i]), t = targets[i];
    loss += cls_math::bce_with_logits(x, t);
    norm += t;
  }
  block_pair_sum(loss, norm, partials);
}

// grad_logits = (σ(x) − t) · grad_loss[0] / norm[0] (norm: N, saved by the forward).
template <typename T>
__global__ void bce_cls_backward(const T* __restrict__ logits, const float* __restrict__ targets,
                                 const float* __restrict__ grad_loss, const float* __restrict__ norm,
                                 T* __restrict__ grad_logits, int64_t n) {
  const float scale = grad_loss[0] / norm[0];
  for (int64_t i = vk::thread_index(); i < n; i += vk::thread_count()) {
    const float x = vk::to_float(logits[i]);
    grad_logits[i] = vk::from_float<T>((cls_math::stable_sigmoid(x) - targets[i]) * scale);
  }
}

// Per block: Σ w·¼·(s·inv_w·(|Δl| + |Δr|) + s·inv_h·(|Δt| + |Δb|)) and Σ w over its share of the B·A anchors;
// pred, target [B, 4, A], weight [B, A], anchors [3, A] (row 2: the stride).
template <typename T>
__global__ void l1_distance_forward_partial(const T* __restrict__ pred, const float* __restrict__ target,
                                            const float* __restrict__ weight, const float* __restrict__ anchors,
                                            float* __restrict__ partials, int64_t batch, int64_t n_anchors,
                                            float inv_w, float inv_h) {
  float loss = 0.0f, norm = 0.0f;
  for (int64_t i = vk::thread_index(); i < batch * n_anchors; i += vk::thread_count()) {
    const int64_t b = i / n_anchors, a = i % n_anchors;
    const T* p = pred + b * 4 * n_anchors + a;
    const float* t = target + b * 4 * n_anchors + a;
    const float s = anchors[2 * n_anchors + a], w = weight[i];
    const float dx = fabsf(vk::to_float(p[0]) - t[0]) + fabsf(vk::to_float(p[2 * n_anchors]) - t[2 * n_anchors]);
    const float dy = fabsf(vk::to_float(p[n_anchors]) - t[n_anchors]) +
                     fabsf(vk::to_float(p[3 * n_anchors]) - t[3 * n_anchors]);
    loss += cls_math::l1_term(w, s, inv_w, inv_h, dx, dy);
    norm += w;
  }
  block_pair_sum(loss, norm, partials);
}

// grad_pred[b, c, a] = grad_loss[0] / norm[0] · w · ¼ · s · (c even ? inv_w : inv_h) · sign(pred − target).
template <typename T>
__global__ void l1_distance_backward(const T* __restrict__ pred, const float* __restrict__ target,
                                     const float* __restrict__ weight, const float* __restrict__ anchors,
                                     const float* __restrict__ grad_loss, const float* __restrict__ norm,
                                     T* __restrict__ grad_pred, int64_t batch, int64_t n_anchors, float inv_w,
                                     float inv_h) {
  const float scale = grad_loss[0] / norm[0];
  for (int64_t i = vk::thread_index(); i < batch * 4 * n_anchors; i += vk::thread_count()) {
    const int64_t a = i % n_anchors, c = (i / n_anchors) % 4, b = i / (4 * n_anchors);
    const float d = vk::to_float(pred[i]) - target[i];
    const float s = anchors[2 * n_anchors + a] * ((c & 1) == 0 ? inv_w : inv_h);
    grad_pred[i] = vk::from_float<T>(cls_math::l1_gradient(scale, weight[b * n_anchors + a], s, d));
  }
}

// One block of kClsLossThreads: adds the n_partials (loss, normaliser) pairs in a fixed order in float64 and
// writes loss[0] = Σ loss / N with N = max(Σ normaliser, 1), and norm[0] = N when norm is not null. T is unused (the
// partials are f32); the kernel is registered for f32 only.
template <typename T>
__global__ void loss_sum_finalize(const float* __restrict__ partials, int32_t n_partials, float* __restrict__ loss,
                                  float* __restrict__ norm) {
  __shared__ double sa[kClsLossThreads], sb[kClsLossThreads];
  double a = 0.0, b = 0.0;
  for (int32_t i = threadIdx.x; i < n_partials; i += kClsLossThreads) {
    a += partials[2 * i];
    b += partials[2 * i + 1];
  }
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (unsigned stride = kClsLossThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      sa[threadIdx.x] += sa[threadIdx.x + stride];
      sb[threadIdx.x] += sb[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double n = sb[0] > 1.0 ? sb[0] : 1.0;
    loss[0] = static_cast<float>(sa[0] / n);
    if (norm) norm[0] = static_cast<float>(n);
  }
}

}  // namespace vision::models::yolo::kernels::loss
