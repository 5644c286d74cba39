// Every built-in CUDA op in f16 and bf16 × NCHW and NHWC (and f32 NHWC), run through its RuntimeOp directly as a
// plan does after its format pass (set_format, then the state in each ParamSpec::compute_format, activations in the
// format), forward and backward, against its CPU twin in f32 NCHW on the same inputs and state rounded to the dtype.
// Bounds come from the dtype's unit roundoff and each result's reduction length (error_bounds.h): every magnitude a
// rounding to the dtype or the f32 arithmetic may act on is recorded per element, and each element is checked against
// its own bound as well as the norm against its bound, so that one wrong element cannot hide. Outputs and gradients
// are poisoned first; inputs and BatchNorm statistics are random. Skipped without a GPU (VISION_REQUIRE_GPU=1 fails).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <sstream>

#include "cuda/format_test_util.h"
#include "error_bounds.h"
#include "ops/op_harness.h"
#include "vision/cuda/device.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/pool.h"
#include "vision/ops/reduce.h"
#include "vision/ops/shape_ops.h"
#include "vision/ops/upsample.h"

using namespace vision;
using namespace vision::test;
using core::DType;
using core::Layout;
using core::Shape;
using core::Tensor;
using graph::Format;
using graph::Mode;

namespace {

// One op's CUDA RuntimeOp in format f, run without a plan on the inputs and state of its CPU twin's harness: the
// activations go to the GPU in f's dtype and (rank 4) layout, each state tensor in its ParamSpec::compute_format when
// it has one (the plan's low-precision copy), else as stored; results come back as f32 NCHW values.
class FormatRun {
 public:
  FormatRun(const graph::Op& op, const OpHarness& cpu, Mode mode, Format f)
      : backend_(graph::cuda_backend()), mode_(mode), f_(f), out_shape_(cpu.output_shape()) {
    for (const Tensor& t : cpu.inputs) in_shapes_.push_back(t.shape());
    rt_ = op.lower(graph::Backend::cuda, mode);
    EXPECT_TRUE(rt_->supports(f)) << op.name() << " in " << graph::format_name(f);
    rt_->set_format(f);
    specs_ = rt_->param_specs(in_shapes_, out_shape_);
    EXPECT_EQ(specs_.size(), cpu.specs().size()) << op.name();
    for (size_t i = 0; i < specs_.size() && i < cpu.specs().size(); ++i)
      EXPECT_TRUE(specs_[i].name == cpu.specs()[i].name && specs_[i].shape == cpu.specs()[i].shape &&
                  specs_[i].dtype == cpu.specs()[i].dtype && specs_[i].kind == cpu.specs()[i].kind)
          << op.name() << " state " << specs_[i].name;
  }

  const std::vector<graph::ParamSpec>& specs() const { return specs_; }

  // The state the GPU reads in a low-precision format, rounded to it in the CPU twin's harness too, so that both sides
  // compute from the same values.
  void round_state(OpHarness& cpu) const {
    for (size_t i = 0; i < specs_.size(); ++i)
      if (specs_[i].compute_format)
        cpu.params[i] = Tensor::from_vector(cpu.params[i].shape(),
                                            rounded(cpu.params[i].to_vector(), specs_[i].compute_format->dtype));
  }

  // Forward on the harness's current inputs and state into a poisoned output; the state afterwards (BatchNorm's
  // running statistics) is kept in `state`.
  std::vector<float> forward(const OpHarness& cpu, bool training) {
    graph::BackendContext& b = *backend_;
    inputs_.clear();
    params_.clear();
    for (const Tensor& t : cpu.inputs) inputs_.push_back(to_device(b, t, f_.dtype, f_.layout));
    for (size_t i = 0; i < specs_.size(); ++i) {
      const auto& cf = specs_[i].compute_format;
      if (cf)
        params_.push_back(to_device(b, cpu.params[i], cf->dtype, cf->layout));
      else
        params_.push_back(b.upload(cpu.params[i]));  // stored format (f32, or the i64 batch counter)
    }
    output_ = poisoned_device(b, out_shape_, f_.dtype, f_.layout);
    saved_.clear();
    for (const auto& s : rt_->saved_specs(in_shapes_, out_shape_))
      saved_.push_back(poisoned_device(b, s.shape, s.dtype));
    derived_.clear();
    for (const auto& s : rt_->derived_specs(in_shapes_, out_shape_))
      derived_.push_back(poisoned_device(b, s.shape, s.dtype));
    const size_t ws = rt_->workspace_bytes({backend_.get(), mode_, false}, in_shapes_, out_shape_);
    workspace_ = ws ? poisoned_device(b, Shape{int64_t(ws)}, DType::u8) : Tensor();

    graph::ForwardCtx ctx;
    ctx.backend = backend_.get();
    ctx.inputs = inputs_;
    ctx.outputs = {output_};
    ctx.output = output_;
    ctx.params = params_;
    ctx.saved = saved_;
    ctx.derived = derived_;
    ctx.workspace = workspace_;
    ctx.training = training;
    rt_->refresh(ctx);
    rt_->forward(ctx);
    state.clear();
    for (const Tensor& p : params_) state.push_back(b.download(p));
    return to_host_nchw(b, output_);
  }

