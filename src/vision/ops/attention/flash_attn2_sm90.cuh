// FlashAttention-2 for Hopper (sm_90a), every product on the warpgroup tensor-core instructions (wgmma.mma_async)
// instead of mma.sync: the forward computes what flash_attention2_forward in flash_attn2.cuh does (o and the
// natural-log log-sum-exp, any n_q, n_k ≥ 1, a runtime softmax scale, here > 0), the backward what
// flash_attention2_backward_dkv_dq does (dK, dV, and dQ added into an f32 accumulator).
//
//   flash_attention2_forward_sm90<T, D, DV, BLOCK_N, NUM_WARPGROUPS>     grid (ceil(n_q / BLOCK_M), BH),
//       BLOCK_M = 64 · NUM_WARPGROUPS, 128 · NUM_WARPGROUPS threads, dynamic shared memory
//       FlashAttention2Sm90Smem<T, D, DV, BLOCK_N, NUM_WARPGROUPS>::bytes (the launcher raises the limit).
//   flash_attention2_backward_sm90<T, D, DV, NUM_WARPGROUPS>             grid (ceil(n_k / (64 · NUM_WARPGROUPS)), BH),
//       128 · NUM_WARPGROUPS threads, FlashAttention2Sm90Smem<...>::backward bytes (design above the kernel).
//   psa_attention_forward_sm90<T, KEY_DIM, BLOCK_N, NUM_WARPGROUPS>     the forward with D = KEY_DIM, DV = 2·KEY_DIM
//       reading Q, K, V from YOLO26's NHWC qkv tensor and writing the merged NHWC output (no pack/merge copies).
//   T ∈ {__half, __nv_bfloat16}; D ∈ {16, 32, 64, 128}; DV ∈ {16, 32, 64, 128}; BLOCK_N ∈ {64, 128}.
//
// Forward design. Warpgroup w owns query rows m0 + 64w .. +63. Q is staged once; K and V tiles stream through two
// shared-memory stages (cp.async, 16-byte, zero-filled past n_k), the next tile's copy overlapping this tile's work:
//   S = Q·K_jᵀ        wgmma m64n{BLOCK_N}k16, A and B from shared memory (both K-major);
//   online softmax     on the S accumulators in registers (the accumulator layout is mma.sync's C layout per warp);
//   O += P·V_j         wgmma m64n{DV}k16, A = P from registers (rounded to T), B = V_j from shared memory
//                      (MN-major: V is stored [key][d_v], the instruction transposes it).
// Shared tiles use the swizzled canonical layouts of wgmma. A tile of R rows × C 16-bit columns (2C bytes a row) is
// cut into column atoms W = min(2C, 128) bytes wide (W ∈ {32, 64, 128}: the 32-, 64- or 128-byte swizzle); atom
// column a holds rows 0..R-1, 8-row groups of 8W contiguous bytes, and byte b of row r of a group sits at
// (r·W + b) XOR (((r·W) >> 7) mod (W/16)) << 4 (the 16-byte chunks of a row permuted by the row's index), so that
// the tensor cores read 8 rows of a group without bank conflicts. Q and K are read K-major (rows = queries or keys,
// columns = head dims: stride byte offset 8W between row groups); V is read MN-major through the same layout
// (rows = keys = the k dimension: stride 8W between key groups, leading byte offset R·W between d_v atom columns).
// The tile loader gives consecutive threads consecutive 16-byte chunks of a row: coalesced global reads and, the
// swizzle being a permutation within a row, conflict-free shared writes. Tiles start 1024-byte aligned.
// Compiles for every architecture (the kernel registry builds each kernel for sm_80 and sm_90a); only an sm_90a
// build has a body: elsewhere it traps, and the launcher never picks it.
#pragma once

#include "vision/ops/attention/flash_attn2.cuh"

