// PSA data movement on CUDA — the kernel descriptors of psa.cuh (channels ↔ rows copies, V extraction), their launch
// helpers, and the CUDA copies behind the RuntimeOps of "yolo.psa_pack_qkv", "yolo.psa_extract_v" and
// "yolo.psa_merge_attn". CUDA builds only.
//
// Ids: psa_channels_to_rows__f32__w32_nhwc0, psa_rows_to_channels__bf16__w64_nhwc1 (w: the row width, KEY_DIM or
// 2·KEY_DIM; nhwc: the image layout), psa_extract_v_forward__f16__kd32_nhwc1. Registered: f32, f16, bf16 × NCHW, NHWC
// × w ∈ {16, 32, 64} and kd ∈ {16, 32}; the launch helpers instantiate any power of two up to 128 on first use.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "vision/cuda/kernel.h"
#include "vision/models/yolo/kernels/attention/psa.h"

namespace vision::models::yolo::kernels::attention {

struct PsaChannelsToRows
    : cuda::KernelDescriptor<const void* /*channels*/, void* /*rows*/, int64_t /*total*/, int64_t /*n*/,
                             int64_t /*heads*/, int64_t /*n_channels*/, int64_t /*head_stride*/, int64_t /*offset*/> {
  PsaChannelsToRows(core::DType dtype, int width, core::Layout layout);
};
struct PsaRowsToChannels
    : cuda::KernelDescriptor<const void* /*rows*/, void* /*channels*/, int64_t /*total*/, int64_t /*n*/,
                             int64_t /*heads*/, int64_t /*n_channels*/, int64_t /*head_stride*/, int64_t /*offset*/> {
  PsaRowsToChannels(core::DType dtype, int width, core::Layout layout);
};
struct PsaExtractVForward
    : cuda::KernelDescriptor<const void* /*qkv*/, void* /*image*/, int64_t /*total*/, int64_t /*n*/,
                             int64_t /*heads*/> {
  PsaExtractVForward(core::DType dtype, int key_dim, core::Layout layout);
};
struct PsaExtractVBackward
    : cuda::KernelDescriptor<const void* /*grad_image*/, void* /*grad_qkv*/, int64_t /*total*/, int64_t /*n*/,
                             int64_t /*heads*/> {
  PsaExtractVBackward(core::DType dtype, int key_dim, core::Layout layout);
};

// PSA's one-pass attention straight from the NHWC qkv tensor to the merged NHWC image on Hopper (sm_90a; f16, bf16;
// key_dim 16, 32 or 64): FlashAttention-2's wgmma forward reading Q, K, V rows 4·key_dim·heads apart
// (psa_attention_forward_sm90 in flash_attn2_sm90.cuh). Id psa_attention_forward_sm90__f16__kd32 (the tile
// constants follow flash_attention2_forward_sm90's for d = key_dim, d_v = 2·key_dim).
struct PsaAttentionForwardSm90
    : cuda::KernelDescriptor<const void* /*qkv*/, void* /*image*/, int32_t /*n*/, int32_t /*heads*/, float /*scale*/> {
  PsaAttentionForwardSm90(core::DType dtype, int key_dim);
};
// Whether this GPU and build run it for (dtype, key_dim).
bool psa_attention_direct_usable(core::DType dtype, int64_t key_dim);
// qkv [batch, n, 4·key_dim·heads] → image [batch, n, 2·key_dim·heads] (NHWC, dtype), softmax scale > 0.
void launch_psa_attention_direct(cudaStream_t stream, core::DType dtype, const void* qkv, void* image, int64_t batch,
                                 int64_t n, int64_t key_dim, int64_t heads, float scale);

// Launch helpers on stream; device memory of dtype (f32, f16, bf16); block.width and key_dim powers of two ≤ 128.
// channels is [block.batch, block.channels, block.n] (NCHW) or [block.batch, block.n, block.channels] (NHWC, per
// block.layout), rows [block.batch·block.heads, block.n, block.width].
void launch_psa_channels_to_rows(cudaStream_t stream, core::DType dtype, const void* channels, void* rows,
                                 const PsaRowsBlock& block);
void launch_psa_rows_to_channels(cudaStream_t stream, core::DType dtype, const void* rows, void* channels,
                                 const PsaRowsBlock& block);
// qkv [batch, 4·key_dim·heads, n] → image [batch, 2·key_dim·heads, n] (both in layout), and the backward (grad_qkv
// written whole).
void launch_psa_extract_v(cudaStream_t stream, core::DType dtype, core::Layout layout, const void* qkv, void* image,
                          int64_t batch, int64_t key_dim, int64_t heads, int64_t n);
void launch_psa_extract_v_backward(cudaStream_t stream, core::DType dtype, core::Layout layout, const void* grad_image,
                                   void* grad_qkv, int64_t batch, int64_t key_dim, int64_t heads, int64_t n);

// The kernels the RuntimeOp of `op` launches for this config and format, forward and backward.
std::vector<const cuda::Kernel*> psa_kernels(PsaOpKind op, const PsaConfig& config, const graph::Format& format);

// The CUDA copies for make_psa_runtime (tensors of the CUDA backend, one dtype).
std::shared_ptr<const PsaCopies> psa_cuda_copies();

}  // namespace vision::models::yolo::kernels::attention
