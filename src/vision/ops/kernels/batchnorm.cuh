// BatchNorm kernels — folding inference BatchNorm into a convolution's weights and bias, the batch counter, and
// BatchNorm itself (training statistics, normalisation, backward) in every dtype and memory order.
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

// ---- BatchNorm (spatial), computed in f32 whatever the element type, in either memory order.
//
// An (N, C, H, W) activation is seen as `units` × `cols` vectors of V elements (V a template constant: 16 bytes of
// the element type, or 1 when the shape or a pointer does not allow it; batchnorm_cuda.cpp chooses):
//   NHWC: unit = one (n, h, w) row, col = a group of V consecutive channels (cols = C / V);
//   NCHW: unit = V consecutive (h, w) positions of one image, col = a channel (cols = C; V divides H·W).
// A block of 256 threads covers `tc` = 2^tc_shift columns (1 in NCHW) and one split of the units: thread t takes
// column blockIdx.x·tc + t % tc and units begin + t / tc, stepping by 256 / tc, so that a warp reads contiguous
// memory in both orders. Every kernel below uses that grid; the reductions write one partial result per (split,
// channel) and a one-warp-per-channel kernel adds the splits in f64, in a fixed order (deterministic, no atomics).

namespace vk {

template <typename T, int V>
struct alignas(sizeof(T) * V) BnVec {
  T v[V];
};

template <typename T, int NHWC, int V>
struct BnGrid {
  uint32_t units, cols, inner_v;  // inner_v = H·W / V (NCHW only)
  int tc_shift;
  uint32_t col, begin, end, step;
  bool active;