namespace vision::ops::attention {

namespace fa2 {

template <typename T, int D, int DV, int BN, int NWG>
struct FlashAttention2Sm90Smem {
  static constexpr int bytes = (64 * NWG * D + 2 * BN * (D + DV)) * 2;  // Q, then two stages of K and V
  // K, V (64·NWG keys), two stages of Q and dO (64 queries), a 64 × 64 dSᵀ tile per warpgroup, two stages of lse
  // and delta, and with two or more warpgroups the dQ partials they sum (reduce_dq).
  static constexpr int backward = (64 * NWG * (D + DV) + 2 * 64 * (D + DV) + NWG * 64 * 64) * 2 + 2 * 2 * 64 * 4 +
                                  (NWG == 2 ? 2 * 64 * (D / 2 + 8) : NWG >= 3 ? NWG * 64 * (D + 8) : 0) * 4;
};

// The swizzled layout of a ROWS × COLS 16-bit tile (see the top of the file).
template <int ROWS, int COLS>
struct Swizzled {
  static_assert(ROWS % 8 == 0 && (COLS == 16 || COLS == 32 || COLS % 64 == 0), "swizzled tile: unsupported shape");
  static constexpr int kW = COLS * 2 < 128 ? COLS * 2 : 128;                     // atom width, bytes
  static constexpr int kMode = kW == 128 ? 1 : (kW == 64 ? 2 : 3);               // descriptor layout type
  static constexpr int kGroup = 8 * kW;                                          // bytes per 8-row group
  static constexpr int kColumn = ROWS * kW;                                      // bytes per atom column
  // Byte offset of the 16-byte chunk c (columns 8c .. 8c+7) of row r.
  static __device__ __forceinline__ int chunk_offset(int r, int c) {
    constexpr int kChunks = kW / 16;
    const int a = c / kChunks, within = (r & 7) * kW + (c % kChunks) * 16;
    return a * kColumn + (r >> 3) * kGroup + (within ^ (((within >> 7) & (kChunks - 1)) << 4));
  }
};

// Stages rows [row0, row0 + ROWS) of an [n, COLS] 16-bit matrix whose rows lie ld elements apart (ld = COLS when
// packed; ld a multiple of 8) into a swizzled tile; rows ≥ n are zero-filled. Thread i copies chunk i % (COLS/8) of
// rows i / (COLS/8) + p·(THREADS / (COLS/8)): the pass p moves its addresses by whole 8-row groups, which the swizzle
// leaves alone, so both addresses are computed once.
template <typename T, int ROWS, int COLS, int THREADS>
__device__ __forceinline__ void load_swizzled_async(T* tile, const T* g, int row0, int n, int ld = COLS) {
  using L = Swizzled<ROWS, COLS>;
  constexpr int kChunks = COLS / 8, kRowsPerPass = THREADS / kChunks;
  static_assert(THREADS % kChunks == 0 && kRowsPerPass % 8 == 0, "load_swizzled_async: THREADS does not fit COLS");
  const int r = static_cast<int>(threadIdx.x) / kChunks, c = static_cast<int>(threadIdx.x) % kChunks;
  unsigned char* dst = reinterpret_cast<unsigned char*>(tile) + L::chunk_offset(r, c);
  const T* src = g + static_cast<long long>(row0 + r) * ld + c * 8;
#pragma unroll
  for (int pass = 0; pass < (ROWS + kRowsPerPass - 1) / kRowsPerPass; ++pass) {
    const int row = r + pass * kRowsPerPass;
    if (ROWS % kRowsPerPass == 0 || row < ROWS) {
      const bool valid = row0 + row < n;
      cp_async_16(dst + pass * (kRowsPerPass / 8) * L::kGroup,
                  valid ? src + static_cast<long long>(pass) * kRowsPerPass * ld : g, valid);
    }
  }
}

// Stores four 8 × 8 16-bit matrices, held in the mma fragment layout (register j: matrix j), to shared memory; lanes
// 8j .. 8j+7 give the addresses of the rows of matrix j (sm_90).
__device__ __forceinline__ void stmatrix_x4(void* p, const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(p)), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// wgmma shared-memory matrix descriptor: start address, leading and stride byte offsets (each >> 4), layout type.
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr, unsigned leading_bytes, unsigned stride_bytes,
                                                        int mode) {
  return static_cast<unsigned long long>((addr & 0x3FFFFu) >> 4) |
         (static_cast<unsigned long long>(leading_bytes >> 4) << 16) |
         (static_cast<unsigned long long>(stride_bytes >> 4) << 32) | (static_cast<unsigned long long>(mode) << 62);
}
// K-major operand: the 8-row groups from row0 (a multiple of 8), k16 step kk (columns 16kk .. 16kk+15).
template <int ROWS, int COLS>
__device__ __forceinline__ unsigned long long kmajor_desc(const void* tile, int row0, int kk) {
  using L = Swizzled<ROWS, COLS>;
  const int bytes = kk * 32;  // from the start of the row
  const unsigned addr = smem_addr(tile) + (bytes / L::kW) * L::kColumn + (row0 >> 3) * L::kGroup + bytes % L::kW;
  return smem_desc(addr, 16, L::kGroup, L::kMode);
}
// MN-major operand (rows = the k dimension, columns = m or n): k16 step kk (rows row0 + 16kk ..), from atom
// column col_atom on (each atom column is 64 of the 16-bit columns when the tile is 64 or more wide).
template <int ROWS, int COLS>
__device__ __forceinline__ unsigned long long mnmajor_desc(const void* tile, int kk, int row0 = 0, int col_atom = 0) {
  using L = Swizzled<ROWS, COLS>;
  return smem_desc(smem_addr(tile) + col_atom * L::kColumn + ((row0 >> 3) + 2 * kk) * L::kGroup, L::kColumn,
                   L::kGroup, L::kMode);
}

// Named barrier over the 128 threads of warpgroup wg (ids 1.. ; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_barrier(int wg) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory");
}

// 2^x by the special-function unit (flush-to-zero: results below 2^-126 are 0, which softmax weights can be).
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins registers at this point of the instruction stream: wgmma reads and writes its registers asynchronously, so the
// compiler must neither sink their last ordinary writes below wgmma.fence nor hoist their first reads above
// wgmma.wait_group. An empty volatile asm that "modifies" each register, placed next to those, orders them.
template <int N>
__device__ __forceinline__ void pin(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}
template <int N>
__device__ __forceinline__ void pin(unsigned (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[i][e])::"memory");
}

// Orders this thread's earlier shared-memory writes (cp.async included) before later reads by the tensor cores.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// wgmma.mma_async m64nNk16 with f32 accumulators d[N/8][4] (the mma.sync C layout per warp, n8 tile by n8 tile),
// always accumulating (the callers zero d first). The scale-d predicate is set from a register holding 1.
#define FA2_ACC4(c) "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
#define FA2_WGMMA_SS(SHAPE, TY, REGS, A, B, P, TA, TB)                                               \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" P ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY \
  " " REGS ", %" A ", %" B ", p, 1, 1, %" TA ", %" TB ";\n}\n"
#define FA2_WGMMA_RS(SHAPE, TY, REGS, A0, A1, A2, A3, B, P)                                          \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" P ", 0;\nwgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY \
  " " REGS ", {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" B ", p, 1, 1, 1;\n}\n"

template <int N>
struct Wgmma;

