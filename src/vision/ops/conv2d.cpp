#include "vision/ops/conv2d.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "vision/cpu/conv_nhwc.h"
#include "vision/cpu/dnnl_context.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/op_util.h"

namespace vision::ops {

using dnnl::algorithm;
using dnnl::memory;

void Conv2dAttrs::validate() const {
  VISION_CHECK(in_channels > 0 && out_channels > 0, "conv2d needs positive channel counts, got in {} out {}",
               in_channels, out_channels);
  VISION_CHECK(kernel > 0 && stride > 0 && dilation > 0 && groups > 0,
               "conv2d needs kernel, stride, dilation and groups > 0, got k {} s {} d {} g {}", kernel, stride,
               dilation, groups);
  VISION_CHECK(in_channels % groups == 0 && out_channels % groups == 0,
               "conv2d: groups {} must divide in_channels {} and out_channels {}", groups, in_channels, out_channels);
}

Shape Conv2dAttrs::output_shape(const Shape& x) const {
  validate();
  VISION_CHECK(x.rank() == 4, "conv2d needs a rank-4 input (N, C, H, W), got {}", x.str());
  VISION_CHECK(x[1] == in_channels, "conv2d expects {} input channels, the input {} has {}", in_channels, x.str(),
               x[1] == Shape::kAny ? std::string("a symbolic count") : std::to_string(x[1]));
  auto spatial = [&](int64_t n) -> int64_t {
    if (n == Shape::kAny) return Shape::kAny;
    const int64_t span = n + 2 * pad() - dilation * (kernel - 1) - 1;
    VISION_CHECK(span >= 0, "conv2d: input {} is too small for kernel {} (dilation {}, padding {})", x.str(), kernel,
                 dilation, pad());
    return span / stride + 1;
  };
  return {x[0], out_channels, spatial(x[2]), spatial(x[3])};
}

std::vector<ParamSpec> conv2d_state_specs(const Conv2dAttrs& a) {
  std::vector<ParamSpec> s{{"weight", a.weight_shape(), DType::f32, StateKind::parameter}};
  if (a.bias) s.push_back({"bias", Shape{a.out_channels}, DType::f32, StateKind::parameter});
  return s;
}

std::vector<std::byte> conv2d_state_init(const Conv2dAttrs& a, size_t i, uint64_t seed) {
  const Shape ws = a.weight_shape();
  const float bound = 1.0f / std::sqrt(static_cast<float>(ws[1] * ws[2] * ws[3]));
  const Shape shape = i == 0 ? ws : Shape{a.out_channels};
  return graph::bytes_of(graph::uniform_init(shape, bound, seed));
}

namespace {

// The oneDNN primitives of one convolution, created for the first input shape and layout seen and re-created when
// either changes. Weights are [Cout, Cin/g, k, k] row-major (oneDNN oihw, or goihw with groups: the same bytes).
class ConvPrimitives {
 public:
  ConvPrimitives(const Conv2dAttrs& a, bool with_bias, bool silu, bool training)
      : a_(a), with_bias_(with_bias), silu_(silu), training_(training) {}