  __device__ __forceinline__ BnGrid(int32_t units_, int32_t cols_, int32_t inner_v_, int32_t tc_shift_,
                                    int32_t units_per_split)
      : units(units_), cols(cols_), inner_v(inner_v_), tc_shift(tc_shift_) {
    const uint32_t t = threadIdx.x, tc = 1u << tc_shift;
    col = blockIdx.x * tc + (t & (tc - 1));
    step = blockDim.x >> tc_shift;
    const uint32_t first = blockIdx.y * uint32_t(units_per_split);
    begin = first + (t >> tc_shift);
    end = min(units, first + uint32_t(units_per_split));
    active = col < cols;
  }
  // The vector index of (unit u, column col).
  __device__ __forceinline__ uint32_t at(uint32_t u) const {
    if (NHWC) return u * cols + col;
    const uint32_t n = u / inner_v;
    return (n * cols + col) * inner_v + (u - n * inner_v);
  }
  // The channel of element j of this thread's vectors.
  __device__ __forceinline__ uint32_t channel(int j) const { return NHWC ? col * V + j : col; }
  __device__ __forceinline__ uint32_t channels() const { return NHWC ? cols * V : cols; }
};

// The apply pass's arithmetic: f64 for f32 activations (y correctly rounded), f32 for f16 and bf16.
template <typename T>
struct BnApplyMath {
  using type = float;
  static __device__ __forceinline__ float root(float v) { return sqrtf(v); }
};
template <>
struct BnApplyMath<float> {
  using type = double;
  static __device__ __forceinline__ double root(double v) { return sqrt(v); }
};

template <typename T, int V>
__device__ __forceinline__ BnVec<T, V> bn_load(const T* __restrict__ p, uint32_t i) {
  return reinterpret_cast<const BnVec<T, V>*>(p)[i];
}

// SiLU fused after the normalisation (the ACT = 1 kernels), in the element-wise kernels' exact formulas
// (elementwise.cuh): z = y·σ(y) forward; backward recomputes y from x and the statistics and takes
// dy = dz·σ(y)·(1 + y·(1 − σ(y))) in f32 before BatchNorm's own backward, so neither y nor dy touches memory.
__device__ __forceinline__ float bn_silu(float y) { return y / (1.0f + expf(-y)); }
__device__ __forceinline__ float bn_silu_backward(float y, float dz) {
  const float s = 1.0f / (1.0f + expf(-y));
  return dz * s * (1.0f + y * (1.0f - s));
}

// Calls f(u) for the thread's units, four loads in flight: load(u) returns what consume takes.
template <typename Load, typename Consume>
__device__ __forceinline__ void bn_for_units(uint32_t begin, uint32_t end, uint32_t step, Load load, Consume consume) {
  uint32_t u = begin;
  for (; u + 3 * step < end; u += 4 * step) {
    auto a = load(u), b = load(u + step), c = load(u + 2 * step), d = load(u + 3 * step);
    consume(u, a), consume(u + step, b), consume(u + 2 * step, c), consume(u + 3 * step, d);
  }
  for (; u < end; u += step) consume(u, load(u));
}

// Sums v[0..N) over the threads of a block that share a column, in a fixed order: afterwards threads t < tc hold
// their column's totals. Every thread of the (256-thread) block calls it.
template <int N>
__device__ __forceinline__ void bn_sum_columns(float (&v)[N], int tc_shift) {
  const int t = static_cast<int>(threadIdx.x), lane = t & 31, warp = t >> 5;
  for (int off = 16; off >= (1 << tc_shift); off >>= 1)
    for (int j = 0; j < N; ++j) v[j] += __shfl_xor_sync(0xffffffffu, v[j], off);
  __shared__ float s[8][32][N];
  if (lane < (1 << tc_shift))
    for (int j = 0; j < N; ++j) s[warp][lane][j] = v[j];
  __syncthreads();
  if (t < (1 << tc_shift) && t < 32)
    for (int j = 0; j < N; ++j) {
      float total = 0.0f;
      for (int w = 0; w < 8; ++w) total += s[w][t][j];
      v[j] = total;
    }
}

// s += y with Kahan's compensation c: a thread's running sums stay exact to about one rounding however many values
// it adds (the kernels are memory-bound, so the three extra additions cost nothing).
__device__ __forceinline__ void bn_kahan_add(float& s, float& c, float y) {
  const float z = y - c, t = s + z;
  c = (t - s) - z;
  s = t;
}

// Chan's combination of two sets' (count, mean, M2 = Σ (x − mean)²) into the first: exact in real arithmetic, and free
// of the cancellation of Σ(x − k)² − n·(mean − k)² however far the mean lies from a shift k. Called with the lower
// lane's set first, so that both partners of a shuffle compute the same value.
template <typename F>
__device__ __forceinline__ void bn_chan(F& n, F& mean, F& m2, F nb, F mean_b, F m2_b) {
  if (nb == F(0)) return;
  if (n == F(0)) {
    n = nb, mean = mean_b, m2 = m2_b;
    return;
  }
  const F total = n + nb, delta = mean_b - mean, wb = nb / total;
  mean += delta * wb;
  m2 += m2_b + delta * delta * (n * wb);
  n = total;
}

// Per (split, channel): the split's mean and M2 = Σ (x − mean)² into partial[(split·C + c)·2 + {0, 1}] (its count
// follows from the grid). Each thread sums x − k and (x − k)² over its values with Kahan's compensation
// (bn_kahan_add), k = its own first value (a random sample of the channel: the shift amplifies the rounding of M2 by
// 1 + (k − mean)²/var, 2 on average, where one shift for the whole channel — its first element, a border pixel — can
// be an outlier), turns them into (n, mean, M2), and the threads of a column combine theirs with Chan's formula in a
// fixed order (deterministic).
template <typename T, int NHWC, int V>
__device__ __forceinline__ void batchnorm_stats_impl(const T* __restrict__ x, float* __restrict__ partial,
                                                     int32_t units, int32_t cols, int32_t inner_v, int32_t tc_shift,
                                                     int32_t units_per_split) {
  const BnGrid<T, NHWC, V> g(units, cols, inner_v, tc_shift, units_per_split);
  constexpr int C = NHWC ? V : 1;  // channels per thread
  float k[V], acc[2 * V], comp[2 * V];
  for (int j = 0; j < 2 * V; ++j) acc[j] = 0.0f, comp[j] = 0.0f;
  for (int j = 0; j < V; ++j) k[j] = 0.0f;
  float n = 0.0f;
  if (g.active && g.begin < g.end) {
    const BnVec<T, V> first = bn_load<T, V>(x, g.at(g.begin));
    for (int j = 0; j < V; ++j) k[j] = to_float(first.v[NHWC ? j : 0]);
    n = static_cast<float>((g.end - g.begin + g.step - 1) / g.step) * (NHWC ? 1.0f : float(V));
    bn_for_units(
        g.begin, g.end, g.step, [&](uint32_t u) { return bn_load<T, V>(x, g.at(u)); },
        [&](uint32_t, const BnVec<T, V>& a) {
          for (int j = 0; j < V; ++j) {
            const float d = to_float(a.v[j]) - k[j];
            bn_kahan_add(acc[2 * j], comp[2 * j], d);
            bn_kahan_add(acc[2 * j + 1], comp[2 * j + 1], d * d);
          }
        });
  }
  if (!NHWC)  // one channel (and one shift) per thread: fold the vector's elements
    for (int j = 1; j < V; ++j) acc[0] += acc[2 * j], acc[1] += acc[2 * j + 1];
  float mean[C], m2[C];
  for (int j = 0; j < C; ++j) {
    const float s1 = acc[2 * j], s2 = acc[2 * j + 1];
    mean[j] = n > 0.0f ? k[j] + s1 / n : 0.0f;
    m2[j] = n > 0.0f ? fmaxf(s2 - s1 * (s1 / n), 0.0f) : 0.0f;
  }
  // The threads of a column: the lanes t, t + tc, … of each warp (shuffles), then the 8 warps in order.
  const int t = static_cast<int>(threadIdx.x), lane = t & 31, warp = t >> 5;
  for (int off = 16; off >= (1 << tc_shift); off >>= 1) {
    const float nb = __shfl_xor_sync(0xffffffffu, n, off);
    const bool upper = (lane & off) != 0;
    float n_out = n;
    for (int j = 0; j < C; ++j) {
      const float mb = __shfl_xor_sync(0xffffffffu, mean[j], off), qb = __shfl_xor_sync(0xffffffffu, m2[j], off);
      float na = upper ? nb : n, ma = upper ? mb : mean[j], qa = upper ? qb : m2[j];
      bn_chan(na, ma, qa, upper ? n : nb, upper ? mean[j] : mb, upper ? m2[j] : qb);
      mean[j] = ma, m2[j] = qa, n_out = na;
    }
    n = n_out;
  }
  __shared__ float sn[8][32], smean[8][32][C], sm2[8][32][C];
  if (lane < (1 << tc_shift)) {
    sn[warp][lane] = n;
    for (int j = 0; j < C; ++j) smean[warp][lane][j] = mean[j], sm2[warp][lane][j] = m2[j];
  }
  __syncthreads();
  if (t < (1 << tc_shift) && t < 32 && g.active)
    for (int j = 0; j < C; ++j) {
      float nn = sn[0][t], mm = smean[0][t][j], qq = sm2[0][t][j];
      for (int w = 1; w < 8; ++w) bn_chan(nn, mm, qq, sn[w][t], smean[w][t][j], sm2[w][t][j]);
      const uint32_t c = g.channel(j);
      partial[(uint64_t(blockIdx.y) * g.channels() + c) * 2] = mm;
      partial[(uint64_t(blockIdx.y) * g.channels() + c) * 2 + 1] = qq;
    }
}

// y = (x − mean[c])·a[c] + β[c] (then z = silu(y) when ACT) with, by `from_var`: 0, a = scale_src[c] (γ·invstd,
// rounded once by batchnorm_stats_finalize) in training; 1, a = γ[c]/sqrt(scale_src[c] + eps) (scale_src the running
// variance); 2, a = γ[c]·scale_src[c] (scale_src the inverse std saved by cuDNN's training forward). f32 activations
// compute y in f64 from the f32 operands (a too) and round once — correctly rounded, never less exact than cuDNN's
// own normalisation, which the f32 NCHW training path replaces with this kernel (the kernel is memory-bound: the f64
// arithmetic costs nothing measurable); f16 and bf16 compute in f32.
template <typename T, int NHWC, int V, int ACT>
__device__ __forceinline__ void batchnorm_apply_impl(const T* __restrict__ x, T* __restrict__ y,
                                                     const float* __restrict__ mean,
                                                     const float* __restrict__ scale_src,
                                                     const float* __restrict__ gamma, const float* __restrict__ beta,
                                                     int32_t units, int32_t cols, int32_t inner_v, int32_t tc_shift,
                                                     int32_t units_per_split, float eps, int32_t from_var) {
  const BnGrid<T, NHWC, V> g(units, cols, inner_v, tc_shift, units_per_split);
  if (!g.active) return;
  using F = typename BnApplyMath<T>::type;
  F mu[V], sc[V], be[V];
  for (int j = 0; j < V; ++j) {
    const uint32_t c = g.channel(j);
    mu[j] = mean[c], be[j] = beta[c];
    sc[j] = from_var == 1   ? F(gamma[c]) / BnApplyMath<T>::root(F(scale_src[c]) + F(eps))
            : from_var == 2 ? F(gamma[c]) * F(scale_src[c])
                            : F(scale_src[c]);
  }
  bn_for_units(
      g.begin, g.end, g.step, [&](uint32_t u) { return bn_load<T, V>(x, g.at(u)); },
      [&](uint32_t u, const BnVec<T, V>& a) {
        BnVec<T, V> o;
        for (int j = 0; j < V; ++j) {
          const float yj = static_cast<float>((F(to_float(a.v[j])) - mu[j]) * sc[j] + be[j]);
          o.v[j] = from_float<T>(ACT ? bn_silu(yj) : yj);
        }
        reinterpret_cast<BnVec<T, V>*>(y)[g.at(u)] = o;
      });
}

// y = (x − mean)·γ·invstd + β, as the forward computed it (for the fused SiLU's backward).
template <int V>
struct BnAffine {
  float mu[V], a[V], be[V];
  __device__ __forceinline__ void load(const float* __restrict__ mean, const float* __restrict__ invstd,
                                       const float* __restrict__ gamma, const float* __restrict__ beta, uint32_t c,
                                       int j, bool act) {
    mu[j] = mean[c];
    a[j] = act ? gamma[c] * invstd[c] : 0.0f;
    be[j] = act ? beta[c] : 0.0f;
  }
  // The gradient reaching BatchNorm's output: dy itself, or through the fused SiLU.
  template <int ACT>
  __device__ __forceinline__ float grad(float x, float dy, int j) const {
    return ACT ? bn_silu_backward((x - mu[j]) * a[j] + be[j], dy) : dy;
  }
};

// Per (split, channel): Σ dy and Σ dy·(x − mean[c]) into partial[(split·C + c)·2 + {0, 1}]; with ACT, dy is the
// gradient through the fused SiLU of the incoming one (invstd, γ and β recompute the forward's y; unused otherwise).
template <typename T, int NHWC, int V, int ACT>
__device__ __forceinline__ void batchnorm_backward_sums_impl(const T* __restrict__ x, const T* __restrict__ dy,
                                                             const float* __restrict__ mean,
                                                             const float* __restrict__ invstd,
                                                             const float* __restrict__ gamma,
                                                             const float* __restrict__ beta,
                                                             float* __restrict__ partial, int32_t units, int32_t cols,
                                                             int32_t inner_v, int32_t tc_shift,
                                                             int32_t units_per_split) {
  const BnGrid<T, NHWC, V> g(units, cols, inner_v, tc_shift, units_per_split);
  BnAffine<V> f;
  float acc[2 * V];
  for (int j = 0; j < 2 * V; ++j) acc[j] = 0.0f;
  struct Pair {
    BnVec<T, V> x, dy;
  };
  if (g.active) {
    for (int j = 0; j < V; ++j) f.load(mean, invstd, gamma, beta, g.channel(j), j, ACT);
    bn_for_units(
        g.begin, g.end, g.step,
        [&](uint32_t u) {
          const uint32_t i = g.at(u);
          return Pair{bn_load<T, V>(x, i), bn_load<T, V>(dy, i)};
        },
        [&](uint32_t, const Pair& p) {
          for (int j = 0; j < V; ++j) {
            const float xj = to_float(p.x.v[j]), gj = f.template grad<ACT>(xj, to_float(p.dy.v[j]), j);
            acc[2 * j] += gj;
            acc[2 * j + 1] += gj * (xj - f.mu[j]);
          }
        });
  }
  if (!NHWC) {
    for (int j = 1; j < V; ++j) acc[0] += acc[2 * j], acc[1] += acc[2 * j + 1];
    float two[2] = {acc[0], acc[1]};
    bn_sum_columns(two, tc_shift);
    acc[0] = two[0], acc[1] = two[1];
  } else {
    bn_sum_columns(acc, tc_shift);
  }
  if (threadIdx.x < (1u << tc_shift) && g.active)
    for (int j = 0; j < (NHWC ? V : 1); ++j) {
      const uint32_t c = g.channel(j);
      partial[(uint64_t(blockIdx.y) * g.channels() + c) * 2] = acc[2 * j];
      partial[(uint64_t(blockIdx.y) * g.channels() + c) * 2 + 1] = acc[2 * j + 1];
    }
}

// dx = γ·s·(dy − dβ/M − (x − mean)·s·dγ/M), s = invstd, M = count (the gradient through the batch statistics),
// as dx = A·dy + B·(x − mean) + D with per-channel A, B, D; with ACT, dy through the fused SiLU as in the sums.
template <typename T, int NHWC, int V, int ACT>
__device__ __forceinline__ void batchnorm_backward_apply_impl(
    const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx, const float* __restrict__ mean,
    const float* __restrict__ invstd, const float* __restrict__ gamma, const float* __restrict__ beta,
    const float* __restrict__ dgamma, const float* __restrict__ dbeta, int32_t units, int32_t cols, int32_t inner_v,
    int32_t tc_shift, int32_t units_per_split, int64_t count) {
  const BnGrid<T, NHWC, V> g(units, cols, inner_v, tc_shift, units_per_split);
  if (!g.active) return;
  const float inv_m = 1.0f / static_cast<float>(count);
  BnAffine<V> f;
  float A[V], B[V], D[V];
  for (int j = 0; j < V; ++j) {
    const uint32_t c = g.channel(j);
    const float s = invstd[c], gs = gamma[c] * s;
    f.load(mean, invstd, gamma, beta, c, j, ACT);
    A[j] = gs, B[j] = -gs * s * dgamma[c] * inv_m, D[j] = -gs * dbeta[c] * inv_m;
  }
  struct Pair {
    BnVec<T, V> x, dy;
  };
  bn_for_units(
      g.begin, g.end, g.step,
      [&](uint32_t u) {
        const uint32_t i = g.at(u);
        return Pair{bn_load<T, V>(x, i), bn_load<T, V>(dy, i)};
      },
      [&](uint32_t u, const Pair& p) {
        BnVec<T, V> o;
        for (int j = 0; j < V; ++j) {
          const float xj = to_float(p.x.v[j]), gj = f.template grad<ACT>(xj, to_float(p.dy.v[j]), j);
          o.v[j] = from_float<T>(A[j] * gj + B[j] * (xj - f.mu[j]) + D[j]);
        }
        reinterpret_cast<BnVec<T, V>*>(dx)[g.at(u)] = o;
      });
}

// One warp per channel: a[c] = Σ_s partial[(s·C + c)·2], b[c] = Σ_s partial[(s·C + c)·2 + 1] in f64, lanes taking
// every 32nd split and a fixed shuffle tree combining them. Valid in lane 0.
__device__ __forceinline__ void bn_sum_splits(const float* __restrict__ partial, int32_t splits, int32_t channels,
                                              uint32_t c, double& a, double& b) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  a = 0.0, b = 0.0;
  for (int s = lane; s < splits; s += 32) {
    a += partial[(uint64_t(s) * channels + c) * 2];
    b += partial[(uint64_t(s) * channels + c) * 2 + 1];
  }
  for (int off = 16; off >= 1; off >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, off);
    b += __shfl_xor_sync(0xffffffffu, b, off);
  }
}

}  // namespace vk