template <>
struct Wgmma<16> {
#define FA2_REGS \
  "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define FA2_OPS \
  FA2_ACC4(0), FA2_ACC4(1)
  // d += A (64×16, shared memory) · B (16×16, shared memory); TA, TB: 0 = K-major, 1 = MN-major (transposed).
  template <typename T, int TA = 0, int TB = 0>
  static __device__ __forceinline__ void ss(float (&d)[2][4], unsigned long long a, unsigned long long b) {
    if constexpr (IsSame<T, __half>::value)
      asm volatile(FA2_WGMMA_SS("m64n16k16", "f16", FA2_REGS, "8", "9", "10", "11", "12")
                   : FA2_OPS
                   : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB));
    else
      asm volatile(FA2_WGMMA_SS("m64n16k16", "bf16", FA2_REGS, "8", "9", "10", "11", "12")
                   : FA2_OPS
                   : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB));
  }
  // d += A (64×16, registers) · B (16×16, shared memory, MN-major).
  template <typename T>
  static __device__ __forceinline__ void rs(float (&d)[2][4], const unsigned (&a)[4], unsigned long long b) {
    if constexpr (IsSame<T, __half>::value)
      asm volatile(FA2_WGMMA_RS("m64n16k16", "f16", FA2_REGS, "8", "9", "10", "11", "12", "13")
                   : FA2_OPS
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    else
      asm volatile(FA2_WGMMA_RS("m64n16k16", "bf16", FA2_REGS, "8", "9", "10", "11", "12", "13")
                   : FA2_OPS
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
#undef FA2_OPS
#undef FA2_REGS
};

template <>
struct Wgmma<32> {
#define FA2_REGS \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FA2_OPS \
  FA2_ACC4(0), FA2_ACC4(1), FA2_ACC4(2), FA2_ACC4(3)
  // d += A (64×16, shared memory) · B (16×32, shared memory); TA, TB: 0 = K-major, 1 = MN-major (transposed).
  template <typename T, int TA = 0, int TB = 0>
  static __device__ __forceinline__ void ss(float (&d)[4][4], unsigned long long a, unsigned long long b) {
    if constexpr (IsSame<T, __half>::value)
      asm volatile(FA2_WGMMA_SS("m64n32k16", "f16", FA2_REGS, "16", "17", "18", "19", "20")
                   : FA2_OPS
                   : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB));
    else
      asm volatile(FA2_WGMMA_SS("m64n32k16", "bf16", FA2_REGS, "16", "17", "18", "19", "20")
                   : FA2_OPS
                   : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB));
  }
  // d += A (64×16, registers) · B (16×32, shared memory, MN-major).
  template <typename T>
  static __device__ __forceinline__ void rs(float (&d)[4][4], const unsigned (&a)[4], unsigned long long b) {
    if constexpr (IsSame<T, __half>::value)
      asm volatile(FA2_WGMMA_RS("m64n32k16", "f16", FA2_REGS, "16", "17", "18", "19", "20", "21")
                   : FA2_OPS
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    else
      asm volatile(FA2_WGMMA_RS("m64n32k16", "bf16", FA2_REGS, "16", "17", "18", "19", "20", "21")
                   : FA2_OPS
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
#undef FA2_OPS
#undef FA2_REGS
};

template <>
struct Wgmma<64> {
#define FA2_REGS \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FA2_OPS \
  FA2_ACC4(0), FA2_ACC4(1), FA2_ACC4(2), FA2_ACC4(3), \
  FA2_ACC4(4), FA2_ACC4(5), FA2_ACC4(6), FA2_ACC4(7)
  // d += A (64×16, shared memory) · B (16×64, shared memory); TA, TB: 0 = K-major, 1 = MN-major (transposed).
  template <typename T, int TA = 0, int TB = 0>
  static __device__ __forceinline__ void ss(float (&d)[8][4], unsigned long long a, unsigned long long b) {
    if constexpr (IsSame<T, __half>::value)
      asm volatile(FA2_WGMMA_SS("m64n64k16", "f16", FA2_REGS, "32", "33", "34", "35", "36")
                   : FA2_OPS
                   : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB));
    else
      asm volatile(FA2_WGMMA_SS("m64n64k16", "bf16", FA2_REGS, "32", "33", "34", "35", "36")
                   : FA2_OPS
                   : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB));
  }
  // d += A (64×16, registers) · B (16×64, shared memory, MN-major).
  template <typename T>
  static __device__ __forceinline__ void rs(float (&d)[8][4], const unsigned (&a)[4], unsigned long long b) {
    if constexpr (IsSame<T, __half>::value)
      asm volatile(FA2_WGMMA_RS("m64n64k16", "f16", FA2_REGS, "32", "33", "34", "35", "36", "37")
                   : FA2_OPS
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    else
      asm volatile(FA2_WGMMA_RS("m64n64k16", "bf16", FA2_REGS, "32", "33", "34", "35", "36", "37")
                   : FA2_OPS
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
#undef FA2_OPS
#undef FA2_REGS
};

template <>
struct Wgmma<128> {
#define FA2_REGS \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define FA2_OPS \
  FA2_ACC4(0), FA2_ACC4(1), FA2_ACC4(2), FA2_ACC4(3), \
  FA2_ACC4(4), FA2_ACC4(5), FA2_ACC4(6), FA2_ACC4(7), \
  FA2_ACC4(8), FA2_ACC4(9), FA2_ACC4(10), FA2_ACC4(11), \
  FA2_ACC4(12), FA2_ACC4(13), FA2_ACC4(14), FA2_ACC4(15)
  // d += A (64×16, shared memory) · B (16×128, shared memory); TA, TB: 0 = K-major, 1 = MN-major (transposed).
  template <typename T, int TA = 0, int TB = 0>
  static __device__ __forceinline__ void ss(float (&d)[16][4], unsigned long long a, unsigned long long b) {
    if constexpr (IsSame<T, __half>::value)
      asm volatile(FA2_WGMMA_SS("m64n128k16", "f16", FA2_REGS, "64", "65", "66", "67", "68")
                   : FA2_OPS
                   : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB));
    else
      asm volatile(FA2_WGMMA_SS("m64n128k16", "bf16", FA2_REGS, "64", "65", "66", "67", "68")
                   : FA2_OPS
                   : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB));
  }
  // d += A (64×16, registers) · B (16×128, shared memory, MN-major).
  template <typename T>
  static __device__ __forceinline__ void rs(float (&d)[16][4], const unsigned (&a)[4], unsigned long long b) {
    if constexpr (IsSame<T, __half>::value)
      asm volatile(FA2_WGMMA_RS("m64n128k16", "f16", FA2_REGS, "64", "65", "66", "67", "68", "69")
                   : FA2_OPS
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    else
      asm volatile(FA2_WGMMA_RS("m64n128k16", "bf16", FA2_REGS, "64", "65", "66", "67", "68", "69")
                   : FA2_OPS
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
#undef FA2_OPS
#undef FA2_REGS
};

#undef FA2_WGMMA_RS
#undef FA2_WGMMA_SS
#undef FA2_ACC4

// Where one (batch, head)'s rows are: q, k, v, o point at its first row, rows ld_* elements apart (D or DV when
// packed [BH, n, D]; the qkv conv's channel count when read straight from YOLO26's NHWC qkv), lse at its n_q values
// (or null).
template <typename T>
struct AttentionRows {
  const T* q;
  const T* k;
  const T* v;
  T* o;
  float* lse;
  int ld_q, ld_k, ld_v, ld_o;
};

template <typename T, int D, int DV, int BN, int NWG>
__device__ __forceinline__ void forward_sm90(const AttentionRows<T>& rows, int n_q, int n_k, float scale) {
  static_assert(!IsF32<T>::value, "flash_attention2_forward_sm90: T must be __half or __nv_bfloat16");
  static_assert(D == 16 || D == 32 || D == 64 || D == 128, "flash_attention2_forward_sm90: HEAD_DIM 16..128");
  static_assert(DV == 16 || DV == 32 || DV == 64 || DV == 128, "flash_attention2_forward_sm90: HEAD_DIM_V 16..128");
  static_assert(BN == 64 || BN == 128, "flash_attention2_forward_sm90: BLOCK_N must be 64 or 128");
  constexpr int BM = 64 * NWG, kThreads = 128 * NWG;
  extern __shared__ __align__(1024) unsigned char fa2_sm90_smem[];  // the swizzle needs 1024-byte aligned tiles
  T* sQ = reinterpret_cast<T*>(fa2_sm90_smem);
  if (smem_addr(sQ) & 1023) __trap();
  T* sK = sQ + BM * D;       // two stages
  T* sV = sK + 2 * BN * D;   // two stages

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, wg = tid >> 7, warp = (tid >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = static_cast<int>(blockIdx.x) * BM;
  const T* kb = rows.k;
  const T* vb = rows.v;
  const int ldk = rows.ld_k, ldv = rows.ld_v;

  load_swizzled_async<T, BM, D, kThreads>(sQ, rows.q, m0, n_q, rows.ld_q);
  load_swizzled_async<T, BN, D, kThreads>(sK, kb, 0, n_k, ldk);
  load_swizzled_async<T, BN, DV, kThreads>(sV, vb, 0, n_k, ldv);
  cp_async_commit();

  float acc_o[DV / 8][4];
#pragma unroll
  for (int i = 0; i < DV / 8; ++i) acc_o[i][0] = acc_o[i][1] = acc_o[i][2] = acc_o[i][3] = 0.0f;
  float row_max[2] = {neg_inf(), neg_inf()}, row_sum[2] = {0.0f, 0.0f};
  const float sl2 = scale * Constants::kLog2e;
  const int n_blocks = (n_k + BN - 1) / BN;

  for (int j = 0; j < n_blocks; ++j) {
    const int n0 = j * BN;
    if (j + 1 < n_blocks) {  // stage (j + 1) & 1 was released by the barrier that ended iteration j − 1
      load_swizzled_async<T, BN, D, kThreads>(sK + ((j + 1) & 1) * BN * D, kb, n0 + BN, n_k, ldk);
      load_swizzled_async<T, BN, DV, kThreads>(sV + ((j + 1) & 1) * BN * DV, vb, n0 + BN, n_k, ldv);
    }
    cp_async_commit();   // possibly empty: one group per iteration keeps the count uniform
    cp_async_wait<1>();  // block j (and Q) have landed
    fence_proxy_async();
    __syncthreads();
    const T* cK = sK + (j & 1) * BN * D;
    const T* cV = sV + (j & 1) * BN * DV;

    // S = Q·K_jᵀ (64 × BN per warpgroup).
    float acc_s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) acc_s[i][0] = acc_s[i][1] = acc_s[i][2] = acc_s[i][3] = 0.0f;
    pin(acc_s);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      Wgmma<BN>::template ss<T>(acc_s, kmajor_desc<BM, D>(sQ, wg * 64, kk), kmajor_desc<BN, D>(cK, 0, kk));
    wgmma_commit();
    wgmma_wait<0>();
    pin(acc_s);

    // Online softmax, rows g and g + 8 of this warp's 16, in log2 units: the running max is kept on the raw scores
    // (scale > 0: the launcher takes this kernel only then), and p = 2^(s·sl2 − max·sl2) is one FFMA and one
    // MUFU.EX2. Keys ≥ n_k (only in the last block) get −inf.
    if (n0 + BN > n_k) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (n0 + nt * 8 + 2 * t + (e & 1) >= n_k) acc_s[nt][e] = neg_inf();
    }
    float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], acc_s[nt][e]);
    float alpha[2], neg_max[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);  // finite: block j holds at least one valid key
      alpha[r] = ex2_approx((row_max[r] - mx[r]) * sl2);  // 0 on the first block (row_max = −inf)
      row_max[r] = mx[r];
      row_sum[r] *= alpha[r];
      neg_max[r] = -mx[r] * sl2;
    }
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc_s[nt][e] = ex2_approx(fmaf(acc_s[nt][e], sl2, neg_max[e >> 1]));
        row_sum[e >> 1] += acc_s[nt][e];
      }
#pragma unroll
    for (int i = 0; i < DV / 8; ++i) {
      acc_o[i][0] *= alpha[0];
      acc_o[i][1] *= alpha[0];
      acc_o[i][2] *= alpha[1];
      acc_o[i][3] *= alpha[1];
    }

    // O += P·V_j.
    unsigned p[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) acc_to_a<T>(p[kk], acc_s, kk);
    pin(acc_o);
    pin(p);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) Wgmma<DV>::template rs<T>(acc_o, p[kk], mnmajor_desc<BN, DV>(cV, kk));
    wgmma_commit();
    wgmma_wait<0>();
    pin(acc_o);
    pin(p);
    __syncthreads();  // every warpgroup is done with stage j & 1 before iteration j + 1 refills it
  }
  cp_async_wait<0>();

  T* ob = rows.o;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(row_sum[r]);
    const float inv = 1.0f / l;
    const int row = m0 + wg * 64 + warp * 16 + g + 8 * r;
    if (row < n_q) {
#pragma unroll
      for (int dn = 0; dn < DV / 8; ++dn)
        *reinterpret_cast<unsigned*>(ob + static_cast<long long>(row) * rows.ld_o + dn * 8 + 2 * t) =
            pack2<T>(acc_o[dn][2 * r] * inv, acc_o[dn][2 * r + 1] * inv);
      if (rows.lse != nullptr && t == 0) rows.lse[row] = (row_max[r] * sl2 + log2f(l)) * Constants::kLn2;
    }
  }
}


