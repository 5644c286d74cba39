#include "vision/ops/kernels/upsample_cuda.h"

#include "vision/core/error.h"

namespace vision::ops::kernels {
namespace {

constexpr int kUpsampleThreads = 256;
constexpr const char* kParams = "const {T}*, {T}*, int64_t, int64_t, int64_t, int64_t";

cuda::KernelSpec make_spec(const char* name, DType dtype, Layout layout) {
  VISION_CHECK(core::is_floating(dtype), "{}: no CUDA kernel for {} tensors (f32, f16 and bf16 only)", name,
               core::dtype_name(dtype));
  return {std::string(name) + (layout == Layout::nhwc ? "_nhwc" : ""), "vision/ops/kernels/upsample.cuh", dtype, {},
          kParams};
}

template <typename D>
void launch(cudaStream_t stream, DType dtype, Layout layout, const void* in, void* out, int64_t batch,
            int64_t channels, int64_t h, int64_t w) {
  const D& kernel = cuda::kernel_instance<D>(dtype, layout);
  VISION_CHECK(batch >= 0 && channels >= 0 && h >= 0 && w >= 0, "{}: invalid size {} × {} × {} × {}", kernel.name(),
               batch, channels, h, w);
  const int64_t n = batch * channels * h * w;  // one thread per input element
  if (n == 0) return;
  kernel.launch_over(stream, n, kUpsampleThreads, in, out, batch, channels, h, w);
}

void register_upsample_kernels(cuda::KernelRegistry& r) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (Layout layout : {Layout::nchw, Layout::nhwc}) {
      r.add<UpsampleNearest2xForward>(t, layout);
      r.add<UpsampleNearest2xBackward>(t, layout);
    }
}
VISION_REGISTER_KERNELS(register_upsample_kernels);

}  // namespace

UpsampleNearest2xForward::UpsampleNearest2xForward(DType t, Layout layout)
    : KernelDescriptor(make_spec("upsample_nearest2x_forward", t, layout)) {}
UpsampleNearest2xBackward::UpsampleNearest2xBackward(DType t, Layout layout)
    : KernelDescriptor(make_spec("upsample_nearest2x_backward", t, layout)) {}

void launch_upsample_nearest2x_forward(cudaStream_t stream, DType dtype, Layout layout, const void* x, void* y,
                                       int64_t batch, int64_t channels, int64_t h, int64_t w) {
  launch<UpsampleNearest2xForward>(stream, dtype, layout, x, y, batch, channels, h, w);
}

void launch_upsample_nearest2x_backward(cudaStream_t stream, DType dtype, Layout layout, const void* dy, void* dx,
                                        int64_t batch, int64_t channels, int64_t h, int64_t w) {
  launch<UpsampleNearest2xBackward>(stream, dtype, layout, dy, dx, batch, channels, h, w);
}

}  // namespace vision::ops::kernels
