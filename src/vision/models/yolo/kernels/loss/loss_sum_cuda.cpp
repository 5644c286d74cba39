#include "vision/models/yolo/kernels/loss/loss_sum_cuda.h"

#include <cuda_runtime.h>

#include <limits>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/models/yolo/kernels/loss/host_util_cuda.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/kernel_info_cuda.h"
#include "vision/models/yolo/kernels/loss/cls_cuda.h"

namespace vision::models::yolo::kernels::loss {
namespace {

using core::DType;
using core::Shape;

constexpr int kThreads = 256;  // kClsLossThreads of cls.cuh: the partial sums' block size
constexpr const char* kLossSumFile = "vision/models/yolo/kernels/loss/loss_sum.cuh";
constexpr const char* kLossSumScope = "vision::models::yolo::kernels::loss";

void register_loss_sum_kernels(cuda::KernelRegistry& r) {
  r.add<TargetScoreSum>();
  r.add<NormalizedSumPartial>();
  r.add<NormalizedSumBackward>();
  r.add<DetectionLossForward>();
  r.add<DetectionLossBackward>();
  r.add<E2ELossSumForward>();
  r.add<E2ELossSumBackward>();
}
VISION_REGISTER_KERNELS(register_loss_sum_kernels);

cuda::KernelSpec sum_spec(const char* name, const char* params) { return {name, kLossSumFile, DType::f32, {}, params, kLossSumScope}; }

void check_count(int64_t n, const char* what) {
  VISION_CHECK(n >= 0 && n <= std::numeric_limits<int64_t>::max() / 4, "{} (GPU): {} elements are out of range", what,
               n);
}

}  // namespace

TargetScoreSum::TargetScoreSum()
    : KernelDescriptor(sum_spec("target_score_sum", "const float*, float*, int64_t, int64_t, int64_t")) {}
NormalizedSumPartial::NormalizedSumPartial()
    : KernelDescriptor(sum_spec("normalized_sum_partial", "const float*, const float*, float*, int64_t")) {}
NormalizedSumBackward::NormalizedSumBackward()
    : KernelDescriptor(sum_spec("normalized_sum_backward", "const float*, const float*, float*, int64_t")) {}
DetectionLossForward::DetectionLossForward()
    : KernelDescriptor(sum_spec("detection_loss_forward",
                                "const float*, const float*, const float*, float*, float*, int64_t, float, float, "
                                "float")) {}
DetectionLossBackward::DetectionLossBackward()
    : KernelDescriptor(sum_spec("detection_loss_backward",
                                "const float*, const float*, float*, float*, float*, int64_t, float, float, float")) {}
E2ELossSumForward::E2ELossSumForward()
    : KernelDescriptor(sum_spec("e2e_loss_sum_forward", "const float*, const float*, const float*, float*")) {}
E2ELossSumBackward::E2ELossSumBackward()
    : KernelDescriptor(sum_spec("e2e_loss_sum_backward",
                                "const float*, const float*, const float*, const float*, float*, float*, float*")) {}

void launch_target_score_sum(cudaStream_t stream, const float* scores, float* weight, int64_t batch, int64_t classes,
                             int64_t n_anchors) {
  VISION_CHECK(batch >= 0 && classes >= 0 && n_anchors >= 0 &&
                   (n_anchors == 0 || batch <= std::numeric_limits<int64_t>::max() / 4 / n_anchors),
               "target_score_sum (GPU): batch {}, {} classes and {} anchors are out of range", batch, classes,
               n_anchors);
  if (batch * n_anchors == 0) return;
  cuda::kernel_instance<TargetScoreSum>().launch_over(stream, batch * n_anchors, kThreads, scores, weight, batch, classes, n_anchors);
}

void launch_normalized_sum_forward(cudaStream_t stream, const float* x, const float* w, float* loss, float* norm,
                                   void* workspace, int64_t n) {
  check_count(n, "normalized_sum");
  const int64_t blocks = loss_partial_blocks(n);
  auto* partials = static_cast<float*>(workspace);
  cuda::kernel_instance<NormalizedSumPartial>().launch(stream, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0,
                                                       x, w, partials, n);
  launch_loss_sum_finalize(stream, partials, blocks, loss, norm);
}

void launch_normalized_sum_backward(cudaStream_t stream, const float* grad_loss, const float* norm, float* grad_x,
                                    int64_t n) {
  check_count(n, "normalized_sum");
  if (n == 0) return;
  cuda::kernel_instance<NormalizedSumBackward>().launch_over(stream, n, kThreads, grad_loss, norm, grad_x, n);
}

void launch_detection_loss_forward(cudaStream_t stream, const float* box, const float* cls, const float* l1,
                                   float* loss, float* items, int64_t batch, const LossGains& g) {
  cuda::kernel_instance<DetectionLossForward>().launch(stream, dim3(1), dim3(32), 0, box, cls, l1, loss, items, batch,
                                                       g.box, g.cls, g.l1);
}

void launch_detection_loss_backward(cudaStream_t stream, const float* d_loss, const float* d_items, float* d_box,
                                    float* d_cls, float* d_l1, int64_t batch, const LossGains& g) {
  cuda::kernel_instance<DetectionLossBackward>().launch(stream, dim3(1), dim3(32), 0, d_loss, d_items, d_box, d_cls,
                                                        d_l1, batch, g.box, g.cls, g.l1);
}

void launch_e2e_loss_sum_forward(cudaStream_t stream, const float* a, const float* b, const float* w, float* total) {
  cuda::kernel_instance<E2ELossSumForward>().launch(stream, dim3(1), dim3(32), 0, a, b, w, total);
}

void launch_e2e_loss_sum_backward(cudaStream_t stream, const float* a, const float* b, const float* w,
                                  const float* dy, float* d_a, float* d_b, float* d_w) {
  cuda::kernel_instance<E2ELossSumBackward>().launch(stream, dim3(1), dim3(32), 0, a, b, w, dy, d_a, d_b, d_w);
}

// ---------------------------------------------------------------------------------------------------------------
// CUDA RuntimeOps

namespace {

using graph::stream_of;

// The tensor's f32 device pointer after checking it; null for an undefined tensor when `optional`.
const float* f32_in(const Tensor& t, const std::string& op, const char* what, const Shape& shape,
                    bool optional = false) {
  if (optional && !t.defined()) return nullptr;
  VISION_CHECK(t.defined() && t.device() == core::Device::cuda && t.dtype() == DType::f32 && t.shape() == shape,
               "{} (CUDA): {} must be an f32 {} tensor on the GPU, got {}", op, what, shape.str(),
               t.defined() ? t.str() : std::string("an undefined tensor"));
  return static_cast<const float*>(t.raw());
}
float* f32_out(const Tensor& t, const std::string& op, const char* what, const Shape& shape, bool optional = false) {
  return const_cast<float*>(f32_in(t, op, what, shape, optional));
}

// What the four CUDA RuntimeOps share: the twin's name, inputs and saved specs; f32 only, any layout.
class SumCudaRuntime : public graph::RuntimeOp {
 public:
  explicit SumCudaRuntime(std::unique_ptr<graph::RuntimeOp> twin) : twin_(std::move(twin)) {}
  std::string name() const override { return twin_->name(); }
  int n_activation_inputs() const override { return twin_->n_activation_inputs(); }
  bool supports(const graph::Format& f) const override { return f.dtype == DType::f32; }
  bool reads_input(size_t i) const override { return twin_->reads_input(i); }
  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return twin_->saved_specs(in, out);
  }
  bool has_backward() const override { return twin_->has_backward(); }

