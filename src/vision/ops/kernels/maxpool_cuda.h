// CUDA kernels of 2-D max pooling (NCHW), forward (saving an i32 argmax per output) and backward: descriptors and
// launch helpers. Kernel text: maxpool.cuh. The window k, stride s and padding p are compile-time constants.
#pragma once

#include <cuda_runtime_api.h>

#include "vision/core/dtype.h"
#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

using core::DType;

struct MaxPool2dWindow {
  int k = 2, s = 2, p = 0;
  auto operator<=>(const MaxPool2dWindow&) const = default;
};

struct MaxPool2dForward
    : cuda::KernelDescriptor<const void* /*x*/, void* /*y*/, void* /*argmax (i32)*/, int64_t /*planes*/, int64_t /*h*/,
                             int64_t /*w*/, int64_t /*ho*/, int64_t /*wo*/> {
  MaxPool2dForward(DType dtype, MaxPool2dWindow window);
};
struct MaxPool2dBackward
    : cuda::KernelDescriptor<const void* /*dy*/, const void* /*argmax (i32)*/, void* /*dx*/, int64_t /*planes*/,
                             int64_t /*h*/, int64_t /*w*/, int64_t /*ho*/, int64_t /*wo*/> {
  MaxPool2dBackward(DType dtype, MaxPool2dWindow window);
};

// The output size of one spatial dimension (floor mode, as PyTorch): (size + 2p − k) / s + 1. Throws vision::Error
// for a window the kernels do not support (k, s >= 1, 0 <= p <= k / 2) or one that leaves no output.
int64_t maxpool2d_output_size(int64_t size, MaxPool2dWindow window);

// x: planes (= batch · channels) × h × w; y and argmax: planes × ho × wo (see maxpool2d_output_size).
void launch_maxpool2d_forward(cudaStream_t stream, DType dtype, MaxPool2dWindow window, const void* x, void* y,
                              int32_t* argmax, int64_t planes, int64_t h, int64_t w);
// dy and argmax: planes × ho × wo; dx: planes × h × w (every element written).
void launch_maxpool2d_backward(cudaStream_t stream, DType dtype, MaxPool2dWindow window, const void* dy,
                               const int32_t* argmax, void* dx, int64_t planes, int64_t h, int64_t w);

}  // namespace vision::ops::kernels