// Batch statistics, pass 1 (see batchnorm_stats_impl), NCHW and NHWC.
template <typename T, int V>
__global__ void batchnorm_stats(const T* __restrict__ x, float* __restrict__ partial, int32_t units, int32_t cols,
                                int32_t inner_v, int32_t tc_shift, int32_t units_per_split) {
  vk::batchnorm_stats_impl<T, 0, V>(x, partial, units, cols, inner_v, tc_shift, units_per_split);
}
template <typename T, int V>
__global__ void batchnorm_stats_nhwc(const T* __restrict__ x, float* __restrict__ partial, int32_t units,
                                     int32_t cols, int32_t inner_v, int32_t tc_shift, int32_t units_per_split) {
  vk::batchnorm_stats_impl<T, 1, V>(x, partial, units, cols, inner_v, tc_shift, units_per_split);
}

// Batch statistics, pass 2 (T = float; one warp per channel, 8 per block): the splits' (mean, M2) combined with Chan's
// formula in f64 — each lane its splits in order, then the lanes in a fixed tree; split s holds (count / units) values
// per unit of it — give the batch mean and inverse std 1/sqrt(var + eps) (biased variance), and the apply pass's scale
// γ·invstd (rounded once, from f64); the running statistics are updated as PyTorch does: running = (1 − momentum)·
// running + momentum·batch, with the unbiased variance M2/(M − 1). SyncBatchNorm: `ranks` ranks' partial results one
// after the other (gathered in rank order, each rank's splits cut alike), all of them combined; 1 otherwise.
template <typename T>
__global__ void batchnorm_stats_finalize(const T* __restrict__ partial, const T* __restrict__ gamma,
                                         T* __restrict__ scale, T* __restrict__ save_mean, T* __restrict__ save_invstd,
                                         T* __restrict__ running_mean, T* __restrict__ running_var, int32_t splits,
                                         int32_t channels, int64_t count, int32_t units, int32_t units_per_split,
                                         float momentum, float eps, int32_t ranks) {
  const uint32_t c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (c >= uint32_t(channels)) return;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const double per_unit = static_cast<double>(count) / static_cast<double>(units);
  double n = 0.0, mean = 0.0, m2 = 0.0;
  for (int s = lane; s < splits * ranks; s += 32) {
    const int64_t first = int64_t(s % splits) * units_per_split;
    const int64_t last = first + units_per_split < int64_t(units) ? first + units_per_split : int64_t(units);
    vk::bn_chan(n, mean, m2, static_cast<double>(last - first) * per_unit,
                static_cast<double>(partial[(uint64_t(s) * channels + c) * 2]),
                static_cast<double>(partial[(uint64_t(s) * channels + c) * 2 + 1]));
  }
  for (int off = 16; off >= 1; off >>= 1) {
    const double nb = __shfl_xor_sync(0xffffffffu, n, off), mb = __shfl_xor_sync(0xffffffffu, mean, off),
                 qb = __shfl_xor_sync(0xffffffffu, m2, off);
    if (lane & off) {
      double na = nb, ma = mb, qa = qb;
      vk::bn_chan(na, ma, qa, n, mean, m2);
      n = na, mean = ma, m2 = qa;
    } else {
      vk::bn_chan(n, mean, m2, nb, mb, qb);
    }
  }
  if (lane != 0) return;
  const double var = m2 / n;
  save_mean[c] = static_cast<float>(mean);
  const double invstd = 1.0 / sqrt(var + static_cast<double>(eps));
  save_invstd[c] = static_cast<float>(invstd);
  scale[c] = static_cast<float>(static_cast<double>(gamma[c]) * invstd);
  const double m = momentum;
  running_mean[c] = static_cast<float>((1.0 - m) * running_mean[c] + m * mean);
  running_var[c] = static_cast<float>((1.0 - m) * running_var[c] + m * m2 / (n - 1.0));
}