  struct Grads {
    std::vector<std::vector<float>> inputs;  // f32, NCHW order
    std::vector<std::vector<float>> params;  // empty for buffers
  };
  // Backward after forward, for dy (host f32 NCHW, already rounded to the dtype), into poisoned gradients: the input
  // gradients in the op's format, each parameter's in its compute format (or f32).
  Grads backward(const Tensor& dy) {
    graph::BackendContext& b = *backend_;
    std::vector<Tensor> grad_inputs, grad_params;
    for (const Shape& s : in_shapes_) grad_inputs.push_back(poisoned_device(b, s, f_.dtype, f_.layout));
    for (const auto& s : specs_) {
      if (s.kind != graph::StateKind::parameter)
        grad_params.emplace_back();
      else if (s.compute_format)
        grad_params.push_back(poisoned_device(b, s.shape, s.compute_format->dtype, s.compute_format->layout));
      else
        grad_params.push_back(poisoned_device(b, s.shape, DType::f32));
    }
    graph::BackwardCtx ctx;
    ctx.backend = backend_.get();
    ctx.inputs = inputs_;
    ctx.outputs = {output_};
    ctx.output = output_;
    ctx.grad_output = to_device(b, dy, f_.dtype, f_.layout);
    ctx.grad_outputs = {ctx.grad_output};
    ctx.grad_inputs = grad_inputs;
    ctx.params = params_;
    ctx.grad_params = grad_params;
    ctx.saved = saved_;
    ctx.derived = derived_;
    ctx.workspace = workspace_;
    rt_->backward(ctx);
    Grads g;
    for (const Tensor& t : grad_inputs) g.inputs.push_back(to_host_nchw(b, t));
    for (const Tensor& t : grad_params) g.params.push_back(t.defined() ? to_host_nchw(b, t) : std::vector<float>());
    return g;
  }

  std::vector<Tensor> state;  // host, after the last forward, in each state tensor's GPU format

 private:
  std::shared_ptr<graph::BackendContext> backend_;
  Mode mode_;
  Format f_;
  Shape out_shape_;
  std::vector<Shape> in_shapes_;
  std::unique_ptr<graph::RuntimeOp> rt_;
  std::vector<graph::ParamSpec> specs_;
  std::vector<Tensor> inputs_, params_, saved_, derived_;
  Tensor output_, workspace_;
};

std::vector<double> as_double(const Tensor& t) { return to_double(t.to_vector()); }

class CudaOpFormats : public testing::TestWithParam<Format> {
 protected:
  void SetUp() override { VISION_SKIP_WITHOUT_GPU(cuda::gpu_available()); }
  DType dtype() const { return GetParam().dtype; }
  Format format() const { return GetParam(); }
  // Random values rounded to the dtype (what the GPU holds).
  Tensor input(const Shape& s, float lo = -1.0f, float hi = 1.0f) const {
    return Tensor::from_vector(s, rounded(random_values(static_cast<size_t>(s.numel()), lo, hi), dtype()));
  }
  std::string what(const std::string& op, const std::string& result) const {
    return op + " " + result + " in " + graph::format_name(format());
  }
};

ops::Conv2dAttrs conv(int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t groups, bool bias) {
  ops::Conv2dAttrs a;
  a.in_channels = cin;
  a.out_channels = cout;
  a.kernel = k;
  a.stride = stride;
  a.groups = groups;
  a.bias = bias;
  return a;
}

// The magnitudes a convolution of x (NCHW) by w reaches each result with: one rounding of each operand of each
// product (cuDNN may hold a transformed operand in the dtype; the f32 accumulation is covered by ū = u + K·2^-24, see
// test_cudnn_conv.cpp), scaled by `coef` (an activation's slope after the convolution). dy, when given, gives the
// terms of dx and dw as well.
struct ConvTerms {
  RoundingTerms y, dx, dw;
};
ConvTerms conv_terms(const ops::Conv2dAttrs& a, const Shape& xs, const std::vector<float>& x,
                     const std::vector<double>& w, const std::vector<float>& dy, DType dtype, double coef = 1.0) {
  const Shape ys = a.output_shape(xs);
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], K = ys[1], Ho = ys[2], Wo = ys[3];
  const int64_t cpg = C / a.groups, kpg = K / a.groups, R = a.kernel, p = a.pad();
  ConvTerms t{RoundingTerms(static_cast<size_t>(ys.numel()), dtype), RoundingTerms(x.size(), dtype),
              RoundingTerms(w.size(), dtype)};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const size_t yi = static_cast<size_t>(((n * K + k) * Ho + oh) * Wo + ow);
          for (int64_t c = 0; c < cpg; ++c)
            for (int64_t i = 0; i < R; ++i)
              for (int64_t j = 0; j < R; ++j) {
                const int64_t ih = oh * a.stride - p + i * a.dilation, iw = ow * a.stride - p + j * a.dilation;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const size_t xi = static_cast<size_t>(((n * C + (k / kpg) * cpg + c) * H + ih) * W + iw);
                const size_t wi = static_cast<size_t>(((k * cpg + c) * R + i) * R + j);
                t.y.add(yi, x[xi], w[wi] * coef);
                t.y.add(yi, w[wi], x[xi] * coef);
                if (dy.empty()) continue;
                t.dx.add(xi, dy[yi], w[wi]);
                t.dx.add(xi, w[wi], dy[yi]);
                t.dw.add(wi, dy[yi], x[xi]);
                t.dw.add(wi, x[xi], dy[yi]);
              }
        }
  return t;
}

