// CUDA and NVRTC status checks: VISION_CUDA_CHECK(call) and VISION_NVRTC_CHECK(call) throw a vision::Error naming
// the failing call and the error ("cudaMalloc(&p, n) failed: out of memory (cudaErrorMemoryAllocation)").
#pragma once

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <string>
#include <string_view>

#include "vision/core/error.h"

namespace vision::cuda {

// "cudaMalloc(&p, n) failed: out of memory (cudaErrorMemoryAllocation) at memory.cpp:42". Also clears the runtime's
// last-error state, so the failure is not reported again by an unrelated later call.
std::string cuda_error_message(cudaError_t status, std::string_view call, const char* file = nullptr, int line = 0);
std::string nvrtc_error_message(nvrtcResult status, std::string_view call, const char* file = nullptr, int line = 0);

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_nvrtc_error(nvrtcResult status, const char* call, const char* file, int line);

}  // namespace vision::cuda

#define VISION_CUDA_CHECK(call)                                                         \
  do {                                                                                  \
    const cudaError_t vision_cuda_status_ = (call);                                     \
    if (vision_cuda_status_ != cudaSuccess)                                             \
      ::vision::cuda::throw_cuda_error(vision_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define VISION_NVRTC_CHECK(call)                                                          \
  do {                                                                                    \
    const nvrtcResult vision_nvrtc_status_ = (call);                                      \
    if (vision_nvrtc_status_ != NVRTC_SUCCESS)                                            \
      ::vision::cuda::throw_nvrtc_error(vision_nvrtc_status_, #call, __FILE__, __LINE__); \
  } while (0)
