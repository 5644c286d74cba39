// FlashAttention-2 GPU kernel check — runs every kernel of flash_attn2.cuh on the GPU against a float64 reference,
// standalone until the kernel system launches them from the engine (then the engine's tests compare with the CPU twin).
//
// Build and run on a machine with an sm_80+ GPU (one binary per dtype: 0 f32, 1 f16, 2 bf16):
//   nvcc -std=c++17 -O2 -arch=sm_90a -Xcompiler -fopenmp -Isrc -DCHECK_DTYPE=1 \
//        tests/models/yolo/cuda/flash_attn2_check.cu -o fa2_check_f16 && ./fa2_check_f16
// Prints one line per case and exits 1 when any case fails. f32 must be < 1e-5 relative (‖out−ref‖/‖ref‖); f16/bf16
// within tolerance() (FA2-style rounding of P and dS to 16 bits), lse within an absolute bound. With n_k = 1, dq and dk
// are exactly 0 and their error is an absolute norm (bound 1e-4).
// FA2_TIME=1 also times forward and backward at a few shapes; FA2_QUICK=1 runs two small shapes per (d, d_v) only
// (for compute-sanitizer --tool memcheck / racecheck / synccheck / initcheck).
//
// Last run (H200, sm_90a, CUDA 13.0, all 240 cases passing): f32 errors ≤ 1.0e-6; f16 ≈ 3e-4 and bf16 ≈ 2.5e-3 for o, dq,
// dk, dv — the same as PyTorch's scaled_dot_product_attention on the same shapes against a float64 reference
// (f16 2.9e-4, bf16 2.3e-3). f16, forward / backward: bh 64, n 400, d 32, d_v 64: 0.018 / 0.059 ms;
// bh 32, n 4096, d = d_v = 64: 0.57 / 1.87 ms (PyTorch's flash backend: 0.46 / 1.41 ms). With FA2_QUICK=1,
// compute-sanitizer memcheck, racecheck, synccheck and initcheck reported 0 errors / hazards (f32 and f16; racecheck
// also bf16).
#include <cuda_runtime.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "vision/models/yolo/kernels/attention/flash_attn2.cuh"

namespace fa = vision::models::yolo::kernels::attention;

#ifndef CHECK_DTYPE
#define CHECK_DTYPE 1
#endif
#if CHECK_DTYPE == 0
using T = float;
constexpr const char* kType = "f32";
#elif CHECK_DTYPE == 1
using T = __half;
constexpr const char* kType = "f16";
#else
using T = __nv_bfloat16;
constexpr const char* kType = "bf16";
#endif
constexpr bool kF32 = CHECK_DTYPE == 0;

#define CUDA_OK(x)                                                                                   \
  do {                                                                                               \
    cudaError_t e_ = (x);                                                                            \
    if (e_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
      std::exit(2);                                                                                  \
    }                                                                                                \
  } while (0)

float to_f(float x) { return x; }
float to_f(__half x) { return __half2float(x); }
float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
T from_f(float x) {
#if CHECK_DTYPE == 0
  return x;
#elif CHECK_DTYPE == 1
  return __float2half(x);
#else
  return __float2bfloat16(x);
#endif
}

