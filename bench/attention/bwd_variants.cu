// Tuning aid (not part of the build): times flash_attention2_backward_sm90 with each number of warpgroups per CTA
// (memset of dq_accum + the kernel + dq_convert, on the GPU alone, CUDA events, median of 15) and checks its dQ, dK,
// dV against the mma.sync fused backward (flash_attention2_backward_dkv_dq). `bwdv SHAPE` (e.g. B64_H4_N1600_d32)
// launches the chosen tiles once for a profiler. Compile on an sm_90a host:
//   nvcc -std=c++17 -O3 -I src -gencode=arch=compute_90a,code=sm_90a bench/attention/bwd_variants.cu -o /tmp/bwdv
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "vision/ops/attention/flash_attn2_sm90.cuh"

namespace attn = vision::ops::attention;

static const char* g_only = nullptr;  // argv[1]: launch the chosen tiles once for this shape (for a profiler)

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e = (x);                                                                 \
    if (e != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

template <typename T, int D, int DV, int NWG>
__global__ void __launch_bounds__(NWG * 128, NWG == 1 ? 3 : 1)
    bwd(const T* q, const T* k, const T* v, const T* go, const float* lse, const float* delta, T* gk, T* gv,
        float* acc, int n_q, int n_k, float scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  attn::fa2::backward_sm90<T, D, DV, NWG>(q, k, v, go, lse, delta, gk, gv, acc, n_q, n_k, scale);
#endif
}

__global__ void fill(__half* p, long long n, unsigned seed) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x) {
    unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2half((x & 0xFFFF) / 32768.0f - 1.0f);
  }
}

struct Problem {
  int b, h, n, d, dv;
};

struct Buffers {
  __half *q, *k, *v, *o, *go, *gq, *gk, *gv;
  float *lse, *delta, *acc;
};

// dQ, dK, dV, concatenated, as floats.
template <int D, int DV>
void download(const Problem& p, const Buffers& bf, std::vector<float>* out) {
  const long long rows = static_cast<long long>(p.b) * p.h * p.n;
  std::vector<__half> h(rows * (2 * D + DV));
  CK(cudaMemcpy(h.data(), bf.gq, rows * D * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h.data() + rows * D, bf.gk, rows * D * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h.data() + 2 * rows * D, bf.gv, rows * DV * 2, cudaMemcpyDeviceToHost));
  out->assign(h.size(), 0.0f);
  for (size_t i = 0; i < h.size(); ++i) (*out)[i] = __half2float(h[i]);
}

template <int D, int DV, int NWG>
float run(const Problem& p, const Buffers& bf, std::vector<float>* out) {
  using T = __half;
  const int bh = p.b * p.h, n = p.n;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int smem = attn::fa2::FlashAttention2Sm90Smem<T, D, DV, 64, NWG>::backward;
  auto kern = bwd<T, D, DV, NWG>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid((n + 64 * NWG - 1) / (64 * NWG), bh);
  const long long nq = static_cast<long long>(bh) * n * D;
  auto once = [&] {
    CK(cudaMemsetAsync(bf.acc, 0, nq * 4));
    kern<<<grid, 128 * NWG, smem>>>(bf.q, bf.k, bf.v, bf.go, bf.lse, bf.delta, bf.gk, bf.gv, bf.acc, n, n, scale);
    attn::flash_attention2_backward_dq_convert<T, 8><<<(nq + 1023) / 1024, 256>>>(bf.acc, bf.gq, static_cast<int>(nq));
  };
  once();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  if (g_only) return 0.0f;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int r = 0; r < 15; ++r) {
    CK(cudaEventRecord(e0));
    for (int it = 0; it < 5; ++it) once();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms * 1000.0f / 5);
  }
  std::sort(ts.begin(), ts.end());
  if (out) download<D, DV>(p, bf, out);
  return ts[ts.size() / 2];
}

// The reference: the mma.sync fused backward (flash_attn2.cuh), same memset / convert flow.
template <int D, int DV>
void run_mma(const Problem& p, const Buffers& bf, std::vector<float>* out) {
  using T = __half;
  constexpr int BM = D + DV <= 128 ? 64 : (D + DV <= 256 ? 32 : 16), BN = 64;
  const int bh = p.b * p.h, n = p.n;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int smem = (BN * (D + 8) + BN * (DV + 8) + 2 * (BM * (D + 8) + BM * (DV + 8))) * 2 + 2 * 2 * BM * 4 +
                   BN * (BM + 8) * 2;
  auto kern = attn::flash_attention2_backward_dkv_dq<T, D, DV, BM, BN, 4>;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const long long nq = static_cast<long long>(bh) * n * D;
  CK(cudaMemset(bf.acc, 0, nq * 4));
  kern<<<dim3((n + BN - 1) / BN, bh), 128, smem>>>(bf.q, bf.k, bf.v, bf.go, bf.lse, bf.delta, bf.gk, bf.gv, bf.acc, n,
                                                   n, scale);
  attn::flash_attention2_backward_dq_convert<T, 8><<<(nq + 1023) / 1024, 256>>>(bf.acc, bf.gq, static_cast<int>(nq));
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  download<D, DV>(p, bf, out);
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}


