// The CUDA RuntimeOps of the built-in ops: cuDNN for convolutions and BatchNorm, NVRTC kernels for the rest, each in
// the formats (f32, f16, bf16 × NCHW, NHWC) its supports() lists. The legacy cuDNN BatchNorm API is deprecated in
// cuDNN 9 but present; PyTorch's semantics match it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <cstdlib>
#include <map>
#include <string_view>
#include <tuple>

#include "vision/cuda/libraries.h"
#include "vision/cuda/sanitizer.h"
#include "vision/graph/collective.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/graph/kernel_info_cuda.h"
#include "vision/ops/cuda/cudnn_conv.h"
#include "vision/ops/cuda/factories.h"
#include "vision/ops/kernels/batchnorm_cuda.h"
#include "vision/ops/kernels/bias_cuda.h"
#include "vision/ops/kernels/depthwise_cuda.h"
#include "vision/ops/kernels/elementwise_cuda.h"
#include "vision/ops/kernels/maxpool_cuda.h"
#include "vision/ops/kernels/permute_cuda.h"
#include "vision/ops/kernels/reduce_cuda.h"
#include "vision/ops/kernels/upsample_cuda.h"
#include "vision/ops/op_util.h"

namespace vision::ops::cuda_impl {

using core::DType;
using core::Layout;
using core::Shape;
using core::Tensor;
using graph::BackwardCtx;
using graph::Format;
using graph::CudaBackendContext;
using graph::ForwardCtx;
using graph::KernelInfo;
using graph::Mode;
using graph::ParamSpec;
using graph::RuntimeOp;
using graph::TensorSpec;

namespace {

using graph::stream_of;
cudnnHandle_t cudnn_of(graph::BackendContext* b) { return CudaBackendContext::of(b).cudnn(); }

// kernels() of an op: what each NVRTC kernel it may launch is.
std::vector<KernelInfo> infos(const std::vector<const cuda::Kernel*>& kernels) {
  std::vector<KernelInfo> out;
  for (const cuda::Kernel* k : kernels) out.push_back(graph::kernel_info(*k));
  return out;
}
// The instantiation of kernel D for the given descriptor arguments (the element type first): the very descriptor the
// launch helpers use.
template <typename D, typename... A>
const cuda::Kernel* kernel_of(A... a) {
  return &cuda::kernel_instance<D>(a...);
}

size_t round_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

// Shares name, inputs, state specs and initial state with the op's CPU RuntimeOp. The format the plan set is that of
// the op's floating activations: dtype() for all of them, layout() for those of rank 4.
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

 protected:
  DType dtype() const { return format().dtype; }
  Layout layout() const { return format().layout; }
  // Throws unless t (an activation the plan handed the op) is in the op's format.
  void expect_format(const Tensor& t, const char* what) const {
    VISION_CHECK(t.dtype() == dtype() && (t.rank() != 4 || t.layout() == layout()),
                 "{} (CUDA, {}): its {} is {}, not in the op's format (a plan's format pass must convert it)", name(),
                 graph::format_name(format()), what, t.str());
  }

 private:
  Twin twin_;
};

// The state a convolution in format f reads in another format than stored: the weight (K, C/g, R, S) in f's dtype
// and layout (K, R, S, C/g in memory for NHWC: the filter layout cuDNN takes with NHWC activations), the bias in f's
// dtype. Nothing in f32 NCHW.
void set_conv_compute_formats(std::vector<ParamSpec>& specs, size_t weight, bool bias, const Format& f) {
  if (f == Format{}) return;
  specs.at(weight).compute_format = f;
  if (bias && f.dtype != DType::f32) specs.at(weight + 1).compute_format = Format{f.dtype, Layout::nchw};
}

// cuDNN convolution plans per (cuDNN handle, input shape, deterministic, TF32 allowed): a RuntimeOp serves one plan, whose shape,
// format and determinism are fixed, but workspace_bytes() runs before the first forward. A cuDNN plan is bound to its
// handle (and so to that handle's stream).
class ConvCache {
 public:
  explicit ConvCache(const Conv2dAttrs& a) : a_(a) {}
  // forward_only: for a plan that runs no backward (an inference plan's): no backward algorithms are chosen, which
  // is two thirds of the choice's cost.
  const CudnnConv& get(cudnnHandle_t cudnn, const Shape& x, bool deterministic, bool tf32, const Format& f,
                       bool forward_only) const {
    auto key = std::tuple{cudnn, x.dims(), deterministic, tf32, forward_only};
    auto it = convs_.find(key);
    if (it == convs_.end())
      it = convs_
               .emplace(std::move(key), std::make_unique<CudnnConv>(cudnn, a_, x, f.dtype, f.layout, deterministic,
                                                                    size_t(256) << 20, tf32, forward_only))
               .first;
    return *it->second;
  }