  // y = conv(x, w) (+ b) (then swish when silu); w and b point at f32 host memory, x and y lie in `layout`.
  // Inference in NHWC reads and writes NHWC as it is, with the weights in the layout oneDNN picks (its brgemm
  // convolutions: as fast as its blocked layouts, bench/graph/NOTES.md), so a plan in NHWC reorders no activation.
  // Inference in NCHW runs in the layouts oneDNN picks (format_tag::any: nChw8c/nChw16c activations, blocked weights)
  // with reorders from and back to NCHW around it: 1.5-5x faster than its plain-NCHW kernels at YOLO widths
  // (bench/graph/bench_cpu_conv_layouts). Training keeps plain NCHW, which its backward primitives share.
  // In f32 NHWC inference on AVX-512 CPUs, the engine's own kernels run the convolutions they take (cpu/conv_nhwc.h:
  // odd k with padding k/2, stride 1 or 2, one group; bias and SiLU in registers), the weights packed once per state
  // version.
  void forward(const Tensor& x, const Tensor& y, const float* w, const float* b, core::Layout layout) {
    prepare(x.shape(), y.shape(), layout);
    if (int8_) return forward_int8(x, y, w, b);
    if (direct_) {
      if (!refreshed_ || packed_from_ != w) {
        direct_weights_ = cpu::conv_nhwc_pack(w, a_.out_channels, a_.in_channels, a_.kernel);
        packed_from_ = w;
      }
      const Shape& s = x.shape();
      return cpu::conv_nhwc(x.data<float>(), direct_weights_.data(), with_bias_ ? b : nullptr, y.data<float>(),
                            {s[0], s[2], s[3], a_.in_channels, a_.out_channels, a_.kernel, a_.stride}, silu_);
    }
    memory src = cpu::as_memory(src_, x), wei = cpu::as_memory(wei_, const_cast<float*>(w)),
           dst = cpu::as_memory(dst_, y), out = dst;
    if (blocked_) {
      if (blocked_->src) src = in_layout(src, blocked_->src);
      wei = packed_weights(wei, w);
      if (blocked_->dst) out = blocked_->dst;
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, out}};
    if (with_bias_) args.emplace(DNNL_ARG_BIAS, cpu::as_memory(bias_, const_cast<float*>(b)));
    cpu::execute(fwd_, args, "convolution forward");
    if (out != dst) cpu::execute(dnnl::reorder(out, dst), {{DNNL_ARG_FROM, out}, {DNNL_ARG_TO, dst}}, "reorder");
  }

