#include "vision/ops/kernels/channel_cuda.h"

#include "vision/core/error.h"

namespace vision::ops::kernels {
namespace {

constexpr int kThreads = 256;

cuda::KernelSpec make_spec(const char* name, DType dtype, const char* params) {
  VISION_CHECK(core::is_floating(dtype), "{}: no CUDA kernel for {} tensors (f32, f16 and bf16 only)", name,
               core::dtype_name(dtype));
  return {name, "vision/ops/kernels/channel.cuh", dtype, {}, params};
}

// Checks a channel range [offset, offset + part) of a tensor with `whole` channels.
void check_range(const char* what, int64_t batch, int64_t part, int64_t hw, int64_t whole, int64_t offset) {
  VISION_CHECK(batch >= 0 && part >= 0 && hw >= 0 && offset >= 0 && offset + part <= whole,
               "{}: channels [{}, {}) do not fit a tensor of {} channels (batch {}, {} elements per channel)", what,
               offset, offset + part, whole, batch, hw);
}

void copy(cudaStream_t stream, DType dtype, const void* x, void* y, int64_t batch, int64_t channels, int64_t hw,
          int64_t x_channels, int64_t x_offset, int64_t y_channels, int64_t y_offset) {
  const int64_t n = batch * channels * hw;
  if (n == 0) return;
  const int64_t per_thread = 16 / static_cast<int64_t>(core::dtype_size(dtype));
  cuda::kernel_instance<ChannelCopy>(dtype).launch(
      stream, dim3(cuda::grid_blocks((n + per_thread - 1) / per_thread, kThreads)), dim3(kThreads), 0, x, y, batch,
      channels, hw, x_channels, x_offset, y_channels, y_offset);
}

void register_channel_kernels(cuda::KernelRegistry& r) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    r.add<ChannelCopy>(t);
    r.add<ChannelSliceBackward>(t);
  }
}
VISION_REGISTER_KERNELS(register_channel_kernels);

}  // namespace

ChannelCopy::ChannelCopy(DType t)
    : KernelDescriptor(make_spec("channel_copy", t,
                                 "const {T}*, {T}*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t")) {}
ChannelSliceBackward::ChannelSliceBackward(DType t)
    : KernelDescriptor(
          make_spec("channel_slice_backward", t, "const {T}*, {T}*, int64_t, int64_t, int64_t, int64_t, int64_t")) {}

void launch_concat_forward(cudaStream_t stream, DType dtype, const void* x, void* y, int64_t batch, int64_t x_channels,
                           int64_t hw, int64_t y_channels, int64_t offset) {
  check_range("concat", batch, x_channels, hw, y_channels, offset);
  copy(stream, dtype, x, y, batch, x_channels, hw, x_channels, 0, y_channels, offset);
}

void launch_concat_backward(cudaStream_t stream, DType dtype, const void* dy, void* dx, int64_t batch,
                            int64_t x_channels, int64_t hw, int64_t y_channels, int64_t offset) {
  check_range("concat backward", batch, x_channels, hw, y_channels, offset);
  copy(stream, dtype, dy, dx, batch, x_channels, hw, y_channels, offset, x_channels, 0);
}

void launch_slice_forward(cudaStream_t stream, DType dtype, const void* x, void* y, int64_t batch, int64_t x_channels,
                          int64_t hw, int64_t y_channels, int64_t offset) {
  check_range("channel slice", batch, y_channels, hw, x_channels, offset);
  copy(stream, dtype, x, y, batch, y_channels, hw, x_channels, offset, y_channels, 0);
}

void launch_slice_backward(cudaStream_t stream, DType dtype, const void* dy, void* dx, int64_t batch,
                           int64_t x_channels, int64_t hw, int64_t y_channels, int64_t offset) {
  check_range("channel slice backward", batch, y_channels, hw, x_channels, offset);
  const int64_t n = batch * x_channels * hw;
  if (n == 0) return;
  cuda::kernel_instance<ChannelSliceBackward>(dtype).launch(stream, dim3(cuda::grid_blocks(n, kThreads)),
                                                            dim3(kThreads), 0, dy, dx, batch, y_channels, hw,
                                                            x_channels, offset);
}

}  // namespace vision::ops::kernels
