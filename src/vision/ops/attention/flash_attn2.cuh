// FlashAttention-2 GPU kernels — forward (with log-sum-exp), backward preprocessing D, dQ and dK/dV, as templates that
// NVRTC instantiates per (dtype, head sizes, block sizes, warps). The CPU twin (flash_attn2.cpp) is their reference.
//
// Plain CUDA C++ for NVRTC: no host code, no system headers (only cuda_fp16.h / cuda_bf16.h). Needs sm_80+.
//
// Layout: contiguous [BH, N, d] tensors (BH = batch × heads), element type T ∈ {float, __half, __nv_bfloat16}:
//   q [BH, n_q, HEAD_DIM], k [BH, n_k, HEAD_DIM], v [BH, n_k, HEAD_DIM_V] → o [BH, n_q, HEAD_DIM_V];
//   lse [BH, n_q] and delta [BH, n_q] are f32. Non-causal; any n_q, n_k ≥ 1 (tails are masked); softmax scale is a
//   runtime argument; lse is the natural-log log-sum-exp of the scaled scores (as in the CPU twin).
//   HEAD_DIM ∈ {16, 32, 64, 128}; HEAD_DIM_V a multiple of 16 up to 256 (YOLO26's PSA runs d_v = 2·d_qk in one pass).
//   Pointers must be 16-byte aligned (cudaMalloc and the plan's arena are); BH ≤ 65535 (it is gridDim.y).
//
// Two designs behind one set of kernel templates:
//   * __half / __nv_bfloat16: tensor cores (mma.sync.aligned.m16n8k16.row.col, f32 accumulation) through inline PTX,
//     operands from shared memory with ldmatrix (.trans where the operand is stored k-major), tiles staged with
//     cp.async (16-byte, zero-filled past the end of a sequence). Rows of shared tiles are padded by 8 elements, which
//     makes every ldmatrix phase conflict-free. One warp owns 16 rows (queries in forward/dQ, keys in dK/dV).
//   * float: IEEE f32 FMA on CUDA cores (no TF32), register-tiled: a CTA of NUM_WARPS·32 threads is a 16 × (2·NUM_WARPS)
//     grid; thread (tx, ty) owns rows ty·(BLOCK/(2·NUM_WARPS)) + i and columns tx + 16·j of each tile, so row
//     reductions are shuffles within 16 lanes. Shared tiles are padded by one float per row (conflict-free column
//     access).
//
// Kernels and launch geometry (THREADS = NUM_WARPS · 32, dynamic shared memory = the matching FlashAttention2Smem
// member below; above 48 KiB the launcher must raise cudaFuncAttributeMaxDynamicSharedMemorySize):
//   flash_attention2_forward<T, D, DV, BLOCK_M, BLOCK_N, W>          grid (ceil(n_q / BLOCK_M), BH)
//       (q, k, v, o, lse, n_q, n_k, scale); lse may be null (inference). One CTA per query block; K/V tiles
//       streamed through shared memory, online softmax in registers, O normalised once at the end.
//   flash_attention2_backward_preprocess<T, DV, W>                    grid (ceil(BH·n_q / (W · R)))
//       (o, grad_o, delta, rows = BH·n_q): delta = rowsum(grad_o ∘ o), R = PreprocessShape<T, DV>::kRowsPerWarp
//       rows per warp, 16-byte loads.
//   flash_attention2_backward_dq<T, D, DV, BLOCK_M, BLOCK_N, W>       grid (ceil(n_q / BLOCK_M), BH)
//       (q, k, v, grad_o, lse, delta, grad_q, n_q, n_k, scale). One CTA per query block, iterating over key blocks
//       (double-buffered on the tensor-core path); P and dS are recomputed, never stored globally.
//   flash_attention2_backward_dkv<T, D, DV, BLOCK_M, BLOCK_N, W>      grid (ceil(n_k / BLOCK_N), BH)
//       (q, k, v, grad_o, lse, delta, grad_k, grad_v, n_q, n_k, scale). One CTA per key block, iterating over query
//       blocks (double-buffered on the tensor-core path): each dK/dV row has one owner, so no atomics.
//   flash_attention2_backward_dkv_dq<T, D, DV, BLOCK_M, BLOCK_N, W>   grid (ceil(n_k / BLOCK_N), BH), 16-bit T only
//       (..., grad_k, grad_v, dq_accum, n_q, n_k, scale): dK/dV as above, plus scale · dS·K added into the f32
//       dq_accum [BH, n_q, D] (zeroed by the caller) with atomics: P and dP computed once for all three gradients.
//   flash_attention2_backward_dq_convert<T, W>                        grid (ceil(n / (4 · 32 · W)))
//       (dq_accum, grad_q, n = BH · n_q · D): grad_q = dq_accum rounded to T.
//   Tensor-core constraints: BLOCK_M = 16·W (forward, dQ), BLOCK_N = 16·W (dK/dV), the other block a multiple of 16.
//   f32 constraints: the owned block (BLOCK_M in forward/dQ, BLOCK_N in dK/dV) a multiple of 2·W, the other of 16.
//
// Tested on the GPU against float64 and the CPU twin by tests/ops/cuda/test_flash_attn2_gpu.cpp (every dtype
// and (d, d_v) pair of the engine's tile table, N from 1 to 1025, N_q ≠ N_k); timings in bench/attention/NOTES.md.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "vision/cuda/mma.cuh"

namespace vision::ops::attention {

namespace fa2 {

template <typename A, typename B>
struct IsSame {
  static constexpr bool value = false;
};
template <typename A>
struct IsSame<A, A> {
  static constexpr bool value = true;
};

// Traits as constants (constexpr functions would be host functions to NVRTC without --expt-relaxed-constexpr).
template <typename T>
struct IsF32 {
  static constexpr bool value = IsSame<T, float>::value;
};
template <typename T>
struct IsSupported {
  static constexpr bool value = IsSame<T, float>::value || IsSame<T, __half>::value || IsSame<T, __nv_bfloat16>::value;
};

// log2(e) and ln(2). Class members rather than namespace-scope constants: NVRTC emits a namespace-scope constant as an
// internal global whose PTX name carries a per-compile hash, which would make the PTX of one source differ from
// compile to compile (and break PTX snapshots).
struct Constants {
  static constexpr float kLog2e = 1.4426950408889634f;
  static constexpr float kLn2 = 0.6931471805599453f;
};

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// ---------------------------------------------------------------------------------------------------------------
// Shared-memory sizes (bytes of dynamic shared memory per CTA). The host mirror is flash_attention2_smem_bytes() in
// flash_attn2.h; both are pinned by the same numbers in the tests.

template <typename T, int D, int DV, int BM, int BN>
struct FlashAttention2Smem {
  static constexpr bool kF32 = IsSame<T, float>::value;
  static constexpr int kPad = kF32 ? 1 : 8;  // elements appended to every shared row
  static constexpr int kElem = kF32 ? 4 : 2;
  // f32: Q, K, V tiles and the P tile. 16-bit: Q, K, V tiles.
  static constexpr int forward = kF32 ? (BM * (D + 1) + BN * (D + 1) + BN * (DV + 1) + BM * (BN + 1)) * 4
                                      : (BM * (D + 8) + BN * (D + 8) + BN * (DV + 8)) * 2;
  // f32: Q, dO, K, V tiles and the dS tile. 16-bit: Q, dO tiles and two stages of K, V tiles.
  static constexpr int backward_dq = kF32 ? (BM * (D + 1) + BM * (DV + 1) + BN * (D + 1) + BN * (DV + 1) + BM * (BN + 1)) * 4
                                          : (BM * (D + 8) + BM * (DV + 8) + 2 * (BN * (D + 8) + BN * (DV + 8))) * 2;
  // f32: K, V, Q, dO tiles, the P and dS tiles and lse/delta rows. 16-bit: K, V tiles, two stages of Q, dO tiles
  // and of the lse/delta rows.
  static constexpr int backward_dkv =
      kF32 ? (BN * (D + 1) + BN * (DV + 1) + BM * (D + 1) + BM * (DV + 1) + 2 * BN * (BM + 1) + 2 * BM) * 4
           : (BN * (D + 8) + BN * (DV + 8) + 2 * (BM * (D + 8) + BM * (DV + 8))) * 2 + 2 * 2 * BM * 4;
  // 16-bit only: the dK/dV tiles and a dSᵀ tile.
  static constexpr int backward_dkv_dq = backward_dkv + BN * (BM + 8) * 2;
};

__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char fa2_dynamic_smem[];
  return fa2_dynamic_smem;
}

// ---------------------------------------------------------------------------------------------------------------
// Element conversions.

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// Two floats as one 32-bit register of two 16-bit elements (a in the low half), rounded to nearest.
template <typename T>
__device__ __forceinline__ unsigned pack2(float a, float b) {
  if constexpr (IsSame<T, __half>::value) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const unsigned*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const unsigned*>(&h);
  }
}