  // int8: x quantised to s8 (one scale), the s8 weights (a scale per output channel, packed as the f32 ones are), y in
  // f32: y = (acc + b / s_out) · s_out with s_out[c] = 1 / (s_x · s_w[c]) (oneDNN scales the accumulator and the bias
  // together), then SiLU.
  void forward_int8(const Tensor& x, const Tensor& y, const float* w, const float* b) {
    Int8& q = *int8_;
    if (!refreshed_ || packed_from_ != w || q.bias_from != b) {
      pack_int8(w, b);
      packed_from_ = w;
    }
    const memory src = cpu::as_memory(src_, x), dst = cpu::as_memory(dst_, y);
    cpu::execute(q.quantise, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, q.src}}, "int8 quantising reorder");
    cpu::execute(q.conv,
                 {{DNNL_ARG_SRC, q.src}, {DNNL_ARG_WEIGHTS, q.wei}, {DNNL_ARG_BIAS, q.bias}, {DNNL_ARG_DST, dst}},
                 "int8 convolution forward");
  }

  // Weight scales s_w[c] = 127 / max |w[c, …]| (1 for an all-zero channel), the s8 weights, the rescaled bias, and the
  // primitive (its output scales depend on s_w).
  void pack_int8(const float* w, const float* b) {
    Int8& q = *int8_;
    const int64_t per_channel = a_.weight_shape().numel() / a_.out_channels;
    std::vector<float> w_scale(static_cast<size_t>(a_.out_channels)), out_scale(w_scale.size());
    auto* bias = static_cast<float*>(q.bias.get_data_handle());
    for (int64_t c = 0; c < a_.out_channels; ++c) {
      float m = 0;
      for (int64_t j = 0; j < per_channel; ++j) m = std::max(m, std::abs(w[c * per_channel + j]));
      const auto k = static_cast<size_t>(c);
      w_scale[k] = m > 0 ? 127.0f / m : 1.0f;
      out_scale[k] = 1.0f / (q.x_scale * w_scale[k]);
      bias[k] = b ? b[c] / out_scale[k] : 0.0f;
    }
    q.bias_from = b;
    q.conv = cpu::dnnl_guard(describe("an int8 convolution forward"), [&] {
      dnnl::primitive_attr attr = epilogue();
      attr.set_output_scales(1 << 1, out_scale);
      const dnnl::convolution_forward::primitive_desc pd(*q.desc, attr, cpu::dnnl_engine());
      VISION_CHECK(pd.weights_desc() == q.wei.get_desc() && pd.src_desc() == q.src.get_desc(),
                   "{}: oneDNN changed the int8 layouts with the output scales", describe("an int8 convolution"));
      return dnnl::convolution_forward(pd);
    });
    dnnl::primitive_attr w_attr;
    w_attr.set_output_scales(a_.groups == 1 ? 1 << 0 : (1 << 0) | (1 << 1), w_scale);
    const memory plain = cpu::as_memory(wei_, const_cast<float*>(w));
    cpu::execute(dnnl::reorder(dnnl::reorder::primitive_desc(plain, q.wei, w_attr)),
                 {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, q.wei}}, "int8 weight reorder");
  }

  // The weights changed (a plan's refresh): the next forward packs them again. Until the first call, every forward
  // packs them (a runtime used outside a plan is never refreshed).
  void weights_changed() {
    refreshed_ = true;
    packed_from_ = nullptr;
  }

  // dx = conv_transpose(dy, w).
  void backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx) {
    prepare(dx.shape(), dy.shape(), core::Layout::nchw);
    VISION_CHECK(!int8_, "int8 convolutions have no backward");
    if (!bwd_data_) {
      using Bwd = dnnl::convolution_backward_data;
      bwd_data_ = cpu::dnnl_guard(describe("a convolution backward (data)"), [&] {
        Bwd::desc d(algorithm::convolution_direct, src_, wei_, dst_, strides(), dilates(), padding(), padding());
        return Bwd(Bwd::primitive_desc(d, cpu::dnnl_engine(), training_pd()));
      });
    }
    cpu::execute(*bwd_data_,
                 {{DNNL_ARG_DIFF_DST, cpu::as_memory(dst_, dy)},
                  {DNNL_ARG_WEIGHTS, cpu::as_memory(wei_, w)},
                  {DNNL_ARG_DIFF_SRC, cpu::as_memory(src_, dx)}},
                 "convolution backward (data)");
  }

  // dw (and db when the convolution has a bias) from x and dy.
  void backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw, float* db) {
    prepare(x.shape(), dy.shape(), core::Layout::nchw);
    if (!bwd_weights_) {
      using Bwd = dnnl::convolution_backward_weights;
      bwd_weights_ = cpu::dnnl_guard(describe("a convolution backward (weights)"), [&] {
        auto d = with_bias_ ? Bwd::desc(algorithm::convolution_direct, src_, wei_, bias_, dst_, strides(), dilates(),
                                        padding(), padding())
                            : Bwd::desc(algorithm::convolution_direct, src_, wei_, dst_, strides(), dilates(),
                                        padding(), padding());
        return Bwd(Bwd::primitive_desc(d, cpu::dnnl_engine(), training_pd()));
      });
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, cpu::as_memory(src_, x)},
                                         {DNNL_ARG_DIFF_DST, cpu::as_memory(dst_, dy)},
                                         {DNNL_ARG_DIFF_WEIGHTS, cpu::as_memory(wei_, dw)}};
    if (with_bias_) args.emplace(DNNL_ARG_DIFF_BIAS, cpu::as_memory(bias_, db));
    cpu::execute(*bwd_weights_, args, "convolution backward (weights)");
  }

 private:
  memory::dims strides() const { return {a_.stride, a_.stride}; }
  memory::dims dilates() const { return {a_.dilation - 1, a_.dilation - 1}; }  // oneDNN counts the gaps
  memory::dims padding() const { return {a_.pad(), a_.pad()}; }

  // from, or its copy in blocked's layout when the primitive wants another one.
  static memory in_layout(const memory& from, const memory& blocked) {
    if (from.get_desc() == blocked.get_desc()) return from;
    cpu::execute(dnnl::reorder(from, blocked), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, blocked}}, "reorder");
    return blocked;
  }

  // The weights in the primitive's layout: packed from w once per state version when a plan refreshes this op,
  // else on every call.
  memory packed_weights(const memory& plain, const float* w) {
    if (!blocked_->wei) return plain;
    if (!refreshed_ || packed_from_ != w) {
      cpu::execute(dnnl::reorder(plain, blocked_->wei), {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, blocked_->wei}},
                   "weight reorder");
      packed_from_ = w;
    }
    return blocked_->wei;
  }

  // The SiLU post-op when the convolution has one.
  dnnl::primitive_attr epilogue() const {
    dnnl::primitive_attr attr;
    if (silu_) {
      dnnl::post_ops po;
      po.append_eltwise(1.0f, algorithm::eltwise_swish, 1.0f, 0.0f);
      attr.set_post_ops(po);
    }
    return attr;
  }

  std::string describe(std::string_view what) const {
    return fmt::format("{} for input {} {} (k {}, s {}, p {}, d {}, g {})", what, core::layout_name(layout_),
                       x_shape_.str(), a_.kernel, a_.stride, a_.pad(), a_.dilation, a_.groups);
  }

  dnnl::convolution_forward::desc forward_desc(dnnl::prop_kind prop) const {
    using Fwd = dnnl::convolution_forward;
    return with_bias_ ? Fwd::desc(prop, algorithm::convolution_direct, src_, wei_, bias_, dst_, strides(), dilates(),
                                  padding(), padding())
                      : Fwd::desc(prop, algorithm::convolution_direct, src_, wei_, dst_, strides(), dilates(),
                                  padding(), padding());
  }

  // The forward primitive descriptor the backward ones are created from.
  const dnnl::convolution_forward::primitive_desc& training_pd() {
    if (!train_pd_)
      train_pd_ = cpu::dnnl_guard(describe("a convolution forward (training)"), [&] {
        return dnnl::convolution_forward::primitive_desc(forward_desc(dnnl::prop_kind::forward_training),
                                                         cpu::dnnl_engine());
      });
    return *train_pd_;
  }

  void prepare(const Shape& x, const Shape& y, core::Layout layout) {
    if (x == x_shape_ && layout == layout_ && (fwd_ || int8_ || direct_)) return;
    VISION_CHECK(!training_ || layout == core::Layout::nchw, "conv2d trains in NCHW only, asked for {}",
                 core::layout_name(layout));
    fwd_ = {};  // stays empty if creation fails, so the next call tries again
    train_pd_.reset();
    bwd_data_.reset();
    bwd_weights_.reset();
    int8_.reset();
    direct_ = false;
    packed_from_ = nullptr;
    x_shape_ = x;
    layout_ = layout;
    const int64_t g = a_.groups;
    const bool nhwc = layout == core::Layout::nhwc;
    auto activation = [&](const Shape& s) {
      return nhwc ? memory::desc(cpu::dims_of(s), memory::data_type::f32, memory::format_tag::nhwc)
                  : cpu::f32_desc(cpu::dims_of(s));
    };
    src_ = activation(x);
    dst_ = activation(y);
    bias_ = cpu::f32_desc({a_.out_channels});
    wei_ = g == 1 ? cpu::f32_desc(cpu::dims_of(a_.weight_shape()))
                  : cpu::f32_desc({g, a_.out_channels / g, a_.in_channels / g, a_.kernel, a_.kernel});
    const dnnl::primitive_attr attr = epilogue();
    blocked_.reset();
    if (!training_ && nhwc && a_.int8_absmax > 0) return prepare_int8();
    direct_ = !training_ && nhwc && a_.pad() == a_.kernel / 2 && cpu::conv_nhwc_available() &&
              cpu::conv_nhwc_supports(a_.kernel, a_.stride, a_.dilation, g) &&
              cpu::conv_nhwc_prefers(a_.kernel, a_.in_channels, a_.out_channels, y[2], y[3]);
    if (direct_) return;
    if (training_) {
      fwd_ = cpu::dnnl_guard(describe("a convolution forward"), [&] {
        return dnnl::convolution_forward(dnnl::convolution_forward::primitive_desc(
            forward_desc(dnnl::prop_kind::forward_training), attr, cpu::dnnl_engine()));
      });
      return;
    }
    fwd_ = cpu::dnnl_guard(describe("a convolution forward"), [&] {
      // NHWC activations stay as they are; NCHW ones go to oneDNN's choice (see forward).
      const memory::desc any_src = nhwc ? src_ : memory::desc(src_.dims(), memory::data_type::f32, memory::format_tag::any),
                         any_wei(wei_.dims(), memory::data_type::f32, memory::format_tag::any),
                         any_dst = nhwc ? dst_ : memory::desc(dst_.dims(), memory::data_type::f32, memory::format_tag::any);
      const auto d = with_bias_ ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                                  algorithm::convolution_direct, any_src, any_wei,
                                                                  bias_, any_dst, strides(), dilates(), padding(),
                                                                  padding())
                                : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                                  algorithm::convolution_direct, any_src, any_wei,
                                                                  any_dst, strides(), dilates(), padding(), padding());
      const dnnl::convolution_forward::primitive_desc pd(d, attr, cpu::dnnl_engine());
      if (pd.src_desc() != src_ || pd.weights_desc() != wei_ || pd.dst_desc() != dst_) {
        auto& eng = cpu::dnnl_engine();
        auto own = [&](const memory::desc& picked, const memory::desc& plain) {
          return picked == plain ? memory() : memory(picked, eng);
        };
        blocked_ = Blocked{own(pd.src_desc(), src_), own(pd.weights_desc(), wei_), own(pd.dst_desc(), dst_)};
      }
      return dnnl::convolution_forward(pd);
    });
  }

  // The int8 path's layouts, buffers and quantising reorder; its primitive comes with the weights (pack_int8).
  void prepare_int8() {
    using dt = memory::data_type;
    auto& eng = cpu::dnnl_engine();
    cpu::dnnl_guard(describe("an int8 convolution forward"), [&] {
      Int8 q;
      q.x_scale = 127.0f / a_.int8_absmax;
      const memory::desc s8_src(src_.dims(), dt::s8, memory::format_tag::nhwc),
          s8_wei(wei_.dims(), dt::s8, memory::format_tag::any);
      q.desc = dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algorithm::convolution_direct,
                                               s8_src, s8_wei, bias_, dst_, strides(), dilates(), padding(), padding());
      dnnl::primitive_attr attr;  // the layouts do not depend on the scales' values
      attr.set_output_scales(1 << 1, std::vector<float>(static_cast<size_t>(a_.out_channels), 1.0f));
      const dnnl::convolution_forward::primitive_desc pd(*q.desc, attr, eng);
      q.src = memory(pd.src_desc(), eng);
      q.wei = memory(pd.weights_desc(), eng);
      q.bias = memory(bias_, eng);
      dnnl::primitive_attr x_attr;
      x_attr.set_output_scales(0, {q.x_scale});
      q.quantise = dnnl::reorder(dnnl::reorder::primitive_desc(eng, src_, eng, pd.src_desc(), x_attr));
      int8_ = std::move(q);
    });
  }

  struct Int8 {
    float x_scale = 1;
    std::optional<dnnl::convolution_forward::desc> desc;
    memory src, wei, bias;
    dnnl::reorder quantise;
    dnnl::convolution_forward conv;
    const float* bias_from = nullptr;
  };
  std::optional<Int8> int8_;

  // Inference in oneDNN's chosen layouts: the operands in those layouts, each empty when it is the tensor's own.
  struct Blocked {
    memory src, wei, dst;
  };
  std::optional<Blocked> blocked_;
  bool direct_ = false;                // the engine's own kernel runs this convolution (prepare)
  std::vector<float> direct_weights_;  // its packed weights
  // The weights blocked_->wei or direct_weights_ holds (refreshed_: until weights_changed()).
  const float* packed_from_ = nullptr;
  bool refreshed_ = false;

  Conv2dAttrs a_;
  bool with_bias_, silu_, training_;
  Shape x_shape_;
  core::Layout layout_ = core::Layout::nchw;
  memory::desc src_, wei_, bias_, dst_;
  dnnl::convolution_forward fwd_;
  std::optional<dnnl::convolution_forward::primitive_desc> train_pd_;
  std::optional<dnnl::convolution_backward_data> bwd_data_;
  std::optional<dnnl::convolution_backward_weights> bwd_weights_;
};

