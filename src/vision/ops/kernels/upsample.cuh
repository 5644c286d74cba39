// Nearest-neighbour ×2 upsampling of NCHW planes, forward and backward.
#pragma once

#include "vision/cuda/kernel_common.cuh"

// y[p, i, j] = x[p, i / 2, j / 2] for p < planes (batch · channels), y being planes × 2h × 2w. One thread per input
// element writes its 2 × 2 block.
template <typename T>
__global__ void upsample_nearest2x_forward(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int64_t h,
                                           int64_t w) {
  const int64_t total = planes * h * w;
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

// dx[p, i, j] = sum of dy over the 2 × 2 block that (i, j) was copied to, in f32.
template <typename T>
__global__ void upsample_nearest2x_backward(const T* __restrict__ dy, T* __restrict__ dx, int64_t planes, int64_t h,
                                            int64_t w) {
  const int64_t total = planes * h * w;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t col = i % w, row = (i / w) % h, p = i / (h * w);
    const T* g = dy + (p * 2 * h + 2 * row) * (2 * w) + 2 * col;
    const float sum = (vk::to_float(g[0]) + vk::to_float(g[1])) + (vk::to_float(g[2 * w]) + vk::to_float(g[2 * w + 1]));
    dx[i] = vk::from_float<T>(sum);
  }
}
