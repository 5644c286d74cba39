// The float64 attention reference (attention_reference.h).
#include "models/yolo/attention_reference.h"

namespace vision::test {

AttentionReference attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                       const std::vector<double>& v, const std::vector<double>* grad_o,
                                       const ops::attention::AttentionSizes& s, double scale,
                                       std::optional<core::DType> rounding) {
  const int64_t nq = s.n_q, nk = s.n_k, dqk = s.d_qk, dvv = s.d_v;
  AttentionReference r;
  r.o.assign(static_cast<size_t>(s.batch_heads * nq * dvv), 0.0);
  r.lse.assign(static_cast<size_t>(s.batch_heads * nq), 0.0);
  if (grad_o) {
    r.delta.assign(r.lse.size(), 0.0);
    r.dq.assign(q.size(), 0.0);
    r.dk.assign(k.size(), 0.0);
    r.dv.assign(v.size(), 0.0);
  }
  const bool terms = rounding.has_value();
  if (terms) {
    r.o_terms = RoundingTerms(r.o.size(), *rounding);
    if (grad_o) {
      r.delta_terms = RoundingTerms(r.delta.size(), *rounding);
      r.dq_terms = RoundingTerms(r.dq.size(), *rounding);
      r.dk_terms = RoundingTerms(r.dk.size(), *rounding);
      r.dv_terms = RoundingTerms(r.dv.size(), *rounding);
    }
  }
  std::vector<double> p(static_cast<size_t>(nq * nk)), dp(grad_o ? p.size() : 0), ds(grad_o ? p.size() : 0);
  const bool threaded = nq * nk * (dqk + dvv) > (1 << 18);
  for (int64_t b = 0; b < s.batch_heads; ++b) {
    const double* qb = q.data() + b * nq * dqk;
    const double* kb = k.data() + b * nk * dqk;
    const double* vb = v.data() + b * nk * dvv;
#pragma omp parallel for schedule(static) if (threaded)
    for (int64_t i = 0; i < nq; ++i) {
      double* pi = p.data() + i * nk;
      double mx = -INFINITY;
      for (int64_t j = 0; j < nk; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < dqk; ++c) dot += qb[i * dqk + c] * kb[j * dqk + c];
        pi[j] = dot * scale;
        mx = std::max(mx, pi[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < nk; ++j) sum += (pi[j] = std::exp(pi[j] - mx));
      for (int64_t j = 0; j < nk; ++j) pi[j] /= sum;
      r.lse[static_cast<size_t>(b * nq + i)] = mx + std::log(sum);
      const int64_t oi = (b * nq + i) * dvv;
      for (int64_t j = 0; j < nk; ++j)
        for (int64_t c = 0; c < dvv; ++c) r.o[static_cast<size_t>(oi + c)] += pi[j] * vb[j * dvv + c];
      if (terms)
        for (int64_t c = 0; c < dvv; ++c) {
          const size_t e = static_cast<size_t>(oi + c);
          r.o_terms.add(e, r.o[e]);
          for (int64_t j = 0; j < nk; ++j) r.o_terms.add(e, pi[j], vb[j * dvv + c]);
        }
    }
    if (!grad_o) continue;
    const double* gob = grad_o->data() + b * nq * dvv;
#pragma omp parallel for schedule(static) if (threaded)
    for (int64_t i = 0; i < nq; ++i) {
      const double* pi = p.data() + i * nk;
      double* dpi = dp.data() + i * nk;
      double* dsi = ds.data() + i * nk;
      const size_t row = static_cast<size_t>(b * nq + i);
      double d = 0;
      for (int64_t j = 0; j < nk; ++j) {
        double x = 0;
        for (int64_t c = 0; c < dvv; ++c) x += gob[i * dvv + c] * vb[j * dvv + c];
        dpi[j] = x;
        d += pi[j] * x;
      }
      r.delta[row] = d;  // = dO_i · o_i
      for (int64_t j = 0; j < nk; ++j) dsi[j] = pi[j] * (dpi[j] - d);
      const int64_t qi = (b * nq + i) * dqk;
      for (int64_t c = 0; c < dqk; ++c) {
        double x = 0;
        for (int64_t j = 0; j < nk; ++j) x += dsi[j] * kb[j * dqk + c];
        r.dq[static_cast<size_t>(qi + c)] = scale * x;
      }
      if (!terms) continue;
      for (int64_t c = 0; c < dvv; ++c) r.delta_terms.add(row, r.o[row * dvv + c], gob[i * dvv + c]);
      for (int64_t j = 0; j < nk; ++j) r.delta_terms.add(row, pi[j], dpi[j]);
      for (int64_t c = 0; c < dqk; ++c) {
        const size_t e = static_cast<size_t>(qi + c);
        r.dq_terms.add(e, r.dq[e]);
        double pk = 0;
        for (int64_t j = 0; j < nk; ++j) {
          r.dq_terms.add(e, dsi[j], scale * kb[j * dqk + c]);
          pk += pi[j] * kb[j * dqk + c];
        }
        r.dq_terms.add_terms(e, r.delta_terms, row, scale * pk);
      }
    }
#pragma omp parallel for schedule(static) if (threaded)
    for (int64_t j = 0; j < nk; ++j) {
      const int64_t kj = (b * nk + j) * dqk, vj = (b * nk + j) * dvv;
      for (int64_t i = 0; i < nq; ++i) {
        const double pij = p[static_cast<size_t>(i * nk + j)], dsij = ds[static_cast<size_t>(i * nk + j)];
        for (int64_t c = 0; c < dqk; ++c) r.dk[static_cast<size_t>(kj + c)] += scale * dsij * qb[i * dqk + c];
        for (int64_t c = 0; c < dvv; ++c) r.dv[static_cast<size_t>(vj + c)] += pij * gob[i * dvv + c];
      }
      if (!terms) continue;
      for (int64_t c = 0; c < dqk; ++c) {
        const size_t e = static_cast<size_t>(kj + c);
        r.dk_terms.add(e, r.dk[e]);
        for (int64_t i = 0; i < nq; ++i) {
          const size_t pe = static_cast<size_t>(i * nk + j);
          r.dk_terms.add(e, ds[pe], scale * qb[i * dqk + c]);
          r.dk_terms.add_terms(e, r.delta_terms, static_cast<size_t>(b * nq + i), scale * p[pe] * qb[i * dqk + c]);
        }
      }
      for (int64_t c = 0; c < dvv; ++c) {
        const size_t e = static_cast<size_t>(vj + c);
        r.dv_terms.add(e, r.dv[e]);
        for (int64_t i = 0; i < nq; ++i) r.dv_terms.add(e, p[static_cast<size_t>(i * nk + j)], gob[i * dvv + c]);
      }
    }
  }
  return r;
}

}  // namespace vision::test