// The engine's tile table (a mirror of flash_attention2_tiles() in flash_attn2.cpp).
struct Tiles {
  int bm, bn, w;
};
// float64 reference: o, lse, dq, dk, dv from inputs already rounded to T.
struct Ref {
  std::vector<double> o, lse, dq, dk, dv;
};
Ref reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
              const std::vector<float>& go, int bh, int nq, int nk, int d, int dv, double scale) {
  Ref r;
  r.o.assign(size_t(bh) * nq * dv, 0);
  r.lse.assign(size_t(bh) * nq, 0);
  r.dq.assign(q.size(), 0);
  r.dk.assign(k.size(), 0);
  r.dv.assign(v.size(), 0);
  std::vector<double> p(size_t(nq) * nk), ds(size_t(nq) * nk);
  for (int b = 0; b < bh; ++b) {
    const float* qb = q.data() + size_t(b) * nq * d;
    const float* kb = k.data() + size_t(b) * nk * d;
    const float* vb = v.data() + size_t(b) * nk * dv;
    const float* gb = go.data() + size_t(b) * nq * dv;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < nq; ++i) {
      double* pi = p.data() + size_t(i) * nk;
      double mx = -INFINITY, sum = 0, dd = 0;
      for (int j = 0; j < nk; ++j) {
        double s = 0;
        for (int c = 0; c < d; ++c) s += double(qb[size_t(i) * d + c]) * kb[size_t(j) * d + c];
        pi[j] = s * scale;
        mx = std::max(mx, pi[j]);
      }
      for (int j = 0; j < nk; ++j) sum += (pi[j] = std::exp(pi[j] - mx));
      for (int j = 0; j < nk; ++j) pi[j] /= sum;
      r.lse[size_t(b) * nq + i] = mx + std::log(sum);
      double* oi = r.o.data() + (size_t(b) * nq + i) * dv;
      for (int j = 0; j < nk; ++j)
        for (int c = 0; c < dv; ++c) oi[c] += pi[j] * vb[size_t(j) * dv + c];
      double* dsi = ds.data() + size_t(i) * nk;
      for (int j = 0; j < nk; ++j) {
        double dp = 0;
        for (int c = 0; c < dv; ++c) dp += double(gb[size_t(i) * dv + c]) * vb[size_t(j) * dv + c];
        dsi[j] = dp;
        dd += pi[j] * dp;
      }
      double* dqi = r.dq.data() + (size_t(b) * nq + i) * d;
      for (int j = 0; j < nk; ++j) {
        dsi[j] = pi[j] * (dsi[j] - dd);
        for (int c = 0; c < d; ++c) dqi[c] += scale * dsi[j] * kb[size_t(j) * d + c];
      }
    }
#pragma omp parallel for schedule(static)
    for (int j = 0; j < nk; ++j) {
      double* dkj = r.dk.data() + (size_t(b) * nk + j) * d;
      double* dvj = r.dv.data() + (size_t(b) * nk + j) * dv;
      for (int i = 0; i < nq; ++i) {
        const double pij = p[size_t(i) * nk + j], dsij = ds[size_t(i) * nk + j];
        for (int c = 0; c < d; ++c) dkj[c] += scale * dsij * qb[size_t(i) * d + c];
        for (int c = 0; c < dv; ++c) dvj[c] += pij * gb[size_t(i) * dv + c];
      }
    }
  }
  return r;
}

double rel_error(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
double max_abs_error(const std::vector<float>& out, const std::vector<double>& ref) {
  double m = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    m = std::max(m, std::abs(out[i] - ref[i]));
  }
  return m;
}

