#include "vision/ops/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "vision/cpu/parallel.h"
#include "vision/ops/op_util.h"

namespace vision::ops {

namespace {

class MaxPool2dRuntime final : public CpuRuntimeOp {
 public:
  MaxPool2dRuntime(int64_t k, int64_t s, int64_t p, Mode mode)
      : CpuRuntimeOp("ops.maxpool2d", 1), k_(k), s_(s), p_(p), mode_(mode) {}

  std::vector<TensorSpec> saved_specs(const std::vector<Shape>&, const Shape& out) const override {
    if (mode_ != Mode::train) return {};
    return {{out, DType::i32}};
  }

  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    const int64_t h = x.dim(2), w = x.dim(3), oh = ctx.output.dim(2), ow = ctx.output.dim(3);
    const float* src = x.data<float>();
    float* dst = ctx.output.data<float>();
    int32_t* arg = ctx.saved.empty() ? nullptr : ctx.saved[0].data<int32_t>();
    const int64_t planes = x.dim(0) * x.dim(1);
    cpu::parallel_for(
        planes,
        [&](int64_t pl) {
          const float* in = src + pl * h * w;
          for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox) {
              float best = -std::numeric_limits<float>::infinity();
              int32_t best_i = -1;
              for (int64_t iy = std::max<int64_t>(oy * s_ - p_, 0); iy < std::min(oy * s_ - p_ + k_, h); ++iy)
                for (int64_t ix = std::max<int64_t>(ox * s_ - p_, 0); ix < std::min(ox * s_ - p_ + k_, w); ++ix) {
                  const float v = in[iy * w + ix];
                  if (best_i < 0 || v > best || std::isnan(v)) {  // NaN propagates, as in PyTorch
                    best = v;
                    best_i = static_cast<int32_t>(iy * w + ix);
                  }
                }
              const int64_t o = (pl * oh + oy) * ow + ox;
              dst[o] = best;
              if (arg) arg[o] = best_i;
            }
        },
        ctx.output.numel() * k_ * k_);
  }

  // dx[argmax] += dy, plane by plane (windows overlap when stride < kernel).
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    VISION_CHECK(!ctx.saved.empty(), "maxpool2d backward needs the argmax saved by a training forward");
    const Tensor& dx = ctx.grad_inputs[0];
    const int64_t hw = dx.dim(2) * dx.dim(3), ohw = ctx.grad_output.dim(2) * ctx.grad_output.dim(3);
    const float* dy = ctx.grad_output.data<float>();
    const int32_t* arg = ctx.saved[0].data<int32_t>();
    float* g = dx.data<float>();
    cpu::parallel_for(
        dx.dim(0) * dx.dim(1),
        [&](int64_t pl) {
          float* gp = g + pl * hw;
          std::fill(gp, gp + hw, 0.0f);
          for (int64_t o = pl * ohw; o < (pl + 1) * ohw; ++o) gp[arg[o]] += dy[o];
        },
        dx.numel());
  }

 private:
  int64_t k_, s_, p_;
  Mode mode_;
};

}  // namespace

MaxPool2dOp::MaxPool2dOp(int64_t kernel, int64_t stride, int64_t padding)
    : kernel_(kernel), stride_(stride < 0 ? kernel : stride), padding_(padding) {
  VISION_CHECK(kernel_ > 0 && stride_ > 0 && padding_ >= 0, "maxpool2d needs kernel, stride > 0 and padding >= 0, got {} {} {}",
               kernel_, stride_, padding_);
  VISION_CHECK(2 * padding_ <= kernel_, "maxpool2d: padding {} must be at most half the kernel {}", padding_, kernel_);
}

Shape MaxPool2dOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, 4, "maxpool2d");
  const Shape& x = inputs[0];
  auto spatial = [&](int64_t n) -> int64_t {
    if (n == Shape::kAny) return Shape::kAny;
    VISION_CHECK(n + 2 * padding_ >= kernel_, "maxpool2d: input {} is smaller than the kernel {} (padding {})",
                 x.str(), kernel_, padding_);
    return (n + 2 * padding_ - kernel_) / stride_ + 1;
  };
  return {x[0], x[1], spatial(x[2]), spatial(x[3])};
}

std::unique_ptr<RuntimeOp> MaxPool2dOp::lower(Backend backend, Mode mode) const {
  return lower_cpu_or_cuda<MaxPool2dRuntime>(
      *this, backend,
      VISION_CUDA_FACTORY(cuda_impl::make_maxpool2d(std::move(twin), kernel_, stride_, padding_, mode)), kernel_,
      stride_, padding_, mode);
}

SymTensor maxpool2d(SymTensor x, int64_t kernel, int64_t stride, int64_t padding, const std::string& name) {
  return record<MaxPool2dOp>({x}, name, kernel, stride, padding);
}

}  // namespace vision::ops
