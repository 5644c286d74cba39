// BatchNorm kernels — folding inference BatchNorm into a convolution's weights and bias, the batch counter, and
// BatchNorm itself (training statistics, normalisation, backward) for the dtypes cuDNN's legacy BatchNorm lacks.
#pragma once

#include "vision/cuda/kernel_common.cuh"
#include "vision/ops/kernels/channel_reduce.cuh"

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

// ---- BatchNorm in our own kernels (the dtypes cuDNN's legacy BatchNorm does not take: bf16), in either memory order,
// computed in f32. The statistics reduce each channel over rows × channels tiles (channel_reduce.cuh): partial
// results per (split, channel) in an f32 workspace, combined by a small kernel in a fixed order (deterministic).

namespace vk {

// Chan et al.'s combination of two (count, mean, M2) summaries; M2 = Σ (x − mean)².
__device__ __forceinline__ void welford_merge(float& n, float& mean, float& m2, float nb, float mb, float m2b) {
  const float total = n + nb;
  if (nb == 0.0f) return;
  const float d = mb - mean, fb = nb / total;
  mean += d * fb;
  m2 += m2b + d * d * n * fb;
  n = total;
}

// partial[(s·C + c)·2 + {0, 1}] = mean and M2 of channel c over the rows of split s (Welford per thread, Chan's
// combination over the block's lanes).
template <typename T, int NHWC>
__device__ __forceinline__ void batchnorm_stats_impl(const T* __restrict__ x, float* __restrict__ partial, int64_t rows,
                                                     int64_t channels, int64_t inner, int64_t rows_per_split) {
  using Tiling = ChannelTiling<NHWC>;
  const int t = static_cast<int>(threadIdx.x), local = t % Tiling::kTile, lane = t / Tiling::kTile;
  const int64_t c = int64_t(blockIdx.x) * Tiling::kTile + local;
  const int64_t begin = int64_t(blockIdx.y) * rows_per_split;
  const int64_t end = min(rows, begin + rows_per_split);
  float n = 0.0f, mean = 0.0f, m2 = 0.0f;
  if (c < channels)
    for (int64_t r = begin + lane; r < end; r += Tiling::kLanes) {
      const float v = to_float(x[channel_offset<NHWC>(r, c, channels, inner)]);
      n += 1.0f;
      const float d = v - mean;
      mean += d / n;
      m2 += d * (v - mean);
    }
  __shared__ float sn[Tiling::kThreads], smean[Tiling::kThreads], sm2[Tiling::kThreads];
  sn[t] = n, smean[t] = mean, sm2[t] = m2;
  __syncthreads();
  for (int stride = Tiling::kThreads / 2; stride >= Tiling::kTile; stride /= 2) {
    if (t < stride) welford_merge(sn[t], smean[t], sm2[t], sn[t + stride], smean[t + stride], sm2[t + stride]);
    __syncthreads();
  }
  if (t < Tiling::kTile && c < channels) {
    partial[(int64_t(blockIdx.y) * channels + c) * 2] = smean[t];
    partial[(int64_t(blockIdx.y) * channels + c) * 2 + 1] = sm2[t];
  }
}

// y = (x − mean[c]) · s[c] · γ[c] + β[c], s = scale_src[c] (an inverse std), or 1/sqrt(scale_src[c] + eps) (a
// variance) when from_var.
template <typename T, int NHWC>
__device__ __forceinline__ void batchnorm_apply_impl(const T* __restrict__ x, T* __restrict__ y,
                                                     const float* __restrict__ mean, const float* __restrict__ scale_src,
                                                     const float* __restrict__ gamma, const float* __restrict__ beta,
                                                     int64_t n, int64_t channels, int64_t inner, float eps,
                                                     int32_t from_var) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const int64_t c = channel_at<NHWC>(i, channels, inner);
    const float s = from_var ? 1.0f / sqrtf(scale_src[c] + eps) : scale_src[c];
    y[i] = from_float<T>((to_float(x[i]) - mean[c]) * s * gamma[c] + beta[c]);
  }
}

