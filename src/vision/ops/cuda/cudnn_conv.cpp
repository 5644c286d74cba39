// The legacy cuDNN convolution API is deprecated in cuDNN 9 but present and complete; it is what this wraps.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include "vision/ops/cuda/cudnn_conv.h"

#include <fmt/format.h>

#include "vision/cuda/libraries.h"

namespace vision::ops::cuda_impl {

cudnnDataType_t cudnn_dtype(core::DType dtype) {
  switch (dtype) {
    case core::DType::f32: return CUDNN_DATA_FLOAT;
    case core::DType::f16: return CUDNN_DATA_HALF;
    case core::DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: fail("cuDNN convolutions take f32, f16 or bf16 tensors, not {}", core::dtype_name(dtype));
  }
}

namespace {
int to_int(int64_t v, const char* what) {
  VISION_CHECK(v >= 0 && v <= INT32_MAX, "convolution {} {} is out of cuDNN's range", what, v);
  return static_cast<int>(v);
}

// The first algorithm in cuDNN's ranking (fastest first) that succeeded, fits in max_workspace and, when asked for,
// is deterministic.
template <typename Perf>
const Perf& pick(const Perf* perf, int count, size_t max_workspace, bool deterministic, const char* what) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= max_workspace &&
        (!deterministic || perf[i].determinism == CUDNN_DETERMINISTIC))
      return perf[i];
  fail("cuDNN found no {}{} algorithm for this convolution within {} MiB of workspace{}",
       deterministic ? "deterministic " : "", what, max_workspace >> 20,
       deterministic ? "; run it without deterministic mode" : "");
}
}  // namespace

CudnnConv::CudnnConv(cudnnHandle_t handle, const Conv2dAttrs& a, const core::Shape& x, core::DType dtype,
                     core::Layout layout, bool deterministic, size_t max_workspace)
    : handle_(handle), y_shape_(a.output_shape(x)), deterministic_(deterministic) {
  VISION_CHECK(x.is_concrete(), "CudnnConv needs a concrete input shape, got {}", x.str());
  const cudnnDataType_t dt = cudnn_dtype(dtype);
  const cudnnTensorFormat_t fmt = layout == core::Layout::nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
  VISION_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_desc_));
  VISION_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_desc_));
  VISION_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias_desc_));
  VISION_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_desc_));
  VISION_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_desc_));
  VISION_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_desc_, fmt, dt, to_int(x[0], "batch"), to_int(x[1], "channels"),
                                                to_int(x[2], "height"), to_int(x[3], "width")));
  VISION_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_desc_, fmt, dt, to_int(y_shape_[0], "batch"),
                                                to_int(y_shape_[1], "channels"), to_int(y_shape_[2], "height"),
                                                to_int(y_shape_[3], "width")));
  VISION_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_desc_, fmt, dt, 1, to_int(a.out_channels, "channels"), 1, 1));
  VISION_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_, dt, fmt, to_int(a.out_channels, "out_channels"),
                                                to_int(a.in_channels / a.groups, "in_channels"),
                                                to_int(a.kernel, "kernel"), to_int(a.kernel, "kernel")));
  const int pad = to_int(a.pad(), "padding"), stride = to_int(a.stride, "stride"),
            dil = to_int(a.dilation, "dilation");
  VISION_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_desc_, pad, pad, stride, stride, dil, dil,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  VISION_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_desc_, to_int(a.groups, "groups")));
  // f32: FMA math keeps IEEE f32 (no TF32); f16/bf16: tensor cores, f32 accumulation.
  VISION_CUDNN_CHECK(cudnnSetConvolutionMathType(
      conv_desc_, dtype == core::DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));

  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  VISION_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle_, x_desc_, w_desc_, conv_desc_, y_desc_,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fwd));
  const auto& f = pick(fwd, n, max_workspace, deterministic, "forward");
  fwd_algo_ = f.algo;
  cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  VISION_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_, w_desc_, y_desc_, conv_desc_, x_desc_,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bd));
  const auto& d = pick(bd, n, max_workspace, deterministic, "backward-data");
  bwd_data_algo_ = d.algo;
  cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  VISION_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle_, x_desc_, y_desc_, conv_desc_, w_desc_,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, bf));
  const auto& w = pick(bf, n, max_workspace, deterministic, "backward-filter");
  bwd_filter_algo_ = w.algo;
  // The heuristics' memory estimates can be short of what the call asks for: ask for the exact sizes.
  size_t s = 0;
  VISION_CUDNN_CHECK(
      cudnnGetConvolutionForwardWorkspaceSize(handle_, x_desc_, w_desc_, conv_desc_, y_desc_, fwd_algo_, &s));
  workspace_ = std::max(workspace_, s);
  VISION_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle_, w_desc_, y_desc_, conv_desc_, x_desc_,
                                                                  bwd_data_algo_, &s));
  workspace_ = std::max(workspace_, s);
  VISION_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle_, x_desc_, y_desc_, conv_desc_, w_desc_,
                                                                    bwd_filter_algo_, &s));
  workspace_ = std::max(workspace_, s);
}

CudnnConv::~CudnnConv() {
  if (conv_desc_) cudnnDestroyConvolutionDescriptor(conv_desc_);
  if (w_desc_) cudnnDestroyFilterDescriptor(w_desc_);
  if (bias_desc_) cudnnDestroyTensorDescriptor(bias_desc_);
  if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
}

void CudnnConv::forward(const void* x, const void* w, void* y, void* workspace, float beta) const {
  const float alpha = 1.0f;
  VISION_CUDNN_CHECK(cudnnConvolutionForward(handle_, &alpha, x_desc_, x, w_desc_, w, conv_desc_, fwd_algo_, workspace,
                                             workspace_, &beta, y_desc_, y));
}

void CudnnConv::add_bias(const void* bias, void* y) const {
  const float one = 1.0f;
  VISION_CUDNN_CHECK(cudnnAddTensor(handle_, &one, bias_desc_, bias, &one, y_desc_, y));
}

void CudnnConv::backward_data(const void* w, const void* dy, void* dx, void* workspace) const {
  const float alpha = 1.0f, beta = 0.0f;
  VISION_CUDNN_CHECK(cudnnConvolutionBackwardData(handle_, &alpha, w_desc_, w, y_desc_, dy, conv_desc_, bwd_data_algo_,
                                                  workspace, workspace_, &beta, x_desc_, dx));
}

void CudnnConv::backward_filter(const void* x, const void* dy, void* dw, void* workspace) const {
  const float alpha = 1.0f, beta = 0.0f;
  VISION_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle_, &alpha, x_desc_, x, y_desc_, dy, conv_desc_,
                                                    bwd_filter_algo_, workspace, workspace_, &beta, w_desc_, dw));
}

void CudnnConv::backward_bias(const void* dy, void* db) const {
  const float alpha = 1.0f, beta = 0.0f;
  VISION_CUDNN_CHECK(cudnnConvolutionBackwardBias(handle_, &alpha, y_desc_, dy, &beta, bias_desc_, db));
}

}  // namespace vision::ops::cuda_impl
