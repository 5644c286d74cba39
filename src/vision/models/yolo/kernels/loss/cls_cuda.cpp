#include "vision/models/yolo/kernels/loss/cls_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <optional>
#include <limits>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/models/yolo/kernels/loss/host_util_cuda.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/kernel_info_cuda.h"
#include "vision/models/yolo/kernels/detect_decode.h"

namespace vision::models::yolo::kernels::loss {
namespace {

using core::DType;
using core::Shape;

constexpr int kClsLossThreads = 256;  // as in cls.cuh
constexpr int64_t kItemsPerThread = 8;
constexpr DType kClsDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr const char* kClsFile = "vision/models/yolo/kernels/loss/cls.cuh";
constexpr const char* kClsScope = "vision::models::yolo::kernels::loss";

void register_cls_loss_kernels(cuda::KernelRegistry& r) {
  for (DType t : kClsDtypes) {
    r.add<BceClsForwardPartial>(t);
    r.add<BceClsBackward>(t);
    r.add<L1DistanceForwardPartial>(t);
    r.add<L1DistanceBackward>(t);
  }
  r.add<LossSumFinalize>();
}
VISION_REGISTER_KERNELS(register_cls_loss_kernels);

void check_cls_dtype(DType t, const char* what) {
  VISION_CHECK(core::is_floating(t), "{}: no CUDA kernel for {} predictions (f32, f16 and bf16 only)", what,
               core::dtype_name(t));
}

cuda::KernelSpec loss_spec(const char* name, DType t, const char* params) {
  check_cls_dtype(t, name);
  return {name, kClsFile, t, {}, params, kClsScope};
}

void check_count(int64_t n, int64_t factor, const char* what) {
  VISION_CHECK(n >= 0 && n <= std::numeric_limits<int64_t>::max() / factor, "{} (GPU): {} elements are out of range",
               what, n);
}

void check_image_size(int64_t h, int64_t w) {
  VISION_CHECK(h > 0 && w > 0, "l1_distance_loss (GPU): the input size {}×{} must be positive", h, w);
}

}  // namespace

void launch_loss_sum_finalize(cudaStream_t stream, const float* partials, int64_t blocks, float* loss, float* norm) {
  VISION_CHECK(blocks >= 1 && blocks <= kMaxLossPartials, "loss_sum_finalize: {} partial sums, 1 to {} expected",
               blocks, kMaxLossPartials);
  cuda::kernel_instance<LossSumFinalize>().launch(stream, dim3(1), dim3(kClsLossThreads), 0,
                                                  static_cast<const void*>(partials), static_cast<int32_t>(blocks),
                                                  static_cast<void*>(loss), static_cast<void*>(norm));
}

BceClsForwardPartial::BceClsForwardPartial(DType t)
    : KernelDescriptor(loss_spec("bce_cls_forward_partial", t, "const {T}*, const float*, float*, int64_t")) {}
BceClsBackward::BceClsBackward(DType t)
    : KernelDescriptor(loss_spec("bce_cls_backward", t, "const {T}*, const float*, const float*, const float*, {T}*, int64_t")) {}
L1DistanceForwardPartial::L1DistanceForwardPartial(DType t)
    : KernelDescriptor(loss_spec("l1_distance_forward_partial", t,
                            "const {T}*, const float*, const float*, const float*, float*, int64_t, int64_t, float, "
                            "float")) {}
L1DistanceBackward::L1DistanceBackward(DType t)
    : KernelDescriptor(loss_spec("l1_distance_backward", t,
                            "const {T}*, const float*, const float*, const float*, const float*, const float*, {T}*, "
                            "int64_t, int64_t, float, float")) {}
LossSumFinalize::LossSumFinalize()
    : KernelDescriptor(loss_spec("loss_sum_finalize", DType::f32, "const float*, int32_t, float*, float*")) {}

int64_t loss_partial_blocks(int64_t items) {
  VISION_CHECK(items >= 0, "loss_partial_blocks: negative element count {}", items);
  const int64_t per_block = kClsLossThreads * kItemsPerThread;
  return std::clamp<int64_t>((items + per_block - 1) / per_block, 1, kMaxLossPartials);
}

size_t loss_workspace_bytes(int64_t items) { return static_cast<size_t>(2 * loss_partial_blocks(items)) * sizeof(float); }

void launch_bce_cls_forward(cudaStream_t stream, DType dtype, const void* logits, const float* targets, float* loss,
                            float* norm, void* workspace, int64_t n) {
  check_count(n, 1, "bce_cls_loss");
  const int64_t blocks = loss_partial_blocks(n);
  auto* partials = static_cast<float*>(workspace);
  cuda::kernel_instance<BceClsForwardPartial>(dtype).launch(stream, dim3(static_cast<unsigned>(blocks)),
                                                            dim3(kClsLossThreads), 0, logits,
                                                            static_cast<const void*>(targets),
                                                            static_cast<void*>(partials), n);
  launch_loss_sum_finalize(stream, partials, blocks, loss, norm);
}

void launch_bce_cls_backward(cudaStream_t stream, DType dtype, const void* logits, const float* targets,
                             const float* grad_loss, const float* norm, void* grad_logits, int64_t n) {
  check_count(n, 1, "bce_cls_loss");
  if (n == 0) return;
  cuda::kernel_instance<BceClsBackward>(dtype).launch_over(stream, n, kClsLossThreads, logits,
      static_cast<const void*>(targets), static_cast<const void*>(grad_loss), static_cast<const void*>(norm),
      grad_logits, n);
}

void launch_l1_distance_forward(cudaStream_t stream, DType dtype, const void* pred, const float* target,
                                const float* weight, const float* anchors, float* loss, float* norm, void* workspace,
                                int64_t batch, int64_t n_anchors, int64_t image_h, int64_t image_w) {
  check_count(batch, 1, "l1_distance_loss");
  check_count(n_anchors, 4 * std::max<int64_t>(batch, 1), "l1_distance_loss");
  check_image_size(image_h, image_w);
  const int64_t blocks = loss_partial_blocks(batch * n_anchors);
  auto* partials = static_cast<float*>(workspace);
  cuda::kernel_instance<L1DistanceForwardPartial>(dtype).launch(
      stream, dim3(static_cast<unsigned>(blocks)), dim3(kClsLossThreads), 0, pred, static_cast<const void*>(target),
      static_cast<const void*>(weight), static_cast<const void*>(anchors), static_cast<void*>(partials), batch,
      n_anchors, static_cast<float>(1.0 / static_cast<double>(image_w)),
      static_cast<float>(1.0 / static_cast<double>(image_h)));
  launch_loss_sum_finalize(stream, partials, blocks, loss, norm);
}

void launch_l1_distance_backward(cudaStream_t stream, DType dtype, const void* pred, const float* target,
                                 const float* weight, const float* anchors, const float* grad_loss, const float* norm,
                                 void* grad_pred, int64_t batch, int64_t n_anchors, int64_t image_h,
                                 int64_t image_w) {
  check_count(batch, 1, "l1_distance_loss");
  check_count(n_anchors, 4 * std::max<int64_t>(batch, 1), "l1_distance_loss");
  check_image_size(image_h, image_w);
  const int64_t n = batch * 4 * n_anchors;
  if (n == 0) return;
  cuda::kernel_instance<L1DistanceBackward>(dtype).launch_over(stream, n, kClsLossThreads, pred,
      static_cast<const void*>(target), static_cast<const void*>(weight), static_cast<const void*>(anchors),
      static_cast<const void*>(grad_loss), static_cast<const void*>(norm), grad_pred, batch, n_anchors,
      static_cast<float>(1.0 / static_cast<double>(image_w)), static_cast<float>(1.0 / static_cast<double>(image_h)));
}

// ---------------------------------------------------------------------------------------------------------------
// CUDA RuntimeOps

namespace {

using graph::stream_of;

void check_tensor(const Tensor& t, const char* op, const char* what, const Shape& shape, DType dtype) {
  VISION_CHECK(t.defined() && t.device() == core::Device::cuda && t.shape() == shape && t.dtype() == dtype,
               "{} (CUDA): {} must be a {} {} tensor on the GPU, got {}", op, what, core::dtype_name(dtype),
               shape.str(), t.defined() ? t.str() : std::string("an undefined tensor"));
}

// What the two CUDA RuntimeOps share: the twin's state and saved specs, formats, workspace.
class LossCudaRuntime : public graph::RuntimeOp {
 public:
  LossCudaRuntime(std::unique_ptr<graph::RuntimeOp> twin, graph::Mode mode) : twin_(std::move(twin)), mode_(mode) {}
  std::string name() const override { return twin_->name(); }
  int n_activation_inputs() const override { return twin_->n_activation_inputs(); }
  // The prediction in f32, f16 or bf16; targets and weights in f32 (input_dtype); any layout (no rank-4 value is
  // read).
  bool supports(const graph::Format& f) const override { return core::is_floating(f.dtype); }
  bool reads_input(size_t i) const override { return twin_->reads_input(i); }
  std::optional<DType> input_dtype(size_t i) const override { return twin_->input_dtype(i); }
  std::vector<graph::ParamSpec> param_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return twin_->param_specs(in, out);
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& in, const Shape& out,
                                         uint64_t seed) const override {
    return twin_->param_init_data(i, in, out, seed);
  }
  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return twin_->saved_specs(in, out);
  }
  bool has_backward() const override { return true; }

