// CUDA kernels of 2-D max pooling (NCHW or NHWC), forward (saving an i32 argmax per output) and backward: descriptors
// and launch helpers. Kernel text: maxpool.cuh. The window k, stride s and padding p are compile-time constants.
#pragma once

#include <cuda_runtime_api.h>

#include "vision/core/dtype.h"
#include "vision/core/tensor.h"
#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

using core::DType;
using core::Layout;

struct MaxPool2dWindow {
  int k = 2, s = 2, p = 0;
  auto operator<=>(const MaxPool2dWindow&) const = default;
};

// "maxpool2d_forward" (NCHW) or "maxpool2d_forward_nhwc".
struct MaxPool2dForward
    : cuda::KernelDescriptor<const void* /*x*/, void* /*y*/, void* /*argmax (i32)*/, int64_t /*batch*/,
                             int64_t /*channels*/, int64_t /*h*/, int64_t /*w*/, int64_t /*ho*/, int64_t /*wo*/> {
  MaxPool2dForward(DType dtype, MaxPool2dWindow window, Layout layout = Layout::nchw);
};
// "maxpool2d_backward" (NCHW) or "maxpool2d_backward_nhwc".
struct MaxPool2dBackward
    : cuda::KernelDescriptor<const void* /*dy*/, const void* /*argmax (i32)*/, void* /*dx*/, int64_t /*batch*/,
                             int64_t /*channels*/, int64_t /*h*/, int64_t /*w*/, int64_t /*ho*/, int64_t /*wo*/> {
  MaxPool2dBackward(DType dtype, MaxPool2dWindow window, Layout layout = Layout::nchw);
};

// The output size of one spatial dimension (floor mode, as PyTorch): (size + 2p − k) / s + 1. Throws vision::Error
// for a window the kernels do not support (k, s >= 1, 0 <= p <= k / 2) or one that leaves no output.
int64_t maxpool2d_output_size(int64_t size, MaxPool2dWindow window);

// x: (batch, channels, h, w); y and argmax: (batch, channels, ho, wo) (see maxpool2d_output_size); all in layout.
// argmax holds the winner's ih · w + iw within its channel.
void launch_maxpool2d_forward(cudaStream_t stream, DType dtype, Layout layout, MaxPool2dWindow window, const void* x,
                              void* y, int32_t* argmax, int64_t batch, int64_t channels, int64_t h, int64_t w);
// dy and argmax: (batch, channels, ho, wo); dx: (batch, channels, h, w) (every element written); all in layout.
void launch_maxpool2d_backward(cudaStream_t stream, DType dtype, Layout layout, MaxPool2dWindow window,
                               const void* dy, const int32_t* argmax, void* dx, int64_t batch, int64_t channels,
                               int64_t h, int64_t w);

}  // namespace vision::ops::kernels