// Stores n8 column tiles tile0 .. tile0 + TILES - 1 of a warpgroup's 64 × D dQ partial (accumulator layout) as f32
// rows of stride LDX, from column 0 of dst.
template <int TILES, int LDX, int D>
__device__ __forceinline__ void store_dq_tiles(const float (&acc_dq)[D / 8][4], int tile0, float* dst, int warp, int g,
                                               int t) {
#pragma unroll
  for (int j = 0; j < TILES; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      *reinterpret_cast<float2*>(dst + (warp * 16 + g + 8 * r) * LDX + j * 8 + 2 * t) =
          make_float2(acc_dq[tile0 + j][2 * r], acc_dq[tile0 + j][2 * r + 1]);
}

// The end of a backward step: warpgroup W (of NWG) adds its dQ partial acc_dq (64 queries from m0 × D, scale not
// yet applied) into dq_accum. With two warpgroups (whose partials cover the same queries) each first hands the other
// half of its columns to the other through sX ([2][64][D/2 + 8] f32: hand_over_dq), then, after a __syncthreads that
// the caller places where every thread of the CTA reaches it (a barrier inside the per-warpgroup branches is
// undefined, and compute-sanitizer's synccheck reports it), adds the half it receives (reduce_dq): half the
// reduction traffic to L2, which bounds the pass at large N.
template <int W, int D>
__device__ __forceinline__ void hand_over_dq(float (&acc_dq)[D / 8][4], float* sX, int warp, int g, int t) {
  constexpr int LDX = D / 2 + 8;
  constexpr int kOwnTiles = D / 16;
  store_dq_tiles<kOwnTiles, LDX, D>(acc_dq, (1 - W) * kOwnTiles, sX + W * 64 * LDX, warp, g, t);
}
template <int W, int NWG, int D>
__device__ __forceinline__ void reduce_dq(float (&acc_dq)[D / 8][4], const float* sX, float* __restrict__ dq_accum,
                                          long long bh, int n_q, int m0, int warp, int g, int t, float scale) {
  constexpr int LDX = D / 2 + 8;
  constexpr int kOwnTiles = NWG == 2 ? D / 16 : D / 8;  // n8 column tiles this warpgroup reduces
  constexpr int kOwn0 = NWG == 2 ? W * kOwnTiles : 0;
  if constexpr (NWG == 2) {
    const float* take = sX + (1 - W) * 64 * LDX;
#pragma unroll
    for (int j = 0; j < kOwnTiles; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float2 x = *reinterpret_cast<const float2*>(take + (warp * 16 + g + 8 * r) * LDX + j * 8 + 2 * t);
        acc_dq[kOwn0 + j][2 * r] += x.x;
        acc_dq[kOwn0 + j][2 * r + 1] += x.y;
      }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = m0 + warp * 16 + g + 8 * r;
    if (row < n_q) {
      float* dst = dq_accum + (bh * n_q + row) * D + 2 * t;
#pragma unroll
      for (int j = 0; j < kOwnTiles; ++j)
        atomic_add2(dst + (kOwn0 + j) * 8, acc_dq[kOwn0 + j][2 * r] * scale, acc_dq[kOwn0 + j][2 * r + 1] * scale);
    }
  }
}

// red.global.add.v4.f32: four consecutive floats (16-byte aligned) in one reduction (sm_90).
__device__ __forceinline__ void atomic_add4(float* p, float a, float b, float c, float d) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
#else
  __trap();  // sm_90 only, as are its callers
#endif
}