 private:
  Conv2dAttrs a_;
  mutable std::map<std::tuple<cudnnHandle_t, std::vector<int64_t>, bool, bool, bool>, std::unique_ptr<CudnnConv>>
      convs_;
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

// A 1×1 convolution in NHWC as one GEMM: y [M = B·H·W, K] = x [M, C] · wᵀ with w [K, C] (the K,R,S,C weight of a 1×1
// kernel), f16/bf16 operands and f32 accumulation. Column-major for cuBLAS: yᵀ [K, M] = w [K, C] · xᵀ [C, M].
void pointwise_conv_gemm(cublasHandle_t handle, DType dtype, const Tensor& x, const void* w, const Tensor& y) {
  const int64_t m = x.dim(0) * x.dim(2) * x.dim(3), c = x.dim(1), k = y.dim(1);
  VISION_CHECK(m <= INT32_MAX && c <= INT32_MAX && k <= INT32_MAX, "conv2d 1×1 (cuBLAS): {} is too large", x.str());
  const cudaDataType_t t = dtype == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
  const float alpha = 1.0f, beta = 0.0f;
  const int M = static_cast<int>(m), C = static_cast<int>(c), K = static_cast<int>(k);
  VISION_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, K, M, C, &alpha, w, t, C, x.raw(), t, C, &beta,
                                   y.raw(), t, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));  cudaStream_t stream = nullptr;
  VISION_CUBLAS_CHECK(cublasGetStream(handle, &stream));
  cuda::mark_written_by_library(stream, y.raw(), y.nbytes());
}

// After the convolution: y = act(y + bias) (either optional). In f32 cuDNN adds the bias (c: the convolution) and the
// SiLU kernel runs in place; in f16 and bf16 one epilogue kernel does both in f32 and rounds once (c unused).
void conv_epilogue(cudaStream_t stream, const CudnnConv* c, const Format& f, const Tensor& y, const void* bias,
                   bool silu) {
  if (f.dtype == DType::f32) {
    VISION_CHECK(c != nullptr || !bias, "conv epilogue: an f32 bias is added by cuDNN, and no convolution was given");
    if (bias) c->add_bias(bias, y.raw());
    if (silu) kernels::launch_silu_forward(stream, DType::f32, y.raw(), y.raw(), y.numel());
  } else if (bias) {
    kernels::launch_bias_act(stream, f.dtype, f.layout, silu, y.shape(), y.raw(), bias);
  } else if (silu) {
    kernels::launch_silu_forward(stream, f.dtype, y.raw(), y.raw(), y.numel());
  }
}

// The epilogue kernels of conv_epilogue in format f.
std::vector<const cuda::Kernel*> epilogue_kernels(const Format& f, bool bias, bool silu) {
  if (f.dtype != DType::f32 && bias) return {kernel_of<kernels::BiasAct>(f.dtype, f.layout, silu)};
  if (silu) return {kernel_of<kernels::SiluForward>(f.dtype)};
  return {};
}

// Any of f32, f16 and bf16 in NCHW or NHWC: cuDNN convolutions (IEEE f32, or tensor cores with f32 accumulation),
// the bias by cuDNN in f32 and by our epilogue and channel-sum kernels in f16 and bf16.
class Conv2dCuda final : public CudaRuntimeOp {
 public:
  Conv2dCuda(Twin twin, const Conv2dAttrs& a) : CudaRuntimeOp(std::move(twin)), a_(a), convs_(a) {}
  bool supports(const Format& f) const override { return core::is_floating(f.dtype); }
  std::vector<ParamSpec> param_specs(const std::vector<Shape>& in, const Shape& out) const override {
    std::vector<ParamSpec> specs = CudaRuntimeOp::param_specs(in, out);
    set_conv_compute_formats(specs, 0, a_.bias, format());
    return specs;
  }
  size_t workspace_bytes(const graph::PlanContext& plan, const std::vector<Shape>& in,
                         const Shape& out) const override {
    const size_t conv = convs_.get(cudnn_of(plan.backend), in[0], plan.deterministic, plan.tf32, format(),
                                   plan.mode != Mode::train)
                            .workspace_bytes();
    if (!bias_by_kernels() || plan.mode != Mode::train) return conv;
    return round_up(conv, 256) + kernels::channel_sum_workspace_bytes(out, layout());
  }
  // cuDNN does the convolutions; in f16 and bf16 our kernels add the bias and compute its gradient.
  std::vector<KernelInfo> kernels() const override {
    if (!bias_by_kernels()) return {};
    return infos({kernel_of<kernels::BiasAct>(dtype(), layout(), false),
                  kernel_of<kernels::ChannelSumPartials>(dtype(), layout()),
                  kernel_of<kernels::ChannelSumFinalize>(dtype())});
  }
  void forward(ForwardCtx& ctx) override {
    expect_format(ctx.inputs[0], "input");
    const CudnnConv& c = convs_.get(cudnn_of(ctx.backend), ctx.inputs[0].shape(), ctx.deterministic, ctx.tf32,
                                    format(), !ctx.training);
    c.forward(ctx.inputs[0].raw(), ctx.params[0].raw(), ctx.output.raw(), conv_workspace(c, ctx.workspace));
    conv_epilogue(stream_of(ctx.backend), &c, format(), ctx.output, a_.bias ? ctx.params[1].raw() : nullptr, false);
  }
  void backward(BackwardCtx& ctx) override {
    expect_format(ctx.grad_output, "output gradient");
    const CudnnConv& c = convs_.get(cudnn_of(ctx.backend), ctx.inputs[0].shape(), ctx.deterministic, ctx.tf32,
                                    format(), false);
    void* ws = conv_workspace(c, ctx.workspace);
    if (ctx.grad_inputs[0].defined()) c.backward_data(ctx.params[0].raw(), ctx.grad_output.raw(), ctx.grad_inputs[0].raw(), ws);
    if (ctx.grad_params[0].defined()) c.backward_filter(ctx.inputs[0].raw(), ctx.grad_output.raw(), ctx.grad_params[0].raw(), ws);
    if (!a_.bias || !ctx.grad_params[1].defined()) return;
    if (!bias_by_kernels()) return c.backward_bias(ctx.grad_output.raw(), ctx.grad_params[1].raw());
    const Shape& y = ctx.grad_output.shape();
    const size_t offset = round_up(c.workspace_bytes(), 256), need = kernels::channel_sum_workspace_bytes(y, layout());
    VISION_CHECK(ctx.workspace.defined() && ctx.workspace.nbytes() >= offset + need,
                 "{} (CUDA) backward: the workspace holds {} bytes, the bias gradient needs {} (the plan's "
                 "workspace_bytes() was not computed for training)",
                 name(), ctx.workspace.defined() ? ctx.workspace.nbytes() : 0, offset + need);
    kernels::launch_channel_sum(stream_of(ctx.backend), dtype(), layout(), y, ctx.grad_output.raw(),
                                ctx.grad_params[1].raw(), static_cast<std::byte*>(ctx.workspace.raw()) + offset);
  }

