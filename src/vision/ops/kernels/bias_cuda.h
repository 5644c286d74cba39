// CUDA kernels of a convolution's bias in f16 and bf16 (cuDNN adds it in f32): the epilogue y = act(y + b) with act
// the identity or SiLU, and the bias gradient Σ dy per channel, in NCHW or NHWC. Descriptors and launch helpers;
// kernel text: bias.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include "vision/core/shape.h"
#include "vision/core/tensor.h"
#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

using core::DType;
using core::Layout;

// "bias_act" / "bias_act_nhwc", with the activation a constant: bias_act__f16__silu1.
struct BiasAct : cuda::KernelDescriptor<void* /*y*/, const void* /*bias*/, int64_t /*n*/, int64_t /*channels*/,
                                        int64_t /*inner*/> {
  BiasAct(DType dtype, Layout layout, bool silu);
};
// "channel_sum_partials" / "channel_sum_partials_nhwc".
struct ChannelSumPartials
    : cuda::KernelDescriptor<const void* /*x*/, void* /*partial*/, int64_t /*rows*/, int64_t /*channels*/,
                             int64_t /*inner*/, int64_t /*rows_per_split*/> {
  ChannelSumPartials(DType dtype, Layout layout);
};
struct ChannelSumFinalize
    : cuda::KernelDescriptor<const void* /*partial*/, void* /*out*/, int64_t /*splits*/, int64_t /*channels*/> {
  explicit ChannelSumFinalize(DType dtype);
};

// y = act(y + bias[c]) in place: y of shape (N, C, H, W) in layout, bias C elements, both of dtype.
void launch_bias_act(cudaStream_t stream, DType dtype, Layout layout, bool silu, const core::Shape& y, void* y_data,
                     const void* bias);

// Workspace bytes of launch_channel_sum for x of shape (N, C, H, W) in layout.
size_t channel_sum_workspace_bytes(const core::Shape& x, Layout layout);
// out[c] = Σ x[:, c] (C elements of dtype; the bias gradient from dy), summed in f32 and f64, rounded once.
void launch_channel_sum(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x, const void* x_data,
                        void* out, void* workspace);

}  // namespace vision::ops::kernels