// Each element of out within its bound of terms (plus its own rounding, the reference's value) and the norm within its
// bound; k counts the f32 operations on the way, both sides' (the CPU twin computes in f32 too).
::testing::AssertionResult close(const std::vector<float>& out, const std::vector<double>& ref, RoundingTerms terms,
                                 DType dtype, int64_t k) {
  for (size_t i = 0; i < ref.size() && i < terms.size(); ++i) terms.add(i, ref[i]);
  return within_rounding(out, ref, terms, dtype, 2 * k);
}

// Bit-identical values (data movement, max), NaN (poison) never equal.
::testing::AssertionResult identical(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size())
    return ::testing::AssertionFailure() << out.size() << " values, expected " << ref.size();
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < out.size(); ++i)
    if (!(out[i] == ref[i]) && bad++ < 5) first << "\n  [" << i << "] " << out[i] << " vs " << ref[i];
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << out.size() << " values differ:" << first.str();
}

}  // namespace

// Plain convolutions, with and without bias, strided and grouped (depthwise too), forward and backward.
TEST_P(CudaOpFormats, Conv2d) {
  for (const ops::Conv2dAttrs& a : {conv(5, 7, 3, 1, 1, true), conv(4, 6, 3, 2, 2, false), conv(8, 8, 3, 1, 8, true),
                                    conv(16, 8, 1, 1, 1, true), conv(6, 4, 3, 1, 1, false)}) {
    const std::string name = fmt::format("conv {}→{} k{} s{} g{}{}", a.in_channels, a.out_channels, a.kernel, a.stride,
                                         a.groups, a.bias ? " +bias" : "");
    SCOPED_TRACE(name);
    const ops::Conv2dOp op(a);
    const Shape xs{2, a.in_channels, 11, 9};
    OpHarness cpu(op, {input(xs)}, Mode::train);
    FormatRun gpu(op, cpu, Mode::train, format());
    // The weight in the convolution's dtype and layout, the bias in its dtype; nothing in f32 NCHW.
    ASSERT_TRUE(gpu.specs()[0].compute_format.has_value());
    EXPECT_EQ(*gpu.specs()[0].compute_format, format());
    if (a.bias) EXPECT_EQ(gpu.specs()[1].compute_format.has_value(), dtype() != DType::f32);
    gpu.round_state(cpu);

    const std::vector<float> y = gpu.forward(cpu, true);
    const Tensor y_cpu = cpu.forward(true);
    const Tensor dy = input(y_cpu.shape());
    const auto g = gpu.backward(dy);
    const auto g_cpu = cpu.backward(dy);

    const Shape ys = y_cpu.shape();
    const int64_t k_fwd = a.in_channels / a.groups * a.kernel * a.kernel + 1;
    const int64_t k_data = a.out_channels / a.groups * a.kernel * a.kernel, k_filter = ys[0] * ys[2] * ys[3];
    const ConvTerms t = conv_terms(a, xs, cpu.inputs[0].to_vector(), as_double(cpu.params[0]), dy.to_vector(), dtype());
    RoundingTerms y_terms = t.y;
    if (a.bias) {
      const std::vector<float> bias = cpu.params[1].to_vector();
      for (size_t i = 0; i < y_terms.size(); ++i)
        y_terms.add(i, bias[i / static_cast<size_t>(ys[2] * ys[3]) % static_cast<size_t>(ys[1])]);
    }
    EXPECT_TRUE(close(y, as_double(y_cpu), y_terms, dtype(), k_fwd)) << what(name, "forward");
    EXPECT_TRUE(close(g.inputs[0], as_double(g_cpu.inputs[0]), t.dx, dtype(), k_data)) << what(name, "dx");
    EXPECT_TRUE(close(g.params[0], as_double(g_cpu.params[0]), t.dw, dtype(), k_filter)) << what(name, "dw");
    if (a.bias) {
      // Σ dy per channel in f32, rounded once to the dtype.
      RoundingTerms db(static_cast<size_t>(a.out_channels), dtype());
      const std::vector<float> d = dy.to_vector();
      for (size_t i = 0; i < d.size(); ++i)
        db.add(i / static_cast<size_t>(ys[2] * ys[3]) % static_cast<size_t>(ys[1]), d[i]);
      EXPECT_TRUE(close(g.params[1], as_double(g_cpu.params[1]), db, dtype(), k_filter)) << what(name, "db");
    }
  }
}