 protected:
  // N on the device: the saved tensor in training, null in inference.
  float* norm_out(const graph::ForwardCtx& ctx) const {
    if (ctx.saved.empty()) return nullptr;
    check_tensor(ctx.saved[0], name().c_str(), "the saved normaliser", Shape{1}, DType::f32);
    return static_cast<float*>(ctx.saved[0].raw());
  }
  void check_workspace(const Tensor& ws, int64_t items) const {
    VISION_CHECK(ws.defined() && ws.nbytes() >= loss_workspace_bytes(items),
                 "{} (CUDA): the workspace holds {} bytes, {} needed", name(), ws.defined() ? ws.nbytes() : 0,
                 loss_workspace_bytes(items));
  }
  void check_backward(const graph::BackwardCtx& ctx) const {
    VISION_CHECK(!ctx.saved.empty(), "{}: backward needs a plan built for training", name());
    check_tensor(ctx.saved[0], name().c_str(), "the saved normaliser", Shape{1}, DType::f32);
    check_tensor(ctx.grad_output, name().c_str(), "the loss gradient", Shape{}, DType::f32);
  }

  std::unique_ptr<graph::RuntimeOp> twin_;
  graph::Mode mode_;
};

class BceClsCudaRuntime final : public LossCudaRuntime {
 public:
  using LossCudaRuntime::LossCudaRuntime;

