#include "vision/ops/kernels/maxpool_cuda.h"

#include "vision/core/error.h"

namespace vision::ops::kernels {
namespace {

constexpr int kMaxPoolThreads = 256;
constexpr const char* kForwardParams =
    "const {T}*, {T}*, int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t";
constexpr const char* kBackwardParams =
    "const {T}*, const int32_t*, {T}*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t";

void check_window(MaxPool2dWindow win) {
  VISION_CHECK(win.k >= 1 && win.k <= 16 && win.s >= 1 && win.s <= 16 && win.p >= 0 && win.p <= win.k / 2,
               "max pooling window k={} s={} p={} is not supported (1 <= k, s <= 16 and 0 <= p <= k / 2)", win.k, win.s,
               win.p);
}

cuda::KernelSpec make_spec(const char* name, DType dtype, MaxPool2dWindow win, Layout layout, const char* params) {
  VISION_CHECK(core::is_floating(dtype), "{}: no CUDA kernel for {} tensors (f32, f16 and bf16 only)", name,
               core::dtype_name(dtype));
  check_window(win);
  return {std::string(name) + (layout == Layout::nhwc ? "_nhwc" : ""), "vision/ops/kernels/maxpool.cuh", dtype,
          {{"k", win.k}, {"s", win.s}, {"p", win.p}}, params};
}

// The windows listed by `vision kernels list` and compiled ahead by `vision kernels build`: YOLO26's SPPF (5/1/2) and
// the common downsampling ones. Others compile on first use.
constexpr MaxPool2dWindow kListedWindows[] = {{5, 1, 2}, {2, 2, 0}, {3, 2, 1}};

void register_maxpool_kernels(cuda::KernelRegistry& r) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (Layout layout : {Layout::nchw, Layout::nhwc})
      for (MaxPool2dWindow win : kListedWindows) {
        r.add<MaxPool2dForward>(t, win, layout);
        r.add<MaxPool2dBackward>(t, win, layout);
      }
}
VISION_REGISTER_KERNELS(register_maxpool_kernels);

}  // namespace

MaxPool2dForward::MaxPool2dForward(DType t, MaxPool2dWindow win, Layout layout)
    : KernelDescriptor(make_spec("maxpool2d_forward", t, win, layout, kForwardParams)) {}
MaxPool2dBackward::MaxPool2dBackward(DType t, MaxPool2dWindow win, Layout layout)
    : KernelDescriptor(make_spec("maxpool2d_backward", t, win, layout, kBackwardParams)) {}

int64_t maxpool2d_output_size(int64_t size, MaxPool2dWindow win) {
  check_window(win);
  const int64_t out = size + 2 * win.p >= win.k ? (size + 2 * win.p - win.k) / win.s + 1 : 0;
  VISION_CHECK(size > 0 && out > 0, "max pooling k={} s={} p={} of a dimension of {} leaves no output", win.k, win.s,
               win.p, size);
  return out;
}

void launch_maxpool2d_forward(cudaStream_t stream, DType dtype, Layout layout, MaxPool2dWindow win, const void* x,
                              void* y, int32_t* argmax, int64_t batch, int64_t channels, int64_t h, int64_t w) {
  VISION_CHECK(batch >= 0 && channels >= 0, "maxpool2d: negative batch {} or channel count {}", batch, channels);
  const int64_t ho = maxpool2d_output_size(h, win), wo = maxpool2d_output_size(w, win);
  VISION_CHECK(h * w <= INT32_MAX, "maxpool2d: a {} × {} plane is too large for i32 argmax indices", h, w);
  const int64_t n = batch * channels * ho * wo;  // one thread per output
  if (n == 0) return;
  cuda::kernel_instance<MaxPool2dForward>(dtype, win, layout)
      .launch_over(stream, n, kMaxPoolThreads, x, y, argmax, batch, channels, h, w,
              ho, wo);
}

void launch_maxpool2d_backward(cudaStream_t stream, DType dtype, Layout layout, MaxPool2dWindow win,
                               const void* dy, const int32_t* argmax, void* dx, int64_t batch, int64_t channels,
                               int64_t h, int64_t w) {
  VISION_CHECK(batch >= 0 && channels >= 0, "maxpool2d backward: negative batch {} or channel count {}", batch,
               channels);
  const int64_t ho = maxpool2d_output_size(h, win), wo = maxpool2d_output_size(w, win);
  const int64_t n = batch * channels * h * w;  // one thread per input element
  if (n == 0) return;
  cuda::kernel_instance<MaxPool2dBackward>(dtype, win, layout)
      .launch_over(stream, n, kMaxPoolThreads, dy, argmax, dx, batch, channels, h, w,
              ho, wo);
}

}  // namespace vision::ops::kernels
