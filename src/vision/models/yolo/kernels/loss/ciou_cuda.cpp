#include "vision/models/yolo/kernels/loss/ciou_cuda.h"

#include <cuda_runtime.h>

#include <limits>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/kernel_info_cuda.h"

namespace vision::models::yolo::kernels::loss {
namespace {

using core::DType;
using core::Shape;

constexpr DType kCiouDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr const char* kCiouFile = "vision/models/yolo/kernels/loss/ciou.cuh";
constexpr const char* kCiouScope = "vision::models::yolo::kernels::loss";

void register_ciou_kernels(cuda::KernelRegistry& r) {
  for (DType t : kCiouDtypes) {
    r.add<CiouForward>(t);
    r.add<CiouBackward>(t);
  }
}
VISION_REGISTER_KERNELS(register_ciou_kernels);

void check_ciou_dtype(DType t) {
  VISION_CHECK(core::is_floating(t), "ciou_loss: no CUDA kernel for {} boxes (f32, f16 and bf16 only)",
               core::dtype_name(t));
}

void check_sizes(int64_t batch, int64_t n_anchors) {
  VISION_CHECK(batch >= 0 && n_anchors >= 0 &&
                   (n_anchors == 0 || batch <= std::numeric_limits<int64_t>::max() / 4 / n_anchors),
               "ciou_loss (GPU): batch {} and {} anchors are out of range", batch, n_anchors);
}

}  // namespace

CiouForward::CiouForward(DType t)
    : KernelDescriptor({"ciou_forward", kCiouFile, t, {{"block", kCiouBlock}},
                        "const {T}*, const float*, const float*, float*, float*, float*, float*, int64_t, int64_t, "
                        "int32_t",
                        kCiouScope}) {
  check_ciou_dtype(t);
}

CiouBackward::CiouBackward(DType t)
    : KernelDescriptor({"ciou_backward", kCiouFile, t, {{"block", kCiouBlock}},
                        "const {T}*, const float*, const float*, const float*, const float*, const float*, "
                        "const float*, {T}*, int64_t, int64_t, int32_t, int32_t",
                        kCiouScope}) {
  check_ciou_dtype(t);
}

void launch_ciou_forward(cudaStream_t stream, DType dtype, const void* pred, const float* target, const float* weight,
                         float* loss, float* iou, float* v, float* alpha, int64_t batch, int64_t n_anchors,
                         BoxFormat format) {
  check_sizes(batch, n_anchors);
  const int64_t n = batch * n_anchors;
  if (n == 0) return;
  const int64_t tiles = (n + kCiouBlock - 1) / kCiouBlock;
  VISION_CHECK(tiles <= std::numeric_limits<int32_t>::max(), "ciou_loss (GPU): {} boxes are too many for one grid",
               n);
  cuda::kernel_instance<CiouForward>(dtype).launch(stream, dim3(static_cast<unsigned>(tiles)), dim3(kCiouBlock), 0,
                                                   pred, target, weight, loss, iou, v, alpha, batch, n_anchors,
                                                   static_cast<int32_t>(format));
}

void launch_ciou_backward(cudaStream_t stream, DType dtype, const void* pred, const float* target,
                          const float* weight, const float* iou, const float* v, const float* alpha,
                          const float* d_loss, void* d_pred, int64_t batch, int64_t n_anchors,
                          const CiouOptions& options) {
  check_sizes(batch, n_anchors);
  const int64_t n = batch * n_anchors;
  if (n == 0) return;
  const int64_t tiles = (n + kCiouBlock - 1) / kCiouBlock;
  VISION_CHECK(tiles <= std::numeric_limits<int32_t>::max(), "ciou_loss (GPU): {} boxes are too many for one grid",
               n);
  cuda::kernel_instance<CiouBackward>(dtype).launch(
      stream, dim3(static_cast<unsigned>(tiles)), dim3(kCiouBlock), 0, pred, target, weight, iou, v, alpha, d_loss,
      d_pred, batch, n_anchors, static_cast<int32_t>(options.format),
      static_cast<int32_t>(options.full_alpha_derivative ? 1 : 0));
}

// ---------------------------------------------------------------------------------------------------------------
// CUDA RuntimeOp

namespace {

class CiouLossCudaRuntime final : public graph::RuntimeOp {
 public:
  CiouLossCudaRuntime(std::unique_ptr<graph::RuntimeOp> twin, CiouOptions options)
      : twin_(std::move(twin)), options_(options) {}

