// CUDA kernels of the scalar reductions (mean, ½·Σx²): descriptors and launch helpers.
#pragma once

#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

using core::DType;

struct ReduceSumForward : cuda::KernelDescriptor<const void* /*x*/, void* /*y*/, int64_t /*n*/, float /*scale*/> {
  ReduceSumForward(DType dtype, bool square);
};
struct ReduceSumBackward
    : cuda::KernelDescriptor<const void* /*x*/, const void* /*dy*/, void* /*dx*/, int64_t /*n*/, float /*scale*/> {
  ReduceSumBackward(DType dtype, bool square);
};

// y[0] = scale · Σ (square ? x² : x) over n elements.
void launch_reduce_sum_forward(cudaStream_t stream, DType dtype, bool square, const void* x, void* y, int64_t n,
                               float scale);
// dx = dy[0] · scale · (square ? 2x : 1).
void launch_reduce_sum_backward(cudaStream_t stream, DType dtype, bool square, const void* x, const void* dy,
                                void* dx, int64_t n, float scale);

}  // namespace vision::ops::kernels
