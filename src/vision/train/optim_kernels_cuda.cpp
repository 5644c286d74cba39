#include "vision/train/optim_kernels_cuda.h"

#include <cuda_runtime.h>

#include <limits>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/cuda/libraries.h"
#include "vision/cuda/sanitizer.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/train/optim_kernels.h"

namespace vision::train {
namespace {

using core::DType;

constexpr const char* kOptimFile = "vision/train/optim.cuh";
constexpr const char* kOptimScope = "vision::train";

void register_optim_kernels(cuda::KernelRegistry& r) {
  r.add<GradSumsqPartial>();
  r.add<GradSumsqFinalize>();
  r.add<SgdStep>();
  r.add<AdamwStep>();
  r.add<MuonPrepare>();
  r.add<MuonNormalize>();
  r.add<EmaUpdate>();
}
VISION_REGISTER_KERNELS(register_optim_kernels);

// One block per chunk: the grid's x dimension.
dim3 chunk_grid(int64_t n_chunks, const char* what) {
  VISION_CHECK(n_chunks > 0 && n_chunks <= std::numeric_limits<int32_t>::max(),
               "{}: {} chunks do not fit one launch's grid (1 to 2^31 − 1 blocks)", what, n_chunks);
  return dim3(static_cast<unsigned>(n_chunks));
}

}  // namespace

GradSumsqPartial::GradSumsqPartial()
    : KernelDescriptor(
          {"grad_sumsq_partial", kOptimFile, DType::f32, {}, "const {T}*, const void*, const void*, float*", kOptimScope}) {}

GradSumsqFinalize::GradSumsqFinalize()
    : KernelDescriptor({"grad_sumsq_finalize", kOptimFile, DType::f32, {}, "const {T}*, int64_t, void*, float", kOptimScope}) {}

SgdStep::SgdStep()
    : KernelDescriptor({"sgd_step", kOptimFile, DType::f32, {},
                        "{T}*, const {T}*, {T}*, const __nv_bfloat16*, const void*, const void*, const void*, float, const void*",
                        kOptimScope}) {}

AdamwStep::AdamwStep()
    : KernelDescriptor({"adamw_step", kOptimFile, DType::f32, {},
                        "{T}*, const {T}*, {T}*, {T}*, const void*, const void*, const void*, float, const void*", kOptimScope}) {}

MuonPrepare::MuonPrepare()
    : KernelDescriptor({"muon_prepare", kOptimFile, DType::f32, {},
                        "const {T}*, {T}*, __nv_bfloat16*, const void*, const void*, const void*, float, const void*", kOptimScope}) {}

MuonNormalize::MuonNormalize()
    : KernelDescriptor({"muon_normalize", kOptimFile, DType::bf16, {}, "{T}*, const void*, const int64_t*, const void*", kOptimScope}) {}

EmaUpdate::EmaUpdate()
    : KernelDescriptor(
          {"ema_update", kOptimFile, DType::f32, {}, "{T}*, const {T}*, const {T}*, const void*, float, float, const void*", kOptimScope}) {}

void launch_grad_sumsq(cudaStream_t stream, const float* grads, const OptimTensor* tensors, const OptimChunk* chunks,
                       int64_t n_chunks, float* partials, OptimStatus* status, float max_grad_norm) {
  if (n_chunks > 0)
    cuda::kernel_instance<GradSumsqPartial>().launch(stream, chunk_grid(n_chunks, "grad_sumsq"), dim3(kOptimThreads),
                                                     0, grads, tensors, chunks, partials);
  // No chunks: the sum of nothing, 0, decided by the same kernel.
  cuda::kernel_instance<GradSumsqFinalize>().launch(stream, dim3(1), dim3(kOptimThreads), 0,
                                                    static_cast<const float*>(partials), n_chunks,
                                                    static_cast<void*>(status), max_grad_norm);
}

void launch_sgd_step(cudaStream_t stream, float* params, const float* grads, float* momentum, const uint16_t* ns_out,
                     const OptimTensor* tensors, const OptimChunk* chunks, int64_t n_chunks, const OptimGroup* groups,
                     float coef, const OptimStatus* status) {
  if (n_chunks == 0) return;
  cuda::kernel_instance<SgdStep>().launch(stream, chunk_grid(n_chunks, "sgd_step"), dim3(kOptimThreads), 0, params,
                                          grads, momentum, ns_out, tensors, chunks, groups, coef,
                                          static_cast<const void*>(status));
}

void launch_adamw_step(cudaStream_t stream, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                       const OptimTensor* tensors, const OptimChunk* chunks, int64_t n_chunks,
                       const OptimGroup* groups, float coef, const OptimStatus* status) {
  if (n_chunks == 0) return;
  cuda::kernel_instance<AdamwStep>().launch(stream, chunk_grid(n_chunks, "adamw_step"), dim3(kOptimThreads), 0, params,
                                            grads, exp_avg, exp_avg_sq, tensors, chunks, groups, coef,
                                            static_cast<const void*>(status));
}

void launch_muon_prepare(cudaStream_t stream, const float* grads, float* muon_momentum, uint16_t* ns_in,
                         const OptimTensor* tensors, const OptimChunk* chunks, int64_t n_chunks,
                         const OptimGroup* groups, float coef, const OptimStatus* status) {
  if (n_chunks == 0) return;
  cuda::kernel_instance<MuonPrepare>().launch(stream, chunk_grid(n_chunks, "muon_prepare"), dim3(kOptimThreads), 0,
                                              grads, muon_momentum, ns_in, tensors, chunks, groups, coef,
                                              static_cast<const void*>(status));
}

void launch_muon_normalize(cudaStream_t stream, uint16_t* ns, const OptimTensor* tensors, const int64_t* muon_tensors,
                           int64_t n_muon, const OptimStatus* status) {
  if (n_muon == 0) return;
  cuda::kernel_instance<MuonNormalize>().launch(stream, chunk_grid(n_muon, "muon_normalize"), dim3(kOptimThreads), 0,
                                                ns, tensors, muon_tensors, static_cast<const void*>(status));
}

void launch_ema_update(cudaStream_t stream, float* ema, const float* params, const float* buffers,
                       const EmaChunk* chunks, int64_t n_chunks, float d, float omd, const OptimStatus* status) {
  if (n_chunks == 0) return;
  cuda::kernel_instance<EmaUpdate>().launch(stream, chunk_grid(n_chunks, "ema_update"), dim3(kOptimThreads), 0, ema,
                                            params, buffers, chunks, d, omd, static_cast<const void*>(status));
}

void launch_ema_update(graph::BackendContext& backend, float* ema, const float* params, const float* buffers,
                       const EmaChunk* chunks, int64_t n_chunks, float d, float omd, const OptimStatus* status) {
  launch_ema_update(graph::stream_of(&backend), ema, params, buffers, chunks, n_chunks, d, omd, status);
}

uint16_t* newton_schulz_cuda(cublasHandle_t handle, cudaStream_t stream, uint16_t* x, uint16_t* y, uint16_t* a,
                             uint16_t* b, int64_t batch, int64_t m, int64_t n, int steps) {
  VISION_CHECK(m > 0 && n > 0 && m <= n && batch >= 0 && steps >= 0,
               "newton_schulz: {} matrices of {}×{} (rows ≤ cols, transpose first)", batch, m, n);
  VISION_CHECK(n <= std::numeric_limits<int>::max() && batch <= std::numeric_limits<int>::max(),
               "newton_schulz: {} matrices of {}×{} exceed cuBLAS's 32-bit sizes", batch, m, n);
  if (batch == 0 || steps == 0) return x;
  cudaStream_t bound = nullptr;
  VISION_CUBLAS_CHECK(cublasGetStream(handle, &bound));
  VISION_CHECK(bound == stream, "newton_schulz: the cuBLAS handle is bound to another stream than the one given");
  const int M = static_cast<int>(m), N = static_cast<int>(n), count = static_cast<int>(batch);
  const long long sx = static_cast<long long>(m) * n, sa = static_cast<long long>(m) * m;
  const size_t x_bytes = static_cast<size_t>(batch * m * n) * 2, a_bytes = static_cast<size_t>(batch * m * m) * 2;
  const float one = 1.0f, zero = 0.0f, fa = kNewtonSchulzA, fb = kNewtonSchulzB, fc = kNewtonSchulzC;
  // Row-major R×C bf16 matrices are column-major C×R ones (their transposes): each product below is written for
  // cuBLAS's column-major view, Cᵀ = op(B)ᵀ·op(A)ᵀ.
  for (int it = 0; it < steps; ++it) {
    // A = X·Xᵀ (m × m): column-major Aᵀ = (Xᵀ)ᵀ·Xᵀ, X's buffer being Xᵀ (n × m, ld n).
    VISION_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, M, M, N, &one, x, CUDA_R_16BF, N,
                                                   sx, x, CUDA_R_16BF, N, sx, &zero, a, CUDA_R_16BF, M, sa, count,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cuda::mark_written_by_library(stream, a, a_bytes);
    // B = c·(A·A) + b·A: B preset to A; column-major (A·A)ᵀ = Aᵀ·Aᵀ.
    VISION_CUDA_CHECK(cudaMemcpyAsync(b, a, a_bytes, cudaMemcpyDeviceToDevice, stream));
    VISION_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &fc, a, CUDA_R_16BF, M,
                                                   sa, a, CUDA_R_16BF, M, sa, &fb, b, CUDA_R_16BF, M, sa, count,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cuda::mark_written_by_library(stream, b, a_bytes);
    // Y = B·X + a·X: Y preset to X; column-major (B·X)ᵀ = Xᵀ·Bᵀ (n × m, k = m).
    VISION_CUDA_CHECK(cudaMemcpyAsync(y, x, x_bytes, cudaMemcpyDeviceToDevice, stream));
    VISION_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, M, &one, x, CUDA_R_16BF, N,
                                                   sx, b, CUDA_R_16BF, M, sa, &fa, y, CUDA_R_16BF, N, sx, count,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cuda::mark_written_by_library(stream, y, x_bytes);
    std::swap(x, y);
  }
  return x;
}

}  // namespace vision::train