 private:
  bool bias_by_kernels() const { return a_.bias && dtype() != DType::f32; }
  Conv2dAttrs a_;
  ConvCache convs_;
};

// Inference: W' = W·γ/σ and b' = β + (b − μ)·γ/σ folded in f32 into the plan's derived tensors once per state version
// (refresh, outside the captured graph) and, outside f32 NCHW, converted there into the convolution's format; one
// cuDNN convolution, then the bias and SiLU epilogue. Without BatchNorm the weight and bias come in the convolution's
// format from the plan (ParamSpec::compute_format).
class FusedConv2dCuda final : public CudaRuntimeOp {
 public:
  FusedConv2dCuda(Twin twin, const Conv2dAttrs& a, const ConvFusion& f)
      : CudaRuntimeOp(std::move(twin)), a_(a), f_(f), convs_(with_bias(a)) {}
  bool supports(const Format& f) const override { return core::is_floating(f.dtype); }
  bool has_backward() const override { return false; }
  std::vector<ParamSpec> param_specs(const std::vector<Shape>& in, const Shape& out) const override {
    std::vector<ParamSpec> specs = CudaRuntimeOp::param_specs(in, out);
    if (!f_.batchnorm) set_conv_compute_formats(specs, 0, a_.bias, format());  // BatchNorm folds from the f32 state
    return specs;
  }
  size_t workspace_bytes(const graph::PlanContext& plan, const std::vector<Shape>& in, const Shape&) const override {
    if (depthwise() || pointwise_gemm()) return 0;
    return convs_.get(cudnn_of(plan.backend), in[0], plan.deterministic, plan.tf32, format(), true).workspace_bytes();
  }
  std::vector<KernelInfo> kernels() const override {
    std::vector<const cuda::Kernel*> launched;
    if (f_.batchnorm) launched.push_back(kernel_of<kernels::BatchNormFold>(DType::f32));
    if (depthwise()) {
      launched.push_back(kernel_of<kernels::DepthwiseConv2dNhwc>(dtype(), static_cast<int>(a_.kernel),
                                                                 static_cast<int>(a_.stride), f_.silu,
                                                                 kernels::depthwise_vec(dtype(), a_.in_channels)));
      return infos(launched);
    }
    for (const cuda::Kernel* k : epilogue_kernels(format(), f_.batchnorm || a_.bias, f_.silu)) launched.push_back(k);
    return infos(launched);
  }
  // With BatchNorm: the folded weight and bias in f32, then (outside f32 NCHW) the weight in the convolution's dtype
  // and layout and (outside f32) the bias in its dtype.
  std::vector<TensorSpec> derived_specs(const std::vector<Shape>&, const Shape&) const override {
    if (!f_.batchnorm) return {};
    std::vector<TensorSpec> specs{{a_.weight_shape(), DType::f32}, {Shape{a_.out_channels}, DType::f32}};
    if (depthwise()) specs.push_back({tap_major_shape(), DType::f32});  // the depthwise kernel's [K, K, C] weight
    if (weight_copy()) specs.push_back({a_.weight_shape(), dtype()});
    if (bias_copy()) specs.push_back({Shape{a_.out_channels}, dtype()});
    return specs;
  }
  void refresh(ForwardCtx& ctx) override {
    if (!f_.batchnorm) return;
    check_derived(ctx, "refresh");
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
    const core::Device dev = core::Device::cuda;
    if (depthwise())  // [C, 1, K, K] read as an NCHW [1, C, K, K] tensor, written NHWC: [K, K, C]
      ctx.backend->convert(Tensor::view(ctx.derived[2].raw(), tap_major_shape(), DType::f32, dev, Layout::nhwc),
                           Tensor::view(ctx.derived[0].raw(), tap_major_shape(), DType::f32, dev, Layout::nchw));
    if (weight_copy())
      ctx.backend->convert(Tensor::view(ctx.derived[2].raw(), a_.weight_shape(), dtype(), dev, layout()),
                           Tensor::view(ctx.derived[0].raw(), a_.weight_shape(), DType::f32, dev, Layout::nchw));
    if (bias_copy())
      ctx.backend->convert(Tensor::view(ctx.derived[3].raw(), Shape{a_.out_channels}, dtype(), dev),
                           Tensor::view(ctx.derived[1].raw(), Shape{a_.out_channels}, DType::f32, dev));
  }
  void forward(ForwardCtx& ctx) override {
    expect_format(ctx.inputs[0], "input");
    if (depthwise()) {  // our kernel, from the folded f32 weight and bias
      check_derived(ctx, "forward (run refresh first)");
      return kernels::launch_depthwise_conv2d_nhwc(
          stream_of(ctx.backend), dtype(), ctx.inputs[0].shape(), ctx.inputs[0].raw(),
          static_cast<const float*>(ctx.derived[2].raw()), static_cast<const float*>(ctx.derived[1].raw()),
          ctx.output.shape(), ctx.output.raw(), a_.kernel, a_.stride, a_.pad(), f_.silu);
    }
    const void* w = ctx.params[0].raw();
    const void* b = a_.bias ? ctx.params[1].raw() : nullptr;
    if (f_.batchnorm) {
      check_derived(ctx, "forward (run refresh first)");
      w = ctx.derived[weight_copy() ? 2 : 0].raw();
      b = ctx.derived[bias_copy() ? 3 : 1].raw();
    }
    if (pointwise_gemm()) {
      pointwise_conv_gemm(CudaBackendContext::of(ctx.backend).cublas(), dtype(), ctx.inputs[0], w, ctx.output);
      return conv_epilogue(stream_of(ctx.backend), nullptr, format(), ctx.output, b, f_.silu);
    }
    const CudnnConv& c = convs_.get(cudnn_of(ctx.backend), ctx.inputs[0].shape(), ctx.deterministic, ctx.tf32,
                                    format(), true);
    c.forward(ctx.inputs[0].raw(), w, ctx.output.raw(), conv_workspace(c, ctx.workspace));
    conv_epilogue(stream_of(ctx.backend), &c, format(), ctx.output, b, f_.silu);
  }

