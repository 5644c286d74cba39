#include "vision/ops/upsample.h"

#include <algorithm>

#include "vision/cpu/parallel.h"
#include "vision/ops/op_util.h"

namespace vision::ops {

namespace {

class UpsampleNearestRuntime final : public CpuRuntimeOp {
 public:
  explicit UpsampleNearestRuntime(int64_t scale) : CpuRuntimeOp("ops.upsample_nearest", 1), s_(scale) {}
  bool supports(const Format& f) const override { return f.dtype == DType::f32; }  // NCHW or NHWC

  // One input row per iteration: its first output row pixel by pixel (no division per element), the other
  // scale − 1 rows copied from it. A pixel is one value in NCHW (rows of every plane) and the c channels in NHWC.
  void forward(ForwardCtx& ctx) override {
    const Tensor& x = ctx.inputs[0];
    const Geometry g(x.shape(), format().layout);
    const int64_t ow = g.w * s_;
    const float* src = x.data<float>();
    float* dst = ctx.output.data<float>();
    cpu::parallel_for(
        g.rows,
        [&](int64_t row) {
          const float* in = src + row * g.w * g.pixel;
          float* out = dst + row * s_ * ow * g.pixel;
          if (g.pixel == 1) {
            for (int64_t ix = 0; ix < g.w; ++ix)
              for (int64_t a = 0; a < s_; ++a) out[ix * s_ + a] = in[ix];
          } else {
            for (int64_t ix = 0; ix < g.w; ++ix)
              for (int64_t a = 0; a < s_; ++a)
                std::copy(in + ix * g.pixel, in + (ix + 1) * g.pixel, out + (ix * s_ + a) * g.pixel);
          }
          for (int64_t a = 1; a < s_; ++a) std::copy(out, out + ow * g.pixel, out + a * ow * g.pixel);
        },
        ctx.output.numel());
  }

  // dx[i, j] = Σ of dy over the scale × scale block it was copied to (summed in the same order in either layout);
  // one input row per iteration.
  void backward(BackwardCtx& ctx) override {
    if (!ctx.grad_inputs[0].defined()) return;
    const Tensor& dx = ctx.grad_inputs[0];
    const Geometry g(dx.shape(), format().layout);
    const int64_t ow = g.w * s_;
    const float* dy = ctx.grad_output.data<float>();
    float* grad = dx.data<float>();
    cpu::parallel_for(
        g.rows,
        [&](int64_t row) {
          float* out = grad + row * g.w * g.pixel;
          for (int64_t ix = 0; ix < g.w; ++ix)
            for (int64_t ch = 0; ch < g.pixel; ++ch) {
              float acc = 0;
              for (int64_t a = 0; a < s_; ++a) {
                const float* in = dy + ((row * s_ + a) * ow + ix * s_) * g.pixel + ch;
                for (int64_t b = 0; b < s_; ++b) acc += in[b * g.pixel];
              }
              out[ix * g.pixel + ch] = acc;
            }
        },
        ctx.grad_output.numel());
  }

 private:
  // Rows of pixels: NCHW has N·C·H rows of W one-value pixels, NHWC N·H rows of W pixels of C values.
  struct Geometry {
    Geometry(const Shape& x, core::Layout layout)
        : rows(layout == core::Layout::nhwc ? x[0] * x[2] : x[0] * x[1] * x[2]),
          w(x[3]),
          pixel(layout == core::Layout::nhwc ? x[1] : 1) {}
    int64_t rows, w, pixel;
  };

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
