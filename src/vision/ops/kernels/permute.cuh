// Permute — y = x with its dims reordered (rank ≤ 4 after padding with leading 1s), one element per thread.
#pragma once

#include "vision/cuda/kernel_common.cuh"

// y has dims (n / (d1·d2·d3), d1, d2, d3) in row-major order; output index (i0, i1, i2, i3) reads x at
// i0·s0 + i1·s1 + i2·s2 + i3·s3, where s_k is the stride in x of the input dim that output dim k comes from.
template <typename T>
__global__ void permute_copy(const T* __restrict__ x, T* __restrict__ y, int64_t n, int64_t d1, int64_t d2, int64_t d3,
                             int64_t s0, int64_t s1, int64_t s2, int64_t s3) {
  for (int64_t i = vk::thread_index(); i < n; i += vk::thread_count()) {
    const int64_t i3 = i % d3, i2 = (i / d3) % d2, i1 = (i / (d3 * d2)) % d1, i0 = i / (d3 * d2 * d1);
    y[i] = x[i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3];
  }
}
