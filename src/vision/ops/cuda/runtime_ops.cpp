// The CUDA RuntimeOps of the built-in ops: cuDNN for convolutions and BatchNorm, NVRTC kernels for the rest.
// The legacy cuDNN BatchNorm API is deprecated in cuDNN 9 but present; PyTorch's semantics match it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <map>
#include <tuple>

#include "vision/cuda/libraries.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/kernel_info_cuda.h"
#include "vision/ops/cuda/cudnn_conv.h"
#include "vision/ops/cuda/factories.h"
#include "vision/ops/kernels/batchnorm_cuda.h"
#include "vision/ops/kernels/elementwise_cuda.h"
#include "vision/ops/kernels/maxpool_cuda.h"
#include "vision/ops/kernels/permute_cuda.h"
#include "vision/ops/kernels/reduce_cuda.h"
#include "vision/ops/kernels/upsample_cuda.h"
#include "vision/ops/op_util.h"

namespace vision::ops::cuda_impl {

using core::DType;
using core::Shape;
using core::Tensor;
using graph::BackwardCtx;
using graph::CudaBackendContext;
using graph::ForwardCtx;
using graph::KernelInfo;
using graph::Mode;
using graph::ParamSpec;
using graph::RuntimeOp;
using graph::TensorSpec;

namespace {

cudaStream_t stream_of(graph::BackendContext* b) { return CudaBackendContext::of(b).stream(); }
cudnnHandle_t cudnn_of(graph::BackendContext* b) { return CudaBackendContext::of(b).cudnn(); }

// kernels() of an op: what each NVRTC kernel it may launch is.
std::vector<KernelInfo> infos(const std::vector<const cuda::Kernel*>& kernels) {
  std::vector<KernelInfo> out;
  for (const cuda::Kernel* k : kernels) out.push_back(graph::kernel_info(*k));
  return out;
}
// The f32 instantiation (the graph runs f32) of kernel D: the descriptor the launch helpers use.
template <typename D, typename... A>
const cuda::Kernel* f32_kernel(A... a) {
  return &cuda::kernel_instance<D>(DType::f32, a...);
}

// Shares name, inputs, state specs and initial state with the op's CPU RuntimeOp.
class CudaRuntimeOp : public RuntimeOp {
 public:
  explicit CudaRuntimeOp(Twin twin) : twin_(std::move(twin)) {}
  std::string name() const override { return twin_->name(); }
  int n_activation_inputs() const override { return twin_->n_activation_inputs(); }
  std::vector<ParamSpec> param_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return twin_->param_specs(in, out);
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& in, const Shape& out,
                                         uint64_t seed) const override {
    return twin_->param_init_data(i, in, out, seed);
  }
  bool has_backward() const override { return twin_->has_backward(); }

 private:
  Twin twin_;
};

// cuDNN convolution plans per (cuDNN handle, input shape, deterministic): a RuntimeOp serves one plan, whose shape and
// determinism are fixed, but workspace_bytes() runs before the first forward. A cuDNN plan is bound to its handle
// (and so to that handle's stream).
class ConvCache {
 public:
  explicit ConvCache(const Conv2dAttrs& a) : a_(a) {}
  const CudnnConv& get(cudnnHandle_t cudnn, const Shape& x, bool deterministic) const {
    auto key = std::tuple{cudnn, x.dims(), deterministic};
    auto it = convs_.find(key);
    if (it == convs_.end())
      it = convs_
               .emplace(std::move(key), std::make_unique<CudnnConv>(cudnn, a_, x, DType::f32, core::Layout::nchw,
                                                                    deterministic))
               .first;
    return *it->second;
  }