// y = (x − mean)·a + β per channel (batchnorm_apply_impl's from_var says where a comes from): training (batch mean,
// a = γ·invstd from batchnorm_stats_finalize), inference (running mean and variance) or cuDNN's saved statistics;
// the _silu kernels write silu(y).
template <typename T, int V>
__global__ void batchnorm_apply(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ mean,
                                const float* __restrict__ scale_src, const float* __restrict__ gamma,
                                const float* __restrict__ beta, int32_t units, int32_t cols, int32_t inner_v,
                                int32_t tc_shift, int32_t units_per_split, float eps, int32_t from_var) {
  vk::batchnorm_apply_impl<T, 0, V, 0>(x, y, mean, scale_src, gamma, beta, units, cols, inner_v, tc_shift,
                                       units_per_split, eps, from_var);
}
template <typename T, int V>
__global__ void batchnorm_apply_nhwc(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ mean,
                                     const float* __restrict__ scale_src, const float* __restrict__ gamma,
                                     const float* __restrict__ beta, int32_t units, int32_t cols, int32_t inner_v,
                                     int32_t tc_shift, int32_t units_per_split, float eps, int32_t from_var) {
  vk::batchnorm_apply_impl<T, 1, V, 0>(x, y, mean, scale_src, gamma, beta, units, cols, inner_v, tc_shift,
                                       units_per_split, eps, from_var);
}
template <typename T, int V>
__global__ void batchnorm_apply_silu(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ mean,
                                     const float* __restrict__ scale_src, const float* __restrict__ gamma,
                                     const float* __restrict__ beta, int32_t units, int32_t cols, int32_t inner_v,
                                     int32_t tc_shift, int32_t units_per_split, float eps, int32_t from_var) {
  vk::batchnorm_apply_impl<T, 0, V, 1>(x, y, mean, scale_src, gamma, beta, units, cols, inner_v, tc_shift,
                                       units_per_split, eps, from_var);
}
template <typename T, int V>
__global__ void batchnorm_apply_silu_nhwc(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ mean,
                                          const float* __restrict__ scale_src, const float* __restrict__ gamma,
                                          const float* __restrict__ beta, int32_t units, int32_t cols, int32_t inner_v,
                                          int32_t tc_shift, int32_t units_per_split, float eps, int32_t from_var) {
  vk::batchnorm_apply_impl<T, 1, V, 1>(x, y, mean, scale_src, gamma, beta, units, cols, inner_v, tc_shift,
                                       units_per_split, eps, from_var);
}