// The end of a backward step with NWG ≥ 3 warpgroups: each puts its dQ partial into sX ([NWG][64][D + 8] f32); after
// a barrier every thread sums the NWG partials of four consecutive columns and adds them into dq_accum with one
// red.global.add.v4.f32 (scale applied): 1/NWG of the reduction traffic of one warpgroup per CTA.
template <int NWG, int D>
__device__ __forceinline__ void reduce_dq_shared(float (&acc_dq)[D / 8][4], float* sX, float* __restrict__ dq_accum,
                                                 long long bh, int n_q, int m0, int wg, int warp, int g, int t,
                                                 float scale) {
  constexpr int LDX = D + 8, kQuads = D / 4;
  store_dq_tiles<D / 8, LDX, D>(acc_dq, 0, sX + wg * 64 * LDX, warp, g, t);
  __syncthreads();  // every partial is in shared memory
  for (int i = static_cast<int>(threadIdx.x); i < 64 * kQuads; i += 128 * NWG) {
    const int row = i / kQuads, col = (i % kQuads) * 4;
    float4 s = *reinterpret_cast<const float4*>(sX + row * LDX + col);
#pragma unroll
    for (int w = 1; w < NWG; ++w) {
      const float4 x = *reinterpret_cast<const float4*>(sX + (w * 64 + row) * LDX + col);
      s.x += x.x;
      s.y += x.y;
      s.z += x.z;
      s.w += x.w;
    }
    if (m0 + row < n_q)
      atomic_add4(dq_accum + (bh * n_q + m0 + row) * D + col, s.x * scale, s.y * scale, s.z * scale, s.w * scale);
  }
}