 private:
  Conv2dAttrs a_;
  mutable std::map<std::tuple<cudnnHandle_t, std::vector<int64_t>, bool>, std::unique_ptr<CudnnConv>> convs_;
};

// The workspace pointer for a convolution, checked against what its algorithms need.
void* conv_workspace(const CudnnConv& c, const Tensor& ws, size_t offset = 0) {
  const size_t have = ws.defined() ? ws.nbytes() : 0;
  VISION_CHECK(have >= offset + c.workspace_bytes(),
               "conv2d (CUDA): the workspace holds {} bytes, the convolution needs {} (the plan's workspace_bytes() "
               "was computed for another input shape or GPU)",
               have, offset + c.workspace_bytes());
  return ws.defined() ? static_cast<std::byte*>(ws.raw()) + offset : nullptr;
}

class Conv2dCuda final : public CudaRuntimeOp {
 public:
  Conv2dCuda(Twin twin, const Conv2dAttrs& a) : CudaRuntimeOp(std::move(twin)), a_(a), convs_(a) {}
  size_t workspace_bytes(const graph::PlanContext& plan, const std::vector<Shape>& in, const Shape&) const override {
    return convs_.get(cudnn_of(plan.backend), in[0], plan.deterministic).workspace_bytes();
  }
  void forward(ForwardCtx& ctx) override {
    const CudnnConv& c = convs_.get(cudnn_of(ctx.backend), ctx.inputs[0].shape(), ctx.deterministic);
    c.forward(ctx.inputs[0].raw(), ctx.params[0].raw(), ctx.output.raw(), conv_workspace(c, ctx.workspace));
    if (a_.bias) c.add_bias(ctx.params[1].raw(), ctx.output.raw());
  }
  void backward(BackwardCtx& ctx) override {
    const CudnnConv& c = convs_.get(cudnn_of(ctx.backend), ctx.inputs[0].shape(), ctx.deterministic);
    void* ws = conv_workspace(c, ctx.workspace);
    if (ctx.grad_inputs[0].defined()) c.backward_data(ctx.params[0].raw(), ctx.grad_output.raw(), ctx.grad_inputs[0].raw(), ws);
    if (ctx.grad_params[0].defined()) c.backward_filter(ctx.inputs[0].raw(), ctx.grad_output.raw(), ctx.grad_params[0].raw(), ws);
    if (a_.bias && ctx.grad_params[1].defined()) c.backward_bias(ctx.grad_output.raw(), ctx.grad_params[1].raw());
  }

 private:
  Conv2dAttrs a_;
  ConvCache convs_;
};

// Inference: W' = W·γ/σ and b' = β + (b − μ)·γ/σ folded into the plan's derived tensors once per state version
// (refresh, outside the captured graph), one cuDNN convolution with bias, SiLU in place.
class FusedConv2dCuda final : public CudaRuntimeOp {
 public:
  FusedConv2dCuda(Twin twin, const Conv2dAttrs& a, const ConvFusion& f)
      : CudaRuntimeOp(std::move(twin)), a_(a), f_(f), convs_(with_bias(a)) {}
  bool has_backward() const override { return false; }
  size_t workspace_bytes(const graph::PlanContext& plan, const std::vector<Shape>& in, const Shape&) const override {
    return convs_.get(cudnn_of(plan.backend), in[0], plan.deterministic).workspace_bytes();
  }
  std::vector<KernelInfo> kernels() const override {
    std::vector<const cuda::Kernel*> launched;
    if (f_.batchnorm) launched.push_back(f32_kernel<kernels::BatchNormFold>());
    if (f_.silu) launched.push_back(f32_kernel<kernels::SiluForward>());
    return infos(launched);
  }
  std::vector<TensorSpec> derived_specs(const std::vector<Shape>&, const Shape&) const override {
    if (!f_.batchnorm) return {};
    return {{a_.weight_shape(), DType::f32}, {Shape{a_.out_channels}, DType::f32}};
  }
  void refresh(ForwardCtx& ctx) override {
    if (!f_.batchnorm) return;
    VISION_CHECK(ctx.derived.size() == 2, "{}: refresh needs the folded weight and bias", name());
    const size_t n_conv = a_.bias ? 2 : 1;
    const auto& p = ctx.params;
    kernels::launch_batchnorm_fold(stream_of(ctx.backend), static_cast<const float*>(p[0].raw()),
                                   a_.bias ? static_cast<const float*>(p[1].raw()) : nullptr,
                                   static_cast<const float*>(p[n_conv].raw()),
                                   static_cast<const float*>(p[n_conv + 1].raw()),
                                   static_cast<const float*>(p[n_conv + 2].raw()),
                                   static_cast<const float*>(p[n_conv + 3].raw()),
                                   static_cast<float*>(ctx.derived[0].raw()), static_cast<float*>(ctx.derived[1].raw()),
                                   a_.out_channels, a_.weight_shape().numel() / a_.out_channels, f_.bn_eps);
  }
  void forward(ForwardCtx& ctx) override {
    const CudnnConv& c = convs_.get(cudnn_of(ctx.backend), ctx.inputs[0].shape(), ctx.deterministic);
    const void* w = ctx.params[0].raw();
    const void* b = a_.bias ? ctx.params[1].raw() : nullptr;
    if (f_.batchnorm) {
      VISION_CHECK(ctx.derived.size() == 2, "{}: the folded weight and bias are missing (run refresh first)", name());
      w = ctx.derived[0].raw();
      b = ctx.derived[1].raw();
    }
    c.forward(ctx.inputs[0].raw(), w, ctx.output.raw(), conv_workspace(c, ctx.workspace));
    if (b) c.add_bias(b, ctx.output.raw());
    if (f_.silu)
      kernels::launch_silu_forward(stream_of(ctx.backend), DType::f32, ctx.output.raw(), ctx.output.raw(),
                                   ctx.output.numel());
  }

