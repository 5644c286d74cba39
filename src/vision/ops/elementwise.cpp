#include "vision/ops/elementwise.h"

#include <cmath>

#include "vision/cpu/parallel.h"
#include "vision/ops/op_util.h"

namespace vision::ops {

namespace {

inline float sigmoid_of(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

float silu_value(float x) { return x * sigmoid_of(x); }
float silu_derivative(float x) {
  const float s = sigmoid_of(x);
  return s * (1.0f + x * (1.0f - s));
}

namespace {

struct SiluFn {
  static constexpr const char* name = "ops.silu";
  static float f(float x) { return silu_value(x); }
  static float df(float x) { return silu_derivative(x); }
};

struct SigmoidFn {
  static constexpr const char* name = "ops.sigmoid";
  static float f(float x) { return sigmoid_of(x); }
  static float df(float x) {
    const float s = sigmoid_of(x);
    return s * (1.0f - s);
  }
};

struct AddFn {
  static constexpr const char* name = "ops.add";
  static float f(float a, float b) { return a + b; }
  static float da(float, float, float dy) { return dy; }
  static float db(float, float, float dy) { return dy; }
};

struct MulFn {
  static constexpr const char* name = "ops.mul";
  static float f(float a, float b) { return a * b; }
  static float da(float, float b, float dy) { return dy * b; }
  static float db(float a, float, float dy) { return dy * a; }
};

// y = Fn::f(x); dx = dy·Fn::df(x) (derivatives from the input, so the output need not be kept).
template <typename Fn>
class UnaryRuntime final : public CpuRuntimeOp {
 public:
  UnaryRuntime() : CpuRuntimeOp(Fn::name, 1) {}
  bool supports(const Format& f) const override { return f.dtype == DType::f32; }  // element by element: any layout
  void forward(ForwardCtx& ctx) override {
    const float* x = ctx.inputs[0].data<float>();
    float* y = ctx.output.data<float>();
    cpu::parallel_for(ctx.output.numel(), [&](int64_t i) { y[i] = Fn::f(x[i]); });
  }
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    const float* x = ctx.inputs[0].data<float>();
    const float* dy = ctx.grad_output.data<float>();
    float* dx = ctx.grad_inputs[0].data<float>();
    cpu::parallel_for(ctx.grad_output.numel(), [&](int64_t i) { dx[i] = dy[i] * Fn::df(x[i]); });
  }
};

// y = Fn::f(a, b) elementwise over two tensors of one shape.
template <typename Fn>
class BinaryRuntime final : public CpuRuntimeOp {
 public:
  BinaryRuntime() : CpuRuntimeOp(Fn::name, 2) {}
  // Two tensors of one shape, both in the step's layout: element i of one meets element i of the other in any layout.
  bool supports(const Format& f) const override { return f.dtype == DType::f32; }
  void forward(ForwardCtx& ctx) override {
    const float* a = ctx.inputs[0].data<float>();
    const float* b = ctx.inputs[1].data<float>();
    float* y = ctx.output.data<float>();
    cpu::parallel_for(ctx.output.numel(), [&](int64_t i) { y[i] = Fn::f(a[i], b[i]); });
  }
  void backward(BackwardCtx& ctx) override {
    const float* a = ctx.inputs[0].data<float>();
    const float* b = ctx.inputs[1].data<float>();
    const float* dy = ctx.grad_output.data<float>();
    const int64_t n = ctx.grad_output.numel();
    if (ctx.grad_inputs[0].defined()) {
      float* da = ctx.grad_inputs[0].data<float>();
      cpu::parallel_for(n, [&](int64_t i) { da[i] = Fn::da(a[i], b[i], dy[i]); });
    }
    if (ctx.grad_inputs[1].defined()) {
      float* db = ctx.grad_inputs[1].data<float>();
      cpu::parallel_for(n, [&](int64_t i) { db[i] = Fn::db(a[i], b[i], dy[i]); });
    }
  }
};

}  // namespace

Shape UnaryElementwiseOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, -1, name());
  return inputs[0];
}

Shape BinaryElementwiseOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 2, -1, name());
  return merge_shapes(inputs[0], inputs[1], name() + " needs inputs of one shape");
}

std::unique_ptr<RuntimeOp> SiluOp::lower(Backend b, Mode) const { return lower_cpu_or_cuda<UnaryRuntime<SiluFn>>(*this, b, VISION_CUDA_FACTORY(cuda_impl::make_silu(std::move(twin)))); }
std::unique_ptr<RuntimeOp> SigmoidOp::lower(Backend b, Mode) const {
  return lower_cpu_or_cuda<UnaryRuntime<SigmoidFn>>(*this, b, VISION_CUDA_FACTORY(cuda_impl::make_sigmoid(std::move(twin))));
}
std::unique_ptr<RuntimeOp> AddOp::lower(Backend b, Mode) const { return lower_cpu_or_cuda<BinaryRuntime<AddFn>>(*this, b, VISION_CUDA_FACTORY(cuda_impl::make_add(std::move(twin)))); }
std::unique_ptr<RuntimeOp> MulOp::lower(Backend b, Mode) const { return lower_cpu_or_cuda<BinaryRuntime<MulFn>>(*this, b, VISION_CUDA_FACTORY(cuda_impl::make_mul(std::move(twin)))); }

SymTensor silu(SymTensor x, const std::string& name) { return record<SiluOp>({x}, name); }
SymTensor sigmoid(SymTensor x, const std::string& name) { return record<SigmoidOp>({x}, name); }
SymTensor add(SymTensor a, SymTensor b, const std::string& name) { return record<AddOp>({a, b}, name); }
SymTensor mul(SymTensor a, SymTensor b, const std::string& name) { return record<MulOp>({a, b}, name); }

}  // namespace vision::ops
