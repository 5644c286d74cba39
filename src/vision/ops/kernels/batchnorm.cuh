// BatchNorm helpers — folding inference BatchNorm into a convolution's weights and bias, and the batch counter.
#pragma once

#include "vision/cuda/kernel_common.cuh"

// For each output channel k (f = γ[k] / sqrt(var[k] + eps)):
//   w_out[k, :] = w[k, :] · f,   b_out[k] = β[k] + (b[k] − mean[k]) · f   (b = 0 when bias is null).
// One thread per weight element; the first per_out threads of each channel also write the bias.
template <typename T>
__global__ void batchnorm_fold(const T* __restrict__ w, const T* __restrict__ bias, const T* __restrict__ gamma,
                               const T* __restrict__ beta, const T* __restrict__ mean, const T* __restrict__ var,
                               T* __restrict__ w_out, T* __restrict__ b_out, int64_t out_channels, int64_t per_out,
                               float eps) {
  for (int64_t i = vk::thread_index(); i < out_channels * per_out; i += vk::thread_count()) {
    const int64_t k = i / per_out;
    const float f = vk::to_float(gamma[k]) * rsqrtf(vk::to_float(var[k]) + eps);
    w_out[i] = vk::from_float<T>(vk::to_float(w[i]) * f);
    if (i % per_out == 0) {
      const float b = bias ? vk::to_float(bias[k]) : 0.0f;
      b_out[k] = vk::from_float<T>(vk::to_float(beta[k]) + (b - vk::to_float(mean[k])) * f);
    }
  }
}

// counter[0] += 1 (BatchNorm's num_batches_tracked, an i64 buffer).
template <typename T>
__global__ void increment_counter(T* counter) {
  if (vk::thread_index() == 0) counter[0] += 1;
}
