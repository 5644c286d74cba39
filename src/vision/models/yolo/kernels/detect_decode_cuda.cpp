#include "vision/models/yolo/kernels/detect_decode_cuda.h"

#include <cuda_runtime.h>

#include <limits>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/kernel_info_cuda.h"

namespace vision::models::yolo::kernels {
namespace {

using core::DType;
using core::Shape;

constexpr int kThreads = 256;
constexpr DType kDecodeDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr const char* kDecodeFile = "vision/models/yolo/kernels/detect_decode.cuh";
constexpr const char* kDecodeScope = "vision::models::yolo::kernels";

void register_detect_decode_kernels(cuda::KernelRegistry& r) {
  for (DType t : kDecodeDtypes) {
    r.add<DetectDecodeForward>(t);
    r.add<DetectDecodeBackward>(t);
  }
}
VISION_REGISTER_KERNELS(register_detect_decode_kernels);

void check_decode_dtype(DType t) {
  VISION_CHECK(core::is_floating(t), "detect_decode: no CUDA kernel for {} tensors (f32, f16 and bf16 only)",
               core::dtype_name(t));
}

void check_sizes(int64_t batch, int64_t n_anchors) {
  VISION_CHECK(batch >= 0 && n_anchors >= 0 && (n_anchors == 0 || batch <= std::numeric_limits<int64_t>::max() / 4 /
                                                                              n_anchors),
               "detect_decode (GPU): batch {} and {} anchors are out of range", batch, n_anchors);
}

}  // namespace

DetectDecodeForward::DetectDecodeForward(DType t)
    : KernelDescriptor({"detect_decode_forward", kDecodeFile, t, {},
                        "const {T}*, const float*, {T}*, int64_t, int64_t, int32_t", kDecodeScope}) {
  check_decode_dtype(t);
}

DetectDecodeBackward::DetectDecodeBackward(DType t)
    : KernelDescriptor({"detect_decode_backward", kDecodeFile, t, {}, "const {T}*, {T}*, int64_t, int64_t", kDecodeScope}) {
  check_decode_dtype(t);
}

void launch_detect_decode_forward(cudaStream_t stream, DType dtype, const void* ltrb, const float* anchors,
                                  void* boxes, int64_t batch, int64_t n_anchors, DecodeMode mode) {
  check_sizes(batch, n_anchors);
  const int64_t n = batch * n_anchors;
  if (n == 0) return;
  cuda::kernel_instance<DetectDecodeForward>(dtype).launch_over(stream, n, kThreads, ltrb, anchors, boxes, batch, n_anchors,
                                                           static_cast<int32_t>(mode));
}

void launch_detect_decode_backward(cudaStream_t stream, DType dtype, const void* grad_boxes, void* grad_ltrb,
                                   int64_t batch, int64_t n_anchors) {
  check_sizes(batch, n_anchors);
  const int64_t n = batch * 4 * n_anchors;
  if (n == 0) return;
  cuda::kernel_instance<DetectDecodeBackward>(dtype).launch_over(stream, n, kThreads, grad_boxes, grad_ltrb, batch,
                                                            n_anchors);
}

// ---------------------------------------------------------------------------------------------------------------
// CUDA RuntimeOp

namespace {

class DetectDecodeCudaRuntime final : public graph::RuntimeOp {
 public:
  DetectDecodeCudaRuntime(std::unique_ptr<graph::RuntimeOp> twin, DecodeMode mode)
      : twin_(std::move(twin)), mode_(mode) {}

  std::string name() const override { return twin_->name(); }
  int n_activation_inputs() const override { return twin_->n_activation_inputs(); }
  // ltrb in f32, f16 or bf16 (boxes of its dtype); the level maps are read for their shapes only.
  bool supports(const graph::Format& f) const override { return core::is_floating(f.dtype); }
  bool reads_input(size_t i) const override { return i == 0; }
  std::vector<graph::ParamSpec> param_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return twin_->param_specs(in, out);
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& in, const Shape& out,
                                         uint64_t seed) const override {
    return twin_->param_init_data(i, in, out, seed);
  }

  void forward(graph::ForwardCtx& ctx) override {
    const Tensor& ltrb = ctx.inputs.at(0);
    const Tensor& anchors = ctx.params.at(0);
    VISION_CHECK(ltrb.rank() == 3 && ltrb.dim(1) == 4, "detect_decode (CUDA): ltrb must be [B, 4, A], got {}",
                 ltrb.str());
    check_tensor(ltrb, "ltrb", ltrb.shape(), ltrb.dtype());
    check_tensor(ctx.output, "boxes", ltrb.shape(), ltrb.dtype());
    check_tensor(anchors, "anchors", Shape{3, ltrb.dim(2)}, DType::f32);
    launch_detect_decode_forward(graph::stream_of(ctx.backend), ltrb.dtype(), ltrb.raw(),
                                 static_cast<const float*>(anchors.raw()), ctx.output.raw(), ltrb.dim(0), ltrb.dim(2),
                                 mode_);
  }

  bool has_backward() const override { return mode_ == DecodeMode::grid; }
  void backward(graph::BackwardCtx& ctx) override {
    VISION_CHECK(mode_ == DecodeMode::grid, "detect_decode has a backward only in grid mode, not in {} mode",
                 decode_mode_name(mode_));
    const Tensor& g = ctx.grad_output;
    const Tensor& d = ctx.grad_inputs.at(0);
    if (d.defined()) {
      check_tensor(g, "grad_boxes", ctx.inputs.at(0).shape(), ctx.inputs.at(0).dtype());
      check_tensor(d, "grad_ltrb", g.shape(), g.dtype());
      launch_detect_decode_backward(graph::stream_of(ctx.backend), g.dtype(), g.raw(), d.raw(), g.dim(0), g.dim(2));
    }
    for (size_t i = 1; i < 4; ++i)  // the level maps: only their shapes are used
      if (const Tensor& z = ctx.grad_inputs.at(i); z.defined())
        VISION_CUDA_CHECK(cudaMemsetAsync(z.raw(), 0, z.nbytes(), graph::stream_of(ctx.backend)));
  }

  std::vector<graph::KernelInfo> kernels() const override {
    std::vector<graph::KernelInfo> out;
    const DType t = format().dtype;
    out.push_back(graph::kernel_info(cuda::kernel_instance<DetectDecodeForward>(t)));
    if (mode_ == DecodeMode::grid) out.push_back(graph::kernel_info(cuda::kernel_instance<DetectDecodeBackward>(t)));
    return out;
  }

 private:
  static void check_tensor(const Tensor& t, const char* what, const Shape& shape, DType dtype) {
    VISION_CHECK(t.defined() && t.device() == core::Device::cuda && t.shape() == shape && t.dtype() == dtype,
                 "detect_decode (CUDA): {} must be a {} {} tensor on the GPU, got {}", what, core::dtype_name(dtype),
                 shape.str(), t.defined() ? t.str() : std::string("an undefined tensor"));
  }

  std::unique_ptr<graph::RuntimeOp> twin_;
  DecodeMode mode_;
};

}  // namespace

std::unique_ptr<graph::RuntimeOp> make_detect_decode_cuda(std::unique_ptr<graph::RuntimeOp> twin, DecodeMode mode) {
  VISION_CHECK(twin != nullptr, "make_detect_decode_cuda: no CPU RuntimeOp to share state specs with");
  return std::make_unique<DetectDecodeCudaRuntime>(std::move(twin), mode);
}

}  // namespace vision::models::yolo::kernels