// Inference fusions: BatchNorm folded into the weights (random statistics) with and without SiLU, and SiLU after a
// convolution with and without its own bias; depthwise convolutions with BatchNorm (our kernel in NHWC, 8 or 16
// bytes of channels per thread or one channel, strides 1 and 2); 1×1 convolutions (a cuBLAS GEMM in f16/bf16 NHWC).
TEST_P(CudaOpFormats, FusedConvBatchNormSilu) {
  struct Case {
    bool bn, silu, bias;
    int64_t depthwise_channels = 0, stride = 1;  // 0: a 6 → 10 convolution (grouped without BatchNorm)
    int64_t kernel = 3;                          // 1: a pointwise convolution (cuBLAS in f16/bf16 NHWC)
  };
  for (const Case c : {Case{true, true, false}, Case{true, false, false}, Case{true, true, true},
                       Case{false, true, false}, Case{false, true, true}, Case{true, true, false, 16, 1},
                       Case{true, false, false, 16, 2}, Case{true, true, false, 6, 2}, Case{true, false, true, 6, 1},
                       Case{true, true, false, 0, 1, 1}, Case{false, true, true, 0, 1, 1}, Case{true, false, true, 0, 1, 1}}) {
    ops::ConvFusion f;
    f.batchnorm = c.bn;
    f.silu = c.silu;
    f.bn_eps = 1e-3f;
    f.conv_prefix = "conv.";
    f.bn_prefix = "bn.";
    const int64_t dw = c.depthwise_channels;
    const ops::Conv2dAttrs a = dw ? conv(dw, dw, 3, c.stride, dw, c.bias)
                                  : conv(6, 10, c.kernel, 1, c.bn || c.kernel == 1 ? 1 : 2, c.bias);
    const ops::FusedConv2dOp op(a, f);
    SCOPED_TRACE(op.name() + (c.bias ? " (conv bias)" : "") +
                 (dw ? fmt::format(" depthwise {} channels, stride {}", dw, c.stride) : std::string()) +
                 (c.kernel == 1 ? " 1x1" : ""));
    const Shape xs{2, dw ? dw : 6, 9, 8};
    OpHarness cpu(op, {input(xs)}, Mode::inference);
    if (c.bn) randomize_batchnorm(cpu, "bn.");
    FormatRun gpu(op, cpu, Mode::inference, format());
    for (const auto& s : gpu.specs())  // BatchNorm folds from the f32 state: nothing read in another format then
      if (c.bn || s.name.starts_with("bn.")) EXPECT_FALSE(s.compute_format.has_value()) << s.name;
    gpu.round_state(cpu);
    const std::vector<float> y = gpu.forward(cpu, false);
    const Tensor y_cpu = cpu.forward(false);

    // The weight and bias the convolution uses: folded (in f64 here; the GPU folds in f32 and rounds them to the
    // dtype) or the state itself.
    const int64_t K = a.out_channels, per_out = a.weight_shape().numel() / K;
    std::vector<double> w = as_double(cpu.params[0]), bias(static_cast<size_t>(K), 0.0);
    if (a.bias) bias = as_double(cpu.params[1]);
    if (c.bn) {
      const size_t s = a.bias ? 2 : 1;
      const auto gamma = cpu.params[s].to_vector(), beta = cpu.params[s + 1].to_vector(),
                 mean = cpu.params[s + 2].to_vector(), var = cpu.params[s + 3].to_vector();
      for (int64_t k = 0; k < K; ++k) {
        const double scale = gamma[k] / std::sqrt(double(var[k]) + f.bn_eps);
        for (int64_t j = 0; j < per_out; ++j) w[k * per_out + j] *= scale;
        bias[k] = beta[k] + (bias[k] - mean[k]) * scale;
      }
    }
    const double slope = c.silu ? 1.1 : 1.0;  // max |SiLU'| < 1.1
    ConvTerms t = conv_terms(a, xs, cpu.inputs[0].to_vector(), w, {}, dtype(), slope);
    const Shape ys = y_cpu.shape();
    for (size_t i = 0; i < t.y.size(); ++i) {
      const double b = bias[i / static_cast<size_t>(ys[2] * ys[3]) % static_cast<size_t>(K)];
      t.y.add(i, b, slope);            // the bias in the dtype, and the addition
      if (c.bn) t.y.add(i, b, slope);  // the folded bias rounded to the dtype
    }
    // The folded weight rounded to the dtype (after its f32 folding): the operand terms once more.
    if (c.bn) {
      const ConvTerms again = conv_terms(a, xs, cpu.inputs[0].to_vector(), w, {}, dtype(), slope);
      for (size_t i = 0; i < t.y.size(); ++i) t.y.add_terms(i, again.y, i, 1.0);
    }
    const int64_t k = a.in_channels / a.groups * a.kernel * a.kernel + 16;
    EXPECT_TRUE(close(y, as_double(y_cpu), t.y, dtype(), k)) << what(op.name(), "forward");
  }
}

