// PSA data movement — the copies between YOLO26's channel-major qkv / image tensors and FlashAttention-2's head-major
// rows (psa.h describes the layouts), one element per thread. WIDTH (the row length) and KEY_DIM are compile-time
// powers of two, so the index arithmetic on them is shifts and masks.
#pragma once

#include "vision/cuda/kernel_common.cuh"

namespace vision::models::yolo::kernels::attention {

// The channel-major index of row element i of a block: rows [batch·heads, n, WIDTH], element (b·heads + h, p, d) is
// channel h·head_stride + offset + d of batch b (channels per batch).
template <int WIDTH>
__device__ __forceinline__ int64_t psa_channel_index(int64_t i, int64_t n, int64_t heads, int64_t channels,
                                                     int64_t head_stride, int64_t offset) {
  const int64_t d = i % WIDTH, r = i / WIDTH, p = r % n, bh = r / n;
  return ((bh / heads) * channels + (bh % heads) * head_stride + offset + d) * n + p;
}

// rows[i] = channels[psa_channel_index(i)] for i < total (pack forward, merge backward).
template <typename T, int WIDTH>
__global__ void psa_channels_to_rows(const T* __restrict__ channels, T* __restrict__ rows, int64_t total, int64_t n,
                                     int64_t heads, int64_t n_channels, int64_t head_stride, int64_t offset) {
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count())
    rows[i] = channels[psa_channel_index<WIDTH>(i, n, heads, n_channels, head_stride, offset)];
}

// channels[psa_channel_index(i)] = rows[i] for i < total (pack backward, merge forward).
template <typename T, int WIDTH>
__global__ void psa_rows_to_channels(const T* __restrict__ rows, T* __restrict__ channels, int64_t total, int64_t n,
                                     int64_t heads, int64_t n_channels, int64_t head_stride, int64_t offset) {
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count())
    channels[psa_channel_index<WIDTH>(i, n, heads, n_channels, head_stride, offset)] = rows[i];
}

// qkv [B, 4·KEY_DIM·heads, n] channel c = h·4·KEY_DIM + j: the image channel h·2·KEY_DIM + j − 2·KEY_DIM when
// j ≥ 2·KEY_DIM (V), else −1 (Q, K).
template <int KEY_DIM>
__device__ __forceinline__ int64_t psa_v_image_channel(int64_t c) {
  const int64_t h = c / (4 * KEY_DIM), j = c % (4 * KEY_DIM);
  return j < 2 * KEY_DIM ? -1 : h * 2 * KEY_DIM + j - 2 * KEY_DIM;
}

// image [B, 2·KEY_DIM·heads, n] = the V channels of qkv; one thread per qkv element (Q and K threads do nothing).
template <typename T, int KEY_DIM>
__global__ void psa_extract_v_forward(const T* __restrict__ qkv, T* __restrict__ image, int64_t total, int64_t n,
                                      int64_t heads) {
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t p = i % n, c = (i / n) % (4 * KEY_DIM * heads), b = i / (n * 4 * KEY_DIM * heads);
    const int64_t v = psa_v_image_channel<KEY_DIM>(c);
    if (v >= 0) image[(b * 2 * KEY_DIM * heads + v) * n + p] = qkv[i];
  }
}

// grad_qkv = grad_image in the V channels, zero in Q and K; one thread per qkv element.
template <typename T, int KEY_DIM>
__global__ void psa_extract_v_backward(const T* __restrict__ grad_image, T* __restrict__ grad_qkv, int64_t total,
                                       int64_t n, int64_t heads) {
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t p = i % n, c = (i / n) % (4 * KEY_DIM * heads), b = i / (n * 4 * KEY_DIM * heads);
    const int64_t v = psa_v_image_channel<KEY_DIM>(c);
    grad_qkv[i] = v >= 0 ? grad_image[(b * 2 * KEY_DIM * heads + v) * n + p] : vk::from_float<T>(0.0f);
  }
}

}  // namespace vision::models::yolo::kernels::attention
