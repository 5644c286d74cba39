// Error bounds derived from a dtype's unit roundoff, for a kernel's output against a float64 reference computed from
// the same (already rounded) inputs: a relative L2 norm and an element-wise bound, so that one wrong element cannot
// hide in the norm.
//
// The model. On its way to an output element y_i a kernel rounds some values to its dtype: the output itself, and
// whatever it keeps in the dtype in between (FlashAttention-2's P and dS, which feed tensor-core products; any operand
// a library may hold in the dtype). Everything else is f32 arithmetic. Rounding x to nearest gives x·(1 + δ) with
// |δ| ≤ u, the unit roundoff (f32 2^-24, f16 2^-11, bf16 2^-8), plus at most 2^-25 absolute where x is an f16
// subnormal (|x| < 2^-14; bf16 and f32 subnormals lie below 1e-38 and never matter here). A rounded value x that
// reaches y_i with the coefficient c (∂y_i/∂x) moves y_i by c·x·δ: at most u·m with m = |c|·(|x| + floor), floor =
// 2^-14 for f16 (the subnormal error in units of u), else 0. The float64 reference records, for each output element,
// A_i = Σ m and B_i = Σ m² over every such value (RoundingTerms). First-order: products of two δ are below 2^-16.
//
// f32 arithmetic. Each f32 operation on the way (the products and additions of every reduction feeding y_i, exp2,
// the final scaling; the tensor cores add each 16-wide product block into an f32 accumulator, truncating) errs by at
// most 2^-23 of magnitudes that the same m bound. We add it as the worst case, K·2^-24 per unit of m for K the total
// length of the reductions feeding y_i, to the unit roundoff: ū = u + K·2^-24. That worst case exceeds the typical
// (random-walk) f32 error, ~sqrt(K)·2^-24, by sqrt(K) (≥ 5 for attention, whose K ≥ 34), which also covers the few
// ulps of exp2 and the f32 error of a softmax score (|s| ≤ 3 for the inputs of these tests) scaling P. For f16 it adds
// at most 2434·2^-24 = 0.3·u (the largest FlashAttention chain), for bf16 under 4% of u; for f32 it is the classic
// γ_K bound of a K-term reduction.
//
// The checks (within_rounding):
//   * element-wise: |out_i − ref_i| ≤ ū·min(A_i, z·sqrt(B_i)), z = 7.5. A_i is the worst case (every δ = ±u, all
//     aligned). z·sqrt(B_i) is Hoeffding's bound for a sum of independent zero-mean errors e with |e| ≤ ū·m:
//     P(|Σe| ≥ t) ≤ 2·exp(−t²/(2ū²B_i)), which at t = 7.5·ū·sqrt(B_i) is 1.2e-12 per element: under 1e-4 over the
//     ~1e8 elements of a whole GPU run. Round-to-nearest errors of random data are independent and zero-mean.
//   * norm: ‖out − ref‖ ≤ ū·min(sqrt(Σ A_i²), 2·sqrt(Σ B_i / 3)). The first is the worst case again. The second is
//     twice the expected size: a round-to-nearest error is uniform over half an ulp, so E[(c·x·δ)²] ≤ (ū·m)²/3 and
//     E‖out − ref‖² ≤ ū²·ΣB/3; the norm of many independent errors concentrates well within 2× its mean square root.
//     Reported as ‖out − ref‖/‖ref‖ against bound/‖ref‖ (an absolute norm where ref is all zero).
// A kernel that only rounds its output (A_i = |y_i|, B_i = y_i²) then gets the norm bound ū·‖ref‖, i.e. a relative
// ū; one that also rounds each operand of a K-term dot product once gets about 2ū·sqrt((1 + 2ρ)/3) with
// ρ = Σ(terms²)/y² ≈ 1 for random data. Nothing here is an empirical tolerance: a kernel that meets the model passes,
// one element off by more than its own rounding budget fails. test_error_bounds.cpp checks the model on the CPU with
// an emulation of the FlashAttention-2 kernels' f16/bf16 numerics: their errors come to about 0.35 of the norm bound
// (round-to-nearest errors average u²x²/6, not /3) and under 0.5 of every element's bound, while one element with its
// sign flipped exceeds its bound by well over 10×.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

#include "vision/core/dtype.h"