// Pᵀ = 2^(Sᵀ·sl2 − lse·log2e) in place on the Sᵀ accumulators (64 keys × BM queries per warpgroup; this thread's
// columns are queries 8nt + 2t and + 1, whose lse it reads from sL). MASKED: queries ≥ valid give 0 (their Q and dO
// rows are zero-filled, so Sᵀ and dPᵀ there are finite).
template <int BM, bool MASKED>
__device__ __forceinline__ void exp_scores(float (&acc_s)[BM / 8][4], const float* sL, float sl2, int valid, int t) {
#pragma unroll
  for (int nt = 0; nt < BM / 8; ++nt) {
    const float2 l = *reinterpret_cast<const float2*>(sL + nt * 8 + 2 * t);
    float nx = -l.x * Constants::kLog2e, ny = -l.y * Constants::kLog2e;
    if constexpr (MASKED) {
      nx = nt * 8 + 2 * t < valid ? nx : neg_inf();
      ny = nt * 8 + 2 * t + 1 < valid ? ny : neg_inf();
    }
    acc_s[nt][0] = ex2_approx(fmaf(acc_s[nt][0], sl2, nx));
    acc_s[nt][1] = ex2_approx(fmaf(acc_s[nt][1], sl2, ny));
    acc_s[nt][2] = ex2_approx(fmaf(acc_s[nt][2], sl2, nx));
    acc_s[nt][3] = ex2_approx(fmaf(acc_s[nt][3], sl2, ny));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Backward for Hopper: dK, dV and dQ in one pass (dQ added into an f32 accumulator with atomics, as
// flash_attention2_backward_dkv_dq does with mma.sync). CTA: NWG warpgroups, BLOCK_N = 64·NWG keys; warpgroup w owns
// keys n0 + 64w .. +63 and steps through the queries 64 at a time (Q, dO, lse, delta double-buffered, shared by the
// warpgroups). Per step, per warpgroup:
//   Sᵀ = K_w·Q_iᵀ, dPᵀ = V_w·dO_iᵀ      wgmma m64n64, A and B K-major from shared memory;
//   Pᵀ = 2^(Sᵀ·sl2 − lse_i·log2e), dSᵀ = Pᵀ ∘ (dPᵀ − delta_i)   in registers (queries ≥ n_q give 0);
//   dV += Pᵀ·dO_i, dK += dSᵀ·Q_i          wgmma m64n{DV}, m64n{D}, A from registers, B MN-major;
//   dQ_i += dS·K_w                         dSᵀ goes to the warpgroup's shared tile (stmatrix), then wgmma m64n{D}
//                                          with A and B MN-major, and red.global.add into dq_accum (scale applied;
//                                          with several warpgroups their partials are summed in shared memory first).
// (A bulk reduction through shared memory, cp.reduce.async.bulk, measured slower than the per-thread reductions.)
// The products are issued in five commit groups so that the exponentials overlap dPᵀ, dSᵀ overlaps dV, and the dQ
// reduction overlaps dK. One barrier per step guards both the shared stages and the dSᵀ tiles.
template <typename T, int D, int DV, int NWG>
__device__ __forceinline__ void backward_sm90(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                              const T* __restrict__ grad_o, const float* __restrict__ lse,
                                              const float* __restrict__ delta, T* __restrict__ grad_k,
                                              T* __restrict__ grad_v, float* __restrict__ dq_accum, int n_q, int n_k,
                                              float scale) {
  static_assert(!IsF32<T>::value, "flash_attention2_backward_sm90: T must be __half or __nv_bfloat16");
  static_assert(D == 16 || D == 32 || D == 64 || D == 128, "flash_attention2_backward_sm90: HEAD_DIM 16..128");
  static_assert(DV == 16 || DV == 32 || DV == 64 || DV == 128, "flash_attention2_backward_sm90: HEAD_DIM_V 16..128");
  constexpr int BM = 64, BN = 64 * NWG, kThreads = 128 * NWG;
  extern __shared__ __align__(1024) unsigned char fa2_sm90_smem[];
  T* sK = reinterpret_cast<T*>(fa2_sm90_smem);
  T* sV = sK + BN * D;
  T* sQ = sV + BN * DV;         // two stages
  T* sdO = sQ + 2 * BM * D;     // two stages
  T* sdS = sdO + 2 * BM * DV;   // one 64 × BM tile per warpgroup
  float* sL = reinterpret_cast<float*>(sdS + NWG * 64 * BM);  // two stages of lse, then two of delta
  float* sD = sL + 2 * BM;
  float* sX = sD + 2 * BM;  // NWG ≥ 2: the dQ partials the warpgroups sum (reduce_dq, reduce_dq_shared)
  if (smem_addr(sK) & 1023) __trap();

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, wg = tid >> 7, warp = (tid >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = static_cast<int>(blockIdx.x) * BN;
  const long long bh = blockIdx.y;
  const T* qb = q + bh * n_q * D;
  const T* ob = grad_o + bh * n_q * DV;
  const float* lb = lse + bh * n_q;
  const float* db = delta + bh * n_q;
  T* my_dS = sdS + wg * 64 * BM;

  load_swizzled_async<T, BN, D, kThreads>(sK, k + bh * n_k * D, n0, n_k);
  load_swizzled_async<T, BN, DV, kThreads>(sV, v + bh * n_k * DV, n0, n_k);
  // With one warpgroup per CTA, the CTAs of a head start at different query blocks (key block mod m_blocks) and wrap
  // around, so that their dQ reductions go to different rows at a time: 2-3% faster at d = 32 on the H200, while
  // with two or three warpgroups it measured 1% slower (bench/attention/NOTES.md, v4).
  const int m_blocks = (n_q + BM - 1) / BM;
  const int first = NWG == 1 ? static_cast<int>(blockIdx.x) % m_blocks : 0;
  load_swizzled_async<T, BM, D, kThreads>(sQ, qb, first * BM, n_q);
  load_swizzled_async<T, BM, DV, kThreads>(sdO, ob, first * BM, n_q);
  load_rows_async<BM, kThreads>(sL, lb, first * BM, n_q);
  load_rows_async<BM, kThreads>(sD, db, first * BM, n_q);
  cp_async_commit();

  float acc_dk[D / 8][4], acc_dv[DV / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) acc_dk[i][0] = acc_dk[i][1] = acc_dk[i][2] = acc_dk[i][3] = 0.0f;
#pragma unroll
  for (int i = 0; i < DV / 8; ++i) acc_dv[i][0] = acc_dv[i][1] = acc_dv[i][2] = acc_dv[i][3] = 0.0f;
  const float sl2 = scale * Constants::kLog2e;

  for (int i = 0, block = first; i < m_blocks; ++i) {
    const int m0 = block * BM;
    if (++block == m_blocks) block = 0;
    cp_async_wait<0>();  // stage i & 1, committed one step ago
    fence_proxy_async();
    __syncthreads();  // stage i & 1 has landed for every thread, and every thread is done with step i − 1
    if (i + 1 < m_blocks) {  // so stage (i + 1) & 1 is free: the next step's copies overlap this step
      const int st = (i + 1) & 1;
      load_swizzled_async<T, BM, D, kThreads>(sQ + st * BM * D, qb, block * BM, n_q);
      load_swizzled_async<T, BM, DV, kThreads>(sdO + st * BM * DV, ob, block * BM, n_q);
      load_rows_async<BM, kThreads>(sL + st * BM, lb, block * BM, n_q);
      load_rows_async<BM, kThreads>(sD + st * BM, db, block * BM, n_q);
    }
    cp_async_commit();
    const T* cQ = sQ + (i & 1) * BM * D;
    const T* cdO = sdO + (i & 1) * BM * DV;
    const float* cL = sL + (i & 1) * BM;
    const float* cD = sD + (i & 1) * BM;

    // Sᵀ and dPᵀ (64 keys × 64 queries per warpgroup).
    float acc_s[BM / 8][4], acc_dp[BM / 8][4];
#pragma unroll
    for (int j = 0; j < BM / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[j][e] = acc_dp[j][e] = 0.0f;
    pin(acc_s);
    pin(acc_dp);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      Wgmma<BM>::template ss<T>(acc_s, kmajor_desc<BN, D>(sK, wg * 64, kk), kmajor_desc<BM, D>(cQ, 0, kk));
    wgmma_commit();  // group 1: Sᵀ
#pragma unroll
    for (int kk = 0; kk < DV / 16; ++kk)
      Wgmma<BM>::template ss<T>(acc_dp, kmajor_desc<BN, DV>(sV, wg * 64, kk), kmajor_desc<BM, DV>(cdO, 0, kk));
    wgmma_commit();  // group 2: dPᵀ
    wgmma_wait<1>();
    pin(acc_s);

    // Pᵀ, rounded to T as the A operand of dV += Pᵀ·dO_i, issued while dPᵀ may still run. Past n_q (the last block
    // only) the exponent is −inf, so Pᵀ and dSᵀ are 0 there.
    unsigned pp[BM / 16][4], ps[BM / 16][4];
    if (m0 + BM <= n_q)
      exp_scores<BM, false>(acc_s, cL, sl2, 0, t);
    else
      exp_scores<BM, true>(acc_s, cL, sl2, n_q - m0, t);
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) acc_to_a<T>(pp[kk], acc_s, kk);
    pin(acc_dv);
    pin(pp);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) Wgmma<DV>::template rs<T>(acc_dv, pp[kk], mnmajor_desc<BM, DV>(cdO, kk));
    wgmma_commit();  // group 3: dV
    wgmma_wait<1>();  // dPᵀ has landed
    pin(acc_dp);

    // dSᵀ = Pᵀ ∘ (dPᵀ − delta_i), rounded to T; also to this warpgroup's shared tile for dQ.
#pragma unroll
    for (int nt = 0; nt < BM / 8; ++nt) {
      const float2 dl = *reinterpret_cast<const float2*>(cD + nt * 8 + 2 * t);
      acc_dp[nt][0] = acc_s[nt][0] * (acc_dp[nt][0] - dl.x);
      acc_dp[nt][1] = acc_s[nt][1] * (acc_dp[nt][1] - dl.y);
      acc_dp[nt][2] = acc_s[nt][2] * (acc_dp[nt][2] - dl.x);
      acc_dp[nt][3] = acc_s[nt][3] * (acc_dp[nt][3] - dl.y);
    }
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      acc_to_a<T>(ps[kk], acc_dp, kk);
      // Register j of ps[kk] is the 8 × 8 block (rows warp·16 + 8(j & 1) .., columns 16kk + 8(j >> 1) ..) of the
      // warpgroup's 64 × BM dSᵀ tile; lane l gives row l & 7 of block l >> 3.
      const int j = lane >> 3;
      stmatrix_x4(reinterpret_cast<unsigned char*>(my_dS) +
                      Swizzled<64, BM>::chunk_offset(warp * 16 + (lane & 7) + 8 * (j & 1), 2 * kk + (j >> 1)),
                  ps[kk]);
    }
    fence_proxy_async();
    warpgroup_barrier(wg);  // the warpgroup's dSᵀ tile is complete

    // dQ_i (64 queries × D) = dS·K_w, then dK += dSᵀ·Q_i, which runs while dQ_i is reduced.
    float acc_dq[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) acc_dq[j][0] = acc_dq[j][1] = acc_dq[j][2] = acc_dq[j][3] = 0.0f;
    pin(acc_dk);
    pin(acc_dq);
    pin(ps);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 64 / 16; ++kk)
      Wgmma<D>::template ss<T, 1, 1>(acc_dq, mnmajor_desc<64, BM>(my_dS, kk), mnmajor_desc<BN, D>(sK, kk, wg * 64));
    wgmma_commit();  // group 4: dQ_i
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) Wgmma<D>::template rs<T>(acc_dk, ps[kk], mnmajor_desc<BM, D>(cQ, kk));
    wgmma_commit();  // group 5: dK
    wgmma_wait<1>();
    pin(acc_dv);
    pin(acc_dq);
    pin(pp);

    // dQ_i into dq_accum (its reduction traffic to L2 bounds this pass at large N and d). With two warpgroups (their
    // partials cover the same queries), each hands the other half of its columns to the other warpgroup through
    // shared memory and adds the half it receives; with three, all partials go through shared memory and every
    // thread sums and reduces a quarter row (reduce_dq_shared).
    // The register indices must be compile-time constants (a run-time index would put acc_dq in local memory), so
    // the reduction is instantiated per warpgroup index.
    if constexpr (NWG == 2) {
      if (wg == 0)
        hand_over_dq<0, D>(acc_dq, sX, warp, g, t);
      else
        hand_over_dq<1, D>(acc_dq, sX, warp, g, t);
      __syncthreads();  // both halves are in shared memory
    }
    if constexpr (NWG >= 3)
      reduce_dq_shared<NWG, D>(acc_dq, sX, dq_accum, bh, n_q, m0, wg, warp, g, t, scale);
    else if (NWG == 1 || wg == 0)
      reduce_dq<0, NWG, D>(acc_dq, sX, dq_accum, bh, n_q, m0, warp, g, t, scale);
    else
      reduce_dq<1, NWG, D>(acc_dq, sX, dq_accum, bh, n_q, m0, warp, g, t, scale);
    wgmma_wait<0>();
    pin(acc_dk);
    pin(ps);
  }
  cp_async_wait<0>();

  T* dkb = grad_k + bh * n_k * D;
  T* dvb = grad_v + bh * n_k * DV;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = n0 + wg * 64 + warp * 16 + g + 8 * r;
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

}  // namespace fa2

