// Task-aligned assigner on CUDA — the kernel descriptors of assigner.cuh (per-gt top-k, shared-anchor resolution,
// per-gt finalisation), the launch helper with its workspace size, and the CUDA RuntimeOp of the graph op
// "yolo.task_aligned_assigner". CUDA builds only. Ids: assigner_topk__f32, assigner_resolve__bf16,
// assigner_finalize__f16, ... (f32, f16, bf16: each reads the boxes, topk and finalize the logits too).
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
                             const void* /*targets f32*/, const void* /*count i32*/, void* /*claimers i32*/,
                             void* /*owner i32*/, int64_t /*n_anchors*/, int64_t /*n_classes*/, int64_t /*n_max*/,
                             int32_t /*topk*/, float /*alpha*/, float /*beta*/, float /*eps*/, float /*small_side*/,
                             float /*widened_side*/> {
  explicit AssignerTopk(core::DType dtype);
};
struct AssignerResolve
    : cuda::KernelDescriptor<const void* /*boxes*/, const void* /*anchors f32*/, const void* /*targets f32*/,
                             const void* /*count i32*/, const void* /*claimers i32*/, void* /*owner i32*/,
                             int64_t /*batch*/, int64_t /*n_anchors*/, int64_t /*n_classes*/, int64_t /*n_max*/,
                             float /*eps*/, float /*small_side*/, float /*widened_side*/> {
  explicit AssignerResolve(core::DType dtype);
};
struct AssignerFinalize
    : cuda::KernelDescriptor<const void* /*logits*/, const void* /*boxes*/, const void* /*anchors f32*/,
                             const void* /*targets f32*/, const void* /*count i32*/, const void* /*owner i32*/,
                             void* /*target_boxes f32*/, void* /*target_scores f32*/, void* /*fg_mask u8*/,
                             void* /*gt_index i32*/, int64_t /*n_anchors*/, int64_t /*n_classes*/, int64_t /*n_max*/,
                             int32_t /*topk*/, int32_t /*topk2*/, float /*alpha*/, float /*beta*/, float /*eps*/,
                             float /*small_side*/, float /*widened_side*/> {
  explicit AssignerFinalize(core::DType dtype);
};

// The sizes of one launch: logits [batch, n_classes, n_anchors], targets [batch, n_max, 5].
struct AssignerSizes {
  int64_t batch = 0, n_anchors = 0, n_classes = 0, n_max = 0;
};

// Device workspace bytes of one launch: B·A claim counts and B·A owners (i32), each part rounded up to 256 bytes.
// Never B·M·A.
size_t assigner_workspace_bytes(const AssignerSizes& sizes, const AssignerOptions& options);

// The four outputs (assigner.h) from device pointers: logits and boxes of `dtype`, anchors [3, A] f32, targets
// [B, M, 5] f32, count [B] i32; on `stream`, without synchronising: 6 memsets and 3 launches (capturable in a CUDA
// graph). Throws on sizes or options out of range, and when the workspace is smaller than assigner_workspace_bytes.
void launch_task_aligned_assigner(cudaStream_t stream, core::DType dtype, const void* logits, const void* boxes,
                                  const float* anchors, const float* targets, const int32_t* count, float* target_boxes,
                                  float* target_scores, uint8_t* fg_mask, int32_t* gt_index, void* workspace,
                                  size_t workspace_bytes, const AssignerSizes& sizes, const AssignerOptions& options);

// The CUDA RuntimeOp of TaskAlignedAssignerOp; its state spec (the anchor grid) comes from the CPU RuntimeOp `twin`.
std::unique_ptr<graph::RuntimeOp> make_task_aligned_assigner_cuda(std::unique_ptr<graph::RuntimeOp> twin,
                                                                  AssignerOptions options);

}  // namespace vision::models::yolo::kernels::loss