 protected:
  std::unique_ptr<graph::RuntimeOp> twin_;
};

class TargetScoreSumCudaRuntime final : public SumCudaRuntime {
 public:
  using SumCudaRuntime::SumCudaRuntime;
  void forward(graph::ForwardCtx& ctx) override {
    const Tensor& s = ctx.inputs.at(0);
    VISION_CHECK(s.rank() == 3, "target_score_sum (CUDA): the target scores must be [B, nc, A], got {}", s.str());
    const int64_t batch = s.dim(0), nc = s.dim(1), n = s.dim(2);
    launch_target_score_sum(stream_of(ctx.backend), f32_in(s, name(), "the target scores", s.shape()),
                            f32_out(ctx.output, name(), "the weight", Shape{batch, n}), batch, nc, n);
  }
  std::vector<graph::KernelInfo> kernels() const override {
    return {graph::kernel_info(cuda::kernel_instance<TargetScoreSum>())};
  }
};

class NormalizedSumCudaRuntime final : public SumCudaRuntime {
 public:
  using SumCudaRuntime::SumCudaRuntime;
  size_t workspace_bytes(const graph::PlanContext&, const std::vector<Shape>& in, const Shape&) const override {
    return loss_workspace_bytes(in.at(0).numel());
  }
  void forward(graph::ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs.at(0);
    const int64_t n = x.numel();
    VISION_CHECK(ctx.workspace.defined() && ctx.workspace.nbytes() >= loss_workspace_bytes(n),
                 "normalized_sum (CUDA): the workspace holds {} bytes, {} needed",
                 ctx.workspace.defined() ? ctx.workspace.nbytes() : 0, loss_workspace_bytes(n));
    float* norm = ctx.saved.empty() ? nullptr : f32_out(ctx.saved[0], name(), "the saved normaliser", Shape{1});
    launch_normalized_sum_forward(stream_of(ctx.backend), f32_in(x, name(), "x", x.shape()),
                                  f32_in(ctx.inputs.at(1), name(), "w", x.shape()),
                                  f32_out(ctx.output, name(), "the sum", Shape{}), norm, ctx.workspace.raw(), n);
  }
  void backward(graph::BackwardCtx& ctx) override {
    VISION_CHECK(!ctx.saved.empty(), "normalized_sum: backward needs a plan built for training");
    const cudaStream_t stream = stream_of(ctx.backend);
    const Tensor& x = ctx.inputs.at(0);
    if (const Tensor& d = ctx.grad_inputs.at(0); d.defined())
      launch_normalized_sum_backward(stream, f32_in(ctx.grad_output, name(), "the sum's gradient", Shape{}),
                                     f32_in(ctx.saved[0], name(), "the saved normaliser", Shape{1}),
                                     f32_out(d, name(), "grad_x", x.shape()), x.numel());
    zero_async_if_defined(ctx.grad_inputs.at(1), stream);
  }
  std::vector<graph::KernelInfo> kernels() const override {
    return {graph::kernel_info(cuda::kernel_instance<NormalizedSumPartial>()),
            graph::kernel_info(cuda::kernel_instance<LossSumFinalize>()),
            graph::kernel_info(cuda::kernel_instance<NormalizedSumBackward>())};
  }
};

class DetectionLossCudaRuntime final : public SumCudaRuntime {
 public:
  DetectionLossCudaRuntime(std::unique_ptr<graph::RuntimeOp> twin, LossGains gains)
      : SumCudaRuntime(std::move(twin)), gains_(gains) {}
  void forward(graph::ForwardCtx& ctx) override {
    launch_detection_loss_forward(stream_of(ctx.backend), f32_in(ctx.inputs.at(0), name(), "box", Shape{}),
                                  f32_in(ctx.inputs.at(1), name(), "cls", Shape{}),
                                  f32_in(ctx.inputs.at(2), name(), "l1", Shape{}),
                                  f32_out(ctx.outputs.at(0), name(), "the loss", Shape{}),
                                  f32_out(ctx.outputs.at(1), name(), "the items", Shape{3}), batch(ctx.inputs), gains_);
  }
  void backward(graph::BackwardCtx& ctx) override {
    const std::string& op = name();
    launch_detection_loss_backward(stream_of(ctx.backend), f32_in(ctx.grad_outputs.at(0), op, "d_loss", Shape{}, true),
                                   f32_in(ctx.grad_outputs.at(1), op, "d_items", Shape{3}, true),
                                   f32_out(ctx.grad_inputs.at(0), op, "d_box", Shape{}, true),
                                   f32_out(ctx.grad_inputs.at(1), op, "d_cls", Shape{}, true),
                                   f32_out(ctx.grad_inputs.at(2), op, "d_l1", Shape{}, true), batch(ctx.inputs),
                                   gains_);
    zero_async_if_defined(ctx.grad_inputs.at(3), stream_of(ctx.backend));
  }
  std::vector<graph::KernelInfo> kernels() const override {
    return {graph::kernel_info(cuda::kernel_instance<DetectionLossForward>()),
            graph::kernel_info(cuda::kernel_instance<DetectionLossBackward>())};
  }

