// CIoU loss on CUDA — the kernel descriptors of ciou.cuh (forward and backward), their launch helpers, and the CUDA
// RuntimeOp of the graph op "yolo.ciou_loss". CUDA builds only.
// Ids: ciou_forward__f32__block256, ciou_backward__bf16__block256, ... (pred in f32, f16, bf16; the box format and
// the alpha mode are kernel arguments).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "vision/cuda/kernel.h"
#include "vision/graph/op.h"
#include "vision/models/yolo/kernels/loss/ciou.h"

namespace vision::models::yolo::kernels::loss {

// Boxes per CTA (one thread each). Kernel arguments are untyped pointers: pred and d_pred of the dtype, every other
// tensor f32 (the descriptors' comments name them).
inline constexpr int kCiouBlock = 256;

struct CiouForward
    : cuda::KernelDescriptor<const void* /*pred*/, const void* /*target*/, const void* /*weight*/, void* /*loss*/,
                             void* /*iou*/, void* /*v*/, void* /*alpha*/, int64_t /*batch*/, int64_t /*n_anchors*/,
                             int32_t /*format*/> {
  explicit CiouForward(core::DType dtype);
};
struct CiouBackward
    : cuda::KernelDescriptor<const void* /*pred*/, const void* /*target*/, const void* /*weight*/,
                             const void* /*iou*/, const void* /*v*/, const void* /*alpha*/,
                             const void* /*d_loss*/, void* /*d_pred*/, int64_t /*batch*/, int64_t /*n_anchors*/,
                             int32_t /*format*/, int32_t /*full_alpha*/> {
  explicit CiouBackward(core::DType dtype);
};

// loss, iou, v, alpha [B, A] f32 from pred [B, 4, A] (dtype), target [B, 4, A] f32, weight [B, A] f32; device
// pointers. iou, v and alpha may be null (inference: nothing saved).
void launch_ciou_forward(cudaStream_t stream, core::DType dtype, const void* pred, const float* target,
                         const float* weight, float* loss, float* iou, float* v, float* alpha, int64_t batch,
                         int64_t n_anchors, BoxFormat format);
// d_pred [B, 4, A] (dtype) from d_loss [B, A] f32 and the forward's saved iou, v, alpha.
void launch_ciou_backward(cudaStream_t stream, core::DType dtype, const void* pred, const float* target,
                          const float* weight, const float* iou, const float* v, const float* alpha,
                          const float* d_loss, void* d_pred, int64_t batch, int64_t n_anchors,
                          const CiouOptions& options);

// The CUDA RuntimeOp of CiouLossOp (twin: its CPU RuntimeOp). kernels(): the forward and backward of its format's
// dtype.
std::unique_ptr<graph::RuntimeOp> make_ciou_loss_cuda(std::unique_ptr<graph::RuntimeOp> twin, CiouOptions options);

}  // namespace vision::models::yolo::kernels::loss