template <int D, int DV>
struct Sweep {
  template <int NWG>
  static void one(const Problem& p, const Buffers& bf, const std::vector<float>& ref) {
    std::vector<float> got;
    const float us = run<D, DV, NWG>(p, bf, &got);
    const double flops = 2.0 * p.b * p.h * double(p.n) * p.n * (3 * D + 2 * DV);
    std::printf("B%d_H%d_N%d_d%d_dv%d  warpgroups %d  %9.1f us  %6.1f TF/s  rel vs mma.sync %.2e\n", p.b, p.h, p.n, D,
                DV, NWG, us, flops / us * 1e-6, rel(got, ref));
  }
  template <int BNF, int NWGF>
  static void go(const Problem& p) {
    using T = __half;
    const int bh = p.b * p.h, n = p.n;
    const long long nq = static_cast<long long>(bh) * n;
    Buffers bf;
    CK(cudaMalloc(&bf.q, nq * D * 2));
    CK(cudaMalloc(&bf.k, nq * D * 2));
    CK(cudaMalloc(&bf.v, nq * DV * 2));
    CK(cudaMalloc(&bf.o, nq * DV * 2));
    CK(cudaMalloc(&bf.go, nq * DV * 2));
    CK(cudaMalloc(&bf.gq, nq * D * 2));
    CK(cudaMalloc(&bf.gk, nq * D * 2));
    CK(cudaMalloc(&bf.gv, nq * DV * 2));
    CK(cudaMalloc(&bf.lse, nq * 4));
    CK(cudaMalloc(&bf.delta, nq * 4));
    CK(cudaMalloc(&bf.acc, nq * D * 4));
    fill<<<1024, 256>>>(bf.q, nq * D, 1);
    fill<<<1024, 256>>>(bf.k, nq * D, 2);
    fill<<<1024, 256>>>(bf.v, nq * DV, 3);
    fill<<<1024, 256>>>(bf.go, nq * DV, 4);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    auto fwd = attn::flash_attention2_forward_sm90<T, D, DV, BNF, NWGF>;
    const int fsmem = attn::fa2::FlashAttention2Sm90Smem<T, D, DV, BNF, NWGF>::bytes;
    CK(cudaFuncSetAttribute(fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, fsmem));
    fwd<<<dim3((n + 64 * NWGF - 1) / (64 * NWGF), bh), 128 * NWGF, fsmem>>>(bf.q, bf.k, bf.v, bf.o, bf.lse, n, n,
                                                                             scale);
    attn::flash_attention2_backward_preprocess<T, DV, 8><<<(nq + 7) / 8, 256>>>(bf.o, bf.go, bf.delta,
                                                                                 static_cast<int>(nq));
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> ref;
    constexpr int kTiles = D >= 128 ? 2 : (D >= 64 ? 3 : 1);  // as flash_attention2_tiles
    if (g_only) {
      run<D, DV, kTiles>(p, bf, nullptr);
      return;
    }
    run_mma<D, DV>(p, bf, &ref);
    if constexpr (D <= 64) one<1>(p, bf, ref);
    one<2>(p, bf, ref);
    if constexpr (D <= 64) one<3>(p, bf, ref);
    for (void* x : {(void*)bf.q, (void*)bf.k, (void*)bf.v, (void*)bf.o, (void*)bf.go, (void*)bf.gq, (void*)bf.gk,
                    (void*)bf.gv, (void*)bf.lse, (void*)bf.delta, (void*)bf.acc})
      CK(cudaFree(x));
  }
};

bool selected(const Problem& p) {
  if (!g_only) return true;
  char name[64];
  std::snprintf(name, sizeof name, "B%d_H%d_N%d_d%d", p.b, p.h, p.n, p.d);
  return std::string(name) == g_only;
}

int main(int argc, char** argv) {
  if (argc > 1) g_only = argv[1];
  for (Problem p : {Problem{64, 4, 1600, 32, 64}, Problem{16, 4, 1600, 32, 64}, Problem{64, 2, 400, 32, 64},
                    Problem{1, 2, 400, 32, 64}, Problem{1, 4, 1600, 32, 64}, Problem{64, 4, 400, 32, 64}, Problem{2, 3, 97, 32, 64}})
    if (selected(p)) Sweep<32, 64>::go<64, 1>(p);
  for (Problem p : {Problem{8, 16, 4096, 64, 64}, Problem{8, 16, 1024, 64, 64}, Problem{1, 3, 1025, 64, 64}}) if (selected(p)) Sweep<64, 64>::go<128, 1>(p);
  for (Problem p : {Problem{8, 16, 4096, 128, 128}, Problem{8, 16, 1024, 128, 128}, Problem{3, 1, 97, 128, 128}})
    if (selected(p)) Sweep<128, 128>::go<128, 2>(p);
  return 0;
}
