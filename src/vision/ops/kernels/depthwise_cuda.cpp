#include "vision/ops/kernels/depthwise_cuda.h"

#include <cstdint>

#include "vision/core/error.h"

namespace vision::ops::kernels {
namespace {

constexpr int kDepthwiseThreads = 256;

int max_vec(core::DType dtype) { return static_cast<int>(16 / core::dtype_size(dtype)); }

// YOLO26's depthwise convolutions: 3×3 at stride 1 (the PSA's pe, the detect head) and 2.
void register_depthwise_kernels(cuda::KernelRegistry& r) {
  for (core::DType t : {core::DType::f32, core::DType::f16, core::DType::bf16})
    for (int stride : {1, 2})
      for (bool silu : {false, true}) {
        r.add<DepthwiseConv2dNhwc>(t, 3, stride, silu, max_vec(t));
        r.add<DepthwiseConv2dNhwc>(t, 3, stride, silu, 1);
      }
}
VISION_REGISTER_KERNELS(register_depthwise_kernels);

}  // namespace

DepthwiseConv2dNhwc::DepthwiseConv2dNhwc(core::DType t, int kernel, int stride, bool silu, int vec)
    : KernelDescriptor({"depthwise_conv2d_nhwc", "vision/ops/kernels/depthwise.cuh", t,
                        {{"k", kernel}, {"s", stride}, {"silu", silu ? 1 : 0}, {"vec", vec}},
                        "const {T}*, const float*, const float*, {T}*, int, int, int, int, int, int, int"}) {
  VISION_CHECK(core::is_floating(t), "depthwise_conv2d_nhwc: no kernel for {} (f32, f16, bf16)", core::dtype_name(t));
  VISION_CHECK(depthwise_conv2d_supported(kernel, stride), "depthwise_conv2d_nhwc: no kernel for a {}×{} window at "
               "stride {} (odd windows up to 7, stride 1 or 2)", kernel, kernel, stride);
  VISION_CHECK(vec >= 1 && vec <= max_vec(t) && (vec & (vec - 1)) == 0,
               "depthwise_conv2d_nhwc: {} channels per thread for {}", vec, core::dtype_name(t));
}

bool depthwise_conv2d_supported(int64_t kernel, int64_t stride) {
  return kernel >= 1 && kernel <= 7 && kernel % 2 == 1 && (stride == 1 || stride == 2);
}

int depthwise_vec(core::DType dtype, int64_t channels) {
  int vec = max_vec(dtype);
  while (vec > 1 && channels % vec != 0) vec /= 2;
  return vec;
}

void launch_depthwise_conv2d_nhwc(cudaStream_t stream, core::DType dtype, const core::Shape& x, const void* x_data,
                                  const float* weight, const float* bias, const core::Shape& y, void* y_data,
                                  int64_t kernel, int64_t stride, int64_t pad, bool silu) {
  VISION_CHECK(x.rank() == 4 && y.rank() == 4 && x[0] == y[0] && x[1] == y[1],
               "depthwise_conv2d_nhwc: x {} and y {} must be [B, C, H, W] of one batch and channel count", x.str(),
               y.str());
  VISION_CHECK(x.numel() <= INT32_MAX && y.numel() <= INT32_MAX, "depthwise_conv2d_nhwc: {} is too large", x.str());
  if (y.numel() == 0) return;
  const int vec = depthwise_vec(dtype, x[1]);
  const int64_t threads = y.numel() / vec;
  const auto i32 = [](int64_t v) { return static_cast<int32_t>(v); };
  cuda::kernel_instance<DepthwiseConv2dNhwc>(dtype, static_cast<int>(kernel), static_cast<int>(stride), silu, vec)
      .launch_over(stream, threads, kDepthwiseThreads, x_data,
              static_cast<const void*>(weight), static_cast<const void*>(bias), y_data,
              i32(x[0]), i32(x[2]), i32(x[3]), i32(x[1]), i32(y[2]), i32(y[3]), i32(pad));
}

}  // namespace vision::ops::kernels