// Training (batch statistics, the running statistics' update, backward) and inference with random statistics.
TEST_P(CudaOpFormats, BatchNorm2d) {
  const float eps = 1e-3f, momentum = 0.1f;
  const ops::BatchNorm2dOp op(eps, momentum);
  for (const Mode mode : {Mode::train, Mode::inference}) {
    const bool training = mode == Mode::train;
    SCOPED_TRACE(training ? "training" : "inference");
    const Shape xs{4, 6, 5, 7};
    OpHarness cpu(op, {input(xs, -2.0f, 3.0f)}, mode);  // a mean far from 0
    randomize_batchnorm(cpu);
    FormatRun gpu(op, cpu, mode, format());
    for (const auto& s : gpu.specs())
      EXPECT_FALSE(s.compute_format.has_value()) << s.name << ": BatchNorm state stays f32";
    const std::vector<float> gamma = cpu.param("weight").to_vector(), beta = cpu.param("bias").to_vector();
    const std::vector<float> rm0 = cpu.param("running_mean").to_vector(), rv0 = cpu.param("running_var").to_vector();
    const std::vector<float> y = gpu.forward(cpu, training);
    const Tensor y_cpu = cpu.forward(training);

    const int64_t N = xs[0], C = xs[1], HW = xs[2] * xs[3], M = N * HW;
    const std::vector<float> x = cpu.inputs[0].to_vector();
    const auto ch = [&](size_t i) { return static_cast<int64_t>(i) / HW % C; };
    if (!training) {
      RoundingTerms terms(x.size(), dtype());
      for (size_t i = 0; i < x.size(); ++i) {
        const int64_t c = ch(i);
        const double s = std::abs(gamma[c]) / std::sqrt(double(rv0[c]) + eps);
        terms.add(i, s * (std::abs(x[i]) + std::abs(rm0[c])));
        terms.add(i, beta[c]);
      }
      EXPECT_TRUE(close(y, as_double(y_cpu), terms, dtype(), 16)) << what("batchnorm2d", "inference");
      continue;
    }
    // Batch statistics in f64, and the magnitudes their f32 computation over M values acts on.
    std::vector<double> mean(C, 0.0), var(C, 0.0), abs_mean(C, 0.0), sq_mean(C, 0.0);
    for (size_t i = 0; i < x.size(); ++i)
      mean[ch(i)] += x[i] / double(M), abs_mean[ch(i)] += std::abs(x[i]) / double(M);
    for (size_t i = 0; i < x.size(); ++i) {
      var[ch(i)] += (x[i] - mean[ch(i)]) * (x[i] - mean[ch(i)]) / double(M);
      sq_mean[ch(i)] += double(x[i]) * x[i] / double(M);
    }
    const int64_t k = M + 16;
    RoundingTerms y_terms(x.size(), dtype());
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t c = ch(i);
      const double g = std::abs(gamma[c]) / std::sqrt(var[c] + eps);
      y_terms.add(i, g * (std::abs(x[i] - mean[c]) + abs_mean[c]));
      y_terms.add(i, beta[c]);
    }
    EXPECT_TRUE(close(y, as_double(y_cpu), y_terms, dtype(), k)) << what("batchnorm2d", "training forward");
    // The running statistics (f32 state) after the update, and the batch counter.
    RoundingTerms rm_terms(C, DType::f32), rv_terms(C, DType::f32);
    for (int64_t c = 0; c < C; ++c) {
      rm_terms.add(c, momentum * abs_mean[c]);
      rm_terms.add(c, (1 - momentum) * std::abs(rm0[c]));
      rv_terms.add(c, momentum * sq_mean[c] * M / (M - 1));
      rv_terms.add(c, (1 - momentum) * std::abs(rv0[c]));
    }
    const size_t irm = cpu.param_index("running_mean"), irv = cpu.param_index("running_var");
    EXPECT_TRUE(close(gpu.state[irm].to_vector(), as_double(cpu.params[irm]), rm_terms, DType::f32, k))
        << what("batchnorm2d", "running mean");
    EXPECT_TRUE(close(gpu.state[irv].to_vector(), as_double(cpu.params[irv]), rv_terms, DType::f32, k))
        << what("batchnorm2d", "running variance");
    const size_t inb = cpu.param_index("num_batches_tracked");
    EXPECT_EQ(gpu.state[inb].data<int64_t>()[0], cpu.params[inb].data<int64_t>()[0]);

    const Tensor dy = input(y_cpu.shape());
    const auto g = gpu.backward(dy);
    const auto g_cpu = cpu.backward(dy);
    const std::vector<float> d = dy.to_vector();
    std::vector<double> sum_abs_dy(C, 0.0), sum_abs_dyx(C, 0.0);
    RoundingTerms dx_terms(x.size(), dtype()), dgamma_terms(C, dtype()), dbeta_terms(C, dtype());
    const auto xhat = [&](size_t i) {
      const int64_t c = ch(i);
      return (std::abs(x[i] - mean[c]) + std::abs(mean[c])) / std::sqrt(var[c] + eps);
    };
    for (size_t i = 0; i < x.size(); ++i) {
      sum_abs_dy[ch(i)] += std::abs(d[i]);
      sum_abs_dyx[ch(i)] += std::abs(d[i]) * xhat(i);
      dgamma_terms.add(ch(i), d[i], xhat(i));  // dy·x̂ and its sum (a library may hold x̂ in the dtype)
      dbeta_terms.add(ch(i), d[i]);
    }
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t c = ch(i);
      const double s = std::abs(gamma[c]) / std::sqrt(var[c] + eps);
      dx_terms.add(i, s * d[i]);
      dx_terms.add(i, s * sum_abs_dy[c] / M);
      dx_terms.add(i, s * xhat(i) * sum_abs_dyx[c] / M);
    }
    EXPECT_TRUE(close(g.inputs[0], as_double(g_cpu.inputs[0]), dx_terms, dtype(), k)) << what("batchnorm2d", "dx");
    EXPECT_TRUE(close(g.params[0], as_double(g_cpu.params[0]), dgamma_terms, dtype(), k)) << what("batchnorm2d", "dγ");
    EXPECT_TRUE(close(g.params[1], as_double(g_cpu.params[1]), dbeta_terms, dtype(), k)) << what("batchnorm2d", "dβ");
  }
}