// The dot product of two 16-byte vectors of T (8 16-bit or 4 f32 elements), accumulated in f32.
template <typename T>
__device__ __forceinline__ float dot16(uint4 a, uint4 b) {
  const unsigned x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (IsF32<T>::value) {
      s = fmaf(__uint_as_float(x[i]), __uint_as_float(y[i]), s);
    } else if constexpr (IsSame<T, __half>::value) {
      const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&x[i]));
      const float2 q = __half22float2(*reinterpret_cast<const __half2*>(&y[i]));
      s = fmaf(p.x, q.x, fmaf(p.y, q.y, s));
    } else {
      const float2 p = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x[i]));
      const float2 q = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&y[i]));
      s = fmaf(p.x, q.x, fmaf(p.y, q.y, s));
    }
  }
  return s;
}

// The preprocessing kernel's layout: a row of DV elements is kChunks 16-byte chunks, read by kLanes lanes of a warp
// (all the chunks when they are a power of two up to 32; else the whole warp strides over them), so that a warp
// covers kRowsPerWarp rows with full 16-byte loads. The host's tile table gives block_m = warps · kRowsPerWarp.
template <typename T, int DV>
struct PreprocessShape {
  static constexpr int kChunks = DV * static_cast<int>(sizeof(T)) / 16;
  static constexpr int kLanes = kChunks <= 32 && (kChunks & (kChunks - 1)) == 0 ? kChunks : 32;
  static constexpr int kRowsPerWarp = 32 / kLanes;
};

// ---------------------------------------------------------------------------------------------------------------
// Warp reductions.

// Over the 4 lanes of an mma quad (lanes 4g .. 4g+3 hold one accumulator row).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
// Over 16 consecutive lanes (one row of the f32 thread grid).
__device__ __forceinline__ float half_warp_max(float x) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float half_warp_sum(float x) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// ---------------------------------------------------------------------------------------------------------------
// PTX wrappers: asynchronous copies, ldmatrix, mma.

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global → shared; with valid = false nothing is read and the 16 bytes are zero-filled.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}
// 4 bytes global → shared, zero-filled when !valid.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// p[0] += a, p[1] += b in global memory (p 8-byte aligned): one vector reduction on sm_90, two atomics before.
__device__ __forceinline__ void atomic_add2(float* p, float a, float b) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// c (16×8, f32) += a (16×16, row) · b (16×8, col), 16-bit inputs.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (IsSame<T, __half>::value)
    vk::mma_16816_f16(c, a, b0, b1);
  else
    vk::mma_16816_bf16(c, a, b0, b1);
}

// Fragment loads from a row-major shared tile with row stride LD (elements).
// mma fragment ownership (lane = 4g + t): A rows g and g+8, columns 2t, 2t+1 (+8); B rows (k) 2t, 2t+1 (+8),
// column (n) g; C rows g and g+8, columns 2t, 2t+1.
//
// A fragment (16×16) of rows row0.., columns col0..: the four 8×8 matrices are (rows 0-7 | 8-15) × (cols 0-7 | 8-15),
// addressed by lanes 0-7, 8-15, 16-23, 24-31.
template <int LD, typename T>
__device__ __forceinline__ void load_a(unsigned (&a)[4], const T* tile, int row0, int col0, int lane) {
  ldmatrix_x4(a, tile + (row0 + (lane & 15)) * LD + col0 + (lane >> 4) * 8);
}
// B fragments of two adjacent n8 tiles from a tile stored n-major ([n][k], e.g. K for S = Q·Kᵀ): rows n0..n0+15,
// columns k0..k0+15. b[0], b[1]: tile n0..n0+7; b[2], b[3]: tile n0+8..n0+15.
template <int LD, typename T>
__device__ __forceinline__ void load_b_nk(unsigned (&b)[4], const T* tile, int n0, int k0, int lane) {
  ldmatrix_x4(b, tile + (n0 + (lane & 7) + ((lane >> 4) << 3)) * LD + k0 + ((lane >> 3) & 1) * 8);
}
// The same from a tile stored k-major ([k][n], e.g. V for O = P·V), transposed by ldmatrix: rows k0..k0+15,
// columns n0..n0+15.
template <int LD, typename T>
__device__ __forceinline__ void load_b_kn(unsigned (&b)[4], const T* tile, int k0, int n0, int lane) {
  ldmatrix_x4_trans(b, tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n0 + (lane >> 4) * 8);
}