// Backward, pass 1: per-(split, channel) Σ dy and Σ dy·(x − mean) into partial; the _silu kernels take dy through
// the fused SiLU (invstd, γ and β recompute its input).
template <typename T, int V>
__global__ void batchnorm_backward_sums(const T* __restrict__ x, const T* __restrict__ dy,
                                        const float* __restrict__ mean, const float* __restrict__ invstd,
                                        const float* __restrict__ gamma, const float* __restrict__ beta,
                                        float* __restrict__ partial, int32_t units, int32_t cols, int32_t inner_v,
                                        int32_t tc_shift, int32_t units_per_split) {
  vk::batchnorm_backward_sums_impl<T, 0, V, 0>(x, dy, mean, invstd, gamma, beta, partial, units, cols, inner_v,
                                               tc_shift, units_per_split);
}
template <typename T, int V>
__global__ void batchnorm_backward_sums_nhwc(const T* __restrict__ x, const T* __restrict__ dy,
                                             const float* __restrict__ mean, const float* __restrict__ invstd,
                                             const float* __restrict__ gamma, const float* __restrict__ beta,
                                             float* __restrict__ partial, int32_t units, int32_t cols, int32_t inner_v,
                                             int32_t tc_shift, int32_t units_per_split) {
  vk::batchnorm_backward_sums_impl<T, 1, V, 0>(x, dy, mean, invstd, gamma, beta, partial, units, cols, inner_v,
                                               tc_shift, units_per_split);
}
template <typename T, int V>
__global__ void batchnorm_backward_sums_silu(const T* __restrict__ x, const T* __restrict__ dy,
                                             const float* __restrict__ mean, const float* __restrict__ invstd,
                                             const float* __restrict__ gamma, const float* __restrict__ beta,
                                             float* __restrict__ partial, int32_t units, int32_t cols, int32_t inner_v,
                                             int32_t tc_shift, int32_t units_per_split) {
  vk::batchnorm_backward_sums_impl<T, 0, V, 1>(x, dy, mean, invstd, gamma, beta, partial, units, cols, inner_v,
                                               tc_shift, units_per_split);
}
template <typename T, int V>
__global__ void batchnorm_backward_sums_silu_nhwc(const T* __restrict__ x, const T* __restrict__ dy,
                                                  const float* __restrict__ mean, const float* __restrict__ invstd,
                                                  const float* __restrict__ gamma, const float* __restrict__ beta,
                                                  float* __restrict__ partial, int32_t units, int32_t cols,
                                                  int32_t inner_v, int32_t tc_shift, int32_t units_per_split) {
  vk::batchnorm_backward_sums_impl<T, 1, V, 1>(x, dy, mean, invstd, gamma, beta, partial, units, cols, inner_v,
                                               tc_shift, units_per_split);
}