 private:
  static Conv2dAttrs with_bias(Conv2dAttrs a) {
    a.bias = true;
    return a;
  }
  // A depthwise convolution with BatchNorm in NHWC runs on our kernel (depthwise.cuh), which reads the folded weight
  // and bias in f32: cuDNN's grouped convolutions are slow in NHWC. Everything else goes to cuDNN.
  bool depthwise() const {
    return f_.batchnorm && layout() == Layout::nhwc && a_.groups == a_.in_channels && a_.out_channels == a_.in_channels &&
           a_.dilation == 1 && kernels::depthwise_conv2d_supported(a_.kernel, a_.stride);
  }
  // A 1×1 convolution (stride 1, no padding, one group) in f16/bf16 NHWC is a matrix product, y [B·H·W, K] = x
  // [B·H·W, C] · wᵀ: cuBLAS's GEMMs beat cuDNN's convolutions there (f32 stays on cuDNN, IEEE without TF32).
  // VISION_CONV1X1=cudnn keeps them on cuDNN (for comparisons).
  bool pointwise_gemm() const {
    static const bool cudnn_only = [] {
      const char* v = std::getenv("VISION_CONV1X1");
      return v != nullptr && std::string_view(v) == "cudnn";
    }();
    return !cudnn_only && dtype() != DType::f32 && layout() == Layout::nhwc && a_.kernel == 1 && a_.stride == 1 &&
           a_.pad() == 0 && a_.groups == 1 && a_.dilation == 1;
  }
  Shape tap_major_shape() const { return {1, a_.out_channels, a_.kernel, a_.kernel}; }
  bool weight_copy() const { return format() != Format{} && !depthwise(); }
  bool bias_copy() const { return dtype() != DType::f32 && !depthwise(); }
  void check_derived(const ForwardCtx& ctx, const char* when) const {
    const size_t want = 2 + (depthwise() ? 1 : 0) + (weight_copy() ? 1 : 0) + (bias_copy() ? 1 : 0);
    VISION_CHECK(ctx.derived.size() == want,
                 "{}: {} needs the {} folded weight and bias tensors of derived_specs(), got {}", name(), when, want,
                 ctx.derived.size());
  }
  Conv2dAttrs a_;
  ConvFusion f_;
  ConvCache convs_;
};