 private:
  static Conv2dAttrs with_bias(Conv2dAttrs a) {
    a.bias = true;
    return a;
  }
  Conv2dAttrs a_;
  ConvFusion f_;
  ConvCache convs_;
};

// cuDNN spatial BatchNorm: training with batch statistics (running statistics updated with the unbiased
// variance, as PyTorch does), inference with the running statistics.
class BatchNorm2dCuda final : public CudaRuntimeOp {
 public:
  BatchNorm2dCuda(Twin twin, float eps, float momentum, Mode mode)
      : CudaRuntimeOp(std::move(twin)), eps_(eps), momentum_(momentum), mode_(mode) {}
  ~BatchNorm2dCuda() override {
    if (c_desc_) cudnnDestroyTensorDescriptor(c_desc_);
    if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
  }
  // cuDNN does the normalisation; training forward counts the batch with an NVRTC kernel.
  std::vector<KernelInfo> kernels() const override {
    if (mode_ != Mode::train) return {};
    return infos({&cuda::kernel_instance<kernels::IncrementCounter>()});
  }
  std::vector<TensorSpec> saved_specs(const std::vector<Shape>& in, const Shape&) const override {
    if (mode_ != Mode::train) return {};
    return {{Shape{in[0][1]}, DType::f32}, {Shape{in[0][1]}, DType::f32}};  // batch mean, inverse std
  }
  void forward(ForwardCtx& ctx) override {
    prepare(ctx.inputs[0].shape());
    const float one = 1.0f, zero = 0.0f;
    const auto& p = ctx.params;
    if (!ctx.training) {
      VISION_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
          cudnn_of(ctx.backend), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_desc_, ctx.inputs[0].raw(), x_desc_,
          ctx.output.raw(), c_desc_, p[0].raw(), p[1].raw(), p[2].raw(), p[3].raw(), eps_));
      return;
    }
    VISION_CHECK(ctx.inputs[0].numel() / ctx.inputs[0].dim(1) > 1,
                 "batchnorm2d in training needs more than one value per channel, got input {}", ctx.inputs[0].str());
    VISION_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        cudnn_of(ctx.backend), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_desc_, ctx.inputs[0].raw(), x_desc_,
        ctx.output.raw(), c_desc_, p[0].raw(), p[1].raw(), momentum_, p[2].raw(), p[3].raw(), eps_,
        ctx.saved[0].raw(), ctx.saved[1].raw()));
    kernels::launch_increment_counter(stream_of(ctx.backend), static_cast<int64_t*>(p[4].raw()));
  }
  void backward(BackwardCtx& ctx) override {
    prepare(ctx.inputs[0].shape());
    VISION_CHECK(ctx.saved.size() == 2, "batchnorm2d backward needs the batch statistics of a training forward");
    VISION_CHECK(ctx.grad_inputs[0].defined() && ctx.grad_params[0].defined() && ctx.grad_params[1].defined(),
                 "batchnorm2d backward on CUDA writes dx, dγ and dβ together");
    const float one = 1.0f, zero = 0.0f;
    VISION_CUDNN_CHECK(cudnnBatchNormalizationBackward(
        cudnn_of(ctx.backend), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, x_desc_, ctx.inputs[0].raw(),
        x_desc_, ctx.grad_output.raw(), x_desc_, ctx.grad_inputs[0].raw(), c_desc_, ctx.params[0].raw(),
        ctx.grad_params[0].raw(), ctx.grad_params[1].raw(), eps_, ctx.saved[0].raw(), ctx.saved[1].raw()));
  }

 private:
  // Sets the descriptors for input x (created on first use, so that lowering needs no GPU or cuDNN call).
  void prepare(const Shape& x) {
    if (x_desc_ && x == shape_) return;
    if (!x_desc_) VISION_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_desc_));
    if (!c_desc_) VISION_CUDNN_CHECK(cudnnCreateTensorDescriptor(&c_desc_));
    shape_ = Shape();  // set again only once both descriptors describe x
    VISION_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(x[0]),
                                                  static_cast<int>(x[1]), static_cast<int>(x[2]),
                                                  static_cast<int>(x[3])));
    VISION_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(c_desc_, x_desc_, CUDNN_BATCHNORM_SPATIAL));
    shape_ = x;
  }
  float eps_;
  double momentum_;
  Mode mode_;
  Shape shape_;
  cudnnTensorDescriptor_t x_desc_ = nullptr, c_desc_ = nullptr;
};

