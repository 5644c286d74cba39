#include "vision/ops/kernels/batchnorm_cuda.h"

#include "vision/core/error.h"
#include "vision/ops/kernels/channel_reduce.h"

namespace vision::ops::kernels {
namespace {

constexpr const char* kBatchnormFile = "vision/ops/kernels/batchnorm.cuh";
constexpr int kThreads = 256;

// "batchnorm_stats" or "batchnorm_stats_nhwc" for an activation dtype of the kernels (f32, f16, bf16).
cuda::KernelSpec activation_spec(const char* name, DType dtype, Layout layout, const char* params) {
  VISION_CHECK(core::is_floating(dtype), "{}: no CUDA kernel for {} tensors (f32, f16 and bf16 only)", name,
               core::dtype_name(dtype));
  return {std::string(name) + (layout == Layout::nhwc ? "_nhwc" : ""), kBatchnormFile, dtype, {}, params};
}

void register_batchnorm_kernels(cuda::KernelRegistry& r) {
  r.add<BatchNormFold>(DType::f32);
  r.add<IncrementCounter>();
  // What a BatchNorm launches outside f32 NCHW (which goes through cuDNN).
  r.add<BatchNormStatsFinalize>();
  r.add<BatchNormBackwardFinalize>();
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (Layout layout : {Layout::nchw, Layout::nhwc}) {
      if (t == DType::f32 && layout == Layout::nchw) continue;
      r.add<BatchNormStats>(t, layout);
      r.add<BatchNormApply>(t, layout);
      r.add<BatchNormBackwardSums>(t, layout);
      r.add<BatchNormBackwardApply>(t, layout);
    }
}
VISION_REGISTER_KERNELS(register_batchnorm_kernels);

void check_shape(const core::Shape& x, const char* what) {
  VISION_CHECK(x.rank() == 4 && x.is_concrete() && x.numel() > 0, "{}: needs a non-empty (N, C, H, W) input, got {}",
               what, x.str());
}

}  // namespace

BatchNormFold::BatchNormFold(DType t)
    : KernelDescriptor({"batchnorm_fold", kBatchnormFile, t, {},
                        "const {T}*, const {T}*, const {T}*, const {T}*, const {T}*, const {T}*, {T}*, {T}*, int64_t, "
                        "int64_t, float"}) {}
IncrementCounter::IncrementCounter() : KernelDescriptor({"increment_counter", kBatchnormFile, DType::i64, {}, "{T}*"}) {}

BatchNormStats::BatchNormStats(DType t, Layout layout)
    : KernelDescriptor(
          activation_spec("batchnorm_stats", t, layout, "const {T}*, float*, int64_t, int64_t, int64_t, int64_t")) {}
BatchNormStatsFinalize::BatchNormStatsFinalize()
    : KernelDescriptor({"batchnorm_stats_finalize", kBatchnormFile, DType::f32, {},
                        "const {T}*, {T}*, {T}*, {T}*, {T}*, int64_t, int64_t, int64_t, int64_t, float, float"}) {}
BatchNormApply::BatchNormApply(DType t, Layout layout)
    : KernelDescriptor(activation_spec("batchnorm_apply", t, layout,
                                       "const {T}*, {T}*, const float*, const float*, const float*, const float*, "
                                       "int64_t, int64_t, int64_t, float, int32_t")) {}
BatchNormBackwardSums::BatchNormBackwardSums(DType t, Layout layout)
    : KernelDescriptor(activation_spec("batchnorm_backward_sums", t, layout,
                                       "const {T}*, const {T}*, const float*, float*, int64_t, int64_t, int64_t, "
                                       "int64_t")) {}
BatchNormBackwardFinalize::BatchNormBackwardFinalize()
    : KernelDescriptor({"batchnorm_backward_finalize", kBatchnormFile, DType::f32, {},
                        "const {T}*, const {T}*, {T}*, {T}*, int64_t, int64_t"}) {}
BatchNormBackwardApply::BatchNormBackwardApply(DType t, Layout layout)
    : KernelDescriptor(activation_spec("batchnorm_backward_apply", t, layout,
                                       "const {T}*, const {T}*, {T}*, const float*, const float*, const float*, "
                                       "const float*, const float*, int64_t, int64_t, int64_t, int64_t")) {}

void launch_batchnorm_fold(cudaStream_t stream, const float* w, const float* bias, const float* gamma,
                           const float* beta, const float* mean, const float* var, float* w_out, float* b_out,
                           int64_t out_channels, int64_t per_out, float eps) {
  const int64_t n = out_channels * per_out;
  if (n == 0) return;
  cuda::kernel_instance<BatchNormFold>(DType::f32)
      .launch(stream, dim3(cuda::grid_blocks(n, 256)), dim3(256), 0, w, bias, gamma, beta, mean, var, w_out, b_out,
              out_channels, per_out, eps);
}

void launch_increment_counter(cudaStream_t stream, int64_t* counter) {
  cuda::kernel_instance<IncrementCounter>().launch(stream, dim3(1), dim3(32), 0, counter);
}

std::vector<const cuda::Kernel*> batchnorm_kernels(DType dtype, Layout layout, bool training) {
  if (!training) return {&cuda::kernel_instance<BatchNormApply>(dtype, layout)};
  return {&cuda::kernel_instance<BatchNormStats>(dtype, layout),
          &cuda::kernel_instance<BatchNormStatsFinalize>(),
          &cuda::kernel_instance<BatchNormApply>(dtype, layout),
          &cuda::kernel_instance<BatchNormBackwardSums>(dtype, layout),
          &cuda::kernel_instance<BatchNormBackwardFinalize>(),
          &cuda::kernel_instance<BatchNormBackwardApply>(dtype, layout),
          &cuda::kernel_instance<IncrementCounter>()};
}

size_t batchnorm_workspace_bytes(const core::Shape& x, Layout layout) {
  return channel_reduction(x, layout).workspace_bytes(2);
}

void launch_batchnorm_forward_training(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x,
                                       const void* x_data, void* y, const float* gamma, const float* beta,
                                       float* running_mean, float* running_var, float* save_mean, float* save_invstd,
                                       void* workspace, float momentum, float eps) {
  check_shape(x, "batchnorm2d forward");
  const ChannelReduction r = channel_reduction(x, layout);
  VISION_CHECK(r.rows > 1, "batchnorm2d in training needs more than one value per channel, got input {}", x.str());
  VISION_CHECK(workspace, "batchnorm2d forward (training): no workspace for the partial statistics");
  cuda::kernel_instance<BatchNormStats>(dtype, layout)
      .launch(stream, dim3(static_cast<uint32_t>(r.tiles), static_cast<uint32_t>(r.splits)), dim3(kChannelReduceThreads), 0,
              x_data, workspace, r.rows, r.channels, r.inner, r.rows_per_split);
  cuda::kernel_instance<BatchNormStatsFinalize>().launch(
      stream, dim3(cuda::grid_blocks(r.channels, kThreads)), dim3(kThreads), 0,
      static_cast<const void*>(workspace), save_mean, save_invstd, running_mean, running_var, r.splits, r.rows,
      r.rows_per_split, r.channels, momentum, eps);
  const int64_t n = x.numel();
  cuda::kernel_instance<BatchNormApply>(dtype, layout)
      .launch(stream, dim3(cuda::grid_blocks(n, kThreads)), dim3(kThreads), 0, x_data, y,
              static_cast<const float*>(save_mean), static_cast<const float*>(save_invstd), gamma, beta, n,
              r.channels, r.inner, eps, int32_t{0});
}

void launch_batchnorm_forward_inference(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x,
                                        const void* x_data, void* y, const float* gamma, const float* beta,
                                        const float* running_mean, const float* running_var, float eps) {
  check_shape(x, "batchnorm2d forward");
  const int64_t n = x.numel();
  cuda::kernel_instance<BatchNormApply>(dtype, layout)
      .launch(stream, dim3(cuda::grid_blocks(n, kThreads)), dim3(kThreads), 0, x_data, y, running_mean, running_var,
              gamma, beta, n, x[1], x[2] * x[3], eps, int32_t{1});
}

void launch_batchnorm_backward(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x,
                               const void* x_data, const void* dy, void* dx, const float* gamma,
                               const float* save_mean, const float* save_invstd, float* dgamma, float* dbeta,
                               void* workspace) {
  check_shape(x, "batchnorm2d backward");
  const ChannelReduction r = channel_reduction(x, layout);
  VISION_CHECK(workspace, "batchnorm2d backward: no workspace for the partial sums");
  cuda::kernel_instance<BatchNormBackwardSums>(dtype, layout)
      .launch(stream, dim3(static_cast<uint32_t>(r.tiles), static_cast<uint32_t>(r.splits)), dim3(kChannelReduceThreads), 0,
              x_data, dy, save_mean, workspace, r.rows, r.channels, r.inner, r.rows_per_split);
  cuda::kernel_instance<BatchNormBackwardFinalize>().launch(
      stream, dim3(cuda::grid_blocks(r.channels, kThreads)), dim3(kThreads), 0, static_cast<const void*>(workspace),
      save_invstd, dgamma, dbeta, r.splits, r.channels);
  const int64_t n = x.numel();
  cuda::kernel_instance<BatchNormBackwardApply>(dtype, layout)
      .launch(stream, dim3(cuda::grid_blocks(n, kThreads)), dim3(kThreads), 0, x_data, dy, dx, save_mean,
              save_invstd, gamma, static_cast<const float*>(dgamma), static_cast<const float*>(dbeta), n, r.channels,
              r.inner, r.rows);
}

}  // namespace vision::ops::kernels