TEST_P(CudaOpFormats, Elementwise) {
  const Shape s{2, 3, 17, 5};
  const auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  {  // SiLU: y = x·σ(x), dx = dy·σ·(1 + x·(1 − σ))
    const ops::SiluOp op;
    OpHarness cpu(op, {input(s, -6.0f, 6.0f)}, Mode::train);
    FormatRun gpu(op, cpu, Mode::train, format());
    const auto y = gpu.forward(cpu, true);
    const Tensor y_cpu = cpu.forward(true);
    const Tensor dy = input(s);
    const auto g = gpu.backward(dy);
    const auto g_cpu = cpu.backward(dy);
    const auto x = cpu.inputs[0].to_vector(), d = dy.to_vector();
    RoundingTerms dx_terms(x.size(), dtype());
    for (size_t i = 0; i < x.size(); ++i) {
      const double sg = sigmoid(x[i]);
      dx_terms.add(i, std::abs(d[i]) * sg * (1 + std::abs(x[i]) * (1 - sg)));
    }
    EXPECT_TRUE(close(y, as_double(y_cpu), RoundingTerms(x.size(), dtype()), dtype(), 8)) << what("silu", "forward");
    EXPECT_TRUE(close(g.inputs[0], as_double(g_cpu.inputs[0]), dx_terms, dtype(), 8)) << what("silu", "dx");
  }
  {  // Sigmoid: dx = dy·y·(1 − y) from the forward's output, which the GPU holds in the dtype.
    const ops::SigmoidOp op;
    OpHarness cpu(op, {input(s, -6.0f, 6.0f)}, Mode::train);
    FormatRun gpu(op, cpu, Mode::train, format());
    const auto y = gpu.forward(cpu, true);
    const Tensor y_cpu = cpu.forward(true);
    const Tensor dy = input(s);
    const auto g = gpu.backward(dy);
    const auto g_cpu = cpu.backward(dy);
    const auto yc = y_cpu.to_vector(), d = dy.to_vector();
    RoundingTerms dx_terms(yc.size(), dtype());
    for (size_t i = 0; i < yc.size(); ++i) {
      dx_terms.add(i, yc[i], d[i] * (1 - 2.0 * yc[i]));  // y rounded to the dtype
      dx_terms.add(i, std::abs(d[i]) * yc[i] * (1 + yc[i]));
    }
    EXPECT_TRUE(close(y, as_double(y_cpu), RoundingTerms(yc.size(), dtype()), dtype(), 8))
        << what("sigmoid", "forward");
    EXPECT_TRUE(close(g.inputs[0], as_double(g_cpu.inputs[0]), dx_terms, dtype(), 8)) << what("sigmoid", "dx");
  }
  for (const bool is_add : {true, false}) {  // one f32 operation, rounded once
    const std::string name = is_add ? "add" : "mul";
    const std::unique_ptr<graph::Op> op =
        is_add ? std::unique_ptr<graph::Op>(new ops::AddOp()) : std::unique_ptr<graph::Op>(new ops::MulOp());
    OpHarness cpu(*op, {input(s, -2.0f, 2.0f), input(s, -2.0f, 2.0f)}, Mode::train);
    FormatRun gpu(*op, cpu, Mode::train, format());
    const auto y = gpu.forward(cpu, true);
    const Tensor y_cpu = cpu.forward(true);
    const Tensor dy = input(s);
    const auto g = gpu.backward(dy);
    const auto g_cpu = cpu.backward(dy);
    const size_t n = static_cast<size_t>(s.numel());
    EXPECT_TRUE(close(y, as_double(y_cpu), RoundingTerms(n, dtype()), dtype(), 1)) << what(name, "forward");
    for (size_t i = 0; i < 2; ++i)
      EXPECT_TRUE(close(g.inputs[i], as_double(g_cpu.inputs[i]), RoundingTerms(n, dtype()), dtype(), 1))
          << what(name, "gradient of input " + std::to_string(i));
  }
}

