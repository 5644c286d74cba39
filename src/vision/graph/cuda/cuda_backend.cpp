#include "vision/graph/cuda/cuda_backend.h"

#include "vision/cuda/check.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/convert_kernels.h"

namespace vision::graph {

CudaBackendContext::CudaBackendContext() : stream_(), cudnn_(stream_.get()), cublas_(stream_.get()) {}

std::shared_ptr<void> CudaBackendContext::allocate(size_t bytes) { return cuda::device_alloc(bytes); }

// Staged through pinned memory: the caller may free or modify src on return, and the call does not wait for the
// stream (see cuda::StagedUploader).
void CudaBackendContext::copy_to_device(void* dst, const void* src, size_t bytes) {
  uploads_.upload(dst, src, bytes, stream());
}

void CudaBackendContext::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  VISION_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
  VISION_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void CudaBackendContext::copy_on_device(void* dst, const void* src, size_t bytes) {
  if (!bytes || dst == src) return;
  VISION_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
}

void CudaBackendContext::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                                 size_t rows) {
  if (!width || !rows) return;
  if (rows == 1 || (width == dst_pitch && width == src_pitch)) return copy_on_device(dst, src, width * rows);
  // Our kernel, not cudaMemcpy2DAsync: the runs of an NHWC channel slice are a few dozen bytes, where the copy
  // engine moves a few hundred MB/s (a C2f's concat took 0.3 ms at batch 32, about 8x this kernel).
  cuda_kernels::launch_copy_rows(stream(), dst, dst_pitch, src, src_pitch, width, rows);
}

void CudaBackendContext::fill_zero(void* dst, size_t bytes) {
  if (bytes) VISION_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream()));
}

void CudaBackendContext::axpy(const Tensor& dst, float alpha, const Tensor& src) {
  VISION_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype() && core::is_floating(dst.dtype()),
               "axpy: {} += α·{} (floating tensors of one shape only)", dst.str(), src.str());
  const cudaDataType_t t = dst.dtype() == DType::f32 ? CUDA_R_32F : dst.dtype() == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
  VISION_CHECK(dst.numel() <= INT32_MAX, "axpy: {} elements exceed cuBLAS's 32-bit count", dst.numel());
  VISION_CUBLAS_CHECK(cublasAxpyEx(cublas(), static_cast<int>(dst.numel()), &alpha, CUDA_R_32F, src.raw(), t, 1,
                                   dst.raw(), t, 1, CUDA_R_32F));
}

void CudaBackendContext::convert(const Tensor& dst, const Tensor& src, bool accumulate) {
  check_convertible(dst, src);
  cuda_kernels::launch_convert(stream(), dst, src, accumulate);
}

bool CudaBackendContext::scale_and_check_finite(const Tensor& t, float factor) {
  VISION_CHECK(t.dtype() == DType::f32, "scale_and_check_finite takes an f32 tensor, got {}", t.str());
  if (!flag_) flag_ = allocate(sizeof(int32_t));
  auto* flag = static_cast<int32_t*>(flag_.get());
  VISION_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int32_t), stream()));
  cuda_kernels::launch_scale_check_finite(stream(), t, factor, flag);
  int32_t host = 0;
  copy_to_host(&host, flag, sizeof(host));
  return host == 0;
}

void CudaBackendContext::synchronize() { stream_.synchronize(); }

std::shared_ptr<void> CudaBackendContext::mark() {
  auto e = std::make_shared<cuda::Event>();
  e->record(stream());
  return e;
}

double CudaBackendContext::elapsed_ms(const void* from, const void* to) {
  const auto& end = *static_cast<const cuda::Event*>(to);
  end.synchronize();
  return end.elapsed_ms_since(*static_cast<const cuda::Event*>(from));
}

std::shared_ptr<void> CudaBackendContext::capture(const std::function<void()>& work) {
  return std::shared_ptr<cuda::CapturedGraph>(cuda::CapturedGraph::capture(stream(), work));
}

void CudaBackendContext::replay(void* captured) { static_cast<cuda::CapturedGraph*>(captured)->replay(stream()); }

CudaBackendContext& CudaBackendContext::of(BackendContext* ctx) {
  VISION_CHECK(ctx != nullptr && ctx->backend() == Backend::cuda, "a CUDA op ran without the CUDA backend");
  return static_cast<CudaBackendContext&>(*ctx);
}

std::shared_ptr<BackendContext> cuda_backend() {
  VISION_CHECK(cuda::gpu_available(), "the CUDA backend was asked for but no usable GPU is present: {}",
               cuda::gpu_unavailable_reason());
  static std::shared_ptr<BackendContext> ctx = std::make_shared<CudaBackendContext>();
  return ctx;
}

}  // namespace vision::graph