template <typename T, int HEAD_DIM, int HEAD_DIM_V, int BLOCK_N, int NUM_WARPGROUPS>
__global__ void __launch_bounds__(NUM_WARPGROUPS * 128, NUM_WARPGROUPS == 1 ? 3 : 1)
    flash_attention2_forward_sm90(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                  T* __restrict__ o, float* __restrict__ lse, int n_q, int n_k, float scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const long long bh = blockIdx.y;
  const fa2::AttentionRows<T> rows{q + bh * n_q * HEAD_DIM, k + bh * n_k * HEAD_DIM, v + bh * n_k * HEAD_DIM_V,
                                   o + bh * n_q * HEAD_DIM_V, lse != nullptr ? lse + bh * n_q : nullptr,
                                   HEAD_DIM, HEAD_DIM, HEAD_DIM_V, HEAD_DIM_V};
  fa2::forward_sm90<T, HEAD_DIM, HEAD_DIM_V, BLOCK_N, NUM_WARPGROUPS>(rows, n_q, n_k, scale);
#else
  __trap();  // sm_90a only; the launcher never picks this kernel elsewhere
#endif
}

// YOLO26's PSA attention straight from the qkv convolution's NHWC output to the merged NHWC image, with no packing:
// qkv [B, n, heads·4·KEY_DIM] holds per pixel and head [Q | K | V] (KEY_DIM, KEY_DIM, 2·KEY_DIM wide); out [B, n,
// heads·2·KEY_DIM] gets head h's attention output in channels [h·2·KEY_DIM, (h+1)·2·KEY_DIM) (PsaMergeAttn's
// order). The forward above with Q, K, V rows read 4·KEY_DIM·heads elements apart. Grid (ceil(n / (64 ·
// NUM_WARPGROUPS)), B·heads), the threads and shared memory of flash_attention2_forward_sm90<T, KEY_DIM,
// 2·KEY_DIM, BLOCK_N, NUM_WARPGROUPS>.
template <typename T, int KEY_DIM, int BLOCK_N, int NUM_WARPGROUPS>
__global__ void __launch_bounds__(NUM_WARPGROUPS * 128, NUM_WARPGROUPS == 1 ? 3 : 1)
    psa_attention_forward_sm90(const T* __restrict__ qkv, T* __restrict__ out, int n, int heads, float scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const int b = static_cast<int>(blockIdx.y) / heads, h = static_cast<int>(blockIdx.y) % heads;
  const int ld_qkv = 4 * KEY_DIM * heads, ld_out = 2 * KEY_DIM * heads;
  const T* q = qkv + static_cast<long long>(b) * n * ld_qkv + h * 4 * KEY_DIM;
  const fa2::AttentionRows<T> rows{q, q + KEY_DIM, q + 2 * KEY_DIM,
                                   out + static_cast<long long>(b) * n * ld_out + h * 2 * KEY_DIM, nullptr,
                                   ld_qkv, ld_qkv, ld_qkv, ld_out};
  fa2::forward_sm90<T, KEY_DIM, 2 * KEY_DIM, BLOCK_N, NUM_WARPGROUPS>(rows, n, n, scale);
#else
  __trap();  // sm_90a only; the launcher never picks this kernel elsewhere
#endif
}

