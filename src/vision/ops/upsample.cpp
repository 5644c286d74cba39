#include "vision/ops/upsample.h"

#include <algorithm>

#include "vision/cpu/parallel.h"
#include "vision/ops/op_util.h"

namespace vision::ops {

namespace {

class UpsampleNearestRuntime final : public CpuRuntimeOp {
 public:
  explicit UpsampleNearestRuntime(int64_t scale) : CpuRuntimeOp("ops.upsample_nearest", 1), s_(scale) {}

  // One input row per iteration: its first output row element by element (no division per element), the other
  // scale − 1 rows copied from it.
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    const int64_t w = x.dim(3), ow = w * s_;
    const float* src = x.data<float>();
    float* dst = ctx.output.data<float>();
    cpu::parallel_for(
        x.dim(0) * x.dim(1) * x.dim(2),
        [&](int64_t row) {
          const float* in = src + row * w;
          float* out = dst + row * s_ * ow;
          for (int64_t ix = 0; ix < w; ++ix)
            for (int64_t a = 0; a < s_; ++a) out[ix * s_ + a] = in[ix];
          for (int64_t a = 1; a < s_; ++a) std::copy(out, out + ow, out + a * ow);
        },
        ctx.output.numel());
  }

  // dx[i, j] = Σ of dy over the scale × scale block it was copied to; one input row per iteration.
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    const Tensor& dx = ctx.grad_inputs[0];
    const int64_t w = dx.dim(3), ow = w * s_;
    const float* dy = ctx.grad_output.data<float>();
    float* g = dx.data<float>();
    cpu::parallel_for(
        dx.dim(0) * dx.dim(1) * dx.dim(2),
        [&](int64_t row) {
          float* out = g + row * w;
          for (int64_t ix = 0; ix < w; ++ix) {
            float acc = 0;
            for (int64_t a = 0; a < s_; ++a) {
              const float* in = dy + (row * s_ + a) * ow + ix * s_;
              for (int64_t b = 0; b < s_; ++b) acc += in[b];
            }
            out[ix] = acc;
          }
        },
        ctx.grad_output.numel());
  }

 private:
  int64_t s_;
};

}  // namespace

UpsampleNearestOp::UpsampleNearestOp(int64_t scale) : scale_(scale) {
  VISION_CHECK(scale >= 1, "upsample_nearest needs an integer scale >= 1, got {}", scale);
}

Shape UpsampleNearestOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, 4, "upsample_nearest");
  const Shape& x = inputs[0];
  auto up = [&](int64_t n) { return n == Shape::kAny ? Shape::kAny : n * scale_; };
  return {x[0], x[1], up(x[2]), up(x[3])};
}

std::unique_ptr<RuntimeOp> UpsampleNearestOp::lower(Backend backend, Mode) const {
  return lower_cpu_or_cuda<UpsampleNearestRuntime>(
      *this, backend, VISION_CUDA_FACTORY(cuda_impl::make_upsample_nearest(std::move(twin), scale_)), scale_);
}

SymTensor upsample_nearest(SymTensor x, int64_t scale, const std::string& name) {
  return record<UpsampleNearestOp>({x}, name, scale);
}

}  // namespace vision::ops