// y = f(x) element-wise; backward from x (SiLU) or from y (sigmoid).
class UnaryCuda final : public CudaRuntimeOp {
 public:
  enum class Kind { silu, sigmoid };
  UnaryCuda(Twin twin, Kind kind) : CudaRuntimeOp(std::move(twin)), kind_(kind) {}
  std::vector<KernelInfo> kernels() const override {
    if (kind_ == Kind::silu) return infos({f32_kernel<kernels::SiluForward>(), f32_kernel<kernels::SiluBackward>()});
    return infos({f32_kernel<kernels::SigmoidForward>(), f32_kernel<kernels::SigmoidBackward>()});
  }
  void forward(ForwardCtx& ctx) override {
    const auto f = kind_ == Kind::silu ? kernels::launch_silu_forward : kernels::launch_sigmoid_forward;
    f(stream_of(ctx.backend), DType::f32, ctx.inputs[0].raw(), ctx.output.raw(), ctx.output.numel());
  }
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    const Tensor& from = kind_ == Kind::silu ? ctx.inputs[0] : ctx.output;
    const auto f = kind_ == Kind::silu ? kernels::launch_silu_backward : kernels::launch_sigmoid_backward;
    f(stream_of(ctx.backend), DType::f32, from.raw(), ctx.grad_output.raw(), ctx.grad_inputs[0].raw(),
      ctx.output.numel());
  }

 private:
  Kind kind_;
};

class BinaryCuda final : public CudaRuntimeOp {
 public:
  enum class Kind { add, mul };
  BinaryCuda(Twin twin, Kind kind) : CudaRuntimeOp(std::move(twin)), kind_(kind) {}
  std::vector<KernelInfo> kernels() const override {
    if (kind_ == Kind::add) return infos({f32_kernel<kernels::AddForward>(), f32_kernel<kernels::AddBackward>()});
    return infos({f32_kernel<kernels::MulForward>(), f32_kernel<kernels::MulBackward>()});
  }
  void forward(ForwardCtx& ctx) override {
    const auto f = kind_ == Kind::add ? kernels::launch_add_forward : kernels::launch_mul_forward;
    f(stream_of(ctx.backend), DType::f32, ctx.inputs[0].raw(), ctx.inputs[1].raw(), ctx.output.raw(),
      ctx.output.numel());
  }
  void backward(BackwardCtx& ctx) override {
    void* da = ctx.grad_inputs[0].defined() ? ctx.grad_inputs[0].raw() : nullptr;
    void* db = ctx.grad_inputs[1].defined() ? ctx.grad_inputs[1].raw() : nullptr;
    if (!da && !db) return;
    const cudaStream_t s = stream_of(ctx.backend);
    if (kind_ == Kind::add)
      kernels::launch_add_backward(s, DType::f32, ctx.grad_output.raw(), da, db, ctx.output.numel());
    else
      kernels::launch_mul_backward(s, DType::f32, ctx.grad_output.raw(), ctx.inputs[0].raw(), ctx.inputs[1].raw(), da,
                                   db, ctx.output.numel());
  }