 private:
  static int64_t batch(const std::vector<Tensor>& in) { return in.at(3).dim(0); }
  LossGains gains_;
};

class E2ELossSumCudaRuntime final : public SumCudaRuntime {
 public:
  using SumCudaRuntime::SumCudaRuntime;
  void forward(graph::ForwardCtx& ctx) override {
    launch_e2e_loss_sum_forward(stream_of(ctx.backend), f32_in(ctx.inputs.at(0), name(), "loss_o2m", Shape{}),
                                f32_in(ctx.inputs.at(1), name(), "loss_o2o", Shape{}),
                                f32_in(ctx.inputs.at(2), name(), "the weights", Shape{2}),
                                f32_out(ctx.output, name(), "the total", Shape{}));
  }
  void backward(graph::BackwardCtx& ctx) override {
    const std::string& op = name();
    launch_e2e_loss_sum_backward(
        stream_of(ctx.backend), f32_in(ctx.inputs.at(0), op, "loss_o2m", Shape{}),
        f32_in(ctx.inputs.at(1), op, "loss_o2o", Shape{}), f32_in(ctx.inputs.at(2), op, "the weights", Shape{2}),
        f32_in(ctx.grad_output, op, "d_total", Shape{}), f32_out(ctx.grad_inputs.at(0), op, "d_o2m", Shape{}, true),
        f32_out(ctx.grad_inputs.at(1), op, "d_o2o", Shape{}, true),
        f32_out(ctx.grad_inputs.at(2), op, "d_weights", Shape{2}, true));
  }
  std::vector<graph::KernelInfo> kernels() const override {
    return {graph::kernel_info(cuda::kernel_instance<E2ELossSumForward>()),
            graph::kernel_info(cuda::kernel_instance<E2ELossSumBackward>())};
  }
};

template <typename Rt, typename... A>
std::unique_ptr<graph::RuntimeOp> make(const char* what, std::unique_ptr<graph::RuntimeOp> twin, A&&... args) {
  VISION_CHECK(twin != nullptr, "{}: no CPU RuntimeOp to share specs with", what);
  return std::make_unique<Rt>(std::move(twin), std::forward<A>(args)...);
}

}  // namespace

std::unique_ptr<graph::RuntimeOp> make_target_score_sum_cuda(std::unique_ptr<graph::RuntimeOp> twin) {
  return make<TargetScoreSumCudaRuntime>("make_target_score_sum_cuda", std::move(twin));
}
std::unique_ptr<graph::RuntimeOp> make_normalized_sum_cuda(std::unique_ptr<graph::RuntimeOp> twin) {
  return make<NormalizedSumCudaRuntime>("make_normalized_sum_cuda", std::move(twin));
}
std::unique_ptr<graph::RuntimeOp> make_detection_loss_cuda(std::unique_ptr<graph::RuntimeOp> twin,
                                                           const LossGains& gains) {
  return make<DetectionLossCudaRuntime>("make_detection_loss_cuda", std::move(twin), gains);
}
std::unique_ptr<graph::RuntimeOp> make_e2e_loss_sum_cuda(std::unique_ptr<graph::RuntimeOp> twin) {
  return make<E2ELossSumCudaRuntime>("make_e2e_loss_sum_cuda", std::move(twin));
}

}  // namespace vision::models::yolo::kernels::loss