class Conv2dRuntime final : public CpuRuntimeOp {
 public:
  Conv2dRuntime(const Conv2dAttrs& a, Mode mode)
      : CpuRuntimeOp("ops.conv2d", 1), a_(a), mode_(mode), prims_(a, a.bias, false, mode == Mode::train) {}

  // f32; NHWC for inference (oneDNN's NHWC kernels have no backward here).
  bool supports(const Format& f) const override {
    return f == Format{} || (mode_ == Mode::inference && f == Format{DType::f32, core::Layout::nhwc});
  }
  bool caches_state() const override { return mode_ == Mode::inference; }
  void refresh(ForwardCtx&) override { prims_.weights_changed(); }

  std::vector<ParamSpec> param_specs(const std::vector<Shape>&, const Shape&) const override {
    return conv2d_state_specs(a_);
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>&, const Shape&,
                                         uint64_t seed) const override {
    return conv2d_state_init(a_, i, seed);
  }

  void forward(ForwardCtx& ctx) override {
    prims_.forward(ctx.inputs[0], ctx.output, ctx.params[0].data<float>(),
                   a_.bias ? ctx.params[1].data<float>() : nullptr, format().layout);
  }

  void backward(BackwardCtx& ctx) override {
    if (ctx.grad_inputs[0].defined()) prims_.backward_data(ctx.grad_output, ctx.params[0], ctx.grad_inputs[0]);
    if (ctx.grad_params[0].defined()) {
      F32Scratch db(a_.bias ? ctx.grad_params[1] : Tensor(), a_.bias ? static_cast<size_t>(a_.out_channels) : 0);
      prims_.backward_weights(ctx.inputs[0], ctx.grad_output, ctx.grad_params[0], db.data());
    } else if (a_.bias && ctx.grad_params[1].defined()) {
      fail("conv2d backward: a bias gradient without a weight gradient is not supported");
    }
  }

