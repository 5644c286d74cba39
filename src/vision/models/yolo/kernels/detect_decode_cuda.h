// Detect decode on CUDA — the kernel descriptors of detect_decode.cuh (forward of every mode, grid-mode backward),
// their launch helpers, and the CUDA RuntimeOp of the graph op "yolo.detect_decode". CUDA builds only.
// Ids: detect_decode_forward__f32, detect_decode_backward__bf16, ... (f32, f16, bf16; the mode is a kernel argument).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "vision/cuda/kernel.h"
#include "vision/graph/op.h"
#include "vision/models/yolo/kernels/detect_decode.h"

namespace vision::models::yolo::kernels {

struct DetectDecodeForward
    : cuda::KernelDescriptor<const void* /*ltrb*/, const void* /*anchors (f32)*/, void* /*boxes*/, int64_t /*batch*/,
                             int64_t /*n_anchors*/, int32_t /*mode*/> {
  explicit DetectDecodeForward(core::DType dtype);
};
struct DetectDecodeBackward
    : cuda::KernelDescriptor<const void* /*grad_boxes*/, void* /*grad_ltrb*/, int64_t /*batch*/,
                             int64_t /*n_anchors*/> {
  explicit DetectDecodeBackward(core::DType dtype);
};

// boxes [B, 4, A] = decode(ltrb [B, 4, A], anchors [3, A] f32) in `mode`; device pointers, dtype of ltrb and boxes.
void launch_detect_decode_forward(cudaStream_t stream, core::DType dtype, const void* ltrb, const float* anchors,
                                  void* boxes, int64_t batch, int64_t n_anchors, DecodeMode mode);
// grad_ltrb [B, 4, A] = (−dx1, −dy1, dx2, dy2) of grad_boxes (the grid mode's backward).
void launch_detect_decode_backward(cudaStream_t stream, core::DType dtype, const void* grad_boxes, void* grad_ltrb,
                                   int64_t batch, int64_t n_anchors);

// The CUDA RuntimeOp of DetectDecodeOp; its state spec and anchor grid come from the CPU RuntimeOp `twin`.
// kernels(): the forward of every registered dtype, and in grid mode the backward too.
std::unique_ptr<graph::RuntimeOp> make_detect_decode_cuda(std::unique_ptr<graph::RuntimeOp> twin, DecodeMode mode);

}  // namespace vision::models::yolo::kernels
