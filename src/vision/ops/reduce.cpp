#include "vision/ops/reduce.h"

#include "vision/cpu/parallel.h"
#include "vision/ops/op_util.h"

namespace vision::ops {

namespace {

// y = Σ Fn::term(x_i, n); dx_i = dy·Fn::grad(x_i, n), n = numel(x).
template <typename Fn>
class ReductionRuntime final : public CpuRuntimeOp {
 public:
  ReductionRuntime() : CpuRuntimeOp(Fn::name, 1) {}
  void forward(ForwardCtx& ctx) override {
    const float* x = ctx.inputs[0].data<float>();
    const int64_t n = ctx.inputs[0].numel();
    const double sum = cpu::parallel_sum(n, [&](int64_t i) { return Fn::term(x[i]); });
    ctx.output.data<float>()[0] = static_cast<float>(Fn::finish(sum, n));
  }
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    const float* x = ctx.inputs[0].data<float>();
    float* dx = ctx.grad_inputs[0].data<float>();
    const float dy = ctx.grad_output.data<float>()[0];
    const int64_t n = ctx.inputs[0].numel();
    cpu::parallel_for(n, [&](int64_t i) { dx[i] = dy * Fn::grad(x[i], n); });
  }
};

struct SumSquaresFn {
  static constexpr const char* name = "ops.sum_squares";
  static double term(float x) { return 0.5 * static_cast<double>(x) * x; }
  static double finish(double sum, int64_t) { return sum; }
  static float grad(float x, int64_t) { return x; }
};

struct MeanFn {
  static constexpr const char* name = "ops.mean";
  static double term(float x) { return x; }
  static double finish(double sum, int64_t n) { return n ? sum / static_cast<double>(n) : 0.0; }
  static float grad(float, int64_t n) { return 1.0f / static_cast<float>(n); }
};

}  // namespace

Shape ScalarReductionOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, -1, name());
  return Shape{};
}

std::unique_ptr<RuntimeOp> SumSquaresOp::lower(Backend b, Mode) const {
  return lower_cpu_or_cuda<ReductionRuntime<SumSquaresFn>>(*this, b, VISION_CUDA_FACTORY(cuda_impl::make_sum_squares(std::move(twin))));
}
std::unique_ptr<RuntimeOp> MeanOp::lower(Backend b, Mode) const { return lower_cpu_or_cuda<ReductionRuntime<MeanFn>>(*this, b, VISION_CUDA_FACTORY(cuda_impl::make_mean(std::move(twin)))); }

SymTensor sum_squares(SymTensor x, const std::string& name) { return record<SumSquaresOp>({x}, name); }
SymTensor mean(SymTensor x, const std::string& name) { return record<MeanOp>({x}, name); }

}  // namespace vision::ops