  size_t workspace_bytes(const graph::PlanContext&, const std::vector<Shape>& in, const Shape&) const override {
    return loss_workspace_bytes(in.at(0).numel());
  }
  void forward(graph::ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs.at(0);
    VISION_CHECK(x.rank() == 3, "bce_cls_loss (CUDA): the logits must be [B, nc, A], got {}", x.str());
    check_tensor(x, "bce_cls_loss", "logits", x.shape(), format().dtype);
    check_tensor(ctx.inputs.at(1), "bce_cls_loss", "target scores", x.shape(), DType::f32);
    check_tensor(ctx.output, "bce_cls_loss", "the loss", Shape{}, DType::f32);
    check_workspace(ctx.workspace, x.numel());
    launch_bce_cls_forward(stream_of(ctx.backend), x.dtype(), x.raw(),
                           static_cast<const float*>(ctx.inputs[1].raw()), static_cast<float*>(ctx.output.raw()),
                           norm_out(ctx), ctx.workspace.raw(), x.numel());
  }
  void backward(graph::BackwardCtx& ctx) override {
    check_backward(ctx);
    const cudaStream_t stream = stream_of(ctx.backend);
    const Tensor& x = ctx.inputs.at(0);
    if (const Tensor& d = ctx.grad_inputs.at(0); d.defined()) {
      check_tensor(d, "bce_cls_loss", "grad_logits", x.shape(), x.dtype());
      launch_bce_cls_backward(stream, x.dtype(), x.raw(), static_cast<const float*>(ctx.inputs.at(1).raw()),
                              static_cast<const float*>(ctx.grad_output.raw()),
                              static_cast<const float*>(ctx.saved[0].raw()), d.raw(), x.numel());
    }
    zero_async_if_defined(ctx.grad_inputs.at(1), stream);
  }
  std::vector<graph::KernelInfo> kernels() const override {
    const DType t = format().dtype;
    std::vector<graph::KernelInfo> out = {graph::kernel_info(cuda::kernel_instance<BceClsForwardPartial>(t)),
                                          graph::kernel_info(cuda::kernel_instance<LossSumFinalize>())};
    if (mode_ == graph::Mode::train) out.push_back(graph::kernel_info(cuda::kernel_instance<BceClsBackward>(t)));
    return out;
  }
};