// Spatial BatchNorm: training with batch statistics (running statistics updated with the unbiased variance, as
// PyTorch does), inference with the running statistics. f32 NCHW — exact f32 training — goes through cuDNN's legacy
// BatchNorm (the statistics and parameters f32: the descriptor cudnnDeriveBNTensorDescriptor gives); every other
// format runs on our kernels (batchnorm.cuh: statistics by Chan's formula, vectorised, deterministic), computed in
// f32 (see own_kernels()). Both save the batch mean and inverse std for backward. Our kernels in f32 NCHW are 2.5-4×
// faster than cuDNN's there, and their norm-wise error on the YOLO26n fixture is within 2× the reference's own
// (1.2e-6 against 1.71e-6), but the largest single logit error is 8.96e-5 against the fixture's 8.2e-5 bound
// (Yolo26ReferenceGpuTraining.TrainingForwardMatchesInF32; cuDNN's stays under it): until that is understood, f32
// keeps cuDNN's BatchNorm (bench/train/NOTES.md).
// With silu (BatchNorm → SiLU fused in a training plan) our kernels write silu(y) in their apply pass and take the
// gradient through it in both backward passes; on cuDNN's f32 NCHW path, cuDNN's training forward computes the
// statistics and our apply kernel then writes silu(y) over its output from x and them, and the backward is ours.
class BatchNorm2dCuda final : public CudaRuntimeOp {
 public:
  BatchNorm2dCuda(Twin twin, float eps, float momentum, Mode mode, bool silu)
      : CudaRuntimeOp(std::move(twin)), eps_(eps), momentum_(momentum), mode_(mode), silu_(silu) {}
  ~BatchNorm2dCuda() override {
    if (c_desc_) cudnnDestroyTensorDescriptor(c_desc_);
    if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
  }
  bool supports(const Format& f) const override { return core::is_floating(f.dtype); }
  // cuDNN does the normalisation (training forward counts the batch with an NVRTC kernel), or our kernels do it all.
  std::vector<KernelInfo> kernels() const override {
    if (own_kernels() || silu_) return infos(kernels::batchnorm_kernels(dtype(), layout(), mode_ == Mode::train, silu_));
    if (mode_ != Mode::train) return {};
    return infos({kernel_of<kernels::IncrementCounter>()});
  }
  std::vector<TensorSpec> saved_specs(const std::vector<Shape>& in, const Shape&) const override {
    if (mode_ != Mode::train) return {};
    return {{Shape{in[0][1]}, DType::f32}, {Shape{in[0][1]}, DType::f32}};  // batch mean, inverse std
  }
  size_t workspace_bytes(const graph::PlanContext& plan, const std::vector<Shape>& in, const Shape&) const override {
    if (mode_ != Mode::train || !(own_kernels() || silu_ || plan.collective)) return 0;
    return kernels::batchnorm_workspace_bytes(in[0], layout(), {}, plan.collective ? plan.collective->world() : 1);
  }
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    expect_format(x, "input");
    const auto& p = ctx.params;
    const auto f32 = [](const Tensor& t) { return static_cast<float*>(t.raw()); };
    if (ctx.training)
      VISION_CHECK(x.numel() / x.dim(1) > 1 && ctx.saved.size() == 2,
                   "batchnorm2d in training needs more than one value per channel and room for the batch statistics, "
                   "got input {} and {} saved tensors",
                   x.str(), ctx.saved.size());
    if (own_kernels() || (ctx.training && ctx.collective)) {  // SyncBatchNorm: our kernels in every format
      const cudaStream_t s = stream_of(ctx.backend);
      if (!ctx.training)
        return kernels::launch_batchnorm_forward_inference(s, dtype(), layout(), x.shape(), x.raw(), ctx.output.raw(),
                                                           f32(p[0]), f32(p[1]), f32(p[2]), f32(p[3]), eps_);
      const kernels::BatchNormRanks ranks = ranks_of(ctx.collective);
      kernels::launch_batchnorm_forward_training(s, dtype(), layout(), x.shape(), x.raw(), ctx.output.raw(), f32(p[0]),
                                                 f32(p[1]), f32(p[2]), f32(p[3]), f32(ctx.saved[0]),
                                                 f32(ctx.saved[1]), workspace(ctx.workspace, x.shape(), ranks.world),
                                                 static_cast<float>(momentum_), eps_, silu_, {}, ranks);
      kernels::launch_increment_counter(s, static_cast<int64_t*>(p[4].raw()));
      return;
    }
    prepare(x.shape());
    const float one = 1.0f, zero = 0.0f;
    if (!ctx.training) {
      VISION_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
          cudnn_of(ctx.backend), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_desc_, x.raw(), x_desc_, ctx.output.raw(),
          c_desc_, p[0].raw(), p[1].raw(), p[2].raw(), p[3].raw(), eps_));
      cuda::mark_written_by_library(stream_of(ctx.backend), ctx.output.raw(), ctx.output.nbytes());
      return;
    }
    VISION_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        cudnn_of(ctx.backend), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_desc_, x.raw(), x_desc_, ctx.output.raw(),
        c_desc_, p[0].raw(), p[1].raw(), momentum_, p[2].raw(), p[3].raw(), eps_, ctx.saved[0].raw(),
        ctx.saved[1].raw()));
    for (const Tensor* t : {&ctx.output, &ctx.saved[0], &ctx.saved[1]})
      cuda::mark_written_by_library(stream_of(ctx.backend), t->raw(), t->nbytes());
    if (silu_)
      kernels::launch_batchnorm_silu_from_saved(stream_of(ctx.backend), dtype(), layout(), x.shape(), x.raw(),
                                                ctx.output.raw(), f32(p[0]), f32(p[1]), f32(ctx.saved[0]),
                                                f32(ctx.saved[1]));
    kernels::launch_increment_counter(stream_of(ctx.backend), static_cast<int64_t*>(p[4].raw()));
  }
  void backward(BackwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    expect_format(ctx.grad_output, "output gradient");
    VISION_CHECK(ctx.saved.size() == 2, "batchnorm2d backward needs the batch statistics of a training forward");
    VISION_CHECK(ctx.grad_inputs[0].defined() && ctx.grad_params[0].defined() && ctx.grad_params[1].defined(),
                 "batchnorm2d backward on CUDA writes dx, dγ and dβ together");
    if (own_kernels() || silu_ || ctx.collective) {  // cuDNN's saved statistics are the batch mean and inverse std too
      const auto f32 = [](const Tensor& t) { return static_cast<float*>(t.raw()); };
      const kernels::BatchNormRanks ranks = ranks_of(ctx.collective);
      kernels::launch_batchnorm_backward(stream_of(ctx.backend), dtype(), layout(), x.shape(), x.raw(),
                                         ctx.grad_output.raw(), ctx.grad_inputs[0].raw(), f32(ctx.params[0]),
                                         f32(ctx.params[1]), f32(ctx.saved[0]), f32(ctx.saved[1]),
                                         f32(ctx.grad_params[0]), f32(ctx.grad_params[1]),
                                         workspace(ctx.workspace, x.shape(), ranks.world), silu_, {}, ranks);
      return;
    }
    prepare(x.shape());
    const float one = 1.0f, zero = 0.0f;
    VISION_CUDNN_CHECK(cudnnBatchNormalizationBackward(
        cudnn_of(ctx.backend), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, x_desc_, x.raw(), x_desc_,
        ctx.grad_output.raw(), x_desc_, ctx.grad_inputs[0].raw(), c_desc_, ctx.params[0].raw(),
        ctx.grad_params[0].raw(), ctx.grad_params[1].raw(), eps_, ctx.saved[0].raw(), ctx.saved[1].raw()));
    for (const Tensor* t : {&ctx.grad_inputs[0], &ctx.grad_params[0], &ctx.grad_params[1]})
      cuda::mark_written_by_library(stream_of(ctx.backend), t->raw(), t->nbytes());
  }

 private:
  // cuDNN's legacy BatchNorm only for f32 NCHW: in NHWC it is slow in training (161 ms against 16 ms for our
  // kernels, a bf16/f16 Conv-BN-SiLU stack at batch 32 on the H200: bench/graph/NOTES.md), and it has no bf16.
  bool own_kernels() const { return !(dtype() == DType::f32 && layout() == core::Layout::nchw); }
  // SyncBatchNorm's ranks (PlanOptions::collective): their all-gather on the plan's stream.
  static kernels::BatchNormRanks ranks_of(graph::Collective* collective) {
    if (!collective) return {};
    return {collective->world(),
            [collective](const void* send, void* recv, size_t bytes) { collective->all_gather(send, recv, bytes); }};
  }
  void* workspace(const Tensor& ws, const Shape& x, int world) const {
    const size_t need = kernels::batchnorm_workspace_bytes(x, layout(), {}, world);
    VISION_CHECK(ws.defined() && ws.nbytes() >= need,
                 "{} (CUDA, {}): the workspace holds {} bytes, the batch statistics need {} (the plan's "
                 "workspace_bytes() was computed for another input shape)",
                 name(), graph::format_name(format()), ws.defined() ? ws.nbytes() : 0, need);
    return ws.raw();
  }
  // Sets the descriptors for input x (created on first use, so that lowering needs no GPU or cuDNN call).
  void prepare(const Shape& x) {
    if (x_desc_ && x == shape_) return;
    if (!x_desc_) VISION_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_desc_));
    if (!c_desc_) VISION_CUDNN_CHECK(cudnnCreateTensorDescriptor(&c_desc_));
    shape_ = Shape();  // set again only once both descriptors describe x
    VISION_CUDNN_CHECK(cudnnSetTensor4dDescriptor(
        x_desc_, layout() == Layout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, cudnn_dtype(dtype()),
        static_cast<int>(x[0]), static_cast<int>(x[1]), static_cast<int>(x[2]), static_cast<int>(x[3])));
    VISION_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(c_desc_, x_desc_, CUDNN_BATCHNORM_SPATIAL));
    shape_ = x;
  }
  float eps_;
  double momentum_;
  Mode mode_;
  bool silu_;
  Shape shape_;
  cudnnTensorDescriptor_t x_desc_ = nullptr, c_desc_ = nullptr;
};

