// Convolution-bias kernels — the epilogue y = act(y + b[c]) (act: identity or SiLU) and the bias gradient Σ dy per
// channel, for (N, C, H, W) activations in NCHW or NHWC, computed in f32.
#pragma once

#include "vision/cuda/kernel_common.cuh"
#include "vision/ops/kernels/channel_reduce.cuh"

namespace vk {

template <typename T, int NHWC, int SILU>
__device__ __forceinline__ void bias_act_impl(T* __restrict__ y, const T* __restrict__ bias, int64_t n,
                                              int64_t channels, int64_t inner) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    float v = to_float(y[i]) + to_float(bias[channel_at<NHWC>(i, channels, inner)]);
    if (SILU) v = v / (1.0f + expf(-v));
    y[i] = from_float<T>(v);
  }
}

template <typename T, int NHWC>
__device__ __forceinline__ void channel_sum_partials_impl(const T* __restrict__ x, float* __restrict__ partial,
                                                          int64_t rows, int64_t channels, int64_t inner,
                                                          int64_t rows_per_split) {
  using Tiling = ChannelTiling<NHWC>;
  const int t = static_cast<int>(threadIdx.x), local = t % Tiling::kTile, lane = t / Tiling::kTile;
  const int64_t c = int64_t(blockIdx.x) * Tiling::kTile + local;
  const int64_t begin = int64_t(blockIdx.y) * rows_per_split;
  const int64_t end = min(rows, begin + rows_per_split);
  float v[1] = {0.0f};
  if (c < channels)
    for (int64_t r = begin + lane; r < end; r += Tiling::kLanes)
      v[0] += to_float(x[channel_offset<NHWC>(r, c, channels, inner)]);
  sum_over_lanes<NHWC>(v);
  if (t < Tiling::kTile && c < channels) partial[int64_t(blockIdx.y) * channels + c] = v[0];
}

}  // namespace vk

// y = act(y + bias[c]) in place (bias: C elements of T), one element per thread.
template <typename T, int SILU>
__global__ void bias_act(T* __restrict__ y, const T* __restrict__ bias, int64_t n, int64_t channels, int64_t inner) {
  vk::bias_act_impl<T, 0, SILU>(y, bias, n, channels, inner);
}
template <typename T, int SILU>
__global__ void bias_act_nhwc(T* __restrict__ y, const T* __restrict__ bias, int64_t n, int64_t channels,
                              int64_t inner) {
  vk::bias_act_impl<T, 1, SILU>(y, bias, n, channels, inner);
}

// partial[s·C + c] = Σ x over channel c and the rows of split s (see channel_reduce.cuh).
template <typename T>
__global__ void channel_sum_partials(const T* __restrict__ x, float* __restrict__ partial, int64_t rows,
                                     int64_t channels, int64_t inner, int64_t rows_per_split) {
  vk::channel_sum_partials_impl<T, 0>(x, partial, rows, channels, inner, rows_per_split);
}
template <typename T>
__global__ void channel_sum_partials_nhwc(const T* __restrict__ x, float* __restrict__ partial, int64_t rows,
                                          int64_t channels, int64_t inner, int64_t rows_per_split) {
  vk::channel_sum_partials_impl<T, 1>(x, partial, rows, channels, inner, rows_per_split);
}

// out[c] = Σ_s partial[s·C + c], the splits added in order (in f64), rounded once to T. One thread per channel.
template <typename T>
__global__ void channel_sum_finalize(const float* __restrict__ partial, T* __restrict__ out, int64_t splits,
                                     int64_t channels) {
  for (int64_t c = vk::thread_index(); c < channels; c += vk::thread_count()) {
    double s = 0.0;
    for (int64_t k = 0; k < splits; ++k) s += partial[k * channels + c];
    out[c] = vk::from_float<T>(static_cast<float>(s));
  }
}
