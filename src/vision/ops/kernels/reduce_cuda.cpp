#include "vision/ops/kernels/reduce_cuda.h"

#include "vision/core/error.h"

namespace vision::ops::kernels {
namespace {

cuda::KernelSpec make_spec(const char* name, DType dtype, bool square, const char* params) {
  VISION_CHECK(core::is_floating(dtype), "{}: no CUDA kernel for {} tensors", name, core::dtype_name(dtype));
  return {name, "vision/ops/kernels/reduce.cuh", dtype, {{"sq", square ? 1 : 0}}, params};
}

void register_reduce_kernels(cuda::KernelRegistry& r) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (bool sq : {false, true}) {
      r.add<ReduceSumForward>(t, sq);
      r.add<ReduceSumBackward>(t, sq);
    }
}
VISION_REGISTER_KERNELS(register_reduce_kernels);

}  // namespace

ReduceSumForward::ReduceSumForward(DType t, bool square)
    : KernelDescriptor(make_spec("reduce_sum_forward", t, square, "const {T}*, {T}*, int64_t, float")) {}
ReduceSumBackward::ReduceSumBackward(DType t, bool square)
    : KernelDescriptor(make_spec("reduce_sum_backward", t, square, "const {T}*, const {T}*, {T}*, int64_t, float")) {}

void launch_reduce_sum_forward(cudaStream_t stream, DType dtype, bool square, const void* x, void* y, int64_t n,
                               float scale) {
  VISION_CHECK(n >= 0, "reduce_sum_forward: negative element count {}", n);
  cuda::kernel_instance<ReduceSumForward>(dtype, square).launch(stream, dim3(1), dim3(1024), 0, x, y, n, scale);
}

void launch_reduce_sum_backward(cudaStream_t stream, DType dtype, bool square, const void* x, const void* dy,
                                void* dx, int64_t n, float scale) {
  VISION_CHECK(n >= 0, "reduce_sum_backward: negative element count {}", n);
  if (n == 0) return;
  cuda::kernel_instance<ReduceSumBackward>(dtype, square)
      .launch_over(stream, n, 256, x, dy, dx, n, scale);
}

}  // namespace vision::ops::kernels
