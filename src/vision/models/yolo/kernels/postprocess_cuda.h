// Postprocess on CUDA — the kernel descriptors of postprocess.cuh (end-to-end top-k, NMS), their launch helpers with
// their workspace sizes, and the CUDA RuntimeOp of the graph ops "yolo.postprocess_e2e" and "yolo.nms". CUDA builds
// only. Ids: postprocess_e2e_select__f16, postprocess_nms_rank__f32, ... (f32, f16 and bf16 for the kernels that
// read boxes or logits; the rank kernel reads only keys and exists as f32).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "vision/cuda/kernel.h"
#include "vision/graph/op.h"
#include "vision/models/yolo/kernels/postprocess.h"

namespace vision::models::yolo::kernels {

struct PostprocessE2eAnchorKeys
    : cuda::KernelDescriptor<const void* /*logits*/, void* /*keys u64*/, int64_t /*n_anchors*/,
                             int64_t /*n_classes*/> {
  explicit PostprocessE2eAnchorKeys(core::DType dtype);
};
struct PostprocessE2eSelect
    : cuda::KernelDescriptor<const void* /*boxes*/, const void* /*logits*/, const void* /*anchor_keys*/,
                             void* /*pair_keys*/, const void* /*class_mask f32 or null*/, void* /*detections f32*/,
                             void* /*count i32*/, int64_t /*n_anchors*/, int64_t /*n_classes*/, int32_t /*max_det*/,
                             float /*logit_threshold*/> {
  explicit PostprocessE2eSelect(core::DType dtype);
};
struct PostprocessNmsCandidates
    : cuda::KernelDescriptor<const void* /*logits*/, const void* /*class_mask*/, void* /*keys u64*/,
                             void* /*classes i32*/, void* /*n_valid i32*/, int64_t /*n_anchors*/,
                             int64_t /*n_classes*/, float /*logit_threshold*/> {
  explicit PostprocessNmsCandidates(core::DType dtype);
};
struct PostprocessNmsRank
    : cuda::KernelDescriptor<const void* /*keys*/, const void* /*n_valid*/, void* /*order i32*/,
                             int64_t /*n_anchors*/, int64_t /*order_stride*/, int32_t /*max_nms*/> {
  explicit PostprocessNmsRank(core::DType dtype);  // f32 only: the kernel reads no element data
};
struct PostprocessNmsSelect
    : cuda::KernelDescriptor<const void* /*boxes*/, const void* /*keys*/, const void* /*classes*/,
                             const void* /*n_valid*/, const void* /*order*/, void* /*detections*/, void* /*count*/,
                             int64_t /*n_anchors*/, int64_t /*order_stride*/, int32_t /*max_det*/,
                             int32_t /*max_nms*/, float /*iou_threshold*/> {
  explicit PostprocessNmsSelect(core::DType dtype);
};

// The sizes of one postprocess launch: boxes [batch, 4, n_anchors], logits [batch, n_classes, n_anchors].
struct PostprocessSizes {
  int64_t batch = 0, n_anchors = 0, n_classes = 0;
};

// Device workspace bytes of one launch (a plan's workspace, or any device buffer of that size).
size_t postprocess_e2e_workspace_bytes(const PostprocessSizes& sizes, const PostprocessOptions& options);
size_t postprocess_nms_workspace_bytes(const PostprocessSizes& sizes, const PostprocessOptions& options);

// detections [B, max_det, 6] f32 and count [B] i32 from boxes and logits (device pointers of `dtype`), on `stream`,
// without synchronising: 2 launches (end-to-end) or a memset and 3 launches (NMS). class_mask: [nc] f32 on the device
// (1 keep, 0 drop), or null for no class filter. Throws on sizes or options out of range, and when the workspace is
// smaller than the *_workspace_bytes above.
void launch_postprocess_e2e(cudaStream_t stream, core::DType dtype, const void* boxes, const void* logits,
                            const float* class_mask, float* detections, int32_t* count, void* workspace,
                            size_t workspace_bytes, const PostprocessSizes& sizes, const PostprocessOptions& options);
void launch_postprocess_nms(cudaStream_t stream, core::DType dtype, const void* boxes, const void* logits,
                            const float* class_mask, float* detections, int32_t* count, void* workspace,
                            size_t workspace_bytes, const PostprocessSizes& sizes, const PostprocessOptions& options);

// The CUDA RuntimeOp of PostprocessOp; its state spec (the class mask) comes from the CPU RuntimeOp `twin`.
// kernels(): those of its method, in the plan's dtype.
std::unique_ptr<graph::RuntimeOp> make_postprocess_cuda(std::unique_ptr<graph::RuntimeOp> twin,
                                                        PostprocessMethod method, PostprocessOptions options);

}  // namespace vision::models::yolo::kernels
