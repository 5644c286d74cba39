// Small host helpers shared by the loss ops' CUDA runtimes (the CUDA build only).
#pragma once

#include <cuda_runtime.h>

#include "vision/core/tensor.h"
#include "vision/cuda/check.h"

namespace vision::models::yolo::kernels::loss {

// Zeroes a device tensor on `stream` when it is defined (a gradient the op does not produce).
inline void zero_async_if_defined(const core::Tensor& t, cudaStream_t stream) {
  if (t.defined()) VISION_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream));
}

}  // namespace vision::models::yolo::kernels::loss