// y = f(x) element-wise, any floating dtype, either layout (memory order does not matter); backward from x (SiLU) or
// from y (sigmoid).
class UnaryCuda final : public CudaRuntimeOp {
 public:
  enum class Kind { silu, sigmoid };
  UnaryCuda(Twin twin, Kind kind) : CudaRuntimeOp(std::move(twin)), kind_(kind) {}
  bool supports(const Format& f) const override { return core::is_floating(f.dtype); }
  std::vector<KernelInfo> kernels() const override {
    if (kind_ == Kind::silu)
      return infos({kernel_of<kernels::SiluForward>(dtype()), kernel_of<kernels::SiluBackward>(dtype())});
    return infos({kernel_of<kernels::SigmoidForward>(dtype()), kernel_of<kernels::SigmoidBackward>(dtype())});
  }
  void forward(ForwardCtx& ctx) override {
    expect_format(ctx.inputs[0], "input");
    const auto f = kind_ == Kind::silu ? kernels::launch_silu_forward : kernels::launch_sigmoid_forward;
    f(stream_of(ctx.backend), dtype(), ctx.inputs[0].raw(), ctx.output.raw(), ctx.output.numel());
  }
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    expect_format(ctx.grad_output, "output gradient");
    const Tensor& from = kind_ == Kind::silu ? ctx.inputs[0] : ctx.output;
    const auto f = kind_ == Kind::silu ? kernels::launch_silu_backward : kernels::launch_sigmoid_backward;
    f(stream_of(ctx.backend), dtype(), from.raw(), ctx.grad_output.raw(), ctx.grad_inputs[0].raw(),
      ctx.output.numel());
  }

 private:
  Kind kind_;
};

