// CudaBackendContext — the CUDA backend's services: one stream, cuDNN/cuBLAS handles, device memory, graphs.
#pragma once

#include <memory>

#include "vision/cuda/libraries.h"
#include "vision/cuda/memory.h"
#include "vision/graph/backend.h"

namespace vision::graph {

class CudaBackendContext final : public BackendContext {
 public:
  CudaBackendContext();
  Backend backend() const override { return Backend::cuda; }
  std::shared_ptr<void> allocate(size_t bytes) override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_on_device(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) override;
  void axpy(const Tensor& dst, float alpha, const Tensor& src) override;
  void convert(const Tensor& dst, const Tensor& src, bool accumulate) override;
  bool scale_and_check_finite(const Tensor& t, float factor) override;
  void synchronize() override;
  std::shared_ptr<void> mark() override;
  double elapsed_ms(const void* from, const void* to) override;
  bool supports_graph_capture() const override { return true; }
  std::shared_ptr<void> capture(const std::function<void()>& work) override;
  void replay(void* captured) override;

  cudaStream_t stream() const { return stream_.get(); }
  cudnnHandle_t cudnn() const { return cudnn_.get(); }
  cublasHandle_t cublas() const { return cublas_.get(); }

  // The context of a ForwardCtx/BackwardCtx on the CUDA backend.
  static CudaBackendContext& of(BackendContext* ctx);

 private:
  cuda::Stream stream_;
  cuda::CudnnHandle cudnn_;
  cuda::CublasHandle cublas_;
  std::shared_ptr<void> flag_;  // one device i32 for scale_and_check_finite
  cuda::StagedUploader uploads_;  // copy_to_device; declared last, so it is freed first
};

// The CUDA stream of a ForwardCtx/BackwardCtx's backend (CudaBackendContext::of(ctx).stream()).
inline cudaStream_t stream_of(BackendContext* ctx) { return CudaBackendContext::of(ctx).stream(); }

// The process-wide CUDA backend; throws vision::Error (with the probe's reason) when no GPU is usable.
std::shared_ptr<BackendContext> cuda_backend();

}  // namespace vision::graph