 private:
  Conv2dAttrs a_;
  Mode mode_;
  ConvPrimitives prims_;
};

class FusedConv2dRuntime final : public CpuRuntimeOp {
 public:
  FusedConv2dRuntime(std::string name, const Conv2dAttrs& a, ConvFusion f)
      : CpuRuntimeOp(std::move(name), 1), a_(a), f_(std::move(f)), prims_(a, a.bias || f_.batchnorm, f_.silu, false) {
    n_conv_state_ = conv2d_state_specs(a_).size();
  }

  std::vector<ParamSpec> param_specs(const std::vector<Shape>&, const Shape&) const override {
    auto specs = prefixed(conv2d_state_specs(a_), f_.conv_prefix);
    if (f_.batchnorm)
      for (auto& s : prefixed(batchnorm2d_state_specs(a_.out_channels), f_.bn_prefix)) specs.push_back(s);
    return specs;
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>&, const Shape&,
                                         uint64_t seed) const override {
    return i < n_conv_state_ ? conv2d_state_init(a_, i, seed)
                             : batchnorm2d_state_init(i - n_conv_state_, a_.out_channels);
  }
  // With BatchNorm: the folded weight and bias, refreshed once per state version.
  std::vector<TensorSpec> derived_specs(const std::vector<Shape>&, const Shape&) const override {
    if (!f_.batchnorm) return {};
    return {{a_.weight_shape(), DType::f32}, {Shape{a_.out_channels}, DType::f32}};
  }
  bool has_backward() const override { return false; }  // built for inference plans only
  bool supports(const Format& f) const override { return f.dtype == DType::f32; }  // NCHW or NHWC
  bool caches_state() const override { return true; }

