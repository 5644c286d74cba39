// YOLO26 BCE classification and L1 distance losses on CUDA — the kernel descriptors of cls.cuh, their launch helpers,
// and the CUDA RuntimeOps of the graph ops "yolo.bce_cls_loss" and "yolo.l1_distance_loss". CUDA builds only.
// Ids: bce_cls_forward_partial__bf16, bce_cls_backward__f16, l1_distance_forward_partial__f32,
// l1_distance_backward__bf16, ... (f32, f16, bf16: the prediction's dtype) and loss_sum_finalize__f32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "vision/cuda/kernel.h"
#include "vision/graph/op.h"
#include "vision/models/yolo/kernels/loss/cls.h"

namespace vision::models::yolo::kernels::loss {

struct BceClsForwardPartial
    : cuda::KernelDescriptor<const void* /*logits*/, const void* /*targets (f32)*/, void* /*partials (f32)*/,
                             int64_t /*n*/> {
  explicit BceClsForwardPartial(core::DType dtype);
};
struct BceClsBackward
    : cuda::KernelDescriptor<const void* /*logits*/, const void* /*targets*/, const void* /*grad_loss (f32)*/,
                             const void* /*norm (f32)*/, void* /*grad_logits*/, int64_t /*n*/> {
  explicit BceClsBackward(core::DType dtype);
};
struct L1DistanceForwardPartial
    : cuda::KernelDescriptor<const void* /*pred*/, const void* /*target*/, const void* /*weight*/,
                             const void* /*anchors*/, void* /*partials*/, int64_t /*batch*/, int64_t /*n_anchors*/,
                             float /*inv_w*/, float /*inv_h*/> {
  explicit L1DistanceForwardPartial(core::DType dtype);
};
struct L1DistanceBackward
    : cuda::KernelDescriptor<const void* /*pred*/, const void* /*target*/, const void* /*weight*/,
                             const void* /*anchors*/, const void* /*grad_loss*/, const void* /*norm*/,
                             void* /*grad_pred*/, int64_t /*batch*/, int64_t /*n_anchors*/, float /*inv_w*/,
                             float /*inv_h*/> {
  explicit L1DistanceBackward(core::DType dtype);
};
struct LossSumFinalize
    : cuda::KernelDescriptor<const void* /*partials*/, int32_t /*n_partials*/, void* /*loss*/, void* /*norm*/> {
  LossSumFinalize();  // f32 only
};

// The number of blocks (and of partial-sum pairs) of a forward over `items` elements (B·nc·A for BCE, B·A for L1):
// a function of items alone, at most kMaxLossPartials.
inline constexpr int64_t kMaxLossPartials = 1024;
int64_t loss_partial_blocks(int64_t items);
// Workspace bytes of a forward over `items` elements: the partial sums (2 floats per block).
size_t loss_workspace_bytes(int64_t items);

// The second pass of every forward: loss[0] = Σ partial losses / N, N = max(Σ partial normalisers, 1), and norm[0] = N
// unless norm is null; partials holds `blocks` (loss, normaliser) pairs (1 ≤ blocks ≤ kMaxLossPartials), added in a
// fixed order in float64 by one block.
void launch_loss_sum_finalize(cudaStream_t stream, const float* partials, int64_t blocks, float* loss, float* norm);

// Forward: loss[0] = Σ bce / N (f32, device), and norm[0] = N unless norm is null; logits of `dtype`, targets f32
// [B, nc, A] (n elements), workspace of loss_workspace_bytes(n) bytes. Two launches, no host synchronisation.
void launch_bce_cls_forward(cudaStream_t stream, core::DType dtype, const void* logits, const float* targets,
                            float* loss, float* norm, void* workspace, int64_t n);
// grad_logits (dtype) = (σ(x) − t) · grad_loss[0] / norm[0].
void launch_bce_cls_backward(cudaStream_t stream, core::DType dtype, const void* logits, const float* targets,
                             const float* grad_loss, const float* norm, void* grad_logits, int64_t n);
// Forward of the L1 term: pred [B, 4, A] of dtype, target [B, 4, A] f32, weight [B, A] f32, anchors [3, A] f32, input
// size image_h × image_w; workspace of loss_workspace_bytes(B·A) bytes.
void launch_l1_distance_forward(cudaStream_t stream, core::DType dtype, const void* pred, const float* target,
                                const float* weight, const float* anchors, float* loss, float* norm, void* workspace,
                                int64_t batch, int64_t n_anchors, int64_t image_h, int64_t image_w);
void launch_l1_distance_backward(cudaStream_t stream, core::DType dtype, const void* pred, const float* target,
                                 const float* weight, const float* anchors, const float* grad_loss, const float* norm,
                                 void* grad_pred, int64_t batch, int64_t n_anchors, int64_t image_h, int64_t image_w);

// The CUDA RuntimeOps; saved specs and the anchor grid come from the CPU RuntimeOp `twin`.
std::unique_ptr<graph::RuntimeOp> make_bce_cls_loss_cuda(std::unique_ptr<graph::RuntimeOp> twin, graph::Mode mode);
std::unique_ptr<graph::RuntimeOp> make_l1_distance_loss_cuda(std::unique_ptr<graph::RuntimeOp> twin,
                                                             graph::Mode mode);

}  // namespace vision::models::yolo::kernels::loss
