// MuSGD's Newton–Schulz iteration as the engine's own grouped GEMM: one launch per product over every Muon matrix of
// every shape (one block per kNsTileM × kNsTileN output tile, the tiles listed once per optimizer in a table), so an
// iteration is three launches whatever the number of shapes — cuBLAS's grouped GEMM runs a kernel per shape, 120 an
// iteration for YOLO26n's 40 shapes. For each matrix X (row-major m × n, m ≤ n, bf16) of the source buffer:
//   product 0: A = bf16(α·(X·Xᵀ))           (m × m, into the scratch a; the host passes α = 1)
//   product 1: B = bf16(α·(A·A) + β·A)      (m × m, into the scratch b; α = c, β = b)
//   product 2: Y = bf16(α·(B·X) + β·X)      (m × n, into the destination buffer, X left as it is; α = 1, β = a)
// Tensor cores (mma.sync m16n8k16, bf16 inputs, f32 accumulation over k in tile order: deterministic); operands
// staged in shared memory with bounds checks, so any m, n, leading dimension and alignment works. The CPU twin is
// newton_schulz_cpu (f32 accumulation k ascending): the two agree to bf16 rounding noise, as cuBLAS does.
// Launch with blockDim.x = kNsThreads (4 warps, each a 32 × 32 quarter of the tile).
#pragma once

#include "vision/cuda/kernel_common.cuh"
#include "vision/cuda/mma.cuh"
#include "vision/train/optim_layout.cuh"

namespace vision::train {

namespace ns_detail {

enum : int { kLd = kNsTileK + 8 };  // shared row stride (elements): the 32-bit fragment reads hit 32 distinct banks

__device__ __forceinline__ unsigned load_pair(const __nv_bfloat16* p) { return *reinterpret_cast<const unsigned*>(p); }

}  // namespace ns_detail

template <typename T>
__global__ void __launch_bounds__(kNsThreads)
    ns_gemm(const void* __restrict__ matrix_table, const void* __restrict__ tile_table, const T* __restrict__ src,
            T* __restrict__ dst, T* __restrict__ a, T* __restrict__ b, int32_t product, float alpha, float beta) {
  using ns_detail::kLd;
  __shared__ __align__(16) T sl[kNsTileM * kLd];  // the left operand's tile, [row][k]
  __shared__ __align__(16) T sr[kNsTileN * kLd];  // the right operand's tile, [col][k]
  const NsTile tile = static_cast<const NsTile*>(tile_table)[blockIdx.x];
  const NsMatrix mat = static_cast<const NsMatrix*>(matrix_table)[tile.matrix];
  const int m = mat.m, n = mat.n;
  const T *L, *R, *C = nullptr;
  T* out;
  int K, ldl, ldr, ldo, cols;
  bool r_rows;  // the right operand given by rows of k (X·Xᵀ: Xᵀ's column j is X's row j), else [k][col]
  if (product == 0) {
    L = src + mat.x_offset, R = L, out = a + mat.a_offset;
    K = n, ldl = n, ldr = n, ldo = m, cols = m, r_rows = true;
  } else if (product == 1) {
    L = a + mat.a_offset, R = L, C = L, out = b + mat.a_offset;
    K = m, ldl = m, ldr = m, ldo = m, cols = m, r_rows = false;
  } else {
    L = b + mat.a_offset, R = src + mat.x_offset, C = R, out = dst + mat.x_offset;
    K = m, ldl = m, ldr = n, ldo = n, cols = n, r_rows = false;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wr = (warp >> 1) * 32, wc = (warp & 1) * 32;
  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  const T zero = vk::from_float<T>(0.0f);
  for (int k0 = 0; k0 < K; k0 += kNsTileK) {
    for (int e = threadIdx.x; e < kNsTileM * kNsTileK; e += kNsThreads) {
      const int r = e / kNsTileK, kk = e % kNsTileK, gr = tile.row + r, gk = k0 + kk;
      sl[r * kLd + kk] = gr < m && gk < K ? L[static_cast<int64_t>(gr) * ldl + gk] : zero;
    }
    for (int e = threadIdx.x; e < kNsTileN * kNsTileK; e += kNsThreads) {
      // Consecutive threads read consecutive elements of global memory in either form.
      const int j = r_rows ? e / kNsTileK : e % kNsTileN, kk = r_rows ? e % kNsTileK : e / kNsTileN;
      const int gj = tile.col + j, gk = k0 + kk;
      T v = zero;
      if (gj < cols && gk < K)
        v = r_rows ? R[static_cast<int64_t>(gj) * ldr + gk] : R[static_cast<int64_t>(gk) * ldr + gj];
      sr[j * kLd + kk] = v;
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kNsTileK; ks += 16) {
      unsigned af[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const T* p = sl + (wr + i * 16 + g) * kLd + ks + 2 * t;
        af[i][0] = ns_detail::load_pair(p);
        af[i][1] = ns_detail::load_pair(p + 8 * kLd);
        af[i][2] = ns_detail::load_pair(p + 8);
        af[i][3] = ns_detail::load_pair(p + 8 * kLd + 8);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const T* q = sr + (wc + j * 8 + g) * kLd + ks + 2 * t;
        const unsigned b0 = ns_detail::load_pair(q), b1 = ns_detail::load_pair(q + 8);
#pragma unroll
        for (int i = 0; i < 2; ++i) vk::mma_16816_bf16(acc[i][j], af[i], b0, b1);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = tile.row + wr + i * 16 + g + (e >> 1) * 8, c = tile.col + wc + j * 8 + 2 * t + (e & 1);
        if (r >= m || c >= cols) continue;
        const int64_t at = static_cast<int64_t>(r) * ldo + c;
        float v = __fmul_rn(alpha, acc[i][j][e]);
        if (C != nullptr) v = __fadd_rn(v, __fmul_rn(beta, vk::to_float(C[at])));
        out[at] = vk::from_float<T>(v);
      }
}

}  // namespace vision::train
