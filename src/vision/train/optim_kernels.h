// Optimizer kernels, CPU twins — the arithmetic of optim.cuh in plain C++ (f32, the same operations in the same order;
// bf16 rounded to nearest even where the GPU rounds), over the tables of optim_layout.cuh. The engine's CPU path and
// the reference of the GPU tests.
//
// Per element of tensor t in group G, with g = grad · coef (coef: the gradient-clipping factor, 1 when not clipped):
//   SGD (Nesterov, L2 decay, no dampening; also MuSGD's SGD part and its non-Muon groups):
//     [Muon tensors first: p ← p − (G.muon_lr · t.muon_scale) · X[t, e], X the Newton–Schulz output]
//     g' = g + wd·p;  buf = momentum·buf + g';  p ← p − lr·(g' + momentum·buf)
//   AdamW (PyTorch's): p ← p·(1 − lr·wd); m = m·β1 + (1 − β1)·g; v = v·β2 + ((1 − β2)·g)·g;
//     p ← p − (step_size·m) / (sqrt(v) / sqrt(1 − β2^t) + eps)
//   Muon prepare (MuSGD, Muon tensors): buf₁ = buf₁ + (1 − β)·(g − buf₁); u = (1 − β)·g + β·buf₁; X = bf16(u), laid out
//     as the tensor's (rows, cols) view, transposed when rows > cols.
//   Muon normalize (per matrix): s = Σ X² (f32, the block order); X ← bf16(X / (sqrt(s) + 1e-7)).
//   Newton–Schulz (per matrix m × n, m ≤ n, row-major bf16; f32 accumulation, k ascending on the CPU), `steps` times:
//     A = bf16(X·Xᵀ);  B = bf16(c·(A·A) + b·A);  X ← bf16((B·X) + a·X),  (a, b, c) = (3.4445, −4.7750, 2.0315).
//   EMA: v ← d·v + (1 − d)·x.
#pragma once

#include <cstdint>
#include <span>

#include "vision/train/optim_layout.cuh"

namespace vision::train {

inline constexpr float kNewtonSchulzA = 3.4445f;
inline constexpr float kNewtonSchulzB = -4.7750f;
inline constexpr float kNewtonSchulzC = 2.0315f;
inline constexpr float kMuonNormEps = 1e-7f;

// f32 → bf16 bits (round to nearest even, NaN kept quiet) and back; the value of x rounded to bf16.
uint16_t to_bf16(float x);
float from_bf16(uint16_t h);
inline float round_bf16(float x) { return from_bf16(to_bf16(x)); }

// Σ grad² over the chunks, in the GPU's order: per chunk the thread-strided sums and the tree (a block's partial),
// then the partials the same way (one block). Returns the f32 sum (+inf or NaN when a gradient is not finite).
float grad_sumsq_cpu(const float* grads, std::span<const OptimTensor> tensors, std::span<const OptimChunk> chunks);
// The per-chunk partials alone (the first kernel), and their reduction (the second).
void grad_sumsq_partials_cpu(const float* grads, std::span<const OptimTensor> tensors,
                             std::span<const OptimChunk> chunks, float* partials);
float grad_sumsq_finalize_cpu(const float* partials, int64_t n);

// The SGD step above over every chunk (Muon tensors read ns_out, bf16 bits; null when there are none).
void sgd_step_cpu(float* params, const float* grads, float* momentum, const uint16_t* ns_out,
                  std::span<const OptimTensor> tensors, std::span<const OptimChunk> chunks,
                  std::span<const OptimGroup> groups, float coef);
// The AdamW step above over every chunk.
void adamw_step_cpu(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                    std::span<const OptimTensor> tensors, std::span<const OptimChunk> chunks,
                    std::span<const OptimGroup> groups, float coef);
// MuSGD's Muon momentum and the bf16 Newton–Schulz input, over the chunks of Muon tensors.
void muon_prepare_cpu(const float* grads, float* muon_momentum, uint16_t* ns_in, std::span<const OptimTensor> tensors,
                      std::span<const OptimChunk> chunks, std::span<const OptimGroup> groups, float coef);
// Normalises each listed Muon tensor's matrix in the workspace by its Frobenius norm (+ 1e-7).
void muon_normalize_cpu(uint16_t* ns, std::span<const OptimTensor> tensors, std::span<const int64_t> muon_tensors);
// `steps` Newton–Schulz iterations on `batch` row-major m × n bf16 matrices at x (m ≤ n, each m·n apart), in place.
void newton_schulz_cpu(uint16_t* x, int64_t batch, int64_t m, int64_t n, int steps);

// ema[dst..] ← d·ema + omd·src over the chunks (src: region 0 params, 1 buffers).
void ema_update_cpu(float* ema, const float* params, const float* buffers, std::span<const EmaChunk> chunks, float d,
                    float omd);

}  // namespace vision::train
