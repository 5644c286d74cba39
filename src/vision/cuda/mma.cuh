// Tensor-core matrix products through inline PTX, shared by the kernels that use them (FlashAttention 2, the
// Newton–Schulz GEMM of MuSGD): mma.sync.aligned.m16n8k16 with 16-bit inputs and f32 accumulation.
//
// Fragment ownership (lane = 4g + t, g = lane / 4, t = lane % 4), each 32-bit register two consecutive 16-bit values:
//   A (16×16, row-major): a[0] row g, columns 2t, 2t+1; a[1] row g+8; a[2] row g, columns 2t+8, 2t+9; a[3] row g+8.
//   B (16×8, column-major): b0 rows (k) 2t, 2t+1 of column (n) g; b1 rows 2t+8, 2t+9.
//   C (16×8, f32): c[0], c[1] row g, columns 2t, 2t+1; c[2], c[3] row g+8.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace vk {

// c += a · b, f16 inputs.
__device__ __forceinline__ void mma_16816_f16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a · b, bf16 inputs.
__device__ __forceinline__ void mma_16816_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace vk