// SPPF's pool (k5 s1 p2) and a downsampling one (k2 s2): the forward is exact (a maximum of the same values, ties to
// the first in row-major order on both sides); the backward adds up to k² gradients in f32.
TEST_P(CudaOpFormats, MaxPool2d) {
  struct Window {
    int64_t k, s, p;
  };
  for (const Window w : {Window{5, 1, 2}, Window{2, 2, 0}}) {
    const std::string name = fmt::format("maxpool2d k{} s{} p{}", w.k, w.s, w.p);
    SCOPED_TRACE(name);
    const ops::MaxPool2dOp op(w.k, w.s, w.p);
    const Shape xs{2, 5, 10, 8};
    OpHarness cpu(op, {input(xs)}, Mode::train);
    FormatRun gpu(op, cpu, Mode::train, format());
    const auto y = gpu.forward(cpu, true);
    const Tensor y_cpu = cpu.forward(true);
    EXPECT_TRUE(identical(y, y_cpu.to_vector())) << what(name, "forward");
    const Tensor dy = input(y_cpu.shape());
    const auto g = gpu.backward(dy);
    const auto g_cpu = cpu.backward(dy);
    // Each input gets the gradients of the outputs whose window holds it and chose it: at most the ones holding it.
    const Shape ys = y_cpu.shape();
    const auto d = dy.to_vector();
    RoundingTerms terms(static_cast<size_t>(xs.numel()), dtype());
    for (int64_t p = 0; p < xs[0] * xs[1]; ++p)
      for (int64_t oh = 0; oh < ys[2]; ++oh)
        for (int64_t ow = 0; ow < ys[3]; ++ow)
          for (int64_t ih = oh * w.s - w.p; ih < oh * w.s - w.p + w.k; ++ih)
            for (int64_t iw = ow * w.s - w.p; iw < ow * w.s - w.p + w.k; ++iw)
              if (ih >= 0 && ih < xs[2] && iw >= 0 && iw < xs[3])
                terms.add(static_cast<size_t>((p * xs[2] + ih) * xs[3] + iw),
                          d[static_cast<size_t>((p * ys[2] + oh) * ys[3] + ow)]);
    EXPECT_TRUE(close(g.inputs[0], as_double(g_cpu.inputs[0]), terms, dtype(), w.k * w.k)) << what(name, "dx");
  }
}

