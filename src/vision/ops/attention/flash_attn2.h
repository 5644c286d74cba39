// FlashAttention-2 — non-causal scaled dot-product attention with online softmax: the CPU twin of the GPU kernels
// (forward with log-sum-exp, backward preprocessing D, dQ, dK/dV) and the graph op "ops.flash_attention2".
//
// Layout: every tensor is contiguous [BH, N, d] (BH = batch × heads):
//   q [BH, Nq, d_qk], k [BH, Nk, d_qk], v [BH, Nk, d_v] → o [BH, Nq, d_v], lse [BH, Nq].
//   o_i = Σ_j softmax_j(scale · q_i·k_j) v_j,  lse_i = log Σ_j exp(scale · q_i·k_j)  (natural log).
// Backward, with dO the gradient of o:
//   D_i = dO_i·o_i,  P_ij = exp(scale · q_i·k_j − lse_i),  dS_ij = P_ij (dO_i·v_j − D_i),
//   dq_i = scale Σ_j dS_ij k_j,  dk_j = scale Σ_i dS_ij q_i,  dv_j = Σ_i P_ij dO_i.
// The N×N matrix is never stored: every function works on blocks of query and key rows, threaded with OpenMP
// over (bh, block). The CPU twin takes f32 tensors with any positive N and head sizes (not only powers of two);
// the GPU kernels (flash_attn2.cuh) take HEAD_DIM ∈ {16, 32, 64, 128} as a compile-time constant.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "vision/graph/graph.h"

namespace vision::ops::attention {

using core::Tensor;

// Sizes of one attention problem, read from q, k and v (validated by attention_sizes()).
struct AttentionSizes {
  int64_t batch_heads = 0;
  int64_t n_q = 0, n_k = 0;
  int64_t d_qk = 0, d_v = 0;
};

// The sizes of q [BH, Nq, d_qk], k [BH, Nk, d_qk], v [BH, Nk, d_v]; throws vision::Error naming the mismatch.
AttentionSizes attention_sizes(const core::Shape& q, const core::Shape& k, const core::Shape& v);

// CPU twin. All tensors are f32 host tensors of the shapes above; outputs are overwritten.
// Forward: o [BH, Nq, d_v] and, when defined, lse [BH, Nq].
void flash_attention2_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, float scale, const Tensor& o,
                                  const Tensor& lse);
// Backward preprocessing: delta [BH, Nq] = rowsum(grad_o ∘ o).
void flash_attention2_backward_preprocess_cpu(const Tensor& o, const Tensor& grad_o, const Tensor& delta);
// dQ [BH, Nq, d_qk], one task per (bh, query block), from the forward's lse and the preprocessing's delta.
void flash_attention2_backward_dq_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_o,
                                      const Tensor& lse, const Tensor& delta, float scale, const Tensor& grad_q);
// dK [BH, Nk, d_qk] and dV [BH, Nk, d_v], one task per (bh, key block) (no atomics); either may be undefined.
void flash_attention2_backward_dkv_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& grad_o,
                                       const Tensor& lse, const Tensor& delta, float scale, const Tensor& grad_k,
                                       const Tensor& grad_v);

// ---------------------------------------------------------------------------------------------------------------
// GPU kernels (flash_attn2.cuh): what the kernel system needs to instantiate and launch them.

//   forward, backward_preprocess, backward_dq, backward_dkv: flash_attn2.cuh, every dtype, sm_80+;
//   backward_dkv_dq: dK/dV plus dQ accumulated in f32 with atomics, and backward_dq_convert, which rounds that
//     accumulator to grad_q: flash_attn2.cuh, f16/bf16 (the non-deterministic, faster backward);
//   forward_sm90, backward_sm90 (dK/dV + atomic dQ, as backward_dkv_dq): flash_attn2_sm90.cuh, wgmma on sm_90a,
//     f16/bf16, d_v ∈ {16, 32, 64, 128}.
enum class FlashAttention2Kernel : uint8_t {
  forward,
  backward_preprocess,
  backward_dq,
  backward_dkv,
  backward_dkv_dq,
  backward_dq_convert,
  forward_sm90,
  backward_sm90,
};
std::string_view flash_attention2_kernel_label(FlashAttention2Kernel kernel);  // "forward", "backward_dq", ...