class L1DistanceCudaRuntime final : public LossCudaRuntime {
 public:
  using LossCudaRuntime::LossCudaRuntime;

  size_t workspace_bytes(const graph::PlanContext&, const std::vector<Shape>& in, const Shape&) const override {
    return loss_workspace_bytes(in.at(0)[0] * in.at(0)[2]);
  }
  void forward(graph::ForwardCtx& ctx) override {
    const Tensor& p = ctx.inputs.at(0);
    VISION_CHECK(p.rank() == 3 && p.dim(1) == 4, "l1_distance_loss (CUDA): pred must be [B, 4, A], got {}", p.str());
    const int64_t batch = p.dim(0), n = p.dim(2);
    check_tensor(p, "l1_distance_loss", "pred", p.shape(), format().dtype);
    check_tensor(ctx.inputs.at(1), "l1_distance_loss", "target", p.shape(), DType::f32);
    check_tensor(ctx.inputs.at(2), "l1_distance_loss", "weight", Shape{batch, n}, DType::f32);
    check_tensor(ctx.params.at(0), "l1_distance_loss", "anchors", Shape{3, n}, DType::f32);
    check_tensor(ctx.output, "l1_distance_loss", "the loss", Shape{}, DType::f32);
    check_workspace(ctx.workspace, batch * n);
    const auto size = image_size(ctx.inputs);
    launch_l1_distance_forward(stream_of(ctx.backend), p.dtype(), p.raw(),
                               static_cast<const float*>(ctx.inputs[1].raw()),
                               static_cast<const float*>(ctx.inputs[2].raw()),
                               static_cast<const float*>(ctx.params[0].raw()), static_cast<float*>(ctx.output.raw()),
                               norm_out(ctx), ctx.workspace.raw(), batch, n, size[0], size[1]);
  }
  void backward(graph::BackwardCtx& ctx) override {
    check_backward(ctx);
    const cudaStream_t stream = stream_of(ctx.backend);
    const Tensor& p = ctx.inputs.at(0);
    if (const Tensor& d = ctx.grad_inputs.at(0); d.defined()) {
      check_tensor(d, "l1_distance_loss", "grad_pred", p.shape(), p.dtype());
      const auto size = image_size(ctx.inputs);
      launch_l1_distance_backward(stream, p.dtype(), p.raw(), static_cast<const float*>(ctx.inputs.at(1).raw()),
                                  static_cast<const float*>(ctx.inputs.at(2).raw()),
                                  static_cast<const float*>(ctx.params.at(0).raw()),
                                  static_cast<const float*>(ctx.grad_output.raw()),
                                  static_cast<const float*>(ctx.saved[0].raw()), d.raw(), p.dim(0), p.dim(2), size[0],
                                  size[1]);
    }
    for (size_t i = 1; i < 6; ++i) zero_async_if_defined(ctx.grad_inputs.at(i), stream);
  }
  std::vector<graph::KernelInfo> kernels() const override {
    const DType t = format().dtype;
    std::vector<graph::KernelInfo> out = {graph::kernel_info(cuda::kernel_instance<L1DistanceForwardPartial>(t)),
                                          graph::kernel_info(cuda::kernel_instance<LossSumFinalize>())};
    if (mode_ == graph::Mode::train) out.push_back(graph::kernel_info(cuda::kernel_instance<L1DistanceBackward>(t)));
    return out;
  }

 private:
  static std::array<int64_t, 2> image_size(const std::vector<Tensor>& in) {
    return detect_image_size(in.at(3).shape(), in.at(4).shape(), in.at(5).shape());
  }
};

}  // namespace

std::unique_ptr<graph::RuntimeOp> make_bce_cls_loss_cuda(std::unique_ptr<graph::RuntimeOp> twin, graph::Mode mode) {
  VISION_CHECK(twin != nullptr, "make_bce_cls_loss_cuda: no CPU RuntimeOp to share specs with");
  return std::make_unique<BceClsCudaRuntime>(std::move(twin), mode);
}

std::unique_ptr<graph::RuntimeOp> make_l1_distance_loss_cuda(std::unique_ptr<graph::RuntimeOp> twin,
                                                             graph::Mode mode) {
  VISION_CHECK(twin != nullptr, "make_l1_distance_loss_cuda: no CPU RuntimeOp to share specs with");
  return std::make_unique<L1DistanceCudaRuntime>(std::move(twin), mode);
}

}  // namespace vision::models::yolo::kernels::loss
