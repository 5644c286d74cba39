// The cuDNN functions the engine calls, forwarded to libcudnn loaded on first use (lazy_library.h). Each definition
// must match cudnn.h's declaration (a mismatch does not compile: two C functions cannot share a name); a function
// the engine starts to call needs a line here, or the link fails naming it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // the legacy convolution/BatchNorm API (cuDNN 9)

#include <cudnn.h>

#include "vision/cuda/lazy_library.h"

#define CUDNN(fn, ...) VISION_LAZY_CALL(cudnn_library, fn, __VA_ARGS__)

extern "C" {

const char* cudnnGetErrorString(cudnnStatus_t status) { return CUDNN(cudnnGetErrorString, status); }

// Handles and descriptors.
size_t cudnnGetVersion() { return CUDNN(cudnnGetVersion); }
cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) { return CUDNN(cudnnCreate, handle); }
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) { return CUDNN(cudnnDestroy, handle); }
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  return CUDNN(cudnnSetStream, handle, stream);
}
cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  return CUDNN(cudnnGetStream, handle, stream);
}
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) {
  return CUDNN(cudnnCreateTensorDescriptor, desc);
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  return CUDNN(cudnnDestroyTensorDescriptor, desc);
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  return CUDNN(cudnnSetTensor4dDescriptor, desc, format, type, n, c, h, w);
}
cudnnStatus_t cudnnGetTensor4dDescriptor(const cudnnTensorDescriptor_t desc, cudnnDataType_t* type, int* n, int* c,
                                         int* h, int* w, int* n_stride, int* c_stride, int* h_stride, int* w_stride) {
  return CUDNN(cudnnGetTensor4dDescriptor, desc, type, n, c, h, w, n_stride, c_stride, h_stride, w_stride);
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) {
  return CUDNN(cudnnCreateFilterDescriptor, desc);
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  return CUDNN(cudnnDestroyFilterDescriptor, desc);
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  return CUDNN(cudnnSetFilter4dDescriptor, desc, type, format, k, c, h, w);
}
cudnnStatus_t cudnnGetFilter4dDescriptor(const cudnnFilterDescriptor_t desc, cudnnDataType_t* type,
                                         cudnnTensorFormat_t* format, int* k, int* c, int* h, int* w) {
  return CUDNN(cudnnGetFilter4dDescriptor, desc, type, format, k, c, h, w);
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) {
  return CUDNN(cudnnCreateConvolutionDescriptor, desc);
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
  return CUDNN(cudnnDestroyConvolutionDescriptor, desc);
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute_type) {
  return CUDNN(cudnnSetConvolution2dDescriptor, desc, pad_h, pad_w, u, v, dilation_h, dilation_w, mode, compute_type);
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t desc, int groups) {
  return CUDNN(cudnnSetConvolutionGroupCount, desc, groups);
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t math) {
  return CUDNN(cudnnSetConvolutionMathType, desc, math);
}
cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derived, const cudnnTensorDescriptor_t x_desc,
                                            cudnnBatchNormMode_t mode) {
  return CUDNN(cudnnDeriveBNTensorDescriptor, derived, x_desc, mode);
}

// Convolution algorithms and workspaces.
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x_desc,
                                                     const cudnnFilterDescriptor_t w_desc,
                                                     const cudnnConvolutionDescriptor_t conv_desc,
                                                     const cudnnTensorDescriptor_t y_desc, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
  return CUDNN(cudnnGetConvolutionForwardAlgorithm_v7, handle, x_desc, w_desc, conv_desc, y_desc, requested, returned,
               perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle, const cudnnFilterDescriptor_t w_desc,
                                                          const cudnnTensorDescriptor_t dy_desc,
                                                          const cudnnConvolutionDescriptor_t conv_desc,
                                                          const cudnnTensorDescriptor_t dx_desc, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  return CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7, handle, w_desc, dy_desc, conv_desc, dx_desc, requested,
               returned, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x_desc,
                                                            const cudnnTensorDescriptor_t dy_desc,
                                                            const cudnnConvolutionDescriptor_t conv_desc,
                                                            const cudnnFilterDescriptor_t dw_desc, const int requested,
                                                            int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  return CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7, handle, x_desc, dy_desc, conv_desc, dw_desc, requested,
               returned, perf);
}
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t x_desc,
                                                     const void* x, const cudnnFilterDescriptor_t w_desc, const void* w,
                                                     const cudnnConvolutionDescriptor_t conv_desc,
                                                     const cudnnTensorDescriptor_t y_desc, void* y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perf,
                                                     void* workspace, size_t workspace_bytes) {
  return CUDNN(cudnnFindConvolutionForwardAlgorithmEx, handle, x_desc, x, w_desc, w, conv_desc, y_desc, y, requested,
               returned, perf, workspace, workspace_bytes);
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t handle, const cudnnFilterDescriptor_t w_desc,
                                                          const void* w, const cudnnTensorDescriptor_t dy_desc,
                                                          const void* dy, const cudnnConvolutionDescriptor_t conv_desc,
                                                          const cudnnTensorDescriptor_t dx_desc, void* dx,
                                                          const int requested, int* returned,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* perf, void* workspace,
                                                          size_t workspace_bytes) {
  return CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx, handle, w_desc, w, dy_desc, dy, conv_desc, dx_desc, dx,
               requested, returned, perf, workspace, workspace_bytes);
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t x_desc,
                                                            const void* x, const cudnnTensorDescriptor_t dy_desc,
                                                            const void* dy,
                                                            const cudnnConvolutionDescriptor_t conv_desc,
                                                            const cudnnFilterDescriptor_t dw_desc, void* dw,
                                                            const int requested, int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perf, void* workspace,
                                                            size_t workspace_bytes) {
  return CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx, handle, x_desc, x, dy_desc, dy, conv_desc, dw_desc, dw,
               requested, returned, perf, workspace, workspace_bytes);
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x_desc,
                                                      const cudnnFilterDescriptor_t w_desc,
                                                      const cudnnConvolutionDescriptor_t conv_desc,
                                                      const cudnnTensorDescriptor_t y_desc,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
  return CUDNN(cudnnGetConvolutionForwardWorkspaceSize, handle, x_desc, w_desc, conv_desc, y_desc, algo, bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t w_desc,
                                                           const cudnnTensorDescriptor_t dy_desc,
                                                           const cudnnConvolutionDescriptor_t conv_desc,
                                                           const cudnnTensorDescriptor_t dx_desc,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
  return CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize, handle, w_desc, dy_desc, conv_desc, dx_desc, algo, bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x_desc,
                                                             const cudnnTensorDescriptor_t dy_desc,
                                                             const cudnnConvolutionDescriptor_t conv_desc,
                                                             const cudnnFilterDescriptor_t dw_desc,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
  return CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize, handle, x_desc, dy_desc, conv_desc, dw_desc, algo,
               bytes);
}