// Tile sizes of one instantiation. forward / forward_sm90 / backward_dq: block_m query rows per CTA, block_n keys
// per step; backward_dkv / backward_dkv_dq: block_n keys per CTA, block_m queries per step; backward_preprocess:
// block_m rows per CTA (warps × the rows one warp covers, which depends on d_v and the dtype), block_n unused;
// backward_dq_convert: block_m = 4 · 32 · warps elements per CTA, block_n unused. forward_sm90: warps = 4 per
// warpgroup, block_m = 64 per warpgroup. backward_sm90: block_m = 64 queries per step, block_n = 64 keys per
// warpgroup.
struct FlashAttention2Tiles {
  int block_m = 0, block_n = 0, warps = 0;
};

// Throws vision::Error unless the GPU kernels take (dtype, d, d_v): f32/f16/bf16, d ∈ {16, 32, 64, 128}, d_v a
// multiple of 16 in [16, 256].
void check_flash_attention2_gpu_sizes(core::DType dtype, int64_t d, int64_t d_v);
// Whether `kernel` exists for (dtype, d_v) at all (backward_dkv_dq, backward_dq_convert and forward_sm90 are
// 16-bit only; forward_sm90 needs d_v ∈ {16, 32, 64, 128}); sizes as check_flash_attention2_gpu_sizes.
bool flash_attention2_kernel_exists(FlashAttention2Kernel kernel, core::DType dtype, int d, int d_v);
// The tile sizes the engine instantiates (chosen so that no instantiation spills registers, except the tensor-core
// dK/dV kernel at d = 128, d_v = 256 which spills a few bytes).
FlashAttention2Tiles flash_attention2_tiles(FlashAttention2Kernel kernel, core::DType dtype, int d, int d_v);
// NVRTC name expression of an instantiation, e.g.
// "vision::ops::attention::flash_attention2_forward<__half, 32, 64, 64, 64, 4>".
std::string flash_attention2_kernel_name(FlashAttention2Kernel kernel, core::DType dtype, int d, int d_v,
                                         FlashAttention2Tiles tiles);
// Dynamic shared memory of one CTA in bytes: the host mirror of fa2::FlashAttention2Smem in flash_attn2.cuh.
// Above 48 KiB a launcher must raise cudaFuncAttributeMaxDynamicSharedMemorySize (sm_80: ≤ 163 KiB, sm_90: ≤ 227 KiB).
size_t flash_attention2_smem_bytes(FlashAttention2Kernel kernel, core::DType dtype, int d, int d_v,
                                   FlashAttention2Tiles tiles);

struct FlashAttention2Launch {
  std::array<unsigned, 3> grid{1, 1, 1};
  unsigned threads = 0;
  size_t smem_bytes = 0;
};
// Launch geometry for one problem (validated: BH ≤ 65535, sizes positive).
FlashAttention2Launch flash_attention2_launch(FlashAttention2Kernel kernel, core::DType dtype, const AttentionSizes& s,
                                              FlashAttention2Tiles tiles);

// ---------------------------------------------------------------------------------------------------------------
// Graph op "ops.flash_attention2": inputs q [BH, Nq, d_qk], k [BH, Nk, d_qk], v [BH, Nk, d_v] (BH may be
// symbolic), output [BH, Nq, d_v]. Training saves lse [BH, Nq] (f32); backward uses a workspace for delta and
// writes the gradients of q, k and v. CPU backend: f32 through the CPU twin. CUDA backend (CUDA builds): the kernels
// of flash_attn2.cuh for the tensors' dtype (flash_attn2_cuda.h), d_qk ∈ {16, 32, 64, 128}, d_v a multiple of 16 up
// to 256.
class FlashAttention2Op : public graph::Op {
 public:
  explicit FlashAttention2Op(float scale);
  std::string name() const override { return "ops.flash_attention2"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  core::DType infer_output_dtype(const std::vector<core::DType>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  float scale() const { return scale_; }

 private:
  float scale_;
};

// Records attention(q, k, v) with the given softmax scale (usually d_qk^-0.5) as a node named `name`.
graph::SymTensor flash_attention2(graph::SymTensor q, graph::SymTensor k, graph::SymTensor v, float scale,
                                  const std::string& name = "attn");

}  // namespace vision::ops::attention
