// Small custom ops for the graph tests: they exercise the one Op/RuntimeOp interface that built-in ops use too.
#pragma once

#include <cstring>

#include "vision/graph/graph.h"

namespace vision::test {

using namespace vision::graph;

// Per-channel scale y[n, c, ...] = w[c] · x (a trainable parameter "weight" of shape [C]).
class ScaleRuntime : public RuntimeOp {
 public:
  explicit ScaleRuntime(std::string prefix = "") : prefix_(std::move(prefix)) {}
  std::string name() const override { return "test.scale"; }
  int n_activation_inputs() const override { return 1; }
  std::vector<ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    return {{prefix_ + "weight", Shape{in[0][1]}, DType::f32, StateKind::parameter}};
  }
  std::vector<std::byte> param_init_data(size_t, const std::vector<Shape>& in, const Shape&,
                                         uint64_t seed) const override {
    auto v = uniform_init(Shape{in[0][1]}, 0.5f, seed);
    for (auto& x : v) x += 1.0f;
    return bytes_of(v);
  }
  static void apply(const Tensor& x, const Tensor& w, const Tensor& y) {
    const int64_t c = x.dim(1), inner = x.numel() / x.dim(0) / c;
    for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = w.data<float>()[(i / inner) % c] * x.data<float>()[i];
  }
  void forward(ForwardCtx& ctx) override { apply(ctx.inputs[0], ctx.params[0], ctx.output); }
  bool has_backward() const override { return true; }
  void backward(BackwardCtx& ctx) override {
    const Tensor &x = ctx.inputs[0], &w = ctx.params[0], &gy = ctx.grad_output;
    const int64_t c = x.dim(1), inner = x.numel() / x.dim(0) / c;
    if (ctx.grad_inputs[0].defined()) apply(gy, w, ctx.grad_inputs[0]);
    float* gw = ctx.grad_params[0].data<float>();
    for (int64_t k = 0; k < c; ++k) gw[k] = 0;
    for (int64_t i = 0; i < x.numel(); ++i) gw[(i / inner) % c] += x.data<float>()[i] * gy.data<float>()[i];
  }

 private:
  std::string prefix_;
};

// Two scales fused into one step (exercises Op::fuse_with and relative state names).
class ScaleScaleRuntime : public RuntimeOp {
 public:
  ScaleScaleRuntime(std::string a, std::string b) : a_(std::move(a)), b_(std::move(b)) {}
  std::string name() const override { return "test.scale_scale"; }
  int n_activation_inputs() const override { return 1; }
  std::vector<ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    return {{a_ + "weight", Shape{in[0][1]}}, {b_ + "weight", Shape{in[0][1]}}};
  }
  void forward(ForwardCtx& ctx) override {
    ScaleRuntime::apply(ctx.inputs[0], ctx.params[0], ctx.output);
    ScaleRuntime::apply(ctx.output, ctx.params[1], ctx.output);
  }

 private:
  std::string a_, b_;
};

class ScaleOp : public Op {
 public:
  std::string name() const override { return "test.scale"; }
  Shape infer_output_shape(const std::vector<Shape>& in) const override { return in.at(0); }
  std::unique_ptr<RuntimeOp> lower(Backend, Mode) const override { return std::make_unique<ScaleRuntime>(); }
  std::shared_ptr<const Op> fuse_with(const Op& next, Mode, const std::string& a, const std::string& b) const override;
};

class ScaleScaleOp : public Op {
 public:
  ScaleScaleOp(std::string a, std::string b) : a_(std::move(a)), b_(std::move(b)) {}
  std::string name() const override { return "test.scale_scale"; }
  Shape infer_output_shape(const std::vector<Shape>& in) const override { return in.at(0); }
  std::unique_ptr<RuntimeOp> lower(Backend, Mode) const override {
    return std::make_unique<ScaleScaleRuntime>(a_, b_);
  }

 private:
  std::string a_, b_;
};

inline std::shared_ptr<const Op> ScaleOp::fuse_with(const Op& next, Mode mode, const std::string& a,
                                                   const std::string& b) const {
  if (mode != Mode::inference || !dynamic_cast<const ScaleOp*>(&next)) return nullptr;  // no backward fused
  return std::make_shared<ScaleScaleOp>(a, b);
}

