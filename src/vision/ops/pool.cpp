#include "vision/ops/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "vision/cpu/parallel.h"
#include "vision/ops/op_util.h"

namespace vision::ops {

namespace {

class MaxPool2dRuntime final : public CpuRuntimeOp {
 public:
  MaxPool2dRuntime(int64_t k, int64_t s, int64_t p, Mode mode)
      : CpuRuntimeOp("ops.maxpool2d", 1), k_(k), s_(s), p_(p), mode_(mode) {}

  // f32; NHWC for inference (no argmax to keep).
  bool supports(const Format& f) const override {
    return f == Format{} || (mode_ == Mode::inference && f == Format{DType::f32, core::Layout::nhwc});
  }

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
    if (format().layout == core::Layout::nhwc) {
      VISION_CHECK(arg == nullptr, "maxpool2d keeps its argmax in NCHW only (a training forward)");
      return forward_nhwc(src, dst, x.dim(0), x.dim(1), h, w, oh, ow);
    }
    if (arg == nullptr) return forward_separable(src, dst, planes, h, w, oh, ow);
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
  // max(a, b) that keeps the first of equal values and propagates NaN (as the windowed loop above does).
  static float max_keep_first(float best, float v) { return (v > best || v != v) ? v : best; }

  // Inference (no argmax): the window's maximum as the maximum over its rows of each row's maximum, 2k comparisons per
  // output instead of k² and no branch in the loops. The same value as the windowed loop, bit for bit: the topmost
  // row holding the maximum wins, and within it the leftmost (so −0 and +0 come out as that loop gives them); any NaN
  // in the window gives NaN.
  void forward_separable(const float* src, float* dst, int64_t planes, int64_t h, int64_t w, int64_t oh,
                         int64_t ow) const {
    const float lowest = -std::numeric_limits<float>::infinity();
    cpu::parallel_for(
        planes,
        [&](int64_t pl) {
          thread_local std::vector<float> rows;
          rows.resize(static_cast<size_t>(h * ow));
          const float* in = src + pl * h * w;
          for (int64_t iy = 0; iy < h; ++iy) {
            const float* row = in + iy * w;
            float* r = rows.data() + iy * ow;
            for (int64_t ox = 0; ox < ow; ++ox) {
              const int64_t x0 = std::max<int64_t>(ox * s_ - p_, 0), x1 = std::min(ox * s_ - p_ + k_, w);
              if (x1 <= x0) {  // no input in the window (not with padding ≤ k / 2, which the op requires)
                r[ox] = lowest;
                continue;
              }
              float best = row[x0];
              for (int64_t ix = x0 + 1; ix < x1; ++ix) best = max_keep_first(best, row[ix]);
              r[ox] = best;
            }
          }
          float* out = dst + pl * oh * ow;
          for (int64_t oy = 0; oy < oh; ++oy) {
            const int64_t y0 = std::max<int64_t>(oy * s_ - p_, 0), y1 = std::min(oy * s_ - p_ + k_, h);
            float* o = out + oy * ow;
            if (y1 <= y0) {
              std::fill(o, o + ow, lowest);
              continue;
            }
            std::copy(rows.data() + y0 * ow, rows.data() + (y0 + 1) * ow, o);
            for (int64_t iy = y0 + 1; iy < y1; ++iy) {
              const float* r = rows.data() + iy * ow;
              for (int64_t ox = 0; ox < ow; ++ox) o[ox] = max_keep_first(o[ox], r[ox]);
            }
          }
        },
        planes * h * w * 2 * k_);
  }

  // Inference in NHWC: forward_separable's two passes with a pixel of c channels for an element (the same values,
  // bit for bit), each pass parallel over rows.
  void forward_nhwc(const float* src, float* dst, int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh,
                    int64_t ow) const {
    const float lowest = -std::numeric_limits<float>::infinity();
    std::vector<float> rows(static_cast<size_t>(n * h * ow * c));
    cpu::parallel_for(
        n * h,
        [&](int64_t row) {  // (image, input row) → the horizontal window maxima of that row
          const float* in = src + row * w * c;
          float* r = rows.data() + row * ow * c;
          for (int64_t ox = 0; ox < ow; ++ox, r += c) {
            const int64_t x0 = std::max<int64_t>(ox * s_ - p_, 0), x1 = std::min(ox * s_ - p_ + k_, w);
            if (x1 <= x0) {
              std::fill(r, r + c, lowest);
              continue;
            }
            std::copy(in + x0 * c, in + (x0 + 1) * c, r);
            for (int64_t ix = x0 + 1; ix < x1; ++ix) {
              const float* v = in + ix * c;
              for (int64_t ch = 0; ch < c; ++ch) r[ch] = max_keep_first(r[ch], v[ch]);
            }
          }
        },
        n * h * w * c * k_);
    cpu::parallel_for(
        n * oh,
        [&](int64_t row) {  // (image, output row) → the vertical maxima of its window's rows
          const int64_t b = row / oh, oy = row % oh;
          const int64_t y0 = std::max<int64_t>(oy * s_ - p_, 0), y1 = std::min(oy * s_ - p_ + k_, h);
          float* o = dst + row * ow * c;
          if (y1 <= y0) {
            std::fill(o, o + ow * c, lowest);
            return;
          }
          const float* first = rows.data() + (b * h + y0) * ow * c;
          std::copy(first, first + ow * c, o);
          for (int64_t iy = y0 + 1; iy < y1; ++iy) {
            const float* r = rows.data() + (b * h + iy) * ow * c;
            for (int64_t i = 0; i < ow * c; ++i) o[i] = max_keep_first(o[i], r[i]);
          }
        },
        n * oh * ow * c * k_);
  }

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
