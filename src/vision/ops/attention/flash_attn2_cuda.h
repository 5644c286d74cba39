// FlashAttention-2 on CUDA — the kernel descriptors of flash_attn2.cuh (forward with log-sum-exp, backward
// preprocessing D = rowsum(dO ∘ O), dQ, dK/dV), their launch helpers, and the CUDA RuntimeOp of the graph op
// "ops.flash_attention2". CUDA builds only.
//
// Ids name the element type and the head sizes: flash_attention2_forward__bf16__d32_dv64,
// flash_attention2_backward_dq__f32__d64_dv64, flash_attention2_backward_dkv__f16__d128_dv256,
// flash_attention2_backward_preprocess__f16__dv64 (it does not depend on d). The tile sizes and warps per CTA are
// template arguments too (flash_attention2_tiles() picks them from (kernel, dtype, d, d_v)); the kernel's source
// header lists them. Registered: f32, f16, bf16 × (d, d_v) ∈ {(16,16), (32,32), (64,64), (128,128), (16,32),
// (32,64), (64,128), (128,256)}; the launch helpers instantiate any (d, d_v) the kernels take on first use.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "vision/cuda/kernel.h"
#include "vision/graph/op.h"
#include "vision/ops/attention/flash_attn2.h"

namespace vision::ops::attention {

using core::DType;

// What one FA2 instantiation is: its kernel, head sizes, tiles and dynamic shared memory per CTA.
struct FlashAttention2Instance {
  FlashAttention2Kernel kernel = FlashAttention2Kernel::forward;
  int d = 0, d_v = 0;
  FlashAttention2Tiles tiles;
  size_t smem_bytes = 0;
};
// Throws vision::Error unless the GPU kernels take (dtype, d, d_v) (see check_flash_attention2_gpu_sizes).
FlashAttention2Instance flash_attention2_instance(FlashAttention2Kernel kernel, DType dtype, int d, int d_v);

// The kernel spec of an instantiation: name, file, constants (the id), and the parameter list of its kernel.
cuda::KernelSpec flash_attention2_spec(const FlashAttention2Instance& in, DType dtype);

// What every FA2 descriptor is: a typed kernel descriptor plus the instantiation it was built from.
template <typename... Params>
struct FlashAttention2Descriptor : cuda::KernelDescriptor<Params...> {
  FlashAttention2Descriptor(FlashAttention2Kernel kernel, DType dtype, int d, int d_v)
      : FlashAttention2Descriptor(flash_attention2_instance(kernel, dtype, d, d_v), dtype) {}
  FlashAttention2Instance instance;