namespace vision::test {

constexpr double kF32Epsilon = 0x1p-24;  // unit roundoff of f32

inline double unit_roundoff(core::DType t) {
  switch (t) {
    case core::DType::f16: return 0x1p-11;
    case core::DType::bf16: return 0x1p-8;
    default: return kF32Epsilon;
  }
}

// The absolute error allowed where a result lands among the subnormals: half the subnormal spacing of f16 (2^-25);
// for f32 and bf16 (subnormal below 2^-126 ≈ 1.2e-38) 2^-133, since the GPU's fast exp/exp2 lose relative precision
// for results in that range (seen: 8.265e-40 for 8.193e-40). Add it to element-wise bounds of outputs that can be
// tiny (a loss gradient of a confident prediction); it is below any value that matters.
inline double subnormal_error(core::DType t) { return t == core::DType::f16 ? 0x1p-25 : 0x1p-133; }

// ū = u + K·2^-24: the unit roundoff with the f32 arithmetic of K-term reductions folded in (see above).
inline double effective_roundoff(core::DType t, int64_t k) {
  return unit_roundoff(t) + static_cast<double>(k) * kF32Epsilon;
}

// Bound on ‖out − ref‖ / ‖ref‖ for an element-wise kernel that computes in f32 and rounds once to dtype: 2u for
// f16/bf16 (u from the output rounding, doubled for the f32 arithmetic of exp and friends), 1e-5 in f32 (IEEE on both
// sides, only the order of operations differs).
inline double output_rounding_bound(core::DType t) { return t == core::DType::f32 ? 1e-5 : 2 * unit_roundoff(t); }

// What a float64 reference records about the roundings on the way to each output element: A_i = Σ m, B_i = Σ m².
struct RoundingTerms {
  RoundingTerms() = default;
  RoundingTerms(size_t n, core::DType dtype)
      : abs_sum(n, 0.0), sq_sum(n, 0.0), floor(dtype == core::DType::f16 ? 0x1p-14 : 0.0) {}

  // Element i is reached by the rounding of `value` with the coefficient c (1 for the output itself).
  void add(size_t i, double value, double c = 1.0) {
    const double m = std::abs(c) * (std::abs(value) + floor);
    abs_sum[i] += m;
    sq_sum[i] += m * m;
  }
  // Element i is reached, with the coefficient c, by the error of element j of an intermediate whose own roundings
  // `other` recorded (independent of the others that reach i).
  void add_terms(size_t i, const RoundingTerms& other, size_t j, double c) {
    abs_sum[i] += std::abs(c) * other.abs_sum[j];
    sq_sum[i] += c * c * other.sq_sum[j];
  }
  size_t size() const { return abs_sum.size(); }

  std::vector<double> abs_sum, sq_sum;
  double floor = 0.0;
};

// The element-wise and norm checks above for out (as the kernel wrote it, NaN included) against ref.
inline ::testing::AssertionResult within_rounding(const std::vector<float>& out, const std::vector<double>& ref,
                                                  const RoundingTerms& terms, core::DType dtype, int64_t k) {
  if (out.size() != ref.size() || terms.size() != ref.size())
    return ::testing::AssertionFailure() << "sizes differ: out " << out.size() << ", ref " << ref.size() << ", terms "
                                         << terms.size();
  constexpr double z = 7.5;
  const double ub = effective_roundoff(dtype, k);
  double err2 = 0, ref2 = 0, a2 = 0, b = 0;
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < out.size(); ++i) {
    const double e = std::abs(static_cast<double>(out[i]) - ref[i]);
    const double bound = ub * std::min(terms.abs_sum[i], z * std::sqrt(terms.sq_sum[i]));
    if (!(e <= bound) && bad++ < 5)  // NaN fails too
      first << "\n  [" << i << "] " << out[i] << " vs " << ref[i] << ": error " << e << " > bound " << bound;
    err2 += std::isfinite(e) ? e * e : INFINITY;
    ref2 += ref[i] * ref[i];
    a2 += terms.abs_sum[i] * terms.abs_sum[i];
    b += terms.sq_sum[i];
  }
  const double err = std::sqrt(err2), norm_bound = ub * std::min(std::sqrt(a2), 2 * std::sqrt(b / 3));
  const double scale = ref2 > 0 ? std::sqrt(ref2) : 1.0;
  const char* kind = ref2 > 0 ? "relative" : "absolute (reference all zero)";
  if (bad == 0 && err <= norm_bound) return ::testing::AssertionSuccess();
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  r << core::dtype_name(dtype) << " (ū = " << ub << "): " << kind << " error " << err / scale << ", bound "
    << norm_bound / scale;
  if (bad) r << "; " << bad << " of " << out.size() << " elements beyond their bound:" << first.str();
  return r;
}

// Every |out_i − ref_i| ≤ bound_i (NaN fails), for bounds derived some other way (a running error analysis, say).
inline ::testing::AssertionResult within_bounds(const std::vector<float>& out, const std::vector<double>& ref,
                                                const std::vector<double>& bound) {
  if (out.size() != ref.size() || bound.size() != ref.size())
    return ::testing::AssertionFailure() << "sizes differ: out " << out.size() << ", ref " << ref.size() << ", bounds "
                                         << bound.size();
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < out.size(); ++i) {
    const double e = std::abs(static_cast<double>(out[i]) - ref[i]);
    if (!(e <= bound[i]) && bad++ < 5)
      first << "\n  [" << i << "] " << out[i] << " vs " << ref[i] << ": error " << e << " > bound " << bound[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << out.size() << " elements beyond their bound:" << first.str();
}

}  // namespace vision::test