// Convolutions.
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t x_desc,
                                      const void* x, const cudnnFilterDescriptor_t w_desc, const void* w,
                                      const cudnnConvolutionDescriptor_t conv_desc, cudnnConvolutionFwdAlgo_t algo,
                                      void* workspace, size_t workspace_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t y_desc, void* y) {
  return CUDNN(cudnnConvolutionForward, handle, alpha, x_desc, x, w_desc, w, conv_desc, algo, workspace,
               workspace_bytes, beta, y_desc, y);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t w_desc, const void* w,
                                           const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv_desc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workspace, size_t workspace_bytes,
                                           const void* beta, const cudnnTensorDescriptor_t dx_desc, void* dx) {
  return CUDNN(cudnnConvolutionBackwardData, handle, alpha, w_desc, w, dy_desc, dy, conv_desc, algo, workspace,
               workspace_bytes, beta, dx_desc, dx);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t x_desc, const void* x,
                                             const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv_desc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t dw_desc, void* dw) {
  return CUDNN(cudnnConvolutionBackwardFilter, handle, alpha, x_desc, x, dy_desc, dy, conv_desc, algo, workspace,
               workspace_bytes, beta, dw_desc, dw);
}
cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t handle, const void* alpha,
                                           const cudnnTensorDescriptor_t dy_desc, const void* dy, const void* beta,
                                           const cudnnTensorDescriptor_t db_desc, void* db) {
  return CUDNN(cudnnConvolutionBackwardBias, handle, alpha, dy_desc, dy, beta, db_desc, db);
}
cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t a_desc,
                             const void* a, const void* beta, const cudnnTensorDescriptor_t c_desc, void* c) {
  return CUDNN(cudnnAddTensor, handle, alpha, a_desc, a, beta, c_desc, c);
}

// BatchNorm.
cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                                      const void* alpha, const void* beta,
                                                      const cudnnTensorDescriptor_t x_desc, const void* x,
                                                      const cudnnTensorDescriptor_t y_desc, void* y,
                                                      const cudnnTensorDescriptor_t bn_desc, const void* scale,
                                                      const void* bias, const void* mean, const void* variance,
                                                      double epsilon) {
  return CUDNN(cudnnBatchNormalizationForwardInference, handle, mode, alpha, beta, x_desc, x, y_desc, y, bn_desc,
               scale, bias, mean, variance, epsilon);
}
cudnnStatus_t cudnnBatchNormalizationForwardTraining(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                                     const void* alpha, const void* beta,
                                                     const cudnnTensorDescriptor_t x_desc, const void* x,
                                                     const cudnnTensorDescriptor_t y_desc, void* y,
                                                     const cudnnTensorDescriptor_t bn_desc, const void* scale,
                                                     const void* bias, double average_factor, void* running_mean,
                                                     void* running_variance, double epsilon, void* save_mean,
                                                     void* save_inv_variance) {
  return CUDNN(cudnnBatchNormalizationForwardTraining, handle, mode, alpha, beta, x_desc, x, y_desc, y, bn_desc, scale,
               bias, average_factor, running_mean, running_variance, epsilon, save_mean, save_inv_variance);
}
cudnnStatus_t cudnnBatchNormalizationBackward(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                              const void* alpha_data, const void* beta_data, const void* alpha_param,
                                              const void* beta_param, const cudnnTensorDescriptor_t x_desc,
                                              const void* x, const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                              const cudnnTensorDescriptor_t dx_desc, void* dx,
                                              const cudnnTensorDescriptor_t bn_desc, const void* scale,
                                              void* d_scale, void* d_bias, double epsilon, const void* saved_mean,
                                              const void* saved_inv_variance) {
  return CUDNN(cudnnBatchNormalizationBackward, handle, mode, alpha_data, beta_data, alpha_param, beta_param, x_desc,
               x, dy_desc, dy, dx_desc, dx, bn_desc, scale, d_scale, d_bias, epsilon, saved_mean, saved_inv_variance);
}

}  // extern "C"