// y = a + b (two activation inputs, no state).
class AddRuntime : public RuntimeOp {
 public:
  std::string name() const override { return "test.add"; }
  int n_activation_inputs() const override { return 2; }
  void forward(ForwardCtx& ctx) override {
    for (int64_t i = 0; i < ctx.output.numel(); ++i)
      ctx.output.data<float>()[i] = ctx.inputs[0].data<float>()[i] + ctx.inputs[1].data<float>()[i];
  }
  bool has_backward() const override { return true; }
  void backward(BackwardCtx& ctx) override {
    for (auto& g : ctx.grad_inputs)
      if (g.defined()) std::memcpy(g.raw(), ctx.grad_output.raw(), g.nbytes());
  }
};
class AddOp : public Op {
 public:
  std::string name() const override { return "test.add"; }
  Shape infer_output_shape(const std::vector<Shape>& in) const override {
    VISION_CHECK(in.size() == 2 && in[0].compatible(in[1]), "add needs two inputs of one shape");
    return in[0];
  }
  std::unique_ptr<RuntimeOp> lower(Backend, Mode) const override { return std::make_unique<AddRuntime>(); }
};

// loss = Σ x² (a rank-0 output).
class SquareSumRuntime : public RuntimeOp {
 public:
  std::string name() const override { return "test.square_sum"; }
  int n_activation_inputs() const override { return 1; }
  void forward(ForwardCtx& ctx) override {
    double s = 0;
    for (int64_t i = 0; i < ctx.inputs[0].numel(); ++i) s += double(ctx.inputs[0].data<float>()[i]) * ctx.inputs[0].data<float>()[i];
    ctx.output.data<float>()[0] = static_cast<float>(s);
  }
  bool has_backward() const override { return true; }
  void backward(BackwardCtx& ctx) override {
    const float g = ctx.grad_output.data<float>()[0];
    for (int64_t i = 0; i < ctx.inputs[0].numel(); ++i)
      ctx.grad_inputs[0].data<float>()[i] = 2 * g * ctx.inputs[0].data<float>()[i];
  }
};
class SquareSumOp : public Op {
 public:
  std::string name() const override { return "test.square_sum"; }
  Shape infer_output_shape(const std::vector<Shape>&) const override { return Shape{}; }
  std::unique_ptr<RuntimeOp> lower(Backend, Mode) const override { return std::make_unique<SquareSumRuntime>(); }
};

// y = x + k[c] with k a per-plan constant (k[c] = 0.5·c), or a constant of the wrong byte count.
class OffsetRuntime : public RuntimeOp {
 public:
  explicit OffsetRuntime(bool bad) : bad_(bad) {}
  std::string name() const override { return "test.offset"; }
  int n_activation_inputs() const override { return 1; }
  std::vector<ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    return {{"grid", Shape{in[0][1]}, DType::f32, StateKind::constant}};
  }
  std::vector<std::byte> param_init_data(size_t, const std::vector<Shape>& in, const Shape&, uint64_t) const override {
    std::vector<float> k(static_cast<size_t>(in[0][1] + (bad_ ? 1 : 0)));
    for (size_t c = 0; c < k.size(); ++c) k[c] = 0.5f * static_cast<float>(c);
    return bytes_of(k);
  }
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    const int64_t c = x.dim(1), inner = x.numel() / x.dim(0) / c;
    for (int64_t i = 0; i < x.numel(); ++i)
      ctx.output.data<float>()[i] = x.data<float>()[i] + ctx.params[0].data<float>()[(i / inner) % c];
  }

 private:
  bool bad_;
};
class OffsetOp : public Op {
 public:
  explicit OffsetOp(bool bad = false) : bad_(bad) {}
  std::string name() const override { return "test.offset"; }
  Shape infer_output_shape(const std::vector<Shape>& in) const override { return in.at(0); }
  std::unique_ptr<RuntimeOp> lower(Backend, Mode) const override { return std::make_unique<OffsetRuntime>(bad_); }

 private:
  bool bad_;
};

