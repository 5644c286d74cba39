#include "vision/ops/shape_ops.h"

#include <algorithm>
#include <cstring>

#include "vision/cpu/parallel.h"
#include "vision/ops/op_util.h"

namespace vision::ops {

namespace {

// Copies channels [src_begin, src_begin + count) of src into channels [dst_begin, dst_begin + count) of dst;
// the two tensors differ in their channel count only.
void copy_channels(const Tensor& src, int64_t src_begin, const Tensor& dst, int64_t dst_begin, int64_t count) {
  const ChannelView s(src.shape()), d(dst.shape());
  const float* sp = src.data<float>();
  float* dp = dst.data<float>();
  cpu::parallel_for(
      s.outer * count,
      [&](int64_t row) {
        const int64_t n = row / count, c = row % count;
        std::memcpy(dp + (n * d.channels + dst_begin + c) * d.inner, sp + (n * s.channels + src_begin + c) * s.inner,
                    static_cast<size_t>(s.inner) * sizeof(float));
      },
      s.outer * count * s.inner);
}

class ConcatRuntime final : public CpuRuntimeOp {
 public:
  explicit ConcatRuntime(int n) : CpuRuntimeOp("ops.concat", n) {}
  void forward(ForwardCtx& ctx) override {
    int64_t offset = 0;
    for (const Tensor& x : ctx.inputs) {
      copy_channels(x, 0, ctx.output, offset, x.dim(1));
      offset += x.dim(1);
    }
  }
  void backward(BackwardCtx& ctx) override {
    int64_t offset = 0;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const int64_t c = ctx.inputs[i].dim(1);
      if (ctx.grad_inputs[i].defined()) copy_channels(ctx.grad_output, offset, ctx.grad_inputs[i], 0, c);
      offset += c;
    }
  }
};

class ChannelSliceRuntime final : public CpuRuntimeOp {
 public:
  ChannelSliceRuntime(int64_t begin, int64_t count) : CpuRuntimeOp("ops.channel_slice", 1), begin_(begin), count_(count) {}
  void forward(ForwardCtx& ctx) override { copy_channels(ctx.inputs[0], begin_, ctx.output, 0, count_); }
  void backward(BackwardCtx& ctx) override {
    const Tensor& dx = ctx.grad_inputs[0];
    if (!dx.defined()) return;
    float* p = dx.data<float>();
    cpu::parallel_for(dx.numel(), [&](int64_t i) { p[i] = 0.0f; });
    copy_channels(ctx.grad_output, 0, dx, begin_, count_);
  }

 private:
  int64_t begin_, count_;
};

}  // namespace

Shape ConcatOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, static_cast<size_t>(n_inputs_), -1, "concat");
  Shape out = inputs[0];
  VISION_CHECK(out.rank() >= 2, "concat joins dim 1: inputs need rank >= 2, input 0 is {}", out.str());
  std::vector<int64_t> channels;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Shape& s = inputs[i];
    VISION_CHECK(s.rank() == out.rank(), "concat: input {} is {}, input 0 is {}: ranks differ", i, s.str(),
                 inputs[0].str());
    for (size_t d = 0; d < s.rank(); ++d)
      if (d != 1)
        out[d] = merge_dim(out[d], s[d],
                           fmt::format("concat: input {} ({}) differs from input 0 ({}) in dim {}", i, s.str(),
                                       inputs[0].str(), d));
    channels.push_back(s[1]);
  }
  out[1] = sum_dims(channels);
  return out;
}

ConcatOp::ConcatOp(int n_inputs) : n_inputs_(n_inputs) {
  VISION_CHECK(n_inputs >= 1, "concat needs at least one input, got {}", n_inputs);
}

std::unique_ptr<RuntimeOp> ConcatOp::lower(Backend backend, Mode) const {
  return lower_cpu_or_cuda<ConcatRuntime>(*this, backend, VISION_CUDA_FACTORY(cuda_impl::make_concat(std::move(twin))),
                                          n_inputs_);
}

ChannelSliceOp::ChannelSliceOp(int64_t begin, int64_t count) : begin_(begin), count_(count) {
  VISION_CHECK(begin >= 0 && count > 0, "channel_slice needs begin >= 0 and count > 0, got {} {}", begin, count);
}

Shape ChannelSliceOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, -1, "channel_slice");
  Shape out = inputs[0];
  VISION_CHECK(out.rank() >= 2 && out[1] != Shape::kAny, "channel_slice needs an input of rank >= 2 with a known "
               "channel count, got {}", out.str());
  VISION_CHECK(begin_ + count_ <= out[1], "channel_slice [{}, {}) is out of range for the input {} ({} channels)",
               begin_, begin_ + count_, out.str(), out[1]);
  out[1] = count_;
  return out;
}

std::unique_ptr<RuntimeOp> ChannelSliceOp::lower(Backend backend, Mode) const {
  return lower_cpu_or_cuda<ChannelSliceRuntime>(
      *this, backend, VISION_CUDA_FACTORY(cuda_impl::make_channel_slice(std::move(twin), begin_, count_)), begin_, count_);
}

SymTensor concat(const std::vector<SymTensor>& xs, const std::string& name) {
  return record<ConcatOp>(xs, name, static_cast<int>(xs.size()));
}

SymTensor channel_slice(SymTensor x, int64_t begin, int64_t count, const std::string& name) {
  return record<ChannelSliceOp>({x}, name, begin, count);
}

std::vector<SymTensor> split(SymTensor x, const std::vector<int64_t>& sizes, const std::string& name) {
  VISION_CHECK(x.valid() && x.shape().rank() >= 2, "split needs a tensor of rank >= 2");
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  VISION_CHECK(total == x.dim(1), "split: sizes add up to {}, the input {} has {} channels", total, x.shape().str(),
               x.dim(1));
  std::vector<SymTensor> out;
  int64_t begin = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.push_back(channel_slice(x, begin, sizes[i], name.empty() ? name : fmt::format("{}.{}", name, i)));
    begin += sizes[i];
  }
  return out;
}

}  // namespace vision::ops