 private:
  Kind kind_;
};

class MaxPool2dCuda final : public CudaRuntimeOp {
 public:
  MaxPool2dCuda(Twin twin, int64_t k, int64_t s, int64_t p, Mode mode)
      : CudaRuntimeOp(std::move(twin)),
        window_{static_cast<int>(k), static_cast<int>(s < 0 ? k : s), static_cast<int>(p)},
        mode_(mode) {}
  std::vector<TensorSpec> saved_specs(const std::vector<Shape>&, const Shape& out) const override {
    if (mode_ != Mode::train) return {};
    return {{out, DType::i32}};
  }
  size_t workspace_bytes(const graph::PlanContext&, const std::vector<Shape>&, const Shape& out) const override {
    return mode_ == Mode::train ? 0 : static_cast<size_t>(out.numel()) * 4;  // argmax nobody reads
  }
  // Backward needs the argmax saved in training.
  std::vector<KernelInfo> kernels() const override {
    if (mode_ != Mode::train) return infos({f32_kernel<kernels::MaxPool2dForward>(window_)});
    return infos({f32_kernel<kernels::MaxPool2dForward>(window_), f32_kernel<kernels::MaxPool2dBackward>(window_)});
  }
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    auto* argmax = static_cast<int32_t*>(ctx.saved.empty() ? ctx.workspace.raw() : ctx.saved[0].raw());
    kernels::launch_maxpool2d_forward(stream_of(ctx.backend), DType::f32, window_, x.raw(), ctx.output.raw(), argmax,
                                      x.dim(0) * x.dim(1), x.dim(2), x.dim(3));
  }
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    const Tensor& x = ctx.inputs[0];
    kernels::launch_maxpool2d_backward(stream_of(ctx.backend), DType::f32, window_, ctx.grad_output.raw(),
                                       static_cast<const int32_t*>(ctx.saved[0].raw()), ctx.grad_inputs[0].raw(),
                                       x.dim(0) * x.dim(1), x.dim(2), x.dim(3));
  }

 private:
  kernels::MaxPool2dWindow window_;
  Mode mode_;
};

class UpsampleCuda final : public CudaRuntimeOp {
 public:
  explicit UpsampleCuda(Twin twin) : CudaRuntimeOp(std::move(twin)) {}
  std::vector<KernelInfo> kernels() const override {
    return infos({f32_kernel<kernels::UpsampleNearest2xForward>(), f32_kernel<kernels::UpsampleNearest2xBackward>()});
  }
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    kernels::launch_upsample_nearest2x_forward(stream_of(ctx.backend), DType::f32, x.raw(), ctx.output.raw(),
                                               x.dim(0) * x.dim(1), x.dim(2), x.dim(3));
  }
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    const Tensor& x = ctx.inputs[0];
    kernels::launch_upsample_nearest2x_backward(stream_of(ctx.backend), DType::f32, ctx.grad_output.raw(),
                                                ctx.grad_inputs[0].raw(), x.dim(0) * x.dim(1), x.dim(2), x.dim(3));
  }
};

// Dims reordered (rank ≤ 4); the backward is the inverse permutation of the gradient.
class PermuteCuda final : public CudaRuntimeOp {
 public:
  PermuteCuda(Twin twin, std::vector<int64_t> perm) : CudaRuntimeOp(std::move(twin)), perm_(std::move(perm)) {}
  std::vector<KernelInfo> kernels() const override { return infos({f32_kernel<kernels::PermuteCopy>()}); }
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    kernels::launch_permute(stream_of(ctx.backend), x.dtype(), x.raw(), ctx.output.raw(), ctx.output.shape(),
                            permuted_strides(x.shape(), perm_));
  }
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    const Tensor& dy = ctx.grad_output;
    kernels::launch_permute(stream_of(ctx.backend), dy.dtype(), dy.raw(), ctx.grad_inputs[0].raw(),
                            ctx.grad_inputs[0].shape(), permuted_strides(dy.shape(), inverse_permutation(perm_)));
  }

 private:
  std::vector<int64_t> perm_;
};