// a + b or a · b element-wise, any floating dtype, either layout (both inputs in the op's).
class BinaryCuda final : public CudaRuntimeOp {
 public:
  enum class Kind { add, mul };
  BinaryCuda(Twin twin, Kind kind) : CudaRuntimeOp(std::move(twin)), kind_(kind) {}
  bool supports(const Format& f) const override { return core::is_floating(f.dtype); }
  std::vector<KernelInfo> kernels() const override {
    if (kind_ == Kind::add)
      return infos({kernel_of<kernels::AddForward>(dtype()), kernel_of<kernels::AddBackward>(dtype())});
    return infos({kernel_of<kernels::MulForward>(dtype()), kernel_of<kernels::MulBackward>(dtype())});
  }
  void forward(ForwardCtx& ctx) override {
    expect_format(ctx.inputs[0], "first input");
    expect_format(ctx.inputs[1], "second input");
    const auto f = kind_ == Kind::add ? kernels::launch_add_forward : kernels::launch_mul_forward;
    f(stream_of(ctx.backend), dtype(), ctx.inputs[0].raw(), ctx.inputs[1].raw(), ctx.output.raw(),
      ctx.output.numel());
  }
  void backward(BackwardCtx& ctx) override {
    void* da = ctx.grad_inputs[0].defined() ? ctx.grad_inputs[0].raw() : nullptr;
    void* db = ctx.grad_inputs[1].defined() ? ctx.grad_inputs[1].raw() : nullptr;
    if (!da && !db) return;
    expect_format(ctx.grad_output, "output gradient");
    const cudaStream_t s = stream_of(ctx.backend);
    if (kind_ == Kind::add)
      kernels::launch_add_backward(s, dtype(), ctx.grad_output.raw(), da, db, ctx.output.numel());
    else
      kernels::launch_mul_backward(s, dtype(), ctx.grad_output.raw(), ctx.inputs[0].raw(), ctx.inputs[1].raw(), da,
                                   db, ctx.output.numel());
  }

 private:
  Kind kind_;
};

