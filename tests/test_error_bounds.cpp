// The rounding bounds of error_bounds.h checked on the CPU, where a GPU kernel's arithmetic can be emulated: an
// emulation of the FlashAttention-2 kernels' f16/bf16 numerics (f32 arithmetic, P, dS and the outputs rounded to the
// dtype, delta from the rounded o) meets the bounds that attention_reference records, and one wrong element fails them.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "error_bounds.h"
#include "models/yolo/attention_reference.h"
#include "test_util.h"

namespace vision::test {
namespace {

using core::DType;
using ops::attention::AttentionSizes;

float round_to(float x, DType t) { return rounded(std::vector<float>{x}, t)[0]; }

struct Emulated {
  std::vector<float> o, lse, delta, dq, dk, dv;
};

// One batch-head of the kernels' numerics, sequential f32 sums (the kernels' orders differ; their f32 error is
// what ū's K·2^-24 covers).
Emulated emulate(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                 const std::vector<float>& go, const AttentionSizes& s, float scale, DType t) {
  const int64_t nq = s.n_q, nk = s.n_k, d = s.d_qk, dv = s.d_v;
  Emulated e{std::vector<float>(static_cast<size_t>(nq * dv)), std::vector<float>(static_cast<size_t>(nq)),
             std::vector<float>(static_cast<size_t>(nq)),      std::vector<float>(q.size()),
             std::vector<float>(k.size()),                     std::vector<float>(v.size())};
  std::vector<float> sc(static_cast<size_t>(nq * nk));
  for (int64_t i = 0; i < nq; ++i) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < nk; ++j) {
      float dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += q[i * d + c] * k[j * d + c];
      sc[i * nk + j] = dot * scale;
      mx = std::max(mx, sc[i * nk + j]);
    }
    float l = 0;
    std::vector<float> acc(static_cast<size_t>(dv), 0.0f);
    for (int64_t j = 0; j < nk; ++j) {
      const float p = std::exp(sc[i * nk + j] - mx);
      l += p;
      const float pr = round_to(p, t);  // P̃ as the P·V product sees it
      for (int64_t c = 0; c < dv; ++c) acc[c] += pr * v[j * dv + c];
    }
    for (int64_t c = 0; c < dv; ++c) e.o[i * dv + c] = round_to(acc[c] / l, t);
    e.lse[i] = mx + std::log(l);
    float dd = 0;
    for (int64_t c = 0; c < dv; ++c) dd += go[i * dv + c] * e.o[i * dv + c];
    e.delta[i] = dd;
  }
  std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dvv(v.size(), 0.0f);
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j) {
      const float p = std::exp(sc[i * nk + j] - e.lse[i]);
      float dp = 0;
      for (int64_t c = 0; c < dv; ++c) dp += go[i * dv + c] * v[j * dv + c];
      const float ds = round_to(p * (dp - e.delta[i]), t), pr = round_to(p, t);
      for (int64_t c = 0; c < d; ++c) {
        dq[i * d + c] += ds * k[j * d + c];
        dk[j * d + c] += ds * q[i * d + c];
      }
      for (int64_t c = 0; c < dv; ++c) dvv[j * dv + c] += pr * go[i * dv + c];
    }
  for (size_t i = 0; i < dq.size(); ++i) e.dq[i] = round_to(dq[i] * scale, t);
  for (size_t i = 0; i < dk.size(); ++i) e.dk[i] = round_to(dk[i] * scale, t);
  for (size_t i = 0; i < dvv.size(); ++i) e.dv[i] = round_to(dvv[i], t);
  return e;
}

TEST(ErrorBounds, EmulatedSixteenBitAttentionMeetsItsRoundingBoundsAndAWrongElementFailsThem) {
  for (DType t : {DType::f16, DType::bf16})
    for (const AttentionSizes s : {AttentionSizes{1, 1, 1, 16, 16}, AttentionSizes{1, 97, 1, 32, 64},
                                   AttentionSizes{1, 97, 130, 32, 64}, AttentionSizes{1, 33, 400, 64, 128}}) {
      SCOPED_TRACE(testing::Message() << core::dtype_name(t) << " nq " << s.n_q << " nk " << s.n_k << " d " << s.d_qk);
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.d_qk));
      const auto q = rounded(random_values(static_cast<size_t>(s.n_q * s.d_qk)), t);
      const auto k = rounded(random_values(static_cast<size_t>(s.n_k * s.d_qk)), t);
      const auto v = rounded(random_values(static_cast<size_t>(s.n_k * s.d_v)), t);
      const auto go = rounded(random_values(static_cast<size_t>(s.n_q * s.d_v)), t);
      const Emulated e = emulate(q, k, v, go, s, scale, t);
      const std::vector<double> go_ref = to_double(go);
      const AttentionReference r = attention_reference(to_double(q), to_double(k), to_double(v), &go_ref, s, scale, t);
      const int64_t chain = attention_reduction_length(s);
      EXPECT_TRUE(within_rounding(e.o, r.o, r.o_terms, t, chain)) << "o";
      EXPECT_TRUE(within_rounding(e.delta, r.delta, r.delta_terms, t, chain)) << "delta";
      EXPECT_TRUE(within_rounding(e.dq, r.dq, r.dq_terms, t, chain)) << "dq";
      EXPECT_TRUE(within_rounding(e.dk, r.dk, r.dk_terms, t, chain)) << "dk";
      EXPECT_TRUE(within_rounding(e.dv, r.dv, r.dv_terms, t, chain)) << "dv";
      EXPECT_LT(max_abs_error(e.lse, r.lse), 1e-5) << "lse";

      // One wrong element fails, though the norm of thousands barely moves: the largest with its sign flipped.
      const auto flip_largest = [](std::vector<float> x) {
        size_t m = 0;
        for (size_t i = 0; i < x.size(); ++i)
          if (std::abs(x[i]) > std::abs(x[m])) m = i;
        x[m] = -x[m];
        return x;
      };
      EXPECT_FALSE(within_rounding(flip_largest(e.o), r.o, r.o_terms, t, chain)) << "o with one sign flipped";
      EXPECT_FALSE(within_rounding(flip_largest(e.dv), r.dv, r.dv_terms, t, chain)) << "dv with one sign flipped";
      if (s.n_k > 1)  // with one key dq is 0
        EXPECT_FALSE(within_rounding(flip_largest(e.dq), r.dq, r.dq_terms, t, chain)) << "dq with one sign flipped";
    }
}

TEST(ErrorBounds, OutputRoundingAloneIsBoundedByTheUnitRoundoff) {
  for (DType t : {DType::f16, DType::bf16}) {
    const auto x = random_values(4096, -3.0f, 3.0f);
    const std::vector<float> out = rounded(x, t);
    RoundingTerms terms(x.size(), t);
    for (size_t i = 0; i < x.size(); ++i) terms.add(i, x[i]);
    EXPECT_TRUE(within_rounding(out, to_double(x), terms, t, 0)) << core::dtype_name(t);
    // Rounding twice as coarsely (one bit less) breaks the bound.
    std::vector<float> coarse(x.size());
    for (size_t i = 0; i < x.size(); ++i) coarse[i] = x[i] + 2 * (out[i] - x[i]);
    EXPECT_FALSE(within_rounding(coarse, to_double(x), terms, t, 0)) << core::dtype_name(t);
  }
}

}  // namespace
}  // namespace vision::test
