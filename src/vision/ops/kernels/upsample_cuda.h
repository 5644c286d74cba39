// CUDA kernels of nearest-neighbour ×2 upsampling (NCHW or NHWC), forward and backward: descriptors and launch helpers.
// Kernel text: upsample.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include "vision/core/dtype.h"
#include "vision/core/tensor.h"
#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

using core::DType;
using core::Layout;

// "upsample_nearest2x_forward" (NCHW) or "upsample_nearest2x_forward_nhwc".
struct UpsampleNearest2xForward
    : cuda::KernelDescriptor<const void* /*x*/, void* /*y*/, int64_t /*batch*/, int64_t /*channels*/, int64_t /*h*/,
                             int64_t /*w*/> {
  explicit UpsampleNearest2xForward(DType dtype, Layout layout = Layout::nchw);
};
// "upsample_nearest2x_backward" (NCHW) or "upsample_nearest2x_backward_nhwc".
struct UpsampleNearest2xBackward
    : cuda::KernelDescriptor<const void* /*dy*/, void* /*dx*/, int64_t /*batch*/, int64_t /*channels*/, int64_t /*h*/,
                             int64_t /*w*/> {
  explicit UpsampleNearest2xBackward(DType dtype, Layout layout = Layout::nchw);
};

// x: (batch, channels, h, w); y: (batch, channels, 2h, 2w); both in layout.
void launch_upsample_nearest2x_forward(cudaStream_t stream, DType dtype, Layout layout, const void* x, void* y,
                                       int64_t batch, int64_t channels, int64_t h, int64_t w);
// dy: (batch, channels, 2h, 2w); dx: (batch, channels, h, w); both in layout.
void launch_upsample_nearest2x_backward(cudaStream_t stream, DType dtype, Layout layout, const void* dy, void* dx,
                                        int64_t batch, int64_t channels, int64_t h, int64_t w);

}  // namespace vision::ops::kernels
