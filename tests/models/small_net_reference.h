// The foundation's small network (models/demo/small_net.h) in float64, unfused, with BatchNorm on its running
// statistics (inference), and a first-order bound on each output element's f32 error; and random BatchNorm state for
// a model, so that tests never run BatchNorm in its identity state.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "error_bounds.h"
#include "test_util.h"
#include "vision/graph/state.h"

namespace vision::test {

// Random γ ∈ [0.5, 1.5), β and running mean ∈ [−1, 1), running variance ∈ [0.2, 2) for every BatchNorm of the model
// (each "<node>.running_var" buffer and its siblings).
inline void randomize_batchnorm_state(graph::StateStore& state) {
  const std::string suffix = "running_var";
  for (const graph::StateEntry& e : std::vector<graph::StateEntry>(state.entries())) {
    if (e.key.size() < suffix.size() || e.key.compare(e.key.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string bn = e.key.substr(0, e.key.size() - suffix.size());
    state.set_from_host(bn + "weight", random_tensor(e.shape, 0.5f, 1.5f));
    state.set_from_host(bn + "bias", random_tensor(e.shape));
    state.set_from_host(bn + "running_mean", random_tensor(e.shape));
    state.set_from_host(bn + "running_var", random_tensor(e.shape, 0.2f, 2.0f));
  }
}

// Each output element's float64 value and a bound on the error of any f32 evaluation of the network (fused or not,
// any summation order), by first-order running error analysis, u = 2^-24:
//   conv (K = C_in·k² terms, bias b): the input errors E_x pass through |W|, and the f32 sum errs by at most
//     (K + 2)·u·(Σ|W·x| + |b|) (the γ_K bound, one rounding more for the bias);
//   BatchNorm, y = s·(z − μ) + β with s = γ / sqrt(σ² + ε): |s|·E_z, plus 6u·(|s|·(Σ|W·x| + |μ|) + |β|) for its six
//     roundings (add, sqrt, divide, subtract, multiply, add) — or, fused into the convolution, for the folded weights
//     W·s and bias β − μ·s, whose rounding scales the conv's terms Σ|W·x| (hence M, not |z|);
//   SiLU: |silu'| ≤ 1.1 times E_t, plus 8u·|y| for exp, add, divide (or multiply) and the library's exp error;
//   max-pool: the largest E of the window (max is 1-Lipschitz, whichever near-tie wins); upsample, concat: copies.
// A worst case (all roundings aligned): the oneDNN result stays within a few percent of it. It catches any wrong
// element (an error of the order of |y|, or a BatchNorm ε off by 10%); the 1e-5 relative norm is the tight check.
struct SmallNetReference {
  std::vector<double> y, bound;
};

// storage: the dtype a plan keeps activations and (folded) weights in (PlanOptions::compute_dtype), f32 arithmetic
// in between. Each value stored in it adds its unit roundoff ud times its magnitude: the input's conversion, the
// (folded) weights and biases (ud · Σ|W·x|, as the weights' own rounding scales the conv's terms), and every stored
// output (ud · |y| for conv, BatchNorm and SiLU; max-pool, upsample and concat copy). ud = 0 for f32.
inline SmallNetReference small_net_reference(const graph::StateStore& state, const core::Tensor& x_host,
                                             double eps = 1e-3, core::DType storage = core::DType::f32) {
  std::map<std::string, std::vector<double>> p;
  for (const auto& [key, t] : state.to_host())
    if (t.dtype() == core::DType::f32) p[key] = to_double(t);
  constexpr double u = kF32Epsilon;
  const double ud = storage == core::DType::f32 ? 0.0 : unit_roundoff(storage);

  struct Act {
    int64_t c, h, w;
    std::vector<double> v, e;  // per image: [c, h, w]
    double& at(std::vector<double>& a, int64_t n, int64_t ci, int64_t y, int64_t x) const {
      return a[static_cast<size_t>(((n * c + ci) * h + y) * w + x)];
    }
  };
  const int64_t batch = x_host.dim(0);
  Act in{x_host.dim(1), x_host.dim(2), x_host.dim(3), to_double(x_host), {}};
  in.e.assign(in.v.size(), 0.0);
  for (size_t i = 0; i < in.v.size(); ++i) in.e[i] = ud * std::abs(in.v[i]);

  // conv k×k, stride 1, "same" padding; returns the value, its error bound and the magnitude Σ|W·x| + |b|.
  auto conv = [&](Act& x, const std::string& name, int64_t co, int64_t k, bool bias, std::vector<double>* magnitude) {
    const auto& wt = p.at(name + ".weight");
    const int64_t pad = k / 2, kk = x.c * k * k;
    Act y{co, x.h, x.w, std::vector<double>(static_cast<size_t>(batch * co * x.h * x.w)), {}};
    y.e.assign(y.v.size(), 0.0);
    magnitude->assign(y.v.size(), 0.0);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t o = 0; o < co; ++o)
        for (int64_t r = 0; r < x.h; ++r)
          for (int64_t s = 0; s < x.w; ++s) {
            double acc = bias ? p.at(name + ".bias")[static_cast<size_t>(o)] : 0.0, mag = std::abs(acc), err = 0;
            for (int64_t i = 0; i < x.c; ++i)
              for (int64_t a = 0; a < k; ++a)
                for (int64_t b = 0; b < k; ++b) {
                  const int64_t yy = r + a - pad, xx = s + b - pad;
                  if (yy < 0 || yy >= x.h || xx < 0 || xx >= x.w) continue;
                  const double wv = wt[static_cast<size_t>(((o * x.c + i) * k + a) * k + b)];
                  acc += wv * x.at(x.v, n, i, yy, xx);
                  mag += std::abs(wv * x.at(x.v, n, i, yy, xx));
                  err += std::abs(wv) * x.at(x.e, n, i, yy, xx);
                }
            const size_t idx = static_cast<size_t>(((n * co + o) * x.h + r) * x.w + s);
            y.v[idx] = acc;
            (*magnitude)[idx] = mag;
            y.e[idx] = err + (static_cast<double>(kk + 2) * u + ud) * mag + ud * std::abs(acc);
          }
    return y;
  };
  // conv → BatchNorm (running statistics) → SiLU, as ultralytics' Conv block.
  auto block = [&](Act& x, const std::string& name, int64_t co) {
    std::vector<double> mag;
    Act z = conv(x, name + ".conv", co, 3, false, &mag);
    const auto &g = p.at(name + ".bn.weight"), &beta = p.at(name + ".bn.bias"), &mu = p.at(name + ".bn.running_mean"),
               &var = p.at(name + ".bn.running_var");
    for (size_t i = 0; i < z.v.size(); ++i) {
      const size_t ch = (i / static_cast<size_t>(z.h * z.w)) % static_cast<size_t>(co);
      const double s = g[ch] / std::sqrt(var[ch] + eps);
      const double t = s * (z.v[i] - mu[ch]) + beta[ch];
      const double et = std::abs(s) * z.e[i] +
                        (6 * u + ud) * (std::abs(s) * (mag[i] + std::abs(mu[ch])) + std::abs(beta[ch])) +
                        ud * std::abs(t);
      z.v[i] = t / (1.0 + std::exp(-t));
      z.e[i] = 1.1 * et + (8 * u + ud) * std::abs(z.v[i]);
    }
    return z;
  };

  const int64_t width = p.at("net.0.conv.weight").size() / static_cast<size_t>(in.c * 9);
  Act a = block(in, "net.0", width);
  Act pooled{a.c, a.h / 2, a.w / 2, std::vector<double>(a.v.size() / 4), std::vector<double>(a.v.size() / 4)};
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < a.c; ++c)
      for (int64_t r = 0; r < pooled.h; ++r)
        for (int64_t s = 0; s < pooled.w; ++s) {
          double m = -INFINITY, e = 0;
          for (int64_t i = 0; i < 2; ++i)
            for (int64_t j = 0; j < 2; ++j) {
              m = std::max(m, a.at(a.v, n, c, 2 * r + i, 2 * s + j));
              e = std::max(e, a.at(a.e, n, c, 2 * r + i, 2 * s + j));
            }
          pooled.at(pooled.v, n, c, r, s) = m;
          pooled.at(pooled.e, n, c, r, s) = e;
        }
  Act b = block(pooled, "net.2", width);
  Act cat{2 * width, a.h, a.w, std::vector<double>(2 * a.v.size()), std::vector<double>(2 * a.v.size())};
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < 2 * width; ++c)
      for (int64_t r = 0; r < a.h; ++r)
        for (int64_t s = 0; s < a.w; ++s) {
          const bool skip = c < width;  // concat(a, upsample2(b))
          const int64_t cc = skip ? c : c - width, rr = skip ? r : r / 2, ss = skip ? s : s / 2;
          const Act& src = skip ? a : b;
          cat.at(cat.v, n, c, r, s) = src.v[static_cast<size_t>(((n * src.c + cc) * src.h + rr) * src.w + ss)];
          cat.at(cat.e, n, c, r, s) = src.e[static_cast<size_t>(((n * src.c + cc) * src.h + rr) * src.w + ss)];
        }
  std::vector<double> mag;
  Act y = conv(cat, "net.5", width, 1, true, &mag);
  return {std::move(y.v), std::move(y.e)};
}

}  // namespace vision::test
