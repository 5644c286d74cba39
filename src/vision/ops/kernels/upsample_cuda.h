// CUDA kernels of nearest-neighbour ×2 upsampling (NCHW), forward and backward: descriptors and launch helpers.
// Kernel text: upsample.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include "vision/core/dtype.h"
#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

using core::DType;

struct UpsampleNearest2xForward
    : cuda::KernelDescriptor<const void* /*x*/, void* /*y*/, int64_t /*planes*/, int64_t /*h*/, int64_t /*w*/> {
  explicit UpsampleNearest2xForward(DType dtype);
};
struct UpsampleNearest2xBackward
    : cuda::KernelDescriptor<const void* /*dy*/, void* /*dx*/, int64_t /*planes*/, int64_t /*h*/, int64_t /*w*/> {
  explicit UpsampleNearest2xBackward(DType dtype);
};

// x: planes (= batch · channels) × h × w; y: planes × 2h × 2w.
void launch_upsample_nearest2x_forward(cudaStream_t stream, DType dtype, const void* x, void* y, int64_t planes,
                                       int64_t h, int64_t w);
// dy: planes × 2h × 2w; dx: planes × h × w.
void launch_upsample_nearest2x_backward(cudaStream_t stream, DType dtype, const void* dy, void* dx, int64_t planes,
                                        int64_t h, int64_t w);

}  // namespace vision::ops::kernels
