#include "vision/train/optim_kernels.h"

#include <cmath>
#include <vector>

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/cpu/parallel.h"
#include "vision/train/optim_math.cuh"

namespace vision::train {

static_assert(sizeof(OptimTensor) == 64 && sizeof(OptimChunk) == 24 && sizeof(OptimGroup) == 64 &&
                  sizeof(EmaChunk) == 32,
              "the optimizer tables are shared with the GPU kernels: keep their layout");
static_assert(kMuonNormEps == 1e-7f, "optim_math::muon_norm_divisor adds 1e-7");

uint16_t to_bf16(float x) { return core::float_to_bf16(x); }
float from_bf16(uint16_t h) { return core::bf16_to_float(h); }

namespace {

// One block's reduction: thread-strided sums of f(j) for j in [0, n), then the shared-memory tree.
template <typename F>
float block_sum(int64_t n, F&& f) {
  float s[kOptimThreads];
  for (int t = 0; t < kOptimThreads; ++t) {
    float acc = 0.0f;
    for (int64_t j = t; j < n; j += kOptimThreads) acc = acc + f(j);
    s[t] = acc;
  }
  for (int w = kOptimThreads / 2; w > 0; w >>= 1)
    for (int t = 0; t < w; ++t) s[t] = s[t] + s[t + w];
  return s[0];
}

// Element e of a Muon tensor's workspace matrix (the transpose when rows > cols).
inline int64_t ns_index(const OptimTensor& t, int64_t e) {
  if (!t.transposed) return t.ns_offset + e;
  const int64_t i = e / t.cols, j = e % t.cols;
  return t.ns_offset + j * t.rows + i;
}

template <typename F>
void for_each_chunk(std::span<const OptimChunk> chunks, F&& f) {
  cpu::parallel_for(static_cast<int64_t>(chunks.size()), [&](int64_t c) { f(chunks[static_cast<size_t>(c)]); },
                    static_cast<int64_t>(chunks.size()) * kOptimChunk);
}

}  // namespace

void grad_sumsq_partials_cpu(const float* grads, std::span<const OptimTensor> tensors,
                             std::span<const OptimChunk> chunks, float* partials) {
  cpu::parallel_for(
      static_cast<int64_t>(chunks.size()),
      [&](int64_t c) {
        const OptimChunk& k = chunks[static_cast<size_t>(c)];
        const float* g = grads + tensors[static_cast<size_t>(k.tensor)].offset + k.start;
        partials[c] = block_sum(k.length, [&](int64_t j) { return g[j] * g[j]; });
      },
      static_cast<int64_t>(chunks.size()) * kOptimChunk);
}

float grad_sumsq_finalize_cpu(const float* partials, int64_t n) {
  return block_sum(n, [&](int64_t j) { return partials[j]; });
}

float grad_sumsq_cpu(const float* grads, std::span<const OptimTensor> tensors, std::span<const OptimChunk> chunks) {
  std::vector<float> partials(chunks.size());
  grad_sumsq_partials_cpu(grads, tensors, chunks, partials.data());
  return grad_sumsq_finalize_cpu(partials.data(), static_cast<int64_t>(partials.size()));
}

void sgd_step_cpu(float* params, const float* grads, float* momentum, const uint16_t* ns_out,
                  std::span<const OptimTensor> tensors, std::span<const OptimChunk> chunks,
                  std::span<const OptimGroup> groups, float coef) {
  for_each_chunk(chunks, [&](const OptimChunk& k) {
    const OptimTensor& t = tensors[static_cast<size_t>(k.tensor)];
    const OptimGroup& G = groups[static_cast<size_t>(t.group)];
    const bool muon = t.ns_offset >= 0;
    VISION_CHECK(!muon || ns_out != nullptr, "sgd_step: a Muon tensor without the Newton–Schulz output");
    const float muon_lr = G.muon_lr * t.muon_scale;
    for (int64_t e = k.start; e < k.start + k.length; ++e) {
      const int64_t i = t.offset + e;
      const float g = optim_math::scaled_grad(grads[i], coef);
      float p = params[i];
      if (muon) p = optim_math::muon_update(p, muon_lr, from_bf16(ns_out[ns_index(t, e)]));
      optim_math::sgd(g, p, momentum[i], G.lr, G.momentum, G.weight_decay);
      params[i] = p;
    }
  });
}

void adamw_step_cpu(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                    std::span<const OptimTensor> tensors, std::span<const OptimChunk> chunks,
                    std::span<const OptimGroup> groups, float coef) {
  for_each_chunk(chunks, [&](const OptimChunk& k) {
    const OptimTensor& t = tensors[static_cast<size_t>(k.tensor)];
    const OptimGroup& G = groups[static_cast<size_t>(t.group)];
    for (int64_t e = k.start; e < k.start + k.length; ++e) {
      const int64_t i = t.offset + e;
      optim_math::adamw(optim_math::scaled_grad(grads[i], coef), params[i], exp_avg[i], exp_avg_sq[i], G);
    }
  });
}

void muon_prepare_cpu(const float* grads, float* muon_momentum, uint16_t* ns_in, std::span<const OptimTensor> tensors,
                      std::span<const OptimChunk> chunks, std::span<const OptimGroup> groups, float coef) {
  for_each_chunk(chunks, [&](const OptimChunk& k) {
    const OptimTensor& t = tensors[static_cast<size_t>(k.tensor)];
    const OptimGroup& G = groups[static_cast<size_t>(t.group)];
    VISION_CHECK(t.ns_offset >= 0, "muon_prepare: chunk of a tensor outside the Muon group");
    for (int64_t e = k.start; e < k.start + k.length; ++e) {
      const int64_t i = t.offset + e;
      const float g = optim_math::scaled_grad(grads[i], coef);
      ns_in[ns_index(t, e)] = to_bf16(optim_math::muon_momentum(g, muon_momentum[i], G.momentum, G.one_minus_momentum));
    }
  });
}

void muon_normalize_cpu(uint16_t* ns, std::span<const OptimTensor> tensors, std::span<const int64_t> muon_tensors) {
  cpu::parallel_for(static_cast<int64_t>(muon_tensors.size()), [&](int64_t b) {
    const OptimTensor& t = tensors[static_cast<size_t>(muon_tensors[static_cast<size_t>(b)])];
    uint16_t* x = ns + t.ns_offset;
    const float s = block_sum(t.numel, [&](int64_t j) {
      const float v = from_bf16(x[j]);
      return v * v;
    });
    const float den = optim_math::muon_norm_divisor(s);
    for (int64_t j = 0; j < t.numel; ++j) x[j] = to_bf16(from_bf16(x[j]) / den);
  });
}

void newton_schulz_cpu(uint16_t* x_bits, int64_t batch, int64_t m, int64_t n, int steps) {
  VISION_CHECK(m > 0 && n > 0 && m <= n && batch >= 0 && steps >= 0,
               "newton_schulz: {} matrices of {}×{} (rows ≤ cols, transpose first)", batch, m, n);
  const auto mm = static_cast<size_t>(m * m), mn = static_cast<size_t>(m * n);
  std::vector<float> X(mn), XT(mn), Y(mn), A(mm), B(mm);
  for (int64_t b = 0; b < batch; ++b) {
    uint16_t* xb = x_bits + b * m * n;
    for (size_t i = 0; i < mn; ++i) X[i] = from_bf16(xb[i]);
    for (int it = 0; it < steps; ++it) {
      // A = bf16(X·Xᵀ): symmetric, the same products in the same order for (i, j) and (j, i). Each element adds its
      // products k ascending; row i keeps one accumulator per j ≤ i and walks Xᵀ's rows (contiguous in j), so the
      // accumulators are independent (vectorisable) and the order per element is the plain loop's.
      for (int64_t i = 0; i < m; ++i)
        for (int64_t k = 0; k < n; ++k) XT[static_cast<size_t>(k * m + i)] = X[static_cast<size_t>(i * n + k)];
      cpu::parallel_for(
          m,
          [&](int64_t i) {
            const float* xi = &X[static_cast<size_t>(i * n)];
            std::vector<float> acc(static_cast<size_t>(i + 1), 0.0f);
            for (int64_t k = 0; k < n; ++k) {
              const float x_ik = xi[k];
              const float* xtk = &XT[static_cast<size_t>(k * m)];
              for (int64_t j = 0; j <= i; ++j) acc[static_cast<size_t>(j)] = acc[static_cast<size_t>(j)] + x_ik * xtk[j];
            }
            for (int64_t j = 0; j <= i; ++j) A[static_cast<size_t>(i * m + j)] = round_bf16(acc[static_cast<size_t>(j)]);
          },
          m * m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = i + 1; j < m; ++j) A[static_cast<size_t>(i * m + j)] = A[static_cast<size_t>(j * m + i)];
      // B = bf16(c·(A·A) + b·A), the products accumulated k ascending per element.
      cpu::parallel_for(
          m,
          [&](int64_t i) {
            std::vector<float> acc(static_cast<size_t>(m), 0.0f);
            for (int64_t k = 0; k < m; ++k) {
              const float a_ik = A[static_cast<size_t>(i * m + k)];
              const float* ak = &A[static_cast<size_t>(k * m)];
              for (int64_t j = 0; j < m; ++j) acc[static_cast<size_t>(j)] = acc[static_cast<size_t>(j)] + a_ik * ak[j];
            }
            for (int64_t j = 0; j < m; ++j)
              B[static_cast<size_t>(i * m + j)] =
                  round_bf16(kNewtonSchulzC * acc[static_cast<size_t>(j)] + kNewtonSchulzB * A[static_cast<size_t>(i * m + j)]);
          },
          m * m * m);
      // X ← bf16(B·X + a·X).
      cpu::parallel_for(
          m,
          [&](int64_t i) {
            std::vector<float> acc(static_cast<size_t>(n), 0.0f);
            for (int64_t k = 0; k < m; ++k) {
              const float b_ik = B[static_cast<size_t>(i * m + k)];
              const float* xk = &X[static_cast<size_t>(k * n)];
              for (int64_t j = 0; j < n; ++j) acc[static_cast<size_t>(j)] = acc[static_cast<size_t>(j)] + b_ik * xk[j];
            }
            for (int64_t j = 0; j < n; ++j)
              Y[static_cast<size_t>(i * n + j)] =
                  round_bf16(acc[static_cast<size_t>(j)] + kNewtonSchulzA * X[static_cast<size_t>(i * n + j)]);
          },
          m * m * n);
      X.swap(Y);
    }
    for (size_t i = 0; i < mn; ++i) xb[i] = to_bf16(X[i]);
  }
}

void ema_update_cpu(float* ema, const float* params, const float* buffers, std::span<const EmaChunk> chunks, float d,
                    float omd) {
  cpu::parallel_for(
      static_cast<int64_t>(chunks.size()),
      [&](int64_t c) {
        const EmaChunk& k = chunks[static_cast<size_t>(c)];
        const float* src = (k.src_region == 0 ? params : buffers) + k.src_offset;
        float* dst = ema + k.dst_offset;
        for (int64_t j = 0; j < k.length; ++j) dst[j] = optim_math::ema(d, dst[j], omd, src[j]);
      },
      static_cast<int64_t>(chunks.size()) * kOptimChunk);
}

}  // namespace vision::train