// Any floating dtype, NCHW or NHWC; the argmax (saved in training) is in the output's layout.
class MaxPool2dCuda final : public CudaRuntimeOp {
 public:
  MaxPool2dCuda(Twin twin, int64_t k, int64_t s, int64_t p, Mode mode)
      : CudaRuntimeOp(std::move(twin)),
        window_{static_cast<int>(k), static_cast<int>(s < 0 ? k : s), static_cast<int>(p)},
        mode_(mode) {}
  bool supports(const Format& f) const override { return core::is_floating(f.dtype); }
  std::vector<TensorSpec> saved_specs(const std::vector<Shape>&, const Shape& out) const override {
    if (mode_ != Mode::train) return {};
    return {{out, DType::i32}};
  }
  size_t workspace_bytes(const graph::PlanContext&, const std::vector<Shape>&, const Shape& out) const override {
    return mode_ == Mode::train ? 0 : static_cast<size_t>(out.numel()) * 4;  // argmax nobody reads
  }
  // Backward needs the argmax saved in training.
  std::vector<KernelInfo> kernels() const override {
    const auto* fwd = kernel_of<kernels::MaxPool2dForward>(dtype(), window_, layout());
    if (mode_ != Mode::train) return infos({fwd});
    return infos({fwd, kernel_of<kernels::MaxPool2dBackward>(dtype(), window_, layout())});
  }
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    expect_format(x, "input");
    auto* argmax = static_cast<int32_t*>(ctx.saved.empty() ? ctx.workspace.raw() : ctx.saved[0].raw());
    kernels::launch_maxpool2d_forward(stream_of(ctx.backend), dtype(), layout(), window_, x.raw(), ctx.output.raw(),
                                      argmax, x.dim(0), x.dim(1), x.dim(2), x.dim(3));
  }
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    expect_format(ctx.grad_output, "output gradient");
    const Tensor& x = ctx.inputs[0];
    kernels::launch_maxpool2d_backward(stream_of(ctx.backend), dtype(), layout(), window_, ctx.grad_output.raw(),
                                       static_cast<const int32_t*>(ctx.saved[0].raw()), ctx.grad_inputs[0].raw(),
                                       x.dim(0), x.dim(1), x.dim(2), x.dim(3));
  }

 private:
  kernels::MaxPool2dWindow window_;
  Mode mode_;
};

// Nearest ×2, any floating dtype, NCHW or NHWC.
class UpsampleCuda final : public CudaRuntimeOp {
 public:
  explicit UpsampleCuda(Twin twin) : CudaRuntimeOp(std::move(twin)) {}
  bool supports(const Format& f) const override { return core::is_floating(f.dtype); }
  std::vector<KernelInfo> kernels() const override {
    return infos({kernel_of<kernels::UpsampleNearest2xForward>(dtype(), layout()),
                  kernel_of<kernels::UpsampleNearest2xBackward>(dtype(), layout())});
  }
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    expect_format(x, "input");
    kernels::launch_upsample_nearest2x_forward(stream_of(ctx.backend), dtype(), layout(), x.raw(), ctx.output.raw(),
                                               x.dim(0), x.dim(1), x.dim(2), x.dim(3));
  }
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    expect_format(ctx.grad_output, "output gradient");
    const Tensor& x = ctx.inputs[0];
    kernels::launch_upsample_nearest2x_backward(stream_of(ctx.backend), dtype(), layout(), ctx.grad_output.raw(),
                                                ctx.grad_inputs[0].raw(), x.dim(0), x.dim(1), x.dim(2), x.dim(3));
  }
};

// Dims reordered (rank ≤ 4); the backward is the inverse permutation of the gradient. Any floating dtype, NCHW only:
// a permutation works on the row-major logical order.
class PermuteCuda final : public CudaRuntimeOp {
 public:
  PermuteCuda(Twin twin, std::vector<int64_t> perm) : CudaRuntimeOp(std::move(twin)), perm_(std::move(perm)) {}
  bool supports(const Format& f) const override { return core::is_floating(f.dtype) && f.layout == Layout::nchw; }
  std::vector<KernelInfo> kernels() const override { return infos({kernel_of<kernels::PermuteCopy>(dtype())}); }
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    expect_format(x, "input");
    kernels::launch_permute(stream_of(ctx.backend), dtype(), x.raw(), ctx.output.raw(), ctx.output.shape(),
                            permuted_strides(x.shape(), perm_));
  }
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    const Tensor& dy = ctx.grad_output;
    expect_format(dy, "output gradient");
    kernels::launch_permute(stream_of(ctx.backend), dtype(), dy.raw(), ctx.grad_inputs[0].raw(),
                            ctx.grad_inputs[0].shape(), permuted_strides(dy.shape(), inverse_permutation(perm_)));
  }

 private:
  std::vector<int64_t> perm_;
};

// ½·Σx² (square) or Σx / n (mean). f32 only (losses and reductions stay f32), either layout: a reduction over the
// whole tensor does not depend on the memory order.
class ReduceCuda final : public CudaRuntimeOp {
 public:
  ReduceCuda(Twin twin, bool square) : CudaRuntimeOp(std::move(twin)), square_(square) {}
  bool supports(const Format& f) const override { return f.dtype == DType::f32; }
  std::vector<KernelInfo> kernels() const override {
    return infos({kernel_of<kernels::ReduceSumForward>(DType::f32, square_),
                  kernel_of<kernels::ReduceSumBackward>(DType::f32, square_)});
  }
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    expect_format(x, "input");
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
std::unique_ptr<RuntimeOp> make_batchnorm2d(Twin twin, float eps, float momentum, Mode mode, bool silu) {
  return std::make_unique<BatchNorm2dCuda>(std::move(twin), eps, momentum, mode, silu);
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
