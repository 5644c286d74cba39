#include "vision/ops/kernels/bias_cuda.h"

#include "vision/core/error.h"
#include "vision/ops/kernels/channel_reduce.h"

namespace vision::ops::kernels {
namespace {

constexpr const char* kBiasFile = "vision/ops/kernels/bias.cuh";
constexpr int kBiasThreads = 256;

void check_bias_dtype(const char* name, DType dtype) {
  VISION_CHECK(core::is_floating(dtype), "{}: no CUDA kernel for {} tensors (f32, f16 and bf16 only)", name,
               core::dtype_name(dtype));
}

std::string with_layout(const char* name, Layout layout) {
  return std::string(name) + (layout == Layout::nhwc ? "_nhwc" : "");
}

void check_bias_shape(const core::Shape& x, const char* what) {
  VISION_CHECK(x.rank() == 4 && x.is_concrete(), "{}: needs an (N, C, H, W) tensor, got {}", what, x.str());
}

// What a convolution with a bias launches in f16 and bf16.
void register_bias_kernels(cuda::KernelRegistry& r) {
  for (DType t : {DType::f16, DType::bf16}) {
    for (Layout layout : {Layout::nchw, Layout::nhwc}) {
      r.add<BiasAct>(t, layout, false);
      r.add<BiasAct>(t, layout, true);
      r.add<ChannelSumPartials>(t, layout);
    }
    r.add<ChannelSumFinalize>(t);
  }
}
VISION_REGISTER_KERNELS(register_bias_kernels);

}  // namespace

BiasAct::BiasAct(DType t, Layout layout, bool silu)
    : KernelDescriptor({with_layout("bias_act", layout), kBiasFile, t, {{"silu", silu ? 1 : 0}},
                        "{T}*, const {T}*, int64_t, int64_t, int64_t"}) {
  check_bias_dtype("bias_act", t);
}
ChannelSumPartials::ChannelSumPartials(DType t, Layout layout)
    : KernelDescriptor({with_layout("channel_sum_partials", layout), kBiasFile, t, {},
                        "const {T}*, float*, int64_t, int64_t, int64_t, int64_t"}) {
  check_bias_dtype("channel_sum_partials", t);
}
ChannelSumFinalize::ChannelSumFinalize(DType t)
    : KernelDescriptor({"channel_sum_finalize", kBiasFile, t, {}, "const float*, {T}*, int64_t, int64_t"}) {
  check_bias_dtype("channel_sum_finalize", t);
}

void launch_bias_act(cudaStream_t stream, DType dtype, Layout layout, bool silu, const core::Shape& y, void* y_data,
                     const void* bias) {
  check_bias_shape(y, "bias_act");
  const int64_t n = y.numel();
  if (n == 0) return;
  cuda::kernel_instance<BiasAct>(dtype, layout, silu)
      .launch_over(stream, n, kBiasThreads, y_data, bias, n, y[1], y[2] * y[3]);
}

size_t channel_sum_workspace_bytes(const core::Shape& x, Layout layout) {
  return channel_reduction(x, layout).workspace_bytes(1);
}

void launch_channel_sum(cudaStream_t stream, DType dtype, Layout layout, const core::Shape& x, const void* x_data,
                        void* out, void* workspace) {
  check_bias_shape(x, "channel_sum");
  const ChannelReduction r = channel_reduction(x, layout);
  VISION_CHECK(workspace, "channel_sum: no workspace for the partial sums");
  cuda::kernel_instance<ChannelSumPartials>(dtype, layout)
      .launch(stream, dim3(static_cast<uint32_t>(r.tiles), static_cast<uint32_t>(r.splits)),
              dim3(kChannelReduceThreads), 0, x_data, workspace, r.rows, r.channels, r.inner, r.rows_per_split);
  cuda::kernel_instance<ChannelSumFinalize>(dtype).launch_over(stream, r.channels, kBiasThreads, static_cast<const void*>(workspace), out,
                                                          r.splits, r.channels);
}

}  // namespace vision::ops::kernels
