#include "vision/ops/kernels/batchnorm_cuda.h"

namespace vision::ops::kernels {
namespace {

constexpr const char* kFile = "vision/ops/kernels/batchnorm.cuh";

void register_batchnorm_kernels(cuda::KernelRegistry& r) {
  r.add<BatchNormFold>(DType::f32);
  r.add<IncrementCounter>();
}
VISION_REGISTER_KERNELS(register_batchnorm_kernels);

}  // namespace

BatchNormFold::BatchNormFold(DType t)
    : KernelDescriptor({"batchnorm_fold", kFile, t, {},
                        "const {T}*, const {T}*, const {T}*, const {T}*, const {T}*, const {T}*, {T}*, {T}*, int64_t, "
                        "int64_t, float"}) {}
IncrementCounter::IncrementCounter() : KernelDescriptor({"increment_counter", kFile, DType::i64, {}, "{T}*"}) {}

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

}  // namespace vision::ops::kernels