// Device buffer of n elements of E, poisoned with 0xFF bytes (NaN for f32, f16 and bf16).
template <typename E>
struct Buf {
  E* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t count) : n(count) {
    CUDA_OK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(E)));
    CUDA_OK(cudaMemset(p, 0xFF, std::max<size_t>(n, 1) * sizeof(E)));
  }
  ~Buf() { cudaFree(p); }
  void upload(const std::vector<E>& h) { CUDA_OK(cudaMemcpy(p, h.data(), n * sizeof(E), cudaMemcpyHostToDevice)); }
  std::vector<float> download() const {
    std::vector<E> h(n);
    CUDA_OK(cudaMemcpy(h.data(), p, n * sizeof(E), cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = to_f(h[i]);
    return f;
  }
};

template <typename K>
void allow_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

std::mt19937_64 rng(12345);

// Error bound for the dtype: f32 absolute 1e-5 (relative norm); 16-bit: inputs rounded to T, P and dS rounded to T
// inside the tensor-core products, so a few units of T's epsilon.
double tolerance() { return CHECK_DTYPE == 0 ? 1e-5 : (CHECK_DTYPE == 1 ? 4e-3 : 3e-2); }

template <int D, int DV>
bool run_case(int bh, int nq, int nk) {
  const double scale = 1.0 / std::sqrt(double(D));
  auto make = [&](size_t n, std::vector<float>& f, std::vector<T>& t) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    f.resize(n);
    t.resize(n);
    for (size_t i = 0; i < n; ++i) {
      t[i] = from_f(u(rng));
      f[i] = to_f(t[i]);
    }
  };
  std::vector<float> qf, kf, vf, gf;
  std::vector<T> qt, kt, vt, gt;
  make(size_t(bh) * nq * D, qf, qt);
  make(size_t(bh) * nk * D, kf, kt);
  make(size_t(bh) * nk * DV, vf, vt);
  make(size_t(bh) * nq * DV, gf, gt);
  const Ref r = reference(qf, kf, vf, gf, bh, nq, nk, D, DV, scale);

  Buf<T> q(qt.size()), k(kt.size()), v(vt.size()), go(gt.size()), o(size_t(bh) * nq * DV), dq(qt.size()),
      dk(kt.size()), dv(vt.size());
  Buf<float> lse(size_t(bh) * nq), delta(size_t(bh) * nq);
  q.upload(qt);
  k.upload(kt);
  v.upload(vt);
  go.upload(gt);
  const float sc = static_cast<float>(scale);

  // Forward.
  constexpr Tiles tf = kF32 ? Tiles{DV >= 128 ? 32 : 64, 32, 4} : Tiles{64, DV >= 256 ? 32 : 64, 4};
  {
    auto kern = fa::flash_attention2_forward<T, D, DV, tf.bm, tf.bn, tf.w>;
    const size_t smem = fa::fa2::FlashAttention2Smem<T, D, DV, tf.bm, tf.bn>::forward;
    allow_smem(kern, smem);
    kern<<<dim3((nq + tf.bm - 1) / tf.bm, bh), tf.w * 32, smem>>>(q.p, k.p, v.p, o.p, lse.p, nq, nk, sc);
    CUDA_OK(cudaGetLastError());
  }
  // Preprocess.
  {
    constexpr int w = 8;
    fa::flash_attention2_backward_preprocess<T, DV, w><<<(bh * nq + w - 1) / w, w * 32>>>(o.p, go.p, delta.p, bh * nq);
    CUDA_OK(cudaGetLastError());
  }
  // dQ.
  constexpr Tiles tq = kF32 ? Tiles{32, 32, 4} : Tiles{64, D + DV >= 384 ? 32 : 64, 4};
  {
    auto kern = fa::flash_attention2_backward_dq<T, D, DV, tq.bm, tq.bn, tq.w>;
    const size_t smem = fa::fa2::FlashAttention2Smem<T, D, DV, tq.bm, tq.bn>::backward_dq;
    allow_smem(kern, smem);
    kern<<<dim3((nq + tq.bm - 1) / tq.bm, bh), tq.w * 32, smem>>>(q.p, k.p, v.p, go.p, lse.p, delta.p, dq.p, nq, nk,
                                                                  sc);
    CUDA_OK(cudaGetLastError());
  }
  // dK/dV.
  constexpr Tiles tk = kF32 ? Tiles{32, D + DV >= 384 ? 16 : 32, 4}
                            : Tiles{D + DV <= 128 ? 64 : (D + DV <= 256 ? 32 : 16), 64, 4};
  {
    auto kern = fa::flash_attention2_backward_dkv<T, D, DV, tk.bm, tk.bn, tk.w>;
    const size_t smem = fa::fa2::FlashAttention2Smem<T, D, DV, tk.bm, tk.bn>::backward_dkv;
    allow_smem(kern, smem);
    kern<<<dim3((nk + tk.bn - 1) / tk.bn, bh), tk.w * 32, smem>>>(q.p, k.p, v.p, go.p, lse.p, delta.p, dk.p, dv.p,
                                                                  nq, nk, sc);
    CUDA_OK(cudaGetLastError());
  }
  CUDA_OK(cudaDeviceSynchronize());

  const double e_o = rel_error(o.download(), r.o), e_lse = max_abs_error(lse.download(), r.lse);
  const double e_dq = rel_error(dq.download(), r.dq), e_dk = rel_error(dk.download(), r.dk),
               e_dv = rel_error(dv.download(), r.dv);
  // dq and dk are exactly 0 for n_k = 1: their rel_error is then an absolute norm.
  const double tol = tolerance(), tol_qk = nk == 1 ? 1e-4 : tol;
  const bool ok = e_o < tol && e_lse < std::max(1e-5, tol) && e_dq < tol_qk && e_dk < tol_qk && e_dv < tol;
  std::printf("%-4s d=%3d dv=%3d bh=%d nq=%4d nk=%4d | o %.2e lse %.2e dq %.2e dk %.2e dv %.2e | %s\n", kType, D, DV,
              bh, nq, nk, e_o, e_lse, e_dq, e_dk, e_dv, ok ? "ok" : "FAIL");
  return ok;
}