// Row maxima of a [N, C] input and where they are: values f32 [N] and indices i32 [N] (a top-1; the indices
// carry no gradient). Backward sends each row's gradient to its maximum.
class MaxWithIndexRuntime : public RuntimeOp {
 public:
  std::string name() const override { return "test.max_with_index"; }
  int n_activation_inputs() const override { return 1; }
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    const int64_t n = x.dim(0), c = x.dim(1);
    for (int64_t r = 0; r < n; ++r) {
      int32_t best = 0;
      for (int32_t j = 1; j < c; ++j)
        if (x.data<float>()[r * c + j] > x.data<float>()[r * c + best]) best = j;
      ctx.outputs[0].data<float>()[r] = x.data<float>()[r * c + best];
      ctx.outputs[1].data<int32_t>()[r] = best;
    }
  }
  bool has_backward() const override { return true; }
  void backward(BackwardCtx& ctx) override {
    VISION_CHECK(!ctx.grad_outputs[1].defined(), "integer indices got a gradient");
    const Tensor& dx = ctx.grad_inputs[0];
    if (!dx.defined()) return;
    const int64_t n = dx.dim(0), c = dx.dim(1);
    for (int64_t i = 0; i < dx.numel(); ++i) dx.data<float>()[i] = 0;
    for (int64_t r = 0; r < n; ++r)
      dx.data<float>()[r * c + ctx.outputs[1].data<int32_t>()[r]] = ctx.grad_outputs[0].data<float>()[r];
  }
};
class MaxWithIndexOp : public Op {
 public:
  std::string name() const override { return "test.max_with_index"; }
  size_t n_outputs() const override { return 2; }
  std::vector<Shape> infer_output_shapes(const std::vector<Shape>& in) const override {
    VISION_CHECK(in.size() == 1 && in[0].rank() == 2, "max_with_index takes one [N, C] input");
    return {Shape{in[0][0]}, Shape{in[0][0]}};
  }
  std::vector<DType> infer_output_dtypes(const std::vector<DType>&) const override { return {DType::f32, DType::i32}; }
  std::unique_ptr<RuntimeOp> lower(Backend, Mode) const override { return std::make_unique<MaxWithIndexRuntime>(); }
};

// y = x · s with s = 2·w derived from a parameter w [C] by refresh(); counts the refreshes (the fold of BatchNorm
// into a convolution, in miniature). Inference only.
class DoubledScaleRuntime : public RuntimeOp {
 public:
  explicit DoubledScaleRuntime(int* refreshes) : refreshes_(refreshes) {}
  std::string name() const override { return "test.doubled_scale"; }
  int n_activation_inputs() const override { return 1; }
  std::vector<ParamSpec> param_specs(const std::vector<Shape>& in, const Shape&) const override {
    return {{"weight", Shape{in[0][1]}, DType::f32, StateKind::parameter}};
  }
  std::vector<std::byte> param_init_data(size_t, const std::vector<Shape>& in, const Shape&,
                                         uint64_t seed) const override {
    return bytes_of(uniform_init(Shape{in[0][1]}, 1.0f, seed));
  }
  std::vector<TensorSpec> derived_specs(const std::vector<Shape>& in, const Shape&) const override {
    return {{Shape{in[0][1]}, DType::f32}};
  }
  void refresh(ForwardCtx& ctx) override {
    ++*refreshes_;
    for (int64_t c = 0; c < ctx.derived[0].numel(); ++c)
      ctx.derived[0].data<float>()[c] = 2 * ctx.params[0].data<float>()[c];
  }
  void forward(ForwardCtx& ctx) override { ScaleRuntime::apply(ctx.inputs[0], ctx.derived[0], ctx.output); }

 private:
  int* refreshes_;
};
class DoubledScaleOp : public Op {
 public:
  explicit DoubledScaleOp(int* refreshes) : refreshes_(refreshes) {}
  std::string name() const override { return "test.doubled_scale"; }
  Shape infer_output_shape(const std::vector<Shape>& in) const override { return in.at(0); }
  std::unique_ptr<RuntimeOp> lower(Backend, Mode) const override {
    return std::make_unique<DoubledScaleRuntime>(refreshes_);
  }

 private:
  int* refreshes_;
};

}  // namespace vision::test