// A fragment for k-chunk kk from a 16×N accumulator (acc[N/8][4]), rounded to T: the C layout of two n8 tiles is the
// A layout of one k16 chunk.
template <typename T, int NT>
__device__ __forceinline__ void acc_to_a(unsigned (&a)[4], const float (&acc)[NT][4], int kk) {
  a[0] = pack2<T>(acc[2 * kk][0], acc[2 * kk][1]);
  a[1] = pack2<T>(acc[2 * kk][2], acc[2 * kk][3]);
  a[2] = pack2<T>(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
  a[3] = pack2<T>(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

// Stages rows [row0, row0 + ROWS) of a [n, DIM] 16-bit matrix into a shared tile with row stride DIM + 8, 16 bytes per
// copy (consecutive threads take consecutive chunks of a row); rows ≥ n are zero-filled.
template <typename T, int ROWS, int DIM, int THREADS>
__device__ __forceinline__ void load_tile_async(T* tile, const T* g, int row0, int n) {
  constexpr int kChunks = DIM / 8;
  constexpr int kTotal = ROWS * kChunks;
#pragma unroll
  for (int it = 0; it < (kTotal + THREADS - 1) / THREADS; ++it) {
    const int i = it * THREADS + static_cast<int>(threadIdx.x);
    if (kTotal % THREADS == 0 || i < kTotal) {
      const int r = i / kChunks, c = (i % kChunks) * 8;
      const bool valid = row0 + r < n;
      const T* src = valid ? g + static_cast<long long>(row0 + r) * DIM + c : g;
      cp_async_16(tile + r * (DIM + 8) + c, src, valid);
    }
  }
}
// count f32 values [row0, row0 + count) of a vector of length n into shared memory, zero past n.
template <int COUNT, int THREADS>
__device__ __forceinline__ void load_rows_async(float* dst, const float* g, int row0, int n) {
#pragma unroll
  for (int pass = 0; pass < (COUNT + THREADS - 1) / THREADS; ++pass) {
    const int r = pass * THREADS + static_cast<int>(threadIdx.x);
    if (COUNT % THREADS == 0 || r < COUNT) {
      const bool valid = row0 + r < n;
      cp_async_4(dst + r, valid ? g + row0 + r : g, valid);
    }
  }
}

// Stages rows [row0, row0 + ROWS) of a [n, DIM] f32 matrix into a shared tile with row stride DIM + 1 (coalesced
// global reads along DIM); rows ≥ n are zero-filled.
template <int ROWS, int DIM, int THREADS>
__device__ __forceinline__ void load_tile_f32(float* tile, const float* g, int row0, int n) {
  for (int i = static_cast<int>(threadIdx.x); i < ROWS * DIM; i += THREADS) {
    const int r = i / DIM, c = i % DIM;
    tile[r * (DIM + 1) + c] = row0 + r < n ? g[static_cast<long long>(row0 + r) * DIM + c] : 0.0f;
  }
}

template <typename T, int D, int DV>
__device__ __forceinline__ void check_shapes() {
  static_assert(IsSupported<T>::value, "flash_attention2: T must be float, __half or __nv_bfloat16");
  static_assert(D == 16 || D == 32 || D == 64 || D == 128, "flash_attention2: HEAD_DIM must be 16, 32, 64 or 128");
  static_assert(DV % 16 == 0 && DV >= 16 && DV <= 256, "flash_attention2: HEAD_DIM_V must be a multiple of 16 in [16, 256]");
}

// ---------------------------------------------------------------------------------------------------------------
// Forward, tensor cores. Warp w owns query rows m0 + 16w .. +15.

template <typename T, int D, int DV, int BM, int BN, int W>
__device__ __forceinline__ void forward_mma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                            T* __restrict__ o, float* __restrict__ lse, int n_q, int n_k,
                                            float scale) {
  static_assert(BM == 16 * W, "tensor-core forward: BLOCK_M must be 16 · NUM_WARPS");
  static_assert(BN % 16 == 0, "tensor-core forward: BLOCK_N must be a multiple of 16");
  constexpr int kThreads = W * 32, LDQ = D + 8, LDK = D + 8, LDV = DV + 8;
  T* sQ = reinterpret_cast<T*>(dynamic_smem());
  T* sK = sQ + BM * LDQ;
  T* sV = sK + BN * LDK;

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = static_cast<int>(blockIdx.x) * BM;
  const long long bh = blockIdx.y;
  const T* qb = q + bh * n_q * D;
  const T* kb = k + bh * n_k * D;
  const T* vb = v + bh * n_k * DV;

  load_tile_async<T, BM, D, kThreads>(sQ, qb, m0, n_q);
  load_tile_async<T, BN, D, kThreads>(sK, kb, 0, n_k);
  cp_async_commit();

  float acc_o[DV / 8][4];
#pragma unroll
  for (int i = 0; i < DV / 8; ++i) acc_o[i][0] = acc_o[i][1] = acc_o[i][2] = acc_o[i][3] = 0.0f;
  // Running max (of scaled scores, log2 units) and this thread's part of the running sum, rows g and g + 8.
  float row_max[2] = {neg_inf(), neg_inf()}, row_sum[2] = {0.0f, 0.0f};
  const float sl2 = scale * Constants::kLog2e;
  const int n_blocks = (n_k + BN - 1) / BN;

  for (int j = 0; j < n_blocks; ++j) {
    const int n0 = j * BN;
    cp_async_wait<0>();  // K_j (and Q on the first block)
    __syncthreads();     // ... visible to all; every warp is done with V_{j-1}
    load_tile_async<T, BN, DV, kThreads>(sV, vb, n0, n_k);
    cp_async_commit();

    // S = Q·K_jᵀ (16 × BN per warp), overlapping the V_j copy.
    float acc_s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) acc_s[i][0] = acc_s[i][1] = acc_s[i][2] = acc_s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned a[4];
      load_a<LDQ>(a, sQ, warp * 16, kk * 16, lane);
#pragma unroll
      for (int nn = 0; nn < BN / 16; ++nn) {
        unsigned b[4];
        load_b_nk<LDK>(b, sK, nn * 16, kk * 16, lane);
        mma_16816<T>(acc_s[2 * nn], a, b[0], b[1]);
        mma_16816<T>(acc_s[2 * nn + 1], a, b[2], b[3]);
      }
    }

    cp_async_wait<0>();  // V_j
    __syncthreads();     // ... visible to all; every warp is done with K_j
    if (j + 1 < n_blocks) {
      load_tile_async<T, BN, D, kThreads>(sK, kb, n0 + BN, n_k);  // K_{j+1}, overlapping softmax and P·V
      cp_async_commit();
    }

    // Online softmax on the scaled scores (log2 units); keys ≥ n_k get −inf.
    float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + nt * 8 + 2 * t + (e & 1);
        acc_s[nt][e] = col < n_k ? acc_s[nt][e] * sl2 : neg_inf();
        mx[e >> 1] = fmaxf(mx[e >> 1], acc_s[nt][e]);
      }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);  // finite: block j holds at least one valid key
      alpha[r] = exp2f(row_max[r] - mx[r]);  // 0 on the first block
      row_max[r] = mx[r];
      row_sum[r] *= alpha[r];
    }
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc_s[nt][e] = exp2f(acc_s[nt][e] - mx[e >> 1]);
        row_sum[e >> 1] += acc_s[nt][e];
      }
#pragma unroll
    for (int i = 0; i < DV / 8; ++i) {
      acc_o[i][0] *= alpha[0];
      acc_o[i][1] *= alpha[0];
      acc_o[i][2] *= alpha[1];
      acc_o[i][3] *= alpha[1];
    }

    // O += P·V_j: P straight from the accumulators, V_j k-major through ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      unsigned a[4];
      acc_to_a<T>(a, acc_s, kk);