// dK, dV and dQ in one pass on Hopper: grid (ceil(n_k / (64 · NUM_WARPGROUPS)), BH), 128 · NUM_WARPGROUPS threads,
// dynamic shared memory FlashAttention2Sm90Smem<...>::backward bytes; dq_accum [BH, n_q, HEAD_DIM] f32 zeroed by the
// caller (flash_attention2_backward_dq_convert rounds it to grad_q). lse and delta as for the other backward kernels.
template <typename T, int HEAD_DIM, int HEAD_DIM_V, int NUM_WARPGROUPS>
__global__ void __launch_bounds__(NUM_WARPGROUPS * 128, NUM_WARPGROUPS == 1 ? 3 : 1)
    flash_attention2_backward_sm90(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                   const T* __restrict__ grad_o, const float* __restrict__ lse,
                                   const float* __restrict__ delta, T* __restrict__ grad_k, T* __restrict__ grad_v,
                                   float* __restrict__ dq_accum, int n_q, int n_k, float scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  fa2::backward_sm90<T, HEAD_DIM, HEAD_DIM_V, NUM_WARPGROUPS>(q, k, v, grad_o, lse, delta, grad_k, grad_v, dq_accum,
                                                              n_q, n_k, scale);
#else
  __trap();  // sm_90a only; the launcher never picks this kernel elsewhere
#endif
}

}  // namespace vision::ops::attention
