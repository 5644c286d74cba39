// Scalar reductions — y = scale · Σ f(x) with f(x) = x or x² (mean, ½·Σx²), and their backward, in one block.
#pragma once

#include "vision/cuda/kernel_common.cuh"

// One block of 1024 threads: each sums a grid-stride slice in f64, then a tree in shared memory. Deterministic
// (fixed order) and exact enough for losses; not meant for large tensors.
template <typename T, int SQUARE>
__global__ void reduce_sum_forward(const T* __restrict__ x, T* __restrict__ y, int64_t n, float scale) {
  __shared__ double partial[1024];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double v = vk::to_float(x[i]);
    s += SQUARE ? v * v : v;
  }
  partial[threadIdx.x] = s;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[0] = vk::from_float<T>(static_cast<float>(partial[0] * scale));
}

// dx = dy · scale · f'(x), dy the scalar gradient of y.
template <typename T, int SQUARE>
__global__ void reduce_sum_backward(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx, int64_t n,
                                    float scale) {
  const float g = vk::to_float(dy[0]) * scale;
  for (int64_t i = vk::thread_index(); i < n; i += vk::thread_count())
    dx[i] = vk::from_float<T>(SQUARE ? 2.0f * g * vk::to_float(x[i]) : g);
}
