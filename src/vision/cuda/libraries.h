// cuDNN and cuBLAS: status checks naming the failing call, and RAII handles bound to a stream.
#pragma once

#include <memory>

#include <cublas_v2.h>
#include <cudnn.h>

#include "vision/core/error.h"

namespace vision::cuda {

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

class CudnnHandle {
 public:
  explicit CudnnHandle(cudaStream_t stream);
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  cudnnHandle_t get() const { return h_; }

 private:
  cudnnHandle_t h_ = nullptr;
};

class CublasHandle {
 public:
  // f32 math stays IEEE f32 (no TF32). The handle gets a workspace of its own (kWorkspaceBytes), so that its calls
  // allocate nothing and can be captured into CUDA graphs.
  explicit CublasHandle(cudaStream_t stream);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return h_; }
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

 private:
  cublasHandle_t h_ = nullptr;
  std::shared_ptr<void> workspace_;
};

}  // namespace vision::cuda

#define VISION_CUDNN_CHECK(call)                                                         \
  do {                                                                                   \
    const cudnnStatus_t vision_cudnn_status_ = (call);                                   \
    if (vision_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                    \
      ::vision::cuda::throw_cudnn_error(vision_cudnn_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define VISION_CUBLAS_CHECK(call)                                                          \
  do {                                                                                     \
    const cublasStatus_t vision_cublas_status_ = (call);                                   \
    if (vision_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                    \
      ::vision::cuda::throw_cublas_error(vision_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)
