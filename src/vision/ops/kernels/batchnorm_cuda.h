// CUDA kernels of BatchNorm's helpers (folding into a convolution, the batch counter): descriptors and launches.
#pragma once

#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

using core::DType;

struct BatchNormFold
    : cuda::KernelDescriptor<const void* /*w*/, const void* /*bias or null*/, const void* /*gamma*/,
                             const void* /*beta*/, const void* /*mean*/, const void* /*var*/, void* /*w_out*/,
                             void* /*b_out*/, int64_t /*out_channels*/, int64_t /*per_out*/, float /*eps*/> {
  explicit BatchNormFold(DType dtype);
};
struct IncrementCounter : cuda::KernelDescriptor<void* /*counter*/> {
  IncrementCounter();
};

// w_out = w · γ/σ per output channel, b_out = β + (b − mean) · γ/σ, σ = sqrt(var + eps); f32 tensors.
void launch_batchnorm_fold(cudaStream_t stream, const float* w, const float* bias, const float* gamma,
                           const float* beta, const float* mean, const float* var, float* w_out, float* b_out,
                           int64_t out_channels, int64_t per_out, float eps);
// counter[0] += 1 for an i64 counter.
void launch_increment_counter(cudaStream_t stream, int64_t* counter);

}  // namespace vision::ops::kernels