// ½·Σx² (square) or Σx / n (mean).
class ReduceCuda final : public CudaRuntimeOp {
 public:
  ReduceCuda(Twin twin, bool square) : CudaRuntimeOp(std::move(twin)), square_(square) {}
  std::vector<KernelInfo> kernels() const override {
    return infos({f32_kernel<kernels::ReduceSumForward>(square_), f32_kernel<kernels::ReduceSumBackward>(square_)});
  }
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    kernels::launch_reduce_sum_forward(stream_of(ctx.backend), DType::f32, square_, x.raw(), ctx.output.raw(),
                                       x.numel(), scale(x));
  }
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    const Tensor& x = ctx.inputs[0];
    kernels::launch_reduce_sum_backward(stream_of(ctx.backend), DType::f32, square_, x.raw(), ctx.grad_output.raw(),
                                        ctx.grad_inputs[0].raw(), x.numel(), scale(x));
  }

 private:
  float scale(const Tensor& x) const {
    return square_ ? 0.5f : static_cast<float>(1.0 / static_cast<double>(std::max<int64_t>(x.numel(), 1)));
  }
  bool square_;
};

}  // namespace

std::unique_ptr<RuntimeOp> make_conv2d(Twin twin, const Conv2dAttrs& a) {
  return std::make_unique<Conv2dCuda>(std::move(twin), a);
}
std::unique_ptr<RuntimeOp> make_fused_conv2d(Twin twin, const Conv2dAttrs& a, const ConvFusion& f) {
  return std::make_unique<FusedConv2dCuda>(std::move(twin), a, f);
}
std::unique_ptr<RuntimeOp> make_batchnorm2d(Twin twin, float eps, float momentum, Mode mode) {
  return std::make_unique<BatchNorm2dCuda>(std::move(twin), eps, momentum, mode);
}
std::unique_ptr<RuntimeOp> make_silu(Twin twin) { return std::make_unique<UnaryCuda>(std::move(twin), UnaryCuda::Kind::silu); }
std::unique_ptr<RuntimeOp> make_sigmoid(Twin twin) {
  return std::make_unique<UnaryCuda>(std::move(twin), UnaryCuda::Kind::sigmoid);
}
std::unique_ptr<RuntimeOp> make_add(Twin twin) { return std::make_unique<BinaryCuda>(std::move(twin), BinaryCuda::Kind::add); }
std::unique_ptr<RuntimeOp> make_mul(Twin twin) { return std::make_unique<BinaryCuda>(std::move(twin), BinaryCuda::Kind::mul); }
std::unique_ptr<RuntimeOp> make_maxpool2d(Twin twin, int64_t k, int64_t s, int64_t p, Mode mode) {
  return std::make_unique<MaxPool2dCuda>(std::move(twin), k, s, p, mode);
}
std::unique_ptr<RuntimeOp> make_upsample_nearest(Twin twin, int64_t scale) {
  VISION_CHECK(scale == 2, "upsample_nearest on CUDA supports scale 2 (YOLO26's), not {}", scale);
  return std::make_unique<UpsampleCuda>(std::move(twin));
}
std::unique_ptr<RuntimeOp> make_permute(Twin twin, const std::vector<int64_t>& perm) {
  return std::make_unique<PermuteCuda>(std::move(twin), perm);
}
std::unique_ptr<RuntimeOp> make_sum_squares(Twin twin) { return std::make_unique<ReduceCuda>(std::move(twin), true); }
std::unique_ptr<RuntimeOp> make_mean(Twin twin) { return std::make_unique<ReduceCuda>(std::move(twin), false); }

}  // namespace vision::ops::cuda_impl