// partial[(s·C + c)·2 + {0, 1}] = Σ dy and Σ dy·(x − mean[c]) over the rows of split s.
template <typename T, int NHWC>
__device__ __forceinline__ void batchnorm_backward_sums_impl(const T* __restrict__ x, const T* __restrict__ dy,
                                                             const float* __restrict__ mean, float* __restrict__ partial,
                                                             int64_t rows, int64_t channels, int64_t inner,
                                                             int64_t rows_per_split) {
  using Tiling = ChannelTiling<NHWC>;
  const int t = static_cast<int>(threadIdx.x), local = t % Tiling::kTile, lane = t / Tiling::kTile;
  const int64_t c = int64_t(blockIdx.x) * Tiling::kTile + local;
  const int64_t begin = int64_t(blockIdx.y) * rows_per_split;
  const int64_t end = min(rows, begin + rows_per_split);
  float v[2] = {0.0f, 0.0f};
  if (c < channels) {
    const float mu = mean[c];
    for (int64_t r = begin + lane; r < end; r += Tiling::kLanes) {
      const int64_t o = channel_offset<NHWC>(r, c, channels, inner);
      const float g = to_float(dy[o]);
      v[0] += g;
      v[1] += g * (to_float(x[o]) - mu);
    }
  }
  sum_over_lanes<NHWC>(v);
  if (t < Tiling::kTile && c < channels) {
    partial[(int64_t(blockIdx.y) * channels + c) * 2] = v[0];
    partial[(int64_t(blockIdx.y) * channels + c) * 2 + 1] = v[1];
  }
}

// dx = γ·invstd·(dy − dβ/M − (x − mean)·invstd·dγ/M), M = rows (the gradient through the batch statistics).
template <typename T, int NHWC>
__device__ __forceinline__ void batchnorm_backward_apply_impl(
    const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx, const float* __restrict__ mean,
    const float* __restrict__ invstd, const float* __restrict__ gamma, const float* __restrict__ dgamma,
    const float* __restrict__ dbeta, int64_t n, int64_t channels, int64_t inner, int64_t rows) {
  const float inv_m = 1.0f / static_cast<float>(rows);
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const int64_t c = channel_at<NHWC>(i, channels, inner);
    const float s = invstd[c], xhat = (to_float(x[i]) - mean[c]) * s;
    dx[i] = from_float<T>(gamma[c] * s * (to_float(dy[i]) - dbeta[c] * inv_m - xhat * dgamma[c] * inv_m));
  }
}

}  // namespace vk

// Batch statistics, pass 1: per-(split, channel) mean and M2 of x (N, C, H, W in NCHW or NHWC) into partial.
template <typename T>
__global__ void batchnorm_stats(const T* __restrict__ x, float* __restrict__ partial, int64_t rows, int64_t channels,
                                int64_t inner, int64_t rows_per_split) {
  vk::batchnorm_stats_impl<T, 0>(x, partial, rows, channels, inner, rows_per_split);
}
template <typename T>
__global__ void batchnorm_stats_nhwc(const T* __restrict__ x, float* __restrict__ partial, int64_t rows,
                                     int64_t channels, int64_t inner, int64_t rows_per_split) {
  vk::batchnorm_stats_impl<T, 1>(x, partial, rows, channels, inner, rows_per_split);
}

// Batch statistics, pass 2 (T = float; one thread per channel): combines the splits in order (in f64) into the batch
// mean and inverse std 1/sqrt(var + eps) (biased variance), and updates the running statistics as PyTorch does:
// running = (1 − momentum)·running + momentum·batch, with the unbiased variance var·M/(M − 1).
template <typename T>
__global__ void batchnorm_stats_finalize(const T* __restrict__ partial, T* __restrict__ save_mean,
                                         T* __restrict__ save_invstd, T* __restrict__ running_mean,
                                         T* __restrict__ running_var, int64_t splits, int64_t rows,
                                         int64_t rows_per_split, int64_t channels, float momentum, float eps) {
  for (int64_t c = vk::thread_index(); c < channels; c += vk::thread_count()) {
    double n = 0.0, mean = 0.0, m2 = 0.0;
    for (int64_t s = 0; s < splits; ++s) {
      const double nb = static_cast<double>(min(rows_per_split, rows - s * rows_per_split));
      if (nb <= 0.0) continue;
      const double mb = partial[(s * channels + c) * 2], m2b = partial[(s * channels + c) * 2 + 1];
      const double total = n + nb, d = mb - mean;
      mean += d * nb / total;
      m2 += m2b + d * d * n * nb / total;
      n = total;
    }
    const double var = m2 / n;
    save_mean[c] = static_cast<float>(mean);
    save_invstd[c] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
    const double m = momentum;
    running_mean[c] = static_cast<float>((1.0 - m) * running_mean[c] + m * mean);
    running_var[c] = static_cast<float>((1.0 - m) * running_var[c] + m * var * n / (n - 1.0));
  }
}