#pragma unroll
      for (int dn = 0; dn < DV / 16; ++dn) {
        unsigned b[4];
        load_b_kn<LDV>(b, sV, kk * 16, dn * 16, lane);
        mma_16816<T>(acc_o[2 * dn], a, b[0], b[1]);
        mma_16816<T>(acc_o[2 * dn + 1], a, b[2], b[3]);
      }
    }
  }

  // O = acc / l; lse = (max + log2 l) · ln 2.
  T* ob = o + bh * n_q * DV;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(row_sum[r]);
    const float inv = 1.0f / l;
    const int row = m0 + warp * 16 + g + 8 * r;
    if (row < n_q) {
#pragma unroll
      for (int dn = 0; dn < DV / 8; ++dn)
        *reinterpret_cast<unsigned*>(ob + static_cast<long long>(row) * DV + dn * 8 + 2 * t) =
            pack2<T>(acc_o[dn][2 * r] * inv, acc_o[dn][2 * r + 1] * inv);
      if (lse != nullptr && t == 0) lse[bh * n_q + row] = (row_max[r] + log2f(l)) * Constants::kLn2;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Forward, f32 (IEEE FMA). Thread (tx, ty) owns query rows ty·TM + i and keys tx + 16·j of each key block.

template <int D, int DV, int BM, int BN, int W>
__device__ __forceinline__ void forward_f32(const float* __restrict__ q, const float* __restrict__ k,
                                            const float* __restrict__ v, float* __restrict__ o,
                                            float* __restrict__ lse, int n_q, int n_k, float scale) {
  constexpr int kThreads = W * 32, TY = 2 * W, TM = BM / TY, TN = BN / 16, TD = DV / 16;
  static_assert(BM % TY == 0, "f32 forward: BLOCK_M must be a multiple of 2 · NUM_WARPS");
  static_assert(BN % 16 == 0, "f32 forward: BLOCK_N must be a multiple of 16");
  constexpr int LDQ = D + 1, LDK = D + 1, LDV = DV + 1, LDP = BN + 1;
  float* sQ = reinterpret_cast<float*>(dynamic_smem());
  float* sK = sQ + BM * LDQ;
  float* sV = sK + BN * LDK;
  float* sP = sV + BN * LDV;

  const int tx = static_cast<int>(threadIdx.x) & 15, ty = static_cast<int>(threadIdx.x) >> 4;
  const int m0 = static_cast<int>(blockIdx.x) * BM;
  const long long bh = blockIdx.y;
  const float* kb = k + bh * n_k * D;
  const float* vb = v + bh * n_k * DV;
  load_tile_f32<BM, D, kThreads>(sQ, q + bh * n_q * D, m0, n_q);

  float acc_o[TM][TD], row_max[TM], row_sum[TM];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    row_max[i] = neg_inf();
    row_sum[i] = 0.0f;
#pragma unroll
    for (int d = 0; d < TD; ++d) acc_o[i][d] = 0.0f;
  }
  const float sl2 = scale * Constants::kLog2e;

  for (int n0 = 0; n0 < n_k; n0 += BN) {
    __syncthreads();  // every thread is done with the previous K, V, P
    load_tile_f32<BN, D, kThreads>(sK, kb, n0, n_k);
    load_tile_f32<BN, DV, kThreads>(sV, vb, n0, n_k);
    __syncthreads();

    float s[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) s[i][j] = 0.0f;
#pragma unroll 4
    for (int c = 0; c < D; ++c) {
      float qv[TM], kv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) qv[i] = sQ[(ty * TM + i) * LDQ + c];
#pragma unroll
      for (int j = 0; j < TN; ++j) kv[j] = sK[(tx + 16 * j) * LDK + c];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
      float mx = row_max[i];
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        s[i][j] = n0 + tx + 16 * j < n_k ? s[i][j] * sl2 : neg_inf();
        mx = fmaxf(mx, s[i][j]);
      }
      mx = half_warp_max(mx);
      const float alpha = exp2f(row_max[i] - mx);
      row_max[i] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const float p = exp2f(s[i][j] - mx);
        sP[(ty * TM + i) * LDP + tx + 16 * j] = p;
        sum += p;
      }
      row_sum[i] = row_sum[i] * alpha + sum;
#pragma unroll
      for (int d = 0; d < TD; ++d) acc_o[i][d] *= alpha;
    }
    __syncthreads();  // P complete

