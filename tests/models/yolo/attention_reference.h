// float64 reference of attention: the naive softmax(scale·QKᵀ)V, its log-sum-exp, delta = rowsum(dO ∘ O) and the
// analytic gradients, for the CPU twin's and the GPU kernels' tests. Optionally it also records, per output element,
// the roundings a FlashAttention-2 kernel of a given dtype makes on its way there (error_bounds.h).
#pragma once

#include <cmath>
#include <optional>
#include <vector>

#include "error_bounds.h"
#include "vision/ops/attention/flash_attn2.h"

namespace vision::test {

struct AttentionReference {
  std::vector<double> o, lse, delta, dq, dk, dv;
  // With a rounding dtype: the roundings reaching each element of o, delta, dq, dk, dv (see attention_reference).
  RoundingTerms o_terms, delta_terms, dq_terms, dk_terms, dv_terms;
};

// q [BH, n_q, d], k [BH, n_k, d], v [BH, n_k, d_v], grad_o [BH, n_q, d_v] (nullptr: forward only), row-major.
//
// With `rounding` (the kernel's element type, inputs already representable in it), the kernel's roundings, as the
// FlashAttention-2 kernels make them (flash_attn2.cuh, flash_attn2_sm90.cuh; everything else is f32):
//   forward: P̃ = exp(s − max) is rounded before O += P̃·V; o is rounded. So o_ic is reached by its own rounding and
//     by each P_ij with the coefficient v_jc (P normalised: the rounding of P̃ is relative, division by l keeps it).
//   preprocessing: delta_i = Σ_c dO_ic·ô_ic in f32 from the rounded o: reached by o_ic's rounding with the coefficient
//     dO_ic and by the forward's P_ij (shared by all c) with Σ_c dO_ic·v_jc = dP_ij.
//   backward: P = exp(s − lse) is recomputed in f32 and rounded before dV += Pᵀ·dO; dS = P ∘ (dP − delta) is
//     computed in f32 from the kernel's delta and rounded before dQ += dS·K and dK += dSᵀ·Q; dq, dk, dv are rounded.
//     An error e_i of delta_i moves dS_ij by −P_ij·e_i: dq_ic by −scale·Σ_j P_ij·k_jc·e_i, dk_jc by
//     −scale·Σ_i P_ij·q_ic·e_i (independent rows i).
// Defined in attention_reference.cpp, which is compiled at -O1 whatever the test sources' level (the largest
// computation of any test: 4.7× slower at -O0).
AttentionReference attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                       const std::vector<double>& v, const std::vector<double>* grad_o,
                                       const ops::attention::AttentionSizes& s, double scale,
                                       std::optional<core::DType> rounding = std::nullopt);

// The length of the chain of f32 reductions feeding an output of the attention kernels (the K of ū = u + K·2^-24 in
// error_bounds.h): the scores (d), dP (d_v), and the sums over keys and queries.
inline int64_t attention_reduction_length(const ops::attention::AttentionSizes& s) {
  return s.d_qk + s.d_v + s.n_q + s.n_k;
}

}  // namespace vision::test