  std::string name() const override { return twin_->name(); }
  int n_activation_inputs() const override { return twin_->n_activation_inputs(); }
  // pred in f32, f16 or bf16; target and weight in f32 whatever the plan's dtype.
  bool supports(const graph::Format& f) const override { return core::is_floating(f.dtype); }
  std::optional<DType> input_dtype(size_t i) const override {
    return i == 0 ? std::nullopt : std::optional<DType>(DType::f32);
  }
  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return twin_->saved_specs(in, out);
  }

  void forward(graph::ForwardCtx& ctx) override {
    const Tensor& pred = ctx.inputs.at(0);
    VISION_CHECK(pred.rank() == 3 && pred.dim(1) == 4, "ciou_loss (CUDA): pred must be [B, 4, A], got {}",
                 pred.str());
    const Shape ba{pred.dim(0), pred.dim(2)};
    check_tensor(pred, "pred", pred.shape(), pred.dtype());
    check_tensor(ctx.inputs.at(1), "target", pred.shape(), DType::f32);
    check_tensor(ctx.inputs.at(2), "weight", ba, DType::f32);
    check_tensor(ctx.output, "loss", ba, DType::f32);
    float* saved[3] = {nullptr, nullptr, nullptr};
    if (ctx.saved.size() == 3)
      for (size_t k = 0; k < 3; ++k) {
        check_tensor(ctx.saved[k], "a saved tensor (iou, v, alpha)", ba, DType::f32);
        saved[k] = static_cast<float*>(ctx.saved[k].raw());
      }
    launch_ciou_forward(graph::stream_of(ctx.backend), pred.dtype(), pred.raw(), f32(ctx.inputs[1]), f32(ctx.inputs[2]),
                        static_cast<float*>(ctx.output.raw()), saved[0], saved[1], saved[2], pred.dim(0),
                        pred.dim(2), options_.format);
  }

  bool has_backward() const override { return true; }
  void backward(graph::BackwardCtx& ctx) override {
    VISION_CHECK(ctx.saved.size() == 3, "ciou_loss: backward needs the forward's saved iou, v and alpha (a training "
                                        "plan); got {} saved tensors",
                 ctx.saved.size());
    const Tensor& pred = ctx.inputs.at(0);
    const Tensor& d = ctx.grad_inputs.at(0);
    if (d.defined()) {
      const Shape ba{pred.dim(0), pred.dim(2)};
      check_tensor(ctx.grad_output, "d_loss", ba, DType::f32);
      check_tensor(d, "d_pred", pred.shape(), pred.dtype());
      launch_ciou_backward(graph::stream_of(ctx.backend), pred.dtype(), pred.raw(), f32(ctx.inputs.at(1)),
                           f32(ctx.inputs.at(2)), f32(ctx.saved[0]), f32(ctx.saved[1]), f32(ctx.saved[2]),
                           f32(ctx.grad_output), d.raw(), pred.dim(0), pred.dim(2), options_);
    }
    for (size_t i = 1; i < 3; ++i)  // target and weight are not differentiated
      if (const Tensor& z = ctx.grad_inputs.at(i); z.defined())
        VISION_CUDA_CHECK(cudaMemsetAsync(z.raw(), 0, z.nbytes(), graph::stream_of(ctx.backend)));
  }

  std::vector<graph::KernelInfo> kernels() const override {
    const DType t = format().dtype;
    return {graph::kernel_info(cuda::kernel_instance<CiouForward>(t)),
            graph::kernel_info(cuda::kernel_instance<CiouBackward>(t))};
  }

 private:
  static float* f32(const Tensor& t) { return static_cast<float*>(t.raw()); }
  static void check_tensor(const Tensor& t, const char* what, const Shape& shape, DType dtype) {
    VISION_CHECK(t.defined() && t.device() == core::Device::cuda && t.shape() == shape && t.dtype() == dtype,
                 "ciou_loss (CUDA): {} must be a {} {} tensor on the GPU, got {}", what, core::dtype_name(dtype),
                 shape.str(), t.defined() ? t.str() : std::string("an undefined tensor"));
  }

  std::unique_ptr<graph::RuntimeOp> twin_;
  CiouOptions options_;
};

}  // namespace

std::unique_ptr<graph::RuntimeOp> make_ciou_loss_cuda(std::unique_ptr<graph::RuntimeOp> twin, CiouOptions options) {
  VISION_CHECK(twin != nullptr, "make_ciou_loss_cuda: no CPU RuntimeOp to share the saved specs with");
  return std::make_unique<CiouLossCudaRuntime>(std::move(twin), options);
}

}  // namespace vision::models::yolo::kernels::loss
