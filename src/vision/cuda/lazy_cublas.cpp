// The cuBLAS functions the engine calls, forwarded to libcublas loaded on first use (lazy_library.h). Each definition
// must match cublas_v2.h's declaration (a mismatch does not compile); cublas_v2.h renames some (cublasCreate is
// cublasCreate_v2), and the wrappers are defined, and looked up, under the new names. libcublasLt is libcublas's own
// dependency: the dynamic loader brings it in with it.
#include <cublas_v2.h>

#include "vision/cuda/lazy_library.h"

#define CUBLAS(fn, ...) VISION_LAZY_CALL(cublas_library, fn, __VA_ARGS__)

extern "C" {

const char* cublasGetStatusString(cublasStatus_t status) { return CUBLAS(cublasGetStatusString, status); }
cublasStatus_t cublasCreate(cublasHandle_t* handle) { return CUBLAS(cublasCreate, handle); }
cublasStatus_t cublasDestroy(cublasHandle_t handle) { return CUBLAS(cublasDestroy, handle); }
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  return CUBLAS(cublasSetStream, handle, stream);
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  return CUBLAS(cublasSetMathMode, handle, mode);
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t workspace_bytes) {
  return CUBLAS(cublasSetWorkspace, handle, workspace, workspace_bytes);
}

cublasStatus_t cublasAxpyEx(cublasHandle_t handle, int n, const void* alpha, cudaDataType alpha_type, const void* x,
                            cudaDataType x_type, int incx, void* y, cudaDataType y_type, int incy,
                            cudaDataType execution_type) {
  return CUBLAS(cublasAxpyEx, handle, n, alpha, alpha_type, x, x_type, incx, y, y_type, incy, execution_type);
}

// cublas_api.h overloads cublasGemmEx for C++ (an inline one taking a cudaDataType compute type), so &cublasGemmEx
// needs the library's type spelled out to pick this one.
using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                        const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                        const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* a, cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta, void* c, cudaDataType c_type, int ldc,
                            cublasComputeType_t compute_type, cublasGemmAlgo_t algo) {
  return ::vision::cuda::lazy_call<static_cast<CublasGemmEx>(&cublasGemmEx)>(
      &::vision::cuda::cublas_library, "cublasGemmEx", handle, transa, transb, m, n, k, alpha, a, a_type, lda, b,
      b_type, ldb, beta, c, c_type, ldc, compute_type, algo);
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  return CUBLAS(cublasGetStream, handle, stream);
}

// Overloaded for C++ like cublasGemmEx (the strided-batched GEMMs of MuSGD's Newton–Schulz).
using CublasGemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                                      int, const void*, const void*, cudaDataType, int, long long int,
                                                      const void*, cudaDataType, int, long long int, const void*,
                                                      void*, cudaDataType, int, long long int, int,
                                                      cublasComputeType_t, cublasGemmAlgo_t);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* a, cudaDataType a_type,
                                          int lda, long long int stride_a, const void* b, cudaDataType b_type, int ldb,
                                          long long int stride_b, const void* beta, void* c, cudaDataType c_type,
                                          int ldc, long long int stride_c, int batch_count,
                                          cublasComputeType_t compute_type, cublasGemmAlgo_t algo) {
  return ::vision::cuda::lazy_call<static_cast<CublasGemmStridedBatchedEx>(&cublasGemmStridedBatchedEx)>(
      &::vision::cuda::cublas_library, "cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, a,
      a_type, lda, stride_a, b, b_type, ldb, stride_b, beta, c, c_type, ldc, stride_c, batch_count, compute_type,
      algo);
}

// One call over GEMMs of several shapes (MuSGD's Newton–Schulz over every shape at once).
cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t handle, const cublasOperation_t transa_array[],
                                          const cublasOperation_t transb_array[], const int m_array[],
                                          const int n_array[], const int k_array[], const void* alpha_array,
                                          const void* const a_array[], cudaDataType_t a_type, const int lda_array[],
                                          const void* const b_array[], cudaDataType_t b_type, const int ldb_array[],
                                          const void* beta_array, void* const c_array[], cudaDataType_t c_type,
                                          const int ldc_array[], int group_count, const int group_size[],
                                          cublasComputeType_t compute_type) {
  return CUBLAS(cublasGemmGroupedBatchedEx, handle, transa_array, transb_array, m_array, n_array, k_array,
                alpha_array, a_array, a_type, lda_array, b_array, b_type, ldb_array, beta_array, c_array, c_type,
                ldc_array, group_count, group_size, compute_type);
}

}  // extern "C"