 private:
  FlashAttention2Descriptor(const FlashAttention2Instance& in, DType dtype)
      : cuda::KernelDescriptor<Params...>(flash_attention2_spec(in, dtype)), instance(in) {}
};

// Descriptors; arguments in the kernel's order (lse and delta are f32 [BH, n_q]; the rest are dtype tensors).
struct FlashAttention2Forward
    : FlashAttention2Descriptor<const void* /*q*/, const void* /*k*/, const void* /*v*/, void* /*o*/, void* /*lse*/,
                             int32_t /*n_q*/, int32_t /*n_k*/, float /*scale*/> {
  FlashAttention2Forward(DType dtype, int d, int d_v);
};
struct FlashAttention2BackwardPreprocess
    : FlashAttention2Descriptor<const void* /*o*/, const void* /*grad_o*/, void* /*delta*/, int32_t /*rows*/> {
  FlashAttention2BackwardPreprocess(DType dtype, int d_v);
};
struct FlashAttention2BackwardDq
    : FlashAttention2Descriptor<const void* /*q*/, const void* /*k*/, const void* /*v*/, const void* /*grad_o*/,
                             const void* /*lse*/, const void* /*delta*/, void* /*grad_q*/, int32_t /*n_q*/,
                             int32_t /*n_k*/, float /*scale*/> {
  FlashAttention2BackwardDq(DType dtype, int d, int d_v);
};
struct FlashAttention2BackwardDkv
    : FlashAttention2Descriptor<const void* /*q*/, const void* /*k*/, const void* /*v*/, const void* /*grad_o*/,
                             const void* /*lse*/, const void* /*delta*/, void* /*grad_k*/, void* /*grad_v*/,
                             int32_t /*n_q*/, int32_t /*n_k*/, float /*scale*/> {
  FlashAttention2BackwardDkv(DType dtype, int d, int d_v);
};
// f16/bf16 only: dK/dV plus dQ added (f32 atomics) into dq_accum, then rounded to grad_q by the conversion kernel.
struct FlashAttention2BackwardDkvDq
    : FlashAttention2Descriptor<const void* /*q*/, const void* /*k*/, const void* /*v*/, const void* /*grad_o*/,
                             const void* /*lse*/, const void* /*delta*/, void* /*grad_k*/, void* /*grad_v*/,
                             void* /*dq_accum*/, int32_t /*n_q*/, int32_t /*n_k*/, float /*scale*/> {
  FlashAttention2BackwardDkvDq(DType dtype, int d, int d_v);
};
struct FlashAttention2BackwardDqConvert
    : FlashAttention2Descriptor<const void* /*dq_accum*/, void* /*grad_q*/, int32_t /*n*/> {
  explicit FlashAttention2BackwardDqConvert(DType dtype);
};
// sm_90a only (flash_attn2_sm90.cuh): dK/dV + atomic dQ on wgmma (the arguments of FlashAttention2BackwardDkvDq) and
// the forward on wgmma; f16/bf16, d_v ∈ {16, 32, 64, 128}.
struct FlashAttention2BackwardSm90
    : FlashAttention2Descriptor<const void* /*q*/, const void* /*k*/, const void* /*v*/, const void* /*grad_o*/,
                             const void* /*lse*/, const void* /*delta*/, void* /*grad_k*/, void* /*grad_v*/,
                             void* /*dq_accum*/, int32_t /*n_q*/, int32_t /*n_k*/, float /*scale*/> {
  FlashAttention2BackwardSm90(DType dtype, int d, int d_v);
};
struct FlashAttention2ForwardSm90
    : FlashAttention2Descriptor<const void* /*q*/, const void* /*k*/, const void* /*v*/, void* /*o*/, void* /*lse*/,
                             int32_t /*n_q*/, int32_t /*n_k*/, float /*scale*/> {
  FlashAttention2ForwardSm90(DType dtype, int d, int d_v);
};

// Whether the launchers can take the wgmma kernels: an sm_90a device (the current one, probed once per process),
// f16/bf16 and d_v ∈ {16, 32, 64, 128}.
bool flash_attention2_sm90_usable(DType dtype, int d, int d_v);

// Which kernels run: the fastest the device and sizes allow, or a family forced (tests, benchmarks).
enum class FlashAttention2Path : uint8_t { automatic, mma_sync, sm90 };

// Launch helpers, on stream. Tensors are contiguous device memory of dtype (f32, f16 or bf16), 16-byte aligned:
// q [BH, n_q, d], k [BH, n_k, d], v [BH, n_k, d_v], o and grad_o [BH, n_q, d_v]; lse and delta are f32 [BH, n_q]
// (4-byte aligned). BH in [1, 65535], n_q and n_k ≥ 1. A kernel needing more than 48 KiB of dynamic shared memory
// gets its limit raised on the first launch (cuda::Kernel::set_max_dynamic_shared_memory), so launch once before
// capturing a stream into a CUDA graph. Throw vision::Error on sizes the kernels do not take, misaligned pointers or
// a CUDA failure.

// o = softmax(scale · q kᵀ) v; lse = the natural-log log-sum-exp of each scaled score row (lse may be null).
// FlashAttention2Path::sm90 where flash_attention2_sm90_usable() is false is an error.
void launch_flash_attention2_forward(cudaStream_t stream, DType dtype, int d, int d_v, const void* q, const void* k,
                                     const void* v, void* o, float* lse, int64_t batch_heads, int64_t n_q,
                                     int64_t n_k, float scale,
                                     FlashAttention2Path path = FlashAttention2Path::automatic);
// delta [rows] = rowsum(grad_o ∘ o) over rows of d_v elements (rows = BH · n_q).
void launch_flash_attention2_backward_preprocess(cudaStream_t stream, DType dtype, int d_v, const void* o,
                                                 const void* grad_o, float* delta, int64_t rows);
// grad_q from the forward's lse and the preprocessing's delta.
void launch_flash_attention2_backward_dq(cudaStream_t stream, DType dtype, int d, int d_v, const void* q,
                                         const void* k, const void* v, const void* grad_o, const float* lse,
                                         const float* delta, void* grad_q, int64_t batch_heads, int64_t n_q,
                                         int64_t n_k, float scale);
// grad_k and grad_v (both written; neither may be null).
void launch_flash_attention2_backward_dkv(cudaStream_t stream, DType dtype, int d, int d_v, const void* q,
                                          const void* k, const void* v, const void* grad_o, const float* lse,
                                          const float* delta, void* grad_k, void* grad_v, int64_t batch_heads,
                                          int64_t n_q, int64_t n_k, float scale);
// dK/dV and dQ in one pass (f16/bf16; the wgmma kernel on sm_90a unless path says mma_sync): dq_accum (scratch of
// BH · n_q · d floats, 16-byte aligned) is zeroed, the fused kernel adds dQ into it with f32 atomics, and a
// conversion kernel rounds it into grad_q. Faster than the dQ
// kernel plus the dK/dV kernel (bench/attention/NOTES.md), but the order of the additions, and so the last bits of
// grad_q, vary from run to run.
void launch_flash_attention2_backward_dkv_dq(cudaStream_t stream, DType dtype, int d, int d_v, const void* q,
                                             const void* k, const void* v, const void* grad_o, const float* lse,
                                             const float* delta, void* grad_k, void* grad_v, float* dq_accum,
                                             void* grad_q, int64_t batch_heads, int64_t n_q, int64_t n_k,
                                             float scale, FlashAttention2Path path = FlashAttention2Path::automatic);
// The whole backward: delta (scratch of BH · n_q floats, overwritten) = rowsum(grad_o ∘ o), then the gradients.
// With dq_accum (scratch of BH · n_q · d floats) and all three gradients wanted, f16/bf16 take the fused
// non-deterministic pass (launch_flash_attention2_backward_dkv_dq). Otherwise (dq_accum null: the deterministic
// mode; f32; or a gradient not wanted) dQ (skipped when grad_q is null) then dK/dV (skipped when both are null; one
// of them null is an error), each by its own kernel, bit-for-bit reproducible.
void launch_flash_attention2_backward(cudaStream_t stream, DType dtype, int d, int d_v, const void* q, const void* k,
                                      const void* v, const void* o, const void* grad_o, const float* lse,
                                      float* delta, float* dq_accum, void* grad_q, void* grad_k, void* grad_v,
                                      int64_t batch_heads, int64_t n_q, int64_t n_k, float scale,
                                      FlashAttention2Path path = FlashAttention2Path::automatic);

// Every kernel the launch helpers may pick for one problem's dtype and head sizes on some GPU: the forward (and on
// sm_90a the wgmma forward), and in training the backward's: preprocessing, dQ, dK/dV, and for f16/bf16 the fused
// dK/dV + dQ pass (mma_sync or, on sm_90a, wgmma) with its dQ conversion. Throws vision::Error for sizes the kernels do
// not take.
std::vector<const cuda::Kernel*> flash_attention2_kernels(DType dtype, int d, int d_v, graph::Mode mode);

// The CUDA RuntimeOp of FlashAttention2Op: the tensors' dtype picks the kernels (the graph runs f32 today), the
// state specs (saved lse) come from the op's CPU RuntimeOp `twin`. Its workspace holds delta and, in training, room
// for a dK or dV that no input needs (the dK/dV kernel writes both). Its kernels() are flash_attention2_kernels() of
// the last forward's dtype and head sizes; before the first forward, those of every registered (dtype, d, d_v).
std::unique_ptr<graph::RuntimeOp> make_flash_attention2_cuda(std::unique_ptr<graph::RuntimeOp> twin, float scale,
                                                             graph::Mode mode);

}  // namespace vision::ops::attention
