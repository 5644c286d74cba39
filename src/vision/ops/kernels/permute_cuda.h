// CUDA kernel of permute (dims reordered, rank ≤ 4): descriptor and launch helper. Kernel text: permute.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "vision/core/shape.h"
#include "vision/cuda/kernel.h"

namespace vision::ops::kernels {

struct PermuteCopy
    : cuda::KernelDescriptor<const void* /*x*/, void* /*y*/, int64_t /*n*/, int64_t /*d1*/, int64_t /*d2*/,
                             int64_t /*d3*/, int64_t /*s0*/, int64_t /*s1*/, int64_t /*s2*/, int64_t /*s3*/> {
  explicit PermuteCopy(core::DType dtype);
};

// y (shape out_shape) = x read with in_strides (the stride in x of the input dim each output dim comes from).
void launch_permute(cudaStream_t stream, core::DType dtype, const void* x, void* y, const core::Shape& out_shape,
                    const std::vector<int64_t>& in_strides);

}  // namespace vision::ops::kernels