// y = (x − mean)·s·γ + β per channel: training (batch mean and inverse std) or inference (running mean and
// variance, from_var = 1).
template <typename T>
__global__ void batchnorm_apply(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ mean,
                                const float* __restrict__ scale_src, const float* __restrict__ gamma,
                                const float* __restrict__ beta, int64_t n, int64_t channels, int64_t inner, float eps,
                                int32_t from_var) {
  vk::batchnorm_apply_impl<T, 0>(x, y, mean, scale_src, gamma, beta, n, channels, inner, eps, from_var);
}
template <typename T>
__global__ void batchnorm_apply_nhwc(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ mean,
                                     const float* __restrict__ scale_src, const float* __restrict__ gamma,
                                     const float* __restrict__ beta, int64_t n, int64_t channels, int64_t inner,
                                     float eps, int32_t from_var) {
  vk::batchnorm_apply_impl<T, 1>(x, y, mean, scale_src, gamma, beta, n, channels, inner, eps, from_var);
}

// Backward, pass 1: per-(split, channel) Σ dy and Σ dy·(x − mean) into partial.
template <typename T>
__global__ void batchnorm_backward_sums(const T* __restrict__ x, const T* __restrict__ dy,
                                        const float* __restrict__ mean, float* __restrict__ partial, int64_t rows,
                                        int64_t channels, int64_t inner, int64_t rows_per_split) {
  vk::batchnorm_backward_sums_impl<T, 0>(x, dy, mean, partial, rows, channels, inner, rows_per_split);
}
template <typename T>
__global__ void batchnorm_backward_sums_nhwc(const T* __restrict__ x, const T* __restrict__ dy,
                                             const float* __restrict__ mean, float* __restrict__ partial, int64_t rows,
                                             int64_t channels, int64_t inner, int64_t rows_per_split) {
  vk::batchnorm_backward_sums_impl<T, 1>(x, dy, mean, partial, rows, channels, inner, rows_per_split);
}

// Backward, pass 2 (T = float; one thread per channel): dβ = Σ dy and dγ = Σ dy·(x − mean)·invstd, the splits added
// in order (in f64).
template <typename T>
__global__ void batchnorm_backward_finalize(const T* __restrict__ partial, const T* __restrict__ invstd,
                                            T* __restrict__ dgamma, T* __restrict__ dbeta, int64_t splits,
                                            int64_t channels) {
  for (int64_t c = vk::thread_index(); c < channels; c += vk::thread_count()) {
    double sum_dy = 0.0, sum_dyx = 0.0;
    for (int64_t s = 0; s < splits; ++s) {
      sum_dy += partial[(s * channels + c) * 2];
      sum_dyx += partial[(s * channels + c) * 2 + 1];
    }
    dbeta[c] = static_cast<float>(sum_dy);
    dgamma[c] = static_cast<float>(sum_dyx * invstd[c]);
  }
}

// Backward, pass 3: dx from dy, x, the batch statistics, γ and the parameter gradients of pass 2.
template <typename T>
__global__ void batchnorm_backward_apply(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                                         const float* __restrict__ mean, const float* __restrict__ invstd,
                                         const float* __restrict__ gamma, const float* __restrict__ dgamma,
                                         const float* __restrict__ dbeta, int64_t n, int64_t channels, int64_t inner,
                                         int64_t rows) {
  vk::batchnorm_backward_apply_impl<T, 0>(x, dy, dx, mean, invstd, gamma, dgamma, dbeta, n, channels, inner, rows);
}
template <typename T>
__global__ void batchnorm_backward_apply_nhwc(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                                              const float* __restrict__ mean, const float* __restrict__ invstd,
                                              const float* __restrict__ gamma, const float* __restrict__ dgamma,
                                              const float* __restrict__ dbeta, int64_t n, int64_t channels,
                                              int64_t inner, int64_t rows) {
  vk::batchnorm_backward_apply_impl<T, 1>(x, dy, dx, mean, invstd, gamma, dgamma, dbeta, n, channels, inner, rows);
}