  void refresh(ForwardCtx& ctx) override {
    prims_.weights_changed();
    if (!f_.batchnorm) return;
    VISION_CHECK(ctx.derived.size() == 2, "{}: refresh needs the folded weight and bias", name());
    const float* w = ctx.params[0].data<float>();
    const float* b = a_.bias ? ctx.params[1].data<float>() : nullptr;
    fold_batchnorm(ctx.params, w, b, ctx.derived[0].data<float>(), ctx.derived[1].data<float>());
  }
  void forward(ForwardCtx& ctx) override {
    if (!f_.batchnorm)
      return prims_.forward(ctx.inputs[0], ctx.output, ctx.params[0].data<float>(),
                            a_.bias ? ctx.params[1].data<float>() : nullptr, format().layout);
    VISION_CHECK(ctx.derived.size() == 2, "{}: the folded weight and bias are missing (run refresh first)", name());
    prims_.forward(ctx.inputs[0], ctx.output, ctx.derived[0].data<float>(), ctx.derived[1].data<float>(),
                   format().layout);
  }

 private:
  // W' = W·γ/σ, b' = β + (b − μ)·γ/σ with σ = sqrt(running_var + eps), per output channel.
  void fold_batchnorm(const std::vector<Tensor>& params, const float* w, const float* b, float* wf, float* bf) const {
    const float* gamma = params[n_conv_state_ + 0].data<float>();
    const float* beta = params[n_conv_state_ + 1].data<float>();
    const float* mean = params[n_conv_state_ + 2].data<float>();
    const float* var = params[n_conv_state_ + 3].data<float>();
    const int64_t per_channel = a_.weight_shape().numel() / a_.out_channels;
    for (int64_t c = 0; c < a_.out_channels; ++c) {
      const double scale = gamma[c] / std::sqrt(static_cast<double>(var[c]) + f_.bn_eps);
      for (int64_t j = 0; j < per_channel; ++j)
        wf[c * per_channel + j] = static_cast<float>(w[c * per_channel + j] * scale);
      bf[c] = static_cast<float>(beta[c] + ((b ? b[c] : 0.0) - mean[c]) * scale);
    }
  }