TEST_P(CudaOpFormats, UpsampleNearest2x) {
  const ops::UpsampleNearestOp op(2);
  const Shape xs{2, 3, 5, 7};
  OpHarness cpu(op, {input(xs)}, Mode::train);
  FormatRun gpu(op, cpu, Mode::train, format());
  const auto y = gpu.forward(cpu, true);
  const Tensor y_cpu = cpu.forward(true);
  EXPECT_TRUE(identical(y, y_cpu.to_vector())) << what("upsample", "forward");
  const Tensor dy = input(y_cpu.shape());
  const auto g = gpu.backward(dy);
  const auto g_cpu = cpu.backward(dy);
  const auto d = dy.to_vector();
  RoundingTerms terms(static_cast<size_t>(xs.numel()), dtype());
  for (int64_t p = 0; p < xs[0] * xs[1]; ++p)
    for (int64_t i = 0; i < 2 * xs[2]; ++i)
      for (int64_t j = 0; j < 2 * xs[3]; ++j)
        terms.add(static_cast<size_t>((p * xs[2] + i / 2) * xs[3] + j / 2),
                  d[static_cast<size_t>((p * 2 * xs[2] + i) * 2 * xs[3] + j)]);
  EXPECT_TRUE(close(g.inputs[0], as_double(g_cpu.inputs[0]), terms, dtype(), 4)) << what("upsample", "dx");
}

// Permute works on the logical row-major order: any dtype, NCHW only. Exact.
TEST_P(CudaOpFormats, Permute) {
  const ops::PermuteOp op({0, 2, 3, 1});
  const Shape xs{2, 3, 4, 5};
  if (format().layout != Layout::nchw) {
    EXPECT_FALSE(op.lower(graph::Backend::cuda, Mode::train)->supports(format()));
    return;
  }
  OpHarness cpu(op, {input(xs)}, Mode::train);
  FormatRun gpu(op, cpu, Mode::train, format());
  const auto y = gpu.forward(cpu, true);
  const Tensor y_cpu = cpu.forward(true);
  EXPECT_TRUE(identical(y, y_cpu.to_vector())) << what("permute", "forward");
  const Tensor dy = input(y_cpu.shape());
  EXPECT_TRUE(identical(gpu.backward(dy).inputs[0], cpu.backward(dy).inputs[0].to_vector())) << what("permute", "dx");
}

// Losses and reductions stay f32, in either layout (a reduction of the whole tensor ignores the memory order).
TEST_P(CudaOpFormats, ScalarReductions) {
  for (const bool square : {true, false}) {
    const std::unique_ptr<graph::Op> op =
        square ? std::unique_ptr<graph::Op>(new ops::SumSquaresOp()) : std::unique_ptr<graph::Op>(new ops::MeanOp());
    if (dtype() != DType::f32) {
      EXPECT_FALSE(op->lower(graph::Backend::cuda, Mode::train)->supports(format())) << op->name();
      continue;
    }
    const Shape xs{3, 5, 11, 13};
    OpHarness cpu(*op, {input(xs)}, Mode::train);
    FormatRun gpu(*op, cpu, Mode::train, format());
    const auto y = gpu.forward(cpu, true);
    const Tensor y_cpu = cpu.forward(true);
    const auto x = cpu.inputs[0].to_vector();
    RoundingTerms terms(1, DType::f32);
    for (const float v : x) terms.add(0, square ? 0.5 * v * v : std::abs(v) / double(x.size()));
    EXPECT_TRUE(close(y, as_double(y_cpu), terms, DType::f32, xs.numel())) << what(op->name(), "forward");
    const Tensor dy = input(y_cpu.shape());
    const auto g = gpu.backward(dy);
    const auto g_cpu = cpu.backward(dy);
    EXPECT_TRUE(close(g.inputs[0], as_double(g_cpu.inputs[0]), RoundingTerms(x.size(), DType::f32), DType::f32, 2))
        << what(op->name(), "dx");
  }
}

INSTANTIATE_TEST_SUITE_P(LowPrecisionAndNhwc, CudaOpFormats,
                         testing::Values(Format{DType::f16, Layout::nchw}, Format{DType::f16, Layout::nhwc},
                                         Format{DType::bf16, Layout::nchw}, Format{DType::bf16, Layout::nhwc},
                                         Format{DType::f32, Layout::nhwc}),
                         [](const testing::TestParamInfo<Format>& info) { return format_test_name(info.param); });
