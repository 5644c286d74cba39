// CUDA depthwise convolution for inference in NHWC (depthwise.cuh): descriptor and launch helper. Ids name the
// element type and the template constants: depthwise_conv2d_nhwc__f16__k3_s1_silu1_vec8.
#pragma once

#include <cuda_runtime_api.h>

#include "vision/core/shape.h"
#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

struct DepthwiseConv2dNhwc
    : cuda::KernelDescriptor<const void* /*x*/, const void* /*weight (f32)*/, const void* /*bias (f32)*/, void* /*y*/,
                             int32_t /*batch*/, int32_t /*height*/, int32_t /*width*/, int32_t /*channels*/,
                             int32_t /*out_h*/, int32_t /*out_w*/, int32_t /*pad*/> {
  DepthwiseConv2dNhwc(core::DType dtype, int kernel, int stride, bool silu, int vec);
};

// Whether the kernel takes a depthwise convolution of this window (odd, 1..7) and stride (1 or 2).
bool depthwise_conv2d_supported(int64_t kernel, int64_t stride);
// The widest unit of channels one thread handles for this dtype and channel count (16 bytes where they divide).
int depthwise_vec(core::DType dtype, int64_t channels);

// x [B, C, H, W] in NHWC (dtype) → y [B, C, out_h, out_w] NHWC; weight [K, K, C] (tap-major) and bias [C] (may be
// null) f32.
void launch_depthwise_conv2d_nhwc(cudaStream_t stream, core::DType dtype, const core::Shape& x, const void* x_data,
                                  const float* weight, const float* bias, const core::Shape& y, void* y_data,
                                  int64_t kernel, int64_t stride, int64_t pad, bool silu);

}  // namespace vision::ops::kernels