  Conv2dAttrs a_;
  ConvFusion f_;
  ConvPrimitives prims_;
  size_t n_conv_state_ = 0;
};

}  // namespace

// ---- Conv2dOp

Conv2dOp::Conv2dOp(const Conv2dAttrs& a) : attrs_(a) { attrs_.validate(); }

Shape Conv2dOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, 4, "conv2d");
  return attrs_.output_shape(inputs[0]);
}

std::unique_ptr<RuntimeOp> Conv2dOp::lower(Backend backend, Mode mode) const {
  return lower_cpu_or_cuda<Conv2dRuntime>(*this, backend, VISION_CUDA_FACTORY(cuda_impl::make_conv2d(std::move(twin), attrs_)),
                                          attrs_, mode);
}

std::shared_ptr<const Op> Conv2dOp::fuse_with(const Op& next, Mode mode, const std::string& self_prefix,
                                              const std::string& next_prefix) const {
  if (mode != Mode::inference) return nullptr;
  if (auto* bn = dynamic_cast<const BatchNorm2dOp*>(&next))
    return std::make_shared<FusedConv2dOp>(attrs_, ConvFusion{true, bn->eps(), false, self_prefix, next_prefix});
  if (dynamic_cast<const SiluOp*>(&next))
    return std::make_shared<FusedConv2dOp>(attrs_, ConvFusion{false, 0.0f, true, self_prefix, ""});
  return nullptr;
}

// ---- FusedConv2dOp

FusedConv2dOp::FusedConv2dOp(const Conv2dAttrs& a, ConvFusion f) : attrs_(a), fusion_(std::move(f)) {
  attrs_.validate();
}

std::string FusedConv2dOp::name() const {
  return std::string("ops.conv2d") + (fusion_.batchnorm ? "_bn" : "") + (fusion_.silu ? "_silu" : "");
}

Shape FusedConv2dOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, 4, name());
  return attrs_.output_shape(inputs[0]);
}

std::unique_ptr<RuntimeOp> FusedConv2dOp::lower(Backend backend, Mode mode) const {
  VISION_CHECK(mode == Mode::inference, "{} is an inference-time fusion: lower the unfused ops for training", name());
  return lower_cpu_or_cuda<FusedConv2dRuntime>(
      *this, backend, VISION_CUDA_FACTORY(cuda_impl::make_fused_conv2d(std::move(twin), attrs_, fusion_)), name(),
      attrs_, fusion_);
}

std::shared_ptr<const Op> FusedConv2dOp::fuse_with(const Op& next, Mode mode, const std::string& self_prefix,
                                                   const std::string& next_prefix) const {
  if (mode != Mode::inference || fusion_.silu || !dynamic_cast<const SiluOp*>(&next)) return nullptr;
  ConvFusion f = fusion_;
  f.silu = true;
  f.conv_prefix = self_prefix + f.conv_prefix;
  f.bn_prefix = self_prefix + f.bn_prefix;
  return std::make_shared<FusedConv2dOp>(attrs_, std::move(f));
}

SymTensor conv2d(SymTensor x, const Conv2dAttrs& a, const std::string& name) {
  return record<Conv2dOp>({x}, name, a);
}

}  // namespace vision::ops
