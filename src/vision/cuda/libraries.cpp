#include "vision/cuda/libraries.h"

#include "vision/cuda/memory.h"

#include <fmt/format.h>

#include <filesystem>

namespace vision::cuda {

namespace {
std::string where(const char* file, int line) {
  return fmt::format(" at {}:{}", std::filesystem::path(file).filename().string(), line);
}
}  // namespace

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("{} failed: {} ({}){}", call, cudnnGetErrorString(status), static_cast<int>(status),
                          where(file, line)));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("{} failed: {} ({}){}", call, cublasGetStatusString(status), static_cast<int>(status),
                          where(file, line)));
}

CudnnHandle::CudnnHandle(cudaStream_t stream) {
  VISION_CUDNN_CHECK(cudnnCreate(&h_));
  VISION_CUDNN_CHECK(cudnnSetStream(h_, stream));
}
CudnnHandle::~CudnnHandle() {
  if (h_) cudnnDestroy(h_);
}

CublasHandle::CublasHandle(cudaStream_t stream) {
  VISION_CUBLAS_CHECK(cublasCreate(&h_));
  VISION_CUBLAS_CHECK(cublasSetStream(h_, stream));
  VISION_CUBLAS_CHECK(cublasSetMathMode(h_, CUBLAS_DEFAULT_MATH));
  workspace_ = device_alloc(kWorkspaceBytes);
  VISION_CUBLAS_CHECK(cublasSetWorkspace(h_, workspace_.get(), kWorkspaceBytes));
}
CublasHandle::~CublasHandle() {
  if (h_) cublasDestroy(h_);
}

}  // namespace vision::cuda