#pragma unroll 4
    for (int kk = 0; kk < BN; ++kk) {
      float pv[TM], vv[TD];
#pragma unroll
      for (int i = 0; i < TM; ++i) pv[i] = sP[(ty * TM + i) * LDP + kk];
#pragma unroll
      for (int d = 0; d < TD; ++d) vv[d] = sV[kk * LDV + tx + 16 * d];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int d = 0; d < TD; ++d) acc_o[i][d] = fmaf(pv[i], vv[d], acc_o[i][d]);
    }
  }

  float* ob = o + bh * n_q * DV;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const float l = half_warp_sum(row_sum[i]);
    const int row = m0 + ty * TM + i;
    if (row < n_q) {
      const float inv = 1.0f / l;
#pragma unroll
      for (int d = 0; d < TD; ++d) ob[static_cast<long long>(row) * DV + tx + 16 * d] = acc_o[i][d] * inv;
      if (lse != nullptr && tx == 0) lse[bh * n_q + row] = (row_max[i] + log2f(l)) * Constants::kLn2;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// dQ, tensor cores. Warp w owns query rows m0 + 16w .. +15; K/V tiles double-buffered.

template <typename T, int D, int DV, int BM, int BN, int W>
__device__ __forceinline__ void backward_dq_mma(const T* __restrict__ q, const T* __restrict__ k,
                                                const T* __restrict__ v, const T* __restrict__ grad_o,
                                                const float* __restrict__ lse, const float* __restrict__ delta,
                                                T* __restrict__ grad_q, int n_q, int n_k, float scale) {
  static_assert(BM == 16 * W, "tensor-core dQ: BLOCK_M must be 16 · NUM_WARPS");
  static_assert(BN % 16 == 0, "tensor-core dQ: BLOCK_N must be a multiple of 16");
  constexpr int kThreads = W * 32, LDQ = D + 8, LDO = DV + 8, LDK = D + 8, LDV = DV + 8;
  T* sQ = reinterpret_cast<T*>(dynamic_smem());
  T* sdO = sQ + BM * LDQ;
  T* sK = sdO + BM * LDO;      // two stages
  T* sV = sK + 2 * BN * LDK;   // two stages

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = static_cast<int>(blockIdx.x) * BM;
  const long long bh = blockIdx.y;
  const T* kb = k + bh * n_k * D;
  const T* vb = v + bh * n_k * DV;

  load_tile_async<T, BM, D, kThreads>(sQ, q + bh * n_q * D, m0, n_q);
  load_tile_async<T, BM, DV, kThreads>(sdO, grad_o + bh * n_q * DV, m0, n_q);
  load_tile_async<T, BN, D, kThreads>(sK, kb, 0, n_k);
  load_tile_async<T, BN, DV, kThreads>(sV, vb, 0, n_k);
  cp_async_commit();

  float lse2[2], dr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = m0 + warp * 16 + g + 8 * r;
    lse2[r] = row < n_q ? lse[bh * n_q + row] * Constants::kLog2e : 0.0f;
    dr[r] = row < n_q ? delta[bh * n_q + row] : 0.0f;
  }
  float acc_dq[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc_dq[i][0] = acc_dq[i][1] = acc_dq[i][2] = acc_dq[i][3] = 0.0f;
  const float sl2 = scale * Constants::kLog2e;
  const int n_blocks = (n_k + BN - 1) / BN;

  for (int j = 0; j < n_blocks; ++j) {
    const int n0 = j * BN;
    if (j + 1 < n_blocks) {
      load_tile_async<T, BN, D, kThreads>(sK + ((j + 1) & 1) * BN * LDK, kb, n0 + BN, n_k);
      load_tile_async<T, BN, DV, kThreads>(sV + ((j + 1) & 1) * BN * LDV, vb, n0 + BN, n_k);
    }
    cp_async_commit();   // possibly empty: one group per iteration keeps the count uniform
    cp_async_wait<1>();  // everything but the prefetch: block j has landed
    __syncthreads();
    const T* cK = sK + (j & 1) * BN * LDK;
    const T* cV = sV + (j & 1) * BN * LDV;

    // S = Q·K_jᵀ and dP = dO·V_jᵀ (16 × BN per warp).
    float acc_s[BN / 8][4], acc_dp[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[i][e] = acc_dp[i][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned a[4];
      load_a<LDQ>(a, sQ, warp * 16, kk * 16, lane);
#pragma unroll
      for (int nn = 0; nn < BN / 16; ++nn) {
        unsigned b[4];
        load_b_nk<LDK>(b, cK, nn * 16, kk * 16, lane);
        mma_16816<T>(acc_s[2 * nn], a, b[0], b[1]);
        mma_16816<T>(acc_s[2 * nn + 1], a, b[2], b[3]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < DV / 16; ++kk) {
      unsigned a[4];
      load_a<LDO>(a, sdO, warp * 16, kk * 16, lane);
#pragma unroll
      for (int nn = 0; nn < BN / 16; ++nn) {
        unsigned b[4];
        load_b_nk<LDV>(b, cV, nn * 16, kk * 16, lane);
        mma_16816<T>(acc_dp[2 * nn], a, b[0], b[1]);
        mma_16816<T>(acc_dp[2 * nn + 1], a, b[2], b[3]);
      }
    }

    // dS = P ∘ (dP − D), P = exp2(S·scale·log2e − lse·log2e); keys ≥ n_k give 0.
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + nt * 8 + 2 * t + (e & 1);
        const float p = col < n_k ? exp2f(acc_s[nt][e] * sl2 - lse2[e >> 1]) : 0.0f;
        acc_s[nt][e] = p * (acc_dp[nt][e] - dr[e >> 1]);
      }

    // dQ += dS·K_j (K_j k-major through ldmatrix.trans).
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      unsigned a[4];
      acc_to_a<T>(a, acc_s, kk);
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        unsigned b[4];
        load_b_kn<LDK>(b, cK, kk * 16, dn * 16, lane);
        mma_16816<T>(acc_dq[2 * dn], a, b[0], b[1]);
        mma_16816<T>(acc_dq[2 * dn + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with stage j & 1 before it is refilled
  }
  cp_async_wait<0>();

  T* dqb = grad_q + bh * n_q * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = m0 + warp * 16 + g + 8 * r;
    if (row < n_q) {
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
        *reinterpret_cast<unsigned*>(dqb + static_cast<long long>(row) * D + dn * 8 + 2 * t) =
            pack2<T>(acc_dq[dn][2 * r] * scale, acc_dq[dn][2 * r + 1] * scale);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// dQ, f32. Thread (tx, ty) owns query rows ty·TM + i, keys tx + 16·j and head columns tx + 16·d.

template <int D, int DV, int BM, int BN, int W>
__device__ __forceinline__ void backward_dq_f32(const float* __restrict__ q, const float* __restrict__ k,
                                                const float* __restrict__ v, const float* __restrict__ grad_o,
                                                const float* __restrict__ lse, const float* __restrict__ delta,
                                                float* __restrict__ grad_q, int n_q, int n_k, float scale) {
  constexpr int kThreads = W * 32, TY = 2 * W, TM = BM / TY, TN = BN / 16, TD = D / 16;
  static_assert(BM % TY == 0, "f32 dQ: BLOCK_M must be a multiple of 2 · NUM_WARPS");
  static_assert(BN % 16 == 0, "f32 dQ: BLOCK_N must be a multiple of 16");
  constexpr int LDQ = D + 1, LDO = DV + 1, LDK = D + 1, LDV = DV + 1, LDS = BN + 1;
  float* sQ = reinterpret_cast<float*>(dynamic_smem());
  float* sdO = sQ + BM * LDQ;
  float* sK = sdO + BM * LDO;
  float* sV = sK + BN * LDK;
  float* sS = sV + BN * LDV;

  const int tx = static_cast<int>(threadIdx.x) & 15, ty = static_cast<int>(threadIdx.x) >> 4;
  const int m0 = static_cast<int>(blockIdx.x) * BM;
  const long long bh = blockIdx.y;
  const float* kb = k + bh * n_k * D;
  const float* vb = v + bh * n_k * DV;
  load_tile_f32<BM, D, kThreads>(sQ, q + bh * n_q * D, m0, n_q);
  load_tile_f32<BM, DV, kThreads>(sdO, grad_o + bh * n_q * DV, m0, n_q);

  float lse2[TM], dr[TM], acc[TM][TD];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = m0 + ty * TM + i;
    lse2[i] = row < n_q ? lse[bh * n_q + row] * Constants::kLog2e : 0.0f;
    dr[i] = row < n_q ? delta[bh * n_q + row] : 0.0f;
#pragma unroll
    for (int d = 0; d < TD; ++d) acc[i][d] = 0.0f;
  }
  const float sl2 = scale * Constants::kLog2e;

  for (int n0 = 0; n0 < n_k; n0 += BN) {
    __syncthreads();
    load_tile_f32<BN, D, kThreads>(sK, kb, n0, n_k);
    load_tile_f32<BN, DV, kThreads>(sV, vb, n0, n_k);
    __syncthreads();

    float s[TM][TN], dp[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) s[i][j] = dp[i][j] = 0.0f;
#pragma unroll 4
    for (int c = 0; c < D; ++c) {
      float qv[TM], kv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) qv[i] = sQ[(ty * TM + i) * LDQ + c];
#pragma unroll
      for (int j = 0; j < TN; ++j) kv[j] = sK[(tx + 16 * j) * LDK + c];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
    }
#pragma unroll 4
    for (int c = 0; c < DV; ++c) {
      float ov[TM], vv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) ov[i] = sdO[(ty * TM + i) * LDO + c];
#pragma unroll
      for (int j = 0; j < TN; ++j) vv[j] = sV[(tx + 16 * j) * LDV + c];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) dp[i][j] = fmaf(ov[i], vv[j], dp[i][j]);
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const float p = n0 + tx + 16 * j < n_k ? exp2f(s[i][j] * sl2 - lse2[i]) : 0.0f;
        sS[(ty * TM + i) * LDS + tx + 16 * j] = p * (dp[i][j] - dr[i]);
      }
    __syncthreads();  // dS complete

#pragma unroll 4
    for (int kk = 0; kk < BN; ++kk) {
      float sv[TM], kv[TD];
#pragma unroll
      for (int i = 0; i < TM; ++i) sv[i] = sS[(ty * TM + i) * LDS + kk];
#pragma unroll
      for (int d = 0; d < TD; ++d) kv[d] = sK[kk * LDK + tx + 16 * d];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int d = 0; d < TD; ++d) acc[i][d] = fmaf(sv[i], kv[d], acc[i][d]);
    }
  }

  float* dqb = grad_q + bh * n_q * D;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = m0 + ty * TM + i;
    if (row < n_q)
#pragma unroll
      for (int d = 0; d < TD; ++d) dqb[static_cast<long long>(row) * D + tx + 16 * d] = acc[i][d] * scale;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// dK/dV, tensor cores. Warp w owns key rows n0 + 16w .. +15 and computes Sᵀ = K·Qᵀ directly; Q/dO tiles and their
// lse/delta rows double-buffered.

// With FUSE_DQ, each CTA also adds its key block's share of dQ, scale · dS·K_block, to the f32 accumulator dq_accum
// [BH, n_q, D] (zeroed by the caller) with atomic adds: dSᵀ goes through shared memory, and every warp takes
// 16 × 16 pieces of the query block's dQ. One recomputation of P and dP then serves all three gradients; the sum's
// order (and so its rounding) depends on scheduling.
template <typename T, int D, int DV, int BM, int BN, int W, bool FUSE_DQ>
__device__ __forceinline__ void backward_dkv_mma(const T* __restrict__ q, const T* __restrict__ k,
                                                 const T* __restrict__ v, const T* __restrict__ grad_o,
                                                 const float* __restrict__ lse, const float* __restrict__ delta,
                                                 T* __restrict__ grad_k, T* __restrict__ grad_v,
                                                 float* __restrict__ dq_accum, int n_q, int n_k, float scale) {
  static_assert(BN == 16 * W, "tensor-core dK/dV: BLOCK_N must be 16 · NUM_WARPS");
  static_assert(BM % 16 == 0, "tensor-core dK/dV: BLOCK_M must be a multiple of 16");
  constexpr int kThreads = W * 32, LDK = D + 8, LDV = DV + 8, LDQ = D + 8, LDO = DV + 8, LDS = BM + 8;
  T* sK = reinterpret_cast<T*>(dynamic_smem());
  T* sV = sK + BN * LDK;
  T* sQ = sV + BN * LDV;       // two stages
  T* sdO = sQ + 2 * BM * LDQ;  // two stages
  float* sL = reinterpret_cast<float*>(sdO + 2 * BM * LDO);  // two stages of lse, then two of delta
  float* sD = sL + 2 * BM;
  T* sdS = reinterpret_cast<T*>(sD + 2 * BM);  // FUSE_DQ: dSᵀ [BN keys][BM queries]

  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = static_cast<int>(blockIdx.x) * BN;
  const long long bh = blockIdx.y;
  const T* qb = q + bh * n_q * D;
  const T* ob = grad_o + bh * n_q * DV;
  const float* lb = lse + bh * n_q;
  const float* db = delta + bh * n_q;

  load_tile_async<T, BN, D, kThreads>(sK, k + bh * n_k * D, n0, n_k);
  load_tile_async<T, BN, DV, kThreads>(sV, v + bh * n_k * DV, n0, n_k);
  load_tile_async<T, BM, D, kThreads>(sQ, qb, 0, n_q);
  load_tile_async<T, BM, DV, kThreads>(sdO, ob, 0, n_q);
  load_rows_async<BM, kThreads>(sL, lb, 0, n_q);
  load_rows_async<BM, kThreads>(sD, db, 0, n_q);
  cp_async_commit();

  float acc_dk[D / 8][4], acc_dv[DV / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc_dk[i][0] = acc_dk[i][1] = acc_dk[i][2] = acc_dk[i][3] = 0.0f;
#pragma unroll
  for (int i = 0; i < DV / 8; ++i) acc_dv[i][0] = acc_dv[i][1] = acc_dv[i][2] = acc_dv[i][3] = 0.0f;
  const float sl2 = scale * Constants::kLog2e;
  const int m_blocks = (n_q + BM - 1) / BM;

  for (int i = 0; i < m_blocks; ++i) {
    const int m0 = i * BM;
    if (i + 1 < m_blocks) {
      const int s = (i + 1) & 1;
      load_tile_async<T, BM, D, kThreads>(sQ + s * BM * LDQ, qb, m0 + BM, n_q);
      load_tile_async<T, BM, DV, kThreads>(sdO + s * BM * LDO, ob, m0 + BM, n_q);
      load_rows_async<BM, kThreads>(sL + s * BM, lb, m0 + BM, n_q);
      load_rows_async<BM, kThreads>(sD + s * BM, db, m0 + BM, n_q);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* cQ = sQ + (i & 1) * BM * LDQ;
    const T* cdO = sdO + (i & 1) * BM * LDO;
    const float* cL = sL + (i & 1) * BM;
    const float* cD = sD + (i & 1) * BM;

    // Sᵀ = K·Q_iᵀ (16 keys × BM queries per warp).
    float acc_s[BM / 8][4];
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) acc_s[j][0] = acc_s[j][1] = acc_s[j][2] = acc_s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      unsigned a[4];
      load_a<LDK>(a, sK, warp * 16, kk * 16, lane);
#pragma unroll
      for (int nn = 0; nn < BM / 16; ++nn) {
        unsigned b[4];
        load_b_nk<LDQ>(b, cQ, nn * 16, kk * 16, lane);
        mma_16816<T>(acc_s[2 * nn], a, b[0], b[1]);
        mma_16816<T>(acc_s[2 * nn + 1], a, b[2], b[3]);
      }
    }
    // Pᵀ; queries ≥ n_q give 0.
#pragma unroll
    for (int nt = 0; nt < BM / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nt * 8 + 2 * t + (e & 1);
        acc_s[nt][e] = m0 + qi < n_q ? exp2f(acc_s[nt][e] * sl2 - cL[qi] * Constants::kLog2e) : 0.0f;
      }
    // dV += Pᵀ·dO_i.
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      unsigned a[4];
      acc_to_a<T>(a, acc_s, kk);
#pragma unroll
      for (int dn = 0; dn < DV / 16; ++dn) {
        unsigned b[4];
        load_b_kn<LDO>(b, cdO, kk * 16, dn * 16, lane);
        mma_16816<T>(acc_dv[2 * dn], a, b[0], b[1]);
        mma_16816<T>(acc_dv[2 * dn + 1], a, b[2], b[3]);
      }
    }
    // dPᵀ = V·dO_iᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ − D) in place of Pᵀ.
    float acc_dp[BM / 8][4];
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) acc_dp[j][0] = acc_dp[j][1] = acc_dp[j][2] = acc_dp[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < DV / 16; ++kk) {
      unsigned a[4];
      load_a<LDV>(a, sV, warp * 16, kk * 16, lane);
#pragma unroll
      for (int nn = 0; nn < BM / 16; ++nn) {
        unsigned b[4];
        load_b_nk<LDO>(b, cdO, nn * 16, kk * 16, lane);
        mma_16816<T>(acc_dp[2 * nn], a, b[0], b[1]);
        mma_16816<T>(acc_dp[2 * nn + 1], a, b[2], b[3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < BM / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[nt][e] *= acc_dp[nt][e] - cD[nt * 8 + 2 * t + (e & 1)];
    // dK += dSᵀ·Q_i.
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      unsigned a[4];
      acc_to_a<T>(a, acc_s, kk);
      if constexpr (FUSE_DQ) {  // dSᵀ rows of this warp into shared memory, as rounded for the products
        T* dst = sdS + (warp * 16 + g) * LDS + kk * 16 + 2 * t;
        *reinterpret_cast<unsigned*>(dst) = a[0];
        *reinterpret_cast<unsigned*>(dst + 8 * LDS) = a[1];
        *reinterpret_cast<unsigned*>(dst + 8) = a[2];
        *reinterpret_cast<unsigned*>(dst + 8 * LDS + 8) = a[3];
      }
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        unsigned b[4];
        load_b_kn<LDQ>(b, cQ, kk * 16, dn * 16, lane);
        mma_16816<T>(acc_dk[2 * dn], a, b[0], b[1]);
        mma_16816<T>(acc_dk[2 * dn + 1], a, b[2], b[3]);
      }
    }
    if constexpr (FUSE_DQ) {
      __syncthreads();  // dSᵀ of the whole key block is in shared memory
      // dQ_i += scale · dS·K: 16 × 16 pieces (query tile, head-column chunk) dealt round-robin to the warps.
      for (int piece = warp; piece < (BM / 16) * (D / 16); piece += W) {
        const int mt = piece / (D / 16), dn = piece % (D / 16);
        float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          unsigned a[4], b[4];
          // A = dS (queries × keys) from dSᵀ stored [key][query]: the transposing ldmatrix.
          ldmatrix_x4_trans(a, sdS + (kk * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + mt * 16 +
                                   ((lane >> 3) & 1) * 8);
          load_b_kn<LDK>(b, sK, kk * 16, dn * 16, lane);
          mma_16816<T>(acc[0], a, b[0], b[1]);
          mma_16816<T>(acc[1], a, b[2], b[3]);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = m0 + mt * 16 + g + 8 * r;
          if (row < n_q) {
            float* dst = dq_accum + (bh * n_q + row) * D + dn * 16 + 2 * t;
#pragma unroll
            for (int h = 0; h < 2; ++h) atomic_add2(dst + 8 * h, acc[h][2 * r] * scale, acc[h][2 * r + 1] * scale);
          }
        }
      }
    }
    __syncthreads();  // every warp is done with stage i & 1 (and dSᵀ) before they are refilled
  }
  cp_async_wait<0>();

  T* dkb = grad_k + bh * n_k * D;
  T* dvb = grad_v + bh * n_k * DV;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = n0 + warp * 16 + g + 8 * r;
    if (row < n_k) {
#pragma unroll
      for (int dn = 0; dn < D / 8; ++dn)
        *reinterpret_cast<unsigned*>(dkb + static_cast<long long>(row) * D + dn * 8 + 2 * t) =
            pack2<T>(acc_dk[dn][2 * r] * scale, acc_dk[dn][2 * r + 1] * scale);
#pragma unroll
      for (int dn = 0; dn < DV / 8; ++dn)
        *reinterpret_cast<unsigned*>(dvb + static_cast<long long>(row) * DV + dn * 8 + 2 * t) =
            pack2<T>(acc_dv[dn][2 * r], acc_dv[dn][2 * r + 1]);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// dK/dV, f32. Thread (tx, ty) owns key rows ty·TR + i, queries tx + 16·j and head columns tx + 16·d.

template <int D, int DV, int BM, int BN, int W>
__device__ __forceinline__ void backward_dkv_f32(const float* __restrict__ q, const float* __restrict__ k,
                                                 const float* __restrict__ v, const float* __restrict__ grad_o,
                                                 const float* __restrict__ lse, const float* __restrict__ delta,
                                                 float* __restrict__ grad_k, float* __restrict__ grad_v, int n_q,
                                                 int n_k, float scale) {
  constexpr int kThreads = W * 32, TY = 2 * W, TR = BN / TY, TC = BM / 16, TD = D / 16, TDV = DV / 16;
  static_assert(BN % TY == 0, "f32 dK/dV: BLOCK_N must be a multiple of 2 · NUM_WARPS");
  static_assert(BM % 16 == 0, "f32 dK/dV: BLOCK_M must be a multiple of 16");
  constexpr int LDK = D + 1, LDV = DV + 1, LDQ = D + 1, LDO = DV + 1, LDP = BM + 1;
  float* sK = reinterpret_cast<float*>(dynamic_smem());
  float* sV = sK + BN * LDK;
  float* sQ = sV + BN * LDV;
  float* sdO = sQ + BM * LDQ;
  float* sP = sdO + BM * LDO;
  float* sS = sP + BN * LDP;
  float* sL = sS + BN * LDP;
  float* sD = sL + BM;

  const int tx = static_cast<int>(threadIdx.x) & 15, ty = static_cast<int>(threadIdx.x) >> 4;
  const int n0 = static_cast<int>(blockIdx.x) * BN;
  const long long bh = blockIdx.y;
  const float* qb = q + bh * n_q * D;
  const float* ob = grad_o + bh * n_q * DV;
  load_tile_f32<BN, D, kThreads>(sK, k + bh * n_k * D, n0, n_k);
  load_tile_f32<BN, DV, kThreads>(sV, v + bh * n_k * DV, n0, n_k);

  float acc_dk[TR][TD], acc_dv[TR][TDV];
#pragma unroll
  for (int i = 0; i < TR; ++i) {
#pragma unroll
    for (int d = 0; d < TD; ++d) acc_dk[i][d] = 0.0f;
#pragma unroll
    for (int d = 0; d < TDV; ++d) acc_dv[i][d] = 0.0f;
  }
  const float sl2 = scale * Constants::kLog2e;

  for (int m0 = 0; m0 < n_q; m0 += BM) {
    __syncthreads();
    load_tile_f32<BM, D, kThreads>(sQ, qb, m0, n_q);
    load_tile_f32<BM, DV, kThreads>(sdO, ob, m0, n_q);
    for (int r = static_cast<int>(threadIdx.x); r < BM; r += kThreads) {
      const bool valid = m0 + r < n_q;
      sL[r] = valid ? lse[bh * n_q + m0 + r] * Constants::kLog2e : 0.0f;
      sD[r] = valid ? delta[bh * n_q + m0 + r] : 0.0f;
    }
    __syncthreads();

    float s[TR][TC], dp[TR][TC];
#pragma unroll
    for (int i = 0; i < TR; ++i)
#pragma unroll
      for (int j = 0; j < TC; ++j) s[i][j] = dp[i][j] = 0.0f;
#pragma unroll 4
    for (int c = 0; c < D; ++c) {
      float kv[TR], qv[TC];
#pragma unroll
      for (int i = 0; i < TR; ++i) kv[i] = sK[(ty * TR + i) * LDK + c];
#pragma unroll
      for (int j = 0; j < TC; ++j) qv[j] = sQ[(tx + 16 * j) * LDQ + c];
#pragma unroll
      for (int i = 0; i < TR; ++i)
#pragma unroll
        for (int j = 0; j < TC; ++j) s[i][j] = fmaf(kv[i], qv[j], s[i][j]);
    }
#pragma unroll 4
    for (int c = 0; c < DV; ++c) {
      float vv[TR], ov[TC];
#pragma unroll
      for (int i = 0; i < TR; ++i) vv[i] = sV[(ty * TR + i) * LDV + c];
#pragma unroll
      for (int j = 0; j < TC; ++j) ov[j] = sdO[(tx + 16 * j) * LDO + c];
#pragma unroll
      for (int i = 0; i < TR; ++i)
#pragma unroll
        for (int j = 0; j < TC; ++j) dp[i][j] = fmaf(vv[i], ov[j], dp[i][j]);
    }
#pragma unroll
    for (int i = 0; i < TR; ++i)
#pragma unroll
      for (int j = 0; j < TC; ++j) {
        const int qi = tx + 16 * j;
        const float p = m0 + qi < n_q ? exp2f(s[i][j] * sl2 - sL[qi]) : 0.0f;
        sP[(ty * TR + i) * LDP + qi] = p;
        sS[(ty * TR + i) * LDP + qi] = p * (dp[i][j] - sD[qi]);
      }
    __syncthreads();  // Pᵀ and dSᵀ complete

#pragma unroll 4
    for (int qq = 0; qq < BM; ++qq) {
      float pv[TR], sv[TR], ov[TDV], qv[TD];
#pragma unroll
      for (int i = 0; i < TR; ++i) {
        pv[i] = sP[(ty * TR + i) * LDP + qq];
        sv[i] = sS[(ty * TR + i) * LDP + qq];
      }
#pragma unroll
      for (int d = 0; d < TDV; ++d) ov[d] = sdO[qq * LDO + tx + 16 * d];
#pragma unroll
      for (int d = 0; d < TD; ++d) qv[d] = sQ[qq * LDQ + tx + 16 * d];
#pragma unroll
      for (int i = 0; i < TR; ++i) {
#pragma unroll
        for (int d = 0; d < TDV; ++d) acc_dv[i][d] = fmaf(pv[i], ov[d], acc_dv[i][d]);
#pragma unroll
        for (int d = 0; d < TD; ++d) acc_dk[i][d] = fmaf(sv[i], qv[d], acc_dk[i][d]);
      }
    }
  }

  float* dkb = grad_k + bh * n_k * D;
  float* dvb = grad_v + bh * n_k * DV;
#pragma unroll
  for (int i = 0; i < TR; ++i) {
    const int row = n0 + ty * TR + i;
    if (row < n_k) {
#pragma unroll
      for (int d = 0; d < TD; ++d) dkb[static_cast<long long>(row) * D + tx + 16 * d] = acc_dk[i][d] * scale;
#pragma unroll
      for (int d = 0; d < TDV; ++d) dvb[static_cast<long long>(row) * DV + tx + 16 * d] = acc_dv[i][d];
    }
  }
}

}  // namespace fa2

// ---------------------------------------------------------------------------------------------------------------
// Kernels (see the top of the file for arguments, grids and shared memory).

template <typename T, int HEAD_DIM, int HEAD_DIM_V = HEAD_DIM, int BLOCK_M = 64, int BLOCK_N = 64, int NUM_WARPS = 4>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    flash_attention2_forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                             T* __restrict__ o, float* __restrict__ lse, int n_q, int n_k, float scale) {
  fa2::check_shapes<T, HEAD_DIM, HEAD_DIM_V>();
  if constexpr (fa2::IsF32<T>::value)
    fa2::forward_f32<HEAD_DIM, HEAD_DIM_V, BLOCK_M, BLOCK_N, NUM_WARPS>(q, k, v, o, lse, n_q, n_k, scale);
  else
    fa2::forward_mma<T, HEAD_DIM, HEAD_DIM_V, BLOCK_M, BLOCK_N, NUM_WARPS>(q, k, v, o, lse, n_q, n_k, scale);
}

template <typename T, int HEAD_DIM_V, int NUM_WARPS = 8>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    flash_attention2_backward_preprocess(const T* __restrict__ o, const T* __restrict__ grad_o,
                                         float* __restrict__ delta, int rows) {
  static_assert(fa2::IsSupported<T>::value, "flash_attention2: T must be float, __half or __nv_bfloat16");
  using P = fa2::PreprocessShape<T, HEAD_DIM_V>;
  const int lane = static_cast<int>(threadIdx.x) & 31, sub = lane % P::kLanes;
  const long long row = (static_cast<long long>(blockIdx.x) * NUM_WARPS + (threadIdx.x >> 5)) * P::kRowsPerWarp +
                        lane / P::kLanes;
  float s = 0.0f;
  if (row < rows) {
    const uint4* a = reinterpret_cast<const uint4*>(o + row * HEAD_DIM_V);
    const uint4* b = reinterpret_cast<const uint4*>(grad_o + row * HEAD_DIM_V);
#pragma unroll
    for (int c = sub; c < P::kChunks; c += P::kLanes) s += fa2::dot16<T>(a[c], b[c]);
  }
#pragma unroll
  for (int off = P::kLanes / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (row < rows && sub == 0) delta[row] = s;
}

template <typename T, int HEAD_DIM, int HEAD_DIM_V = HEAD_DIM, int BLOCK_M = 64, int BLOCK_N = 64, int NUM_WARPS = 4>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    flash_attention2_backward_dq(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                 const T* __restrict__ grad_o, const float* __restrict__ lse,
                                 const float* __restrict__ delta, T* __restrict__ grad_q, int n_q, int n_k,
                                 float scale) {
  fa2::check_shapes<T, HEAD_DIM, HEAD_DIM_V>();
  if constexpr (fa2::IsF32<T>::value)
    fa2::backward_dq_f32<HEAD_DIM, HEAD_DIM_V, BLOCK_M, BLOCK_N, NUM_WARPS>(q, k, v, grad_o, lse, delta, grad_q, n_q,
                                                                            n_k, scale);
  else
    fa2::backward_dq_mma<T, HEAD_DIM, HEAD_DIM_V, BLOCK_M, BLOCK_N, NUM_WARPS>(q, k, v, grad_o, lse, delta, grad_q,
                                                                               n_q, n_k, scale);
}

template <typename T, int HEAD_DIM, int HEAD_DIM_V = HEAD_DIM, int BLOCK_M = 64, int BLOCK_N = 64, int NUM_WARPS = 4>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    flash_attention2_backward_dkv(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                  const T* __restrict__ grad_o, const float* __restrict__ lse,
                                  const float* __restrict__ delta, T* __restrict__ grad_k, T* __restrict__ grad_v,
                                  int n_q, int n_k, float scale) {
  fa2::check_shapes<T, HEAD_DIM, HEAD_DIM_V>();
  if constexpr (fa2::IsF32<T>::value)
    fa2::backward_dkv_f32<HEAD_DIM, HEAD_DIM_V, BLOCK_M, BLOCK_N, NUM_WARPS>(q, k, v, grad_o, lse, delta, grad_k,
                                                                             grad_v, n_q, n_k, scale);
  else
    fa2::backward_dkv_mma<T, HEAD_DIM, HEAD_DIM_V, BLOCK_M, BLOCK_N, NUM_WARPS, false>(
        q, k, v, grad_o, lse, delta, grad_k, grad_v, nullptr, n_q, n_k, scale);
}

// dK/dV as flash_attention2_backward_dkv, plus scale · dS·K added into dq_accum [BH, n_q, HEAD_DIM] (f32, zeroed
// by the caller) with atomics; flash_attention2_backward_dq_convert then rounds it to grad_q. 16-bit T only.
template <typename T, int HEAD_DIM, int HEAD_DIM_V = HEAD_DIM, int BLOCK_M = 64, int BLOCK_N = 64, int NUM_WARPS = 4>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    flash_attention2_backward_dkv_dq(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                     const T* __restrict__ grad_o, const float* __restrict__ lse,
                                     const float* __restrict__ delta, T* __restrict__ grad_k, T* __restrict__ grad_v,
                                     float* __restrict__ dq_accum, int n_q, int n_k, float scale) {
  fa2::check_shapes<T, HEAD_DIM, HEAD_DIM_V>();
  static_assert(!fa2::IsF32<T>::value, "flash_attention2_backward_dkv_dq: T must be __half or __nv_bfloat16");
  fa2::backward_dkv_mma<T, HEAD_DIM, HEAD_DIM_V, BLOCK_M, BLOCK_N, NUM_WARPS, true>(
      q, k, v, grad_o, lse, delta, grad_k, grad_v, dq_accum, n_q, n_k, scale);
}

// grad_q [n] = dq_accum [n] rounded to T (n = BH · n_q · HEAD_DIM, a multiple of 4), four elements per thread.
template <typename T, int NUM_WARPS = 8>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    flash_attention2_backward_dq_convert(const float* __restrict__ dq_accum, T* __restrict__ grad_q, int n) {
  static_assert(!fa2::IsF32<T>::value, "flash_attention2_backward_dq_convert: T must be __half or __nv_bfloat16");
  const long long i = (static_cast<long long>(blockIdx.x) * NUM_WARPS * 32 + threadIdx.x) * 4;
  if (i >= n) return;
  const float4 x = *reinterpret_cast<const float4*>(dq_accum + i);
  uint2 y;
  y.x = fa2::pack2<T>(x.x, x.y);
  y.y = fa2::pack2<T>(x.z, x.w);
  *reinterpret_cast<uint2*>(grad_q + i) = y;
}

}  // namespace vision::ops::attention