template <int D, int DV>
int run_sizes() {
  const int sizes[][3] = {{1, 1, 1},     {3, 7, 7},      {1, 97, 97},   {3, 400, 400}, {1, 1025, 1025},
                          {3, 130, 77},  {2, 64, 64},    {1, 1, 300},   {2, 300, 1},   {2, 17, 1025}};
  int failed = 0;
  if (std::getenv("FA2_QUICK")) {  // small sizes with tails, for compute-sanitizer
    failed += !run_case<D, DV>(2, 77, 130);
    failed += !run_case<D, DV>(1, 130, 77);
    return failed;
  }
  for (const auto& s : sizes) failed += !run_case<D, DV>(s[0], s[1], s[2]);
  return failed;
}

// Forward + backward timing at YOLO26's PSA shape (d = 32, d_v = 64) and a large one.
template <int D, int DV>
void time_case(int bh, int n) {
  Buf<T> q(size_t(bh) * n * D), k(size_t(bh) * n * D), v(size_t(bh) * n * DV), o(size_t(bh) * n * DV),
      go(size_t(bh) * n * DV), dq(size_t(bh) * n * D), dk(size_t(bh) * n * D), dv(size_t(bh) * n * DV);
  std::vector<T> h(size_t(bh) * n * DV);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : h) x = from_f(u(rng));
  for (Buf<T>* b : {&q, &k, &v, &go}) CUDA_OK(cudaMemcpy(b->p, h.data(), b->n * sizeof(T), cudaMemcpyHostToDevice));
  Buf<float> lse(size_t(bh) * n), delta(size_t(bh) * n);
  constexpr Tiles tf = kF32 ? Tiles{DV >= 128 ? 32 : 64, 32, 4} : Tiles{64, DV >= 256 ? 32 : 64, 4};
  constexpr Tiles tq = kF32 ? Tiles{32, 32, 4} : Tiles{64, D + DV >= 384 ? 32 : 64, 4};
  constexpr Tiles tk = kF32 ? Tiles{32, D + DV >= 384 ? 16 : 32, 4}
                            : Tiles{D + DV <= 128 ? 64 : (D + DV <= 256 ? 32 : 16), 64, 4};
  auto kf = fa::flash_attention2_forward<T, D, DV, tf.bm, tf.bn, tf.w>;
  auto kq = fa::flash_attention2_backward_dq<T, D, DV, tq.bm, tq.bn, tq.w>;
  auto kk = fa::flash_attention2_backward_dkv<T, D, DV, tk.bm, tk.bn, tk.w>;
  const size_t sf = fa::fa2::FlashAttention2Smem<T, D, DV, tf.bm, tf.bn>::forward;
  const size_t sq = fa::fa2::FlashAttention2Smem<T, D, DV, tq.bm, tq.bn>::backward_dq;
  const size_t sk = fa::fa2::FlashAttention2Smem<T, D, DV, tk.bm, tk.bn>::backward_dkv;
  allow_smem(kf, sf);
  allow_smem(kq, sq);
  allow_smem(kk, sk);
  const float sc = 1.0f / std::sqrt(float(D));
  cudaEvent_t e0, e1, e2;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  CUDA_OK(cudaEventCreate(&e2));
  const int reps = 20;
  for (int it = 0; it < reps + 3; ++it) {
    if (it == 3) CUDA_OK(cudaEventRecord(e0));
    kf<<<dim3((n + tf.bm - 1) / tf.bm, bh), tf.w * 32, sf>>>(q.p, k.p, v.p, o.p, lse.p, n, n, sc);
    if (it == reps + 2) CUDA_OK(cudaEventRecord(e1));
    fa::flash_attention2_backward_preprocess<T, DV, 8><<<(bh * n + 7) / 8, 256>>>(o.p, go.p, delta.p, bh * n);
    kq<<<dim3((n + tq.bm - 1) / tq.bm, bh), tq.w * 32, sq>>>(q.p, k.p, v.p, go.p, lse.p, delta.p, dq.p, n, n, sc);
    kk<<<dim3((n + tk.bn - 1) / tk.bn, bh), tk.w * 32, sk>>>(q.p, k.p, v.p, go.p, lse.p, delta.p, dk.p, dv.p, n, n,
                                                            sc);
  }
  CUDA_OK(cudaEventRecord(e2));
  CUDA_OK(cudaEventSynchronize(e2));
  CUDA_OK(cudaGetLastError());
  float all_ms = 0, fwd_last = 0;
  CUDA_OK(cudaEventElapsedTime(&all_ms, e0, e2));
  (void)fwd_last;
  // Separate forward-only timing.
  CUDA_OK(cudaEventRecord(e0));
  for (int it = 0; it < reps; ++it)
    kf<<<dim3((n + tf.bm - 1) / tf.bm, bh), tf.w * 32, sf>>>(q.p, k.p, v.p, o.p, lse.p, n, n, sc);
  CUDA_OK(cudaEventRecord(e1));
  CUDA_OK(cudaEventSynchronize(e1));
  float fwd_ms = 0;
  CUDA_OK(cudaEventElapsedTime(&fwd_ms, e0, e1));
  fwd_ms /= reps;
  const float bwd_ms = all_ms / reps - fwd_ms;
  const double f_fwd = 2.0 * bh * double(n) * n * (D + DV), f_bwd = 2.0 * bh * double(n) * n * (2 * D + 3 * DV);
  std::printf("time %-4s d=%3d dv=%3d bh=%3d n=%5d | fwd %.3f ms %.1f TFLOP/s | bwd %.3f ms %.1f TFLOP/s\n", kType, D,
              DV, bh, n, fwd_ms, f_fwd / fwd_ms * 1e-9, bwd_ms, f_bwd / bwd_ms * 1e-9);
}

int main() {
  int failed = 0;
  failed += run_sizes<16, 16>();
  failed += run_sizes<16, 32>();
  failed += run_sizes<32, 32>();
  failed += run_sizes<32, 64>();
  failed += run_sizes<64, 64>();
  failed += run_sizes<64, 128>();
  failed += run_sizes<128, 128>();
  failed += run_sizes<128, 256>();
  if (std::getenv("FA2_TIME")) {
    time_case<32, 64>(64, 400);
    time_case<32, 64>(64, 1600);
    time_case<64, 64>(32, 4096);
    time_case<128, 128>(16, 4096);
  }
  std::printf("%s: %d case(s) failed\n", kType, failed);
  return failed ? 1 : 0;
}
