// Nearest-neighbour ×2 upsampling of (N, C, H, W) activations in NCHW or NHWC, forward and backward.
#pragma once

#include "vision/cuda/kernel_common.cuh"

// NCHW. y[p, i, j] = x[p, i / 2, j / 2] for each plane p < batch · channels, y being 2h × 2w per plane. One thread per
// input element writes its 2 × 2 block.
template <typename T>
__global__ void upsample_nearest2x_forward(const T* __restrict__ x, T* __restrict__ y, int64_t batch,
                                           int64_t channels, int64_t h, int64_t w) {
  const int64_t total = batch * channels * h * w;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t col = i % w, row = (i / w) % h, p = i / (h * w);
    const T v = x[i];
    T* out = y + (p * 2 * h + 2 * row) * (2 * w) + 2 * col;
    out[0] = v;
    out[1] = v;
    out[2 * w] = v;
    out[2 * w + 1] = v;
  }
}

// NHWC. y[n, i, j, c] = x[n, i / 2, j / 2, c]; consecutive threads take consecutive channels of one input element and
// write its 2 × 2 block.
template <typename T>
__global__ void upsample_nearest2x_forward_nhwc(const T* __restrict__ x, T* __restrict__ y, int64_t batch,
                                                int64_t channels, int64_t h, int64_t w) {
  const int64_t total = batch * h * w * channels;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t c = i % channels, col = (i / channels) % w, row = (i / (channels * w)) % h,
                  n = i / (channels * w * h);
    const T v = x[i];
    T* out = y + ((n * 2 * h + 2 * row) * (2 * w) + 2 * col) * channels + c;
    const int64_t next_row = 2 * w * channels;
    out[0] = v;
    out[channels] = v;
    out[next_row] = v;
    out[next_row + channels] = v;
  }
}

// NCHW. dx[p, i, j] = sum of dy over the 2 × 2 block that (i, j) was copied to, in f32.
template <typename T>
__global__ void upsample_nearest2x_backward(const T* __restrict__ dy, T* __restrict__ dx, int64_t batch,
                                            int64_t channels, int64_t h, int64_t w) {
  const int64_t total = batch * channels * h * w;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t col = i % w, row = (i / w) % h, p = i / (h * w);
    const T* g = dy + (p * 2 * h + 2 * row) * (2 * w) + 2 * col;
    const float sum = (vk::to_float(g[0]) + vk::to_float(g[1])) + (vk::to_float(g[2 * w]) + vk::to_float(g[2 * w + 1]));
    dx[i] = vk::from_float<T>(sum);
  }
}

// NHWC. As upsample_nearest2x_backward with dy and dx in NHWC order.
template <typename T>
__global__ void upsample_nearest2x_backward_nhwc(const T* __restrict__ dy, T* __restrict__ dx, int64_t batch,
                                                 int64_t channels, int64_t h, int64_t w) {
  const int64_t total = batch * h * w * channels;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t c = i % channels, col = (i / channels) % w, row = (i / (channels * w)) % h,
                  n = i / (channels * w * h);
    const T* g = dy + ((n * 2 * h + 2 * row) * (2 * w) + 2 * col) * channels + c;
    const int64_t next_row = 2 * w * channels;
    const float sum = (vk::to_float(g[0]) + vk::to_float(g[channels])) +
                      (vk::to_float(g[next_row]) + vk::to_float(g[next_row + channels]));
    dx[i] = vk::from_float<T>(sum);
  }
}
