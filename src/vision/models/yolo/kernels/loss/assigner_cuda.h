// Task-aligned assigner on CUDA — the kernel descriptors of assigner.cuh (per-gt top-k, per-gt finalisation), the
// launch helper with its workspace size, and the CUDA RuntimeOp of the graph op "yolo.task_aligned_assigner". CUDA
// builds only. Ids: assigner_topk__f32, assigner_topk__bf16, ... (f32, f16, bf16: it reads the logits and boxes);
// assigner_finalize__f32 (it reads no element data and exists as f32 only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "vision/cuda/kernel.h"
#include "vision/graph/op.h"
#include "vision/models/yolo/kernels/loss/assigner.h"

namespace vision::models::yolo::kernels::loss {

struct AssignerTopk
    : cuda::KernelDescriptor<const void* /*logits*/, const void* /*boxes*/, const void* /*anchors f32*/,
                             const void* /*targets f32*/, const void* /*count i32*/, void* /*claim_anchor i32*/,
                             void* /*claim_align f32*/, void* /*claim_overlap f32*/, void* /*n_claims i32*/,
                             void* /*best u64*/, int64_t /*n_anchors*/, int64_t /*n_classes*/, int64_t /*n_max*/,
                             int32_t /*topk*/, float /*alpha*/, float /*beta*/, float /*eps*/, float /*small_side*/,
                             float /*widened_side*/> {
  explicit AssignerTopk(core::DType dtype);
};
struct AssignerFinalize
    : cuda::KernelDescriptor<const void* /*anchors*/, const void* /*targets*/, const void* /*count*/,
                             const void* /*claim_anchor*/, const void* /*claim_align*/, const void* /*claim_overlap*/,
                             const void* /*n_claims*/, const void* /*best*/, void* /*target_boxes f32*/,
                             void* /*target_scores f32*/, void* /*fg_mask u8*/, void* /*gt_index i32*/,
                             int64_t /*batch*/, int64_t /*n_anchors*/, int64_t /*n_classes*/, int64_t /*n_max*/,
                             int32_t /*topk*/, int32_t /*topk2*/, float /*eps*/> {
  explicit AssignerFinalize(core::DType dtype);  // f32 only: the kernel reads no element data
};

// The sizes of one launch: logits [batch, n_classes, n_anchors], targets [batch, n_max, 5].
struct AssignerSizes {
  int64_t batch = 0, n_anchors = 0, n_classes = 0, n_max = 0;
};

// Device workspace bytes of one launch: B·M·topk claims (12 bytes), B·M counts, B·A u64 keys, each part rounded up to
// 256 bytes. Never B·M·A.
size_t assigner_workspace_bytes(const AssignerSizes& sizes, const AssignerOptions& options);

// The four outputs (assigner.h) from device pointers: logits and boxes of `dtype`, anchors [3, A] f32, targets
// [B, M, 5] f32, count [B] i32; on `stream`, without synchronising: 5 memsets and 2 launches (capturable in a CUDA
// graph). Throws on sizes or options out of range, and when the workspace is smaller than assigner_workspace_bytes.
void launch_task_aligned_assigner(cudaStream_t stream, core::DType dtype, const void* logits, const void* boxes,
                                  const float* anchors, const float* targets, const int32_t* count, float* target_boxes,
                                  float* target_scores, uint8_t* fg_mask, int32_t* gt_index, void* workspace,
                                  size_t workspace_bytes, const AssignerSizes& sizes, const AssignerOptions& options);

// The CUDA RuntimeOp of TaskAlignedAssignerOp; its state spec (the anchor grid) comes from the CPU RuntimeOp `twin`.
std::unique_ptr<graph::RuntimeOp> make_task_aligned_assigner_cuda(std::unique_ptr<graph::RuntimeOp> twin,
                                                                  AssignerOptions options);

}  // namespace vision::models::yolo::kernels::loss
