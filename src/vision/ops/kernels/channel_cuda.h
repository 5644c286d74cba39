// CUDA kernels of concat and channel slice (split) on NCHW tensors, forward and backward: descriptors and launch
// helpers. Kernel text: channel.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include "vision/core/dtype.h"
#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

using core::DType;

// Copies a channel range between two NCHW tensors of equal batch and spatial size (see channel.cuh).
struct ChannelCopy : cuda::KernelDescriptor<const void* /*x*/, void* /*y*/, int64_t /*batch*/, int64_t /*channels*/,
                                            int64_t /*hw*/, int64_t /*x_channels*/, int64_t /*x_offset*/,
                                            int64_t /*y_channels*/, int64_t /*y_offset*/> {
  explicit ChannelCopy(DType dtype);
};
// Backward of a channel slice: the whole input gradient, zero outside the slice.
struct ChannelSliceBackward
    : cuda::KernelDescriptor<const void* /*dy*/, void* /*dx*/, int64_t /*batch*/, int64_t /*channels*/, int64_t /*hw*/,
                             int64_t /*x_channels*/, int64_t /*offset*/> {
  explicit ChannelSliceBackward(DType dtype);
};

// Concat along channels: input x (batch, x_channels, hw) goes to channels [offset, offset + x_channels) of y
// (batch, y_channels, hw). One launch per input.
void launch_concat_forward(cudaStream_t stream, DType dtype, const void* x, void* y, int64_t batch, int64_t x_channels,
                           int64_t hw, int64_t y_channels, int64_t offset);
// The gradient of that input: dx = dy[:, offset : offset + x_channels].
void launch_concat_backward(cudaStream_t stream, DType dtype, const void* dy, void* dx, int64_t batch,
                            int64_t x_channels, int64_t hw, int64_t y_channels, int64_t offset);
// Channel slice: y (batch, y_channels, hw) = x[:, offset : offset + y_channels] of x (batch, x_channels, hw).
void launch_slice_forward(cudaStream_t stream, DType dtype, const void* x, void* y, int64_t batch, int64_t x_channels,
                          int64_t hw, int64_t y_channels, int64_t offset);
// Its backward: dx (batch, x_channels, hw) = dy in the slice's channels, zero elsewhere. (When every part of a split
// is used, each part's gradient can instead be placed with launch_concat_forward.)
void launch_slice_backward(cudaStream_t stream, DType dtype, const void* dy, void* dx, int64_t batch,
                           int64_t x_channels, int64_t hw, int64_t y_channels, int64_t offset);

}  // namespace vision::ops::kernels