// Backward, pass 2 (T = float; one warp per channel, 8 per block): dβ = Σ dy and dγ = Σ dy·(x − mean)·invstd, the
// splits added in f64.
template <typename T>
__global__ void batchnorm_backward_finalize(const T* __restrict__ partial, const T* __restrict__ invstd,
                                            T* __restrict__ dgamma, T* __restrict__ dbeta, int32_t splits,
                                            int32_t channels) {
  const uint32_t c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (c >= uint32_t(channels)) return;
  double sum_dy, sum_dyx;
  vk::bn_sum_splits(partial, splits, channels, c, sum_dy, sum_dyx);
  if ((threadIdx.x & 31) != 0) return;
  dbeta[c] = static_cast<float>(sum_dy);
  dgamma[c] = static_cast<float>(sum_dyx * invstd[c]);
}

// Backward, pass 3: dx from dy, x, the batch statistics, γ and the parameter gradients of pass 2 (the _silu kernels:
// dy through the fused SiLU).
template <typename T, int V>
__global__ void batchnorm_backward_apply(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                                         const float* __restrict__ mean, const float* __restrict__ invstd,
                                         const float* __restrict__ gamma, const float* __restrict__ beta,
                                         const float* __restrict__ dgamma, const float* __restrict__ dbeta,
                                         int32_t units, int32_t cols, int32_t inner_v, int32_t tc_shift,
                                         int32_t units_per_split, int64_t count) {
  vk::batchnorm_backward_apply_impl<T, 0, V, 0>(x, dy, dx, mean, invstd, gamma, beta, dgamma, dbeta, units, cols,
                                                inner_v, tc_shift, units_per_split, count);
}
template <typename T, int V>
__global__ void batchnorm_backward_apply_nhwc(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                                              const float* __restrict__ mean, const float* __restrict__ invstd,
                                              const float* __restrict__ gamma, const float* __restrict__ beta,
                                              const float* __restrict__ dgamma, const float* __restrict__ dbeta,
                                              int32_t units, int32_t cols, int32_t inner_v, int32_t tc_shift,
                                              int32_t units_per_split, int64_t count) {
  vk::batchnorm_backward_apply_impl<T, 1, V, 0>(x, dy, dx, mean, invstd, gamma, beta, dgamma, dbeta, units, cols,
                                                inner_v, tc_shift, units_per_split, count);
}
template <typename T, int V>
__global__ void batchnorm_backward_apply_silu(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                                              const float* __restrict__ mean, const float* __restrict__ invstd,
                                              const float* __restrict__ gamma, const float* __restrict__ beta,
                                              const float* __restrict__ dgamma, const float* __restrict__ dbeta,
                                              int32_t units, int32_t cols, int32_t inner_v, int32_t tc_shift,
                                              int32_t units_per_split, int64_t count) {
  vk::batchnorm_backward_apply_impl<T, 0, V, 1>(x, dy, dx, mean, invstd, gamma, beta, dgamma, dbeta, units, cols,
                                                inner_v, tc_shift, units_per_split, count);
}
template <typename T, int V>
__global__ void batchnorm_backward_apply_silu_nhwc(const T* __restrict__ x, const T* __restrict__ dy,
                                                   T* __restrict__ dx, const float* __restrict__ mean,
                                                   const float* __restrict__ invstd, const float* __restrict__ gamma,
                                                   const float* __restrict__ beta, const float* __restrict__ dgamma,
                                                   const float* __restrict__ dbeta, int32_t units, int32_t cols,
                                                   int32_t inner_v, int32_t tc_shift, int32_t units_per_split,
                                                   int64_t count) {
  vk::batchnorm_backward_apply_impl<T, 1, V, 1>(x, dy, dx, mean, invstd, gamma, beta, dgamma, dbeta, units, cols,
                                                inner_v, tc_shift, units_per_split, count);
}
