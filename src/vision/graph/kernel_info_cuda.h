// graph::KernelInfo of a CUDA kernel descriptor: what a CUDA RuntimeOp's kernels() lists for each kernel it launches.
#pragma once

#include "vision/cuda/kernel.h"
#include "vision/graph/op.h"

namespace vision::graph {

inline KernelInfo kernel_info(const cuda::Kernel& kernel) { return {kernel.name(), kernel.id(), kernel.source()}; }

}  // namespace vision::graph
