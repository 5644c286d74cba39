// PSA data movement — the copies between YOLO26's qkv / image tensors (NCHW, or NHWC when NHWC is 1) and
// FlashAttention-2's head-major rows (psa.h describes the layouts), one element per thread. WIDTH (the row length) and
// KEY_DIM are compile-time powers of two, so the index arithmetic on them is shifts and masks.
#pragma once

#include "vision/cuda/kernel_common.cuh"

namespace vision::models::yolo::kernels::attention {

// The image index of row element i of a block: rows [batch·heads, n, WIDTH], element (b·heads + h, p, d) is
// channel h·head_stride + offset + d of batch b (channels per batch) at pixel p.
template <int WIDTH, int NHWC>
__device__ __forceinline__ int64_t psa_channel_index(int64_t i, int64_t n, int64_t heads, int64_t channels,
                                                     int64_t head_stride, int64_t offset) {
  const int64_t d = i % WIDTH, r = i / WIDTH, p = r % n, bh = r / n;
  const int64_t b = bh / heads, c = (bh % heads) * head_stride + offset + d;
  return NHWC ? (b * n + p) * channels + c : (b * channels + c) * n + p;
}

// rows[i] = channels[psa_channel_index(i)] for i < total (pack forward, merge backward).
template <typename T, int WIDTH, int NHWC>
__global__ void psa_channels_to_rows(const T* __restrict__ channels, T* __restrict__ rows, int64_t total, int64_t n,
                                     int64_t heads, int64_t n_channels, int64_t head_stride, int64_t offset) {
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count())
    rows[i] = channels[psa_channel_index<WIDTH, NHWC>(i, n, heads, n_channels, head_stride, offset)];
}

// channels[psa_channel_index(i)] = rows[i] for i < total (pack backward, merge forward).
template <typename T, int WIDTH, int NHWC>
__global__ void psa_rows_to_channels(const T* __restrict__ rows, T* __restrict__ channels, int64_t total, int64_t n,
                                     int64_t heads, int64_t n_channels, int64_t head_stride, int64_t offset) {
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count())
    channels[psa_channel_index<WIDTH, NHWC>(i, n, heads, n_channels, head_stride, offset)] = rows[i];
}

// qkv [B, 4·KEY_DIM·heads, n] channel c = h·4·KEY_DIM + j: the image channel h·2·KEY_DIM + j − 2·KEY_DIM when
// j ≥ 2·KEY_DIM (V), else −1 (Q, K).
template <int KEY_DIM>
__device__ __forceinline__ int64_t psa_v_image_channel(int64_t c) {
  const int64_t h = c / (4 * KEY_DIM), j = c % (4 * KEY_DIM);
  return j < 2 * KEY_DIM ? -1 : h * 2 * KEY_DIM + j - 2 * KEY_DIM;
}

// qkv element i as (batch b, qkv channel c, pixel p), and the image index of image channel v at (b, p).
template <int KEY_DIM, int NHWC>
struct PsaQkvElement {
  int64_t b, c, p;
  __device__ __forceinline__ PsaQkvElement(int64_t i, int64_t n, int64_t heads) {
    const int64_t qc = 4 * KEY_DIM * heads;
    if (NHWC) {
      c = i % qc, p = (i / qc) % n, b = i / (qc * n);
    } else {
      p = i % n, c = (i / n) % qc, b = i / (n * qc);
    }
  }
  __device__ __forceinline__ int64_t image_index(int64_t v, int64_t n, int64_t heads) const {
    const int64_t ic = 2 * KEY_DIM * heads;
    return NHWC ? (b * n + p) * ic + v : (b * ic + v) * n + p;
  }
};

// image [B, 2·KEY_DIM·heads, n] = the V channels of qkv; one thread per qkv element (Q and K threads do nothing).
template <typename T, int KEY_DIM, int NHWC>
__global__ void psa_extract_v_forward(const T* __restrict__ qkv, T* __restrict__ image, int64_t total, int64_t n,
                                      int64_t heads) {
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const PsaQkvElement<KEY_DIM, NHWC> e(i, n, heads);
    const int64_t v = psa_v_image_channel<KEY_DIM>(e.c);
    if (v >= 0) image[e.image_index(v, n, heads)] = qkv[i];
  }
}

// grad_qkv = grad_image in the V channels, zero in Q and K; one thread per qkv element.
template <typename T, int KEY_DIM, int NHWC>
__global__ void psa_extract_v_backward(const T* __restrict__ grad_image, T* __restrict__ grad_qkv, int64_t total,
                                       int64_t n, int64_t heads) {
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const PsaQkvElement<KEY_DIM, NHWC> e(i, n, heads);
    const int64_t v = psa_v_image_channel<KEY_DIM>(e.c);
    grad_qkv[i] = v >= 0 ? grad_image[e.image_index(v, n, heads)] : vk::from_float<T>(0.0f);
  }
}

}  // namespace vision::models::yolo::kernels::attention
