#include "vision/ops/shape_ops.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "vision/cpu/parallel.h"
#include "vision/graph/backend.h"
#include "vision/ops/op_util.h"

namespace vision::ops {

namespace {

// Axis in [0, rank) from one that may count from the end.
int64_t normalized_axis(int64_t axis, size_t rank, std::string_view what) {
  const int64_t r = static_cast<int64_t>(rank);
  VISION_CHECK(axis >= -r && axis < r, "{}: axis {} is out of range for a rank-{} tensor", what, axis, r);
  return axis < 0 ? axis + r : axis;
}

// A tensor seen as [outer, dim, inner] around one axis (outer or inner is 1 when the axis is first or last).
struct AxisGeometry {
  int64_t outer = 1, dim = 1, inner = 1;
  AxisGeometry(const Shape& s, int64_t axis) {
    axis = normalized_axis(axis, s.rank(), "axis");
    for (int64_t i = 0; i < static_cast<int64_t>(s.rank()); ++i) {
      const int64_t d = s[static_cast<size_t>(i)];
      if (i < axis) outer = d == Shape::kAny || outer == Shape::kAny ? Shape::kAny : outer * d;
      if (i > axis) inner = d == Shape::kAny || inner == Shape::kAny ? Shape::kAny : inner * d;
    }
    dim = s[static_cast<size_t>(axis)];
  }
};

// The memory-order view of a logical shape and axis: a rank-4 NHWC tensor of shape (N, C, H, W) lies in memory as
// (N, H, W, C), so its channel axis is the innermost one.
struct Physical {
  Shape shape;
  int64_t axis;
  Physical(const Shape& s, int64_t logical_axis, core::Layout layout) : shape(s) {
    axis = normalized_axis(logical_axis, s.rank(), "axis");
    if (s.rank() == 4 && layout == core::Layout::nhwc) {
      shape = Shape{s[0], s[2], s[3], s[1]};
      static constexpr int64_t kNhwcAxis[4] = {0, 3, 1, 2};
      axis = kNhwcAxis[axis];
    }
  }
  AxisGeometry geometry() const { return AxisGeometry(shape, axis); }
};

// Copies `count` entries along the axis, for every outer index: src entries [src_begin, +count) of its src_dim to
// dst entries [dst_begin, +count) of its dst_dim. Nothing to do when the bytes already are where they belong.
void copy_along_axis(graph::BackendContext& backend, const Tensor& src, int64_t src_dim, int64_t src_begin,
                     const Tensor& dst, int64_t dst_dim, int64_t dst_begin, int64_t outer, int64_t count,
                     int64_t inner) {
  const size_t e = core::dtype_size(src.dtype());
  const auto* s = static_cast<const std::byte*>(src.raw()) + static_cast<size_t>(src_begin * inner) * e;
  auto* d = static_cast<std::byte*>(dst.raw()) + static_cast<size_t>(dst_begin * inner) * e;
  const size_t src_pitch = static_cast<size_t>(src_dim * inner) * e, dst_pitch = static_cast<size_t>(dst_dim * inner) * e;
  if (s == d && (outer == 1 || src_pitch == dst_pitch)) return;
  backend.copy_2d(d, dst_pitch, s, src_pitch, static_cast<size_t>(count * inner) * e, static_cast<size_t>(outer));
}

// The byte-for-byte copy of a view op when the plan gave its output memory of its own.
void copy_unless_same(graph::BackendContext& backend, const Tensor& src, const Tensor& dst) {
  if (src.raw() != dst.raw()) backend.copy_on_device(dst.raw(), src.raw(), dst.nbytes());
}

// Concat and split share one runtime shape: a whole tensor and its parts along an axis. These runtimes use only
// the backend's copies, so the same class serves the CPU and CUDA backends, for any dtype.
// Byte movers: any dtype, either layout (format().layout says how to read the axis).
class ConcatRuntime final : public CpuRuntimeOp {
 public:
  ConcatRuntime(int n, int64_t axis) : CpuRuntimeOp("ops.concat", n), axis_(axis) {}
  bool supports(const graph::Format&) const override { return true; }
  bool follows_input_format() const override { return true; }
  void forward(ForwardCtx& ctx) override {
    const AxisGeometry g = Physical(ctx.output.shape(), axis_, format().layout).geometry();
    int64_t offset = 0;
    for (const Tensor& x : ctx.inputs) {
      const int64_t n = x.dim(static_cast<int>(axis_));  // Shape::dim counts negative axes from the end
      copy_along_axis(*ctx.backend, x, n, 0, ctx.output, g.dim, offset, g.outer, n, g.inner);
      offset += n;
    }
  }
  void backward(BackwardCtx& ctx) override {
    const AxisGeometry g = Physical(ctx.output.shape(), axis_, format().layout).geometry();
    int64_t offset = 0;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const int64_t n = ctx.inputs[i].dim(static_cast<int>(axis_));
      if (ctx.grad_inputs[i].defined())
        copy_along_axis(*ctx.backend, ctx.grad_output, g.dim, offset, ctx.grad_inputs[i], n, 0, g.outer, n, g.inner);
      offset += n;
    }
  }

 private:
  int64_t axis_;
};

class SplitRuntime final : public CpuRuntimeOp {
 public:
  SplitRuntime(std::vector<int64_t> sizes, int64_t axis)
      : CpuRuntimeOp("ops.split", 1), sizes_(std::move(sizes)), axis_(axis) {}
  bool supports(const graph::Format&) const override { return true; }
  bool follows_input_format() const override { return true; }
  void forward(ForwardCtx& ctx) override {
    const AxisGeometry g = Physical(ctx.inputs[0].shape(), axis_, format().layout).geometry();
    int64_t offset = 0;
    for (size_t k = 0; k < sizes_.size(); ++k) {
      copy_along_axis(*ctx.backend, ctx.inputs[0], g.dim, offset, ctx.outputs[k], sizes_[k], 0, g.outer, sizes_[k],
                      g.inner);
      offset += sizes_[k];
    }
  }
  void backward(BackwardCtx& ctx) override {
    const Tensor& dx = ctx.grad_inputs[0];
    if (!dx.defined()) return;
    const AxisGeometry g = Physical(dx.shape(), axis_, format().layout).geometry();
    int64_t offset = 0;
    for (size_t k = 0; k < sizes_.size(); ++k) {
      VISION_CHECK(ctx.grad_outputs[k].defined(), "split backward: part {} has no gradient", k);
      copy_along_axis(*ctx.backend, ctx.grad_outputs[k], sizes_[k], 0, dx, g.dim, offset, g.outer, sizes_[k], g.inner);
      offset += sizes_[k];
    }
  }

 private:
  std::vector<int64_t> sizes_;
  int64_t axis_;
};

// Reshape and detach: the output is the input's bytes.
class SameBytesRuntime final : public CpuRuntimeOp {
 public:
  SameBytesRuntime(std::string name, bool backward, bool any_layout)
      : CpuRuntimeOp(std::move(name), 1), backward_(backward), any_layout_(any_layout) {}
  // Any dtype; a reshape reads its input in row-major (N, C, H, W) order, so it takes NCHW only.
  bool supports(const graph::Format& f) const override { return any_layout_ || f.layout == core::Layout::nchw; }
  bool follows_input_format() const override { return true; }
  bool has_backward() const override { return backward_; }
  void forward(ForwardCtx& ctx) override { copy_unless_same(*ctx.backend, ctx.inputs[0], ctx.output); }
  void backward(BackwardCtx& ctx) override {
    VISION_CHECK(backward_, "{} has no backward", name());
    if (ctx.grad_inputs[0].defined()) copy_unless_same(*ctx.backend, ctx.grad_output, ctx.grad_inputs[0]);
  }

 private:
  bool backward_, any_layout_;
};

// y[i0, …] = x at the input index whose dim perm[k] is i_k. Elements moved as raw bytes of their size.
template <size_t E>
void permute_bytes(const std::byte* x, std::byte* y, const Shape& out_shape, const std::vector<int64_t>& in_strides) {
  const size_t rank = out_shape.rank();
  const int64_t n = out_shape.numel();
  const int64_t last = rank ? out_shape[rank - 1] : 1;
  const int64_t rows = last ? n / last : 0;
  cpu::parallel_for(
      rows,
      [&](int64_t row) {
        int64_t rem = row, src = 0;
        for (size_t k = rank - 1; k-- > 0;) {
          src += (rem % out_shape[k]) * in_strides[k];
          rem /= out_shape[k];
        }
        const int64_t step = rank ? in_strides[rank - 1] : 0;
        std::byte* dst = y + static_cast<size_t>(row * last) * E;
        for (int64_t j = 0; j < last; ++j) std::memcpy(dst + j * E, x + static_cast<size_t>(src + j * step) * E, E);
      },
      n);
}

}  // namespace

// Strides (in elements) of the input dims in the order of the output dims: output dim k walks input dim perm[k].
std::vector<int64_t> permuted_strides(const Shape& in, const std::vector<int64_t>& perm) {
  std::vector<int64_t> stride(in.rank(), 1);
  for (size_t k = in.rank(); k-- > 1;) stride[k - 1] = stride[k] * in[k];
  std::vector<int64_t> out(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) out[k] = stride[static_cast<size_t>(perm[k])];
  return out;
}

std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inv[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
  return inv;
}

namespace {

void permute_cpu(const Tensor& x, const Tensor& y, const std::vector<int64_t>& perm) {
  const auto strides = permuted_strides(x.shape(), perm);
  const auto* src = static_cast<const std::byte*>(x.raw());
  auto* dst = static_cast<std::byte*>(y.raw());
  switch (core::dtype_size(x.dtype())) {
    case 1: return permute_bytes<1>(src, dst, y.shape(), strides);
    case 2: return permute_bytes<2>(src, dst, y.shape(), strides);
    case 4: return permute_bytes<4>(src, dst, y.shape(), strides);
    default: return permute_bytes<8>(src, dst, y.shape(), strides);
  }
}

class PermuteRuntime final : public CpuRuntimeOp {
 public:
  explicit PermuteRuntime(std::vector<int64_t> perm) : CpuRuntimeOp("ops.permute", 1), perm_(std::move(perm)) {}
  void forward(ForwardCtx& ctx) override { permute_cpu(ctx.inputs[0], ctx.output, perm_); }
  void backward(BackwardCtx& ctx) override {
    if (ctx.grad_inputs[0].defined()) permute_cpu(ctx.grad_output, ctx.grad_inputs[0], inverse_permutation(perm_));
  }

 private:
  std::vector<int64_t> perm_;
};

class ChannelSliceRuntime final : public CpuRuntimeOp {
 public:
  ChannelSliceRuntime(int64_t begin, int64_t count) : CpuRuntimeOp("ops.channel_slice", 1), begin_(begin), count_(count) {}
  bool supports(const graph::Format&) const override { return true; }
  bool follows_input_format() const override { return true; }
  void forward(ForwardCtx& ctx) override {
    const AxisGeometry g = Physical(ctx.inputs[0].shape(), 1, format().layout).geometry();
    copy_along_axis(*ctx.backend, ctx.inputs[0], g.dim, begin_, ctx.output, count_, 0, g.outer, count_, g.inner);
  }
  void backward(BackwardCtx& ctx) override {
    const Tensor& dx = ctx.grad_inputs[0];
    if (!dx.defined()) return;
    const AxisGeometry g = Physical(dx.shape(), 1, format().layout).geometry();
    ctx.backend->fill_zero(dx.raw(), dx.nbytes());
    copy_along_axis(*ctx.backend, ctx.grad_output, count_, 0, dx, g.dim, begin_, g.outer, count_, g.inner);
  }

 private:
  int64_t begin_, count_;
};

}  // namespace

// ---- ConcatOp

ConcatOp::ConcatOp(int n_inputs, int64_t axis) : n_inputs_(n_inputs), axis_(axis) {
  VISION_CHECK(n_inputs >= 1, "concat needs at least one input, got {}", n_inputs);
}

Shape ConcatOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, static_cast<size_t>(n_inputs_), -1, "concat");
  Shape out = inputs[0];
  const auto axis = static_cast<size_t>(normalized_axis(axis_, out.rank(), "concat"));
  std::vector<int64_t> parts;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Shape& s = inputs[i];
    VISION_CHECK(s.rank() == out.rank(), "concat: input {} is {}, input 0 is {}: ranks differ", i, s.str(),
                 inputs[0].str());
    for (size_t d = 0; d < s.rank(); ++d)
      if (d != axis)
        out[d] = merge_dim(out[d], s[d],
                           fmt::format("concat along dim {}: input {} ({}) differs from input 0 ({}) in dim {}", axis,
                                       i, s.str(), inputs[0].str(), d));
    parts.push_back(s[axis]);
  }
  out[axis] = sum_dims(parts);
  return out;
}

core::DType ConcatOp::infer_output_dtype(const std::vector<core::DType>& inputs) const {
  for (size_t i = 1; i < inputs.size(); ++i)
    VISION_CHECK(inputs[i] == inputs[0], "concat: input {} is {}, input 0 is {}", i, core::dtype_name(inputs[i]),
                 core::dtype_name(inputs[0]));
  return inputs.at(0);
}

std::optional<size_t> ConcatOp::input_in_output(size_t input, const std::vector<Shape>& inputs,
                                                core::Layout layout) const {
  const int64_t axis = normalized_axis(axis_, inputs[0].rank(), "concat");
  const AxisGeometry g = Physical(inputs[0], axis, layout).geometry();
  if (g.outer != 1) return std::nullopt;  // the input's part of the output is not one contiguous range
  int64_t offset = 0;
  for (size_t i = 0; i < input; ++i) offset += inputs[i][static_cast<size_t>(axis)];
  return static_cast<size_t>(offset * g.inner);
}

std::unique_ptr<RuntimeOp> ConcatOp::lower(Backend, Mode) const { return std::make_unique<ConcatRuntime>(n_inputs_, axis_); }

// ---- SplitOp

SplitOp::SplitOp(std::vector<int64_t> sizes, int64_t axis) : sizes_(std::move(sizes)), axis_(axis) {
  VISION_CHECK(!sizes_.empty(), "split needs at least one part");
  for (int64_t s : sizes_) VISION_CHECK(s > 0, "split: part sizes must be positive, got {}", s);
}

std::vector<Shape> SplitOp::infer_output_shapes(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, -1, "split");
  const auto axis = static_cast<size_t>(normalized_axis(axis_, inputs[0].rank(), "split"));
  const int64_t total = std::accumulate(sizes_.begin(), sizes_.end(), int64_t{0});
  VISION_CHECK(inputs[0][axis] == total, "split: the parts add up to {}, the input {} has {} along dim {}", total,
               inputs[0].str(), inputs[0][axis], axis);
  std::vector<Shape> out;
  for (int64_t s : sizes_) {
    Shape part = inputs[0];
    part[axis] = s;
    out.push_back(std::move(part));
  }
  return out;
}

std::optional<graph::OutputView> SplitOp::output_view(size_t output, const std::vector<Shape>& inputs,
                                                     core::Layout layout) const {
  const int64_t axis = normalized_axis(axis_, inputs[0].rank(), "split");
  const AxisGeometry g = Physical(inputs[0], axis, layout).geometry();
  if (g.outer != 1) return std::nullopt;
  int64_t offset = 0;
  for (size_t k = 0; k < output; ++k) offset += sizes_[k];
  return graph::OutputView{0, static_cast<size_t>(offset * g.inner)};
}

std::unique_ptr<RuntimeOp> SplitOp::lower(Backend, Mode) const { return std::make_unique<SplitRuntime>(sizes_, axis_); }

// ---- ChannelSliceOp

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

std::unique_ptr<RuntimeOp> ChannelSliceOp::lower(Backend, Mode) const {
  return std::make_unique<ChannelSliceRuntime>(begin_, count_);
}

// ---- ReshapeOp

ReshapeOp ReshapeOp::flatten(int64_t start, int64_t end) {
  ReshapeOp op;
  op.flatten_ = true;
  op.start_ = start;
  op.end_ = end;
  return op;
}

ReshapeOp::ReshapeOp(std::vector<int64_t> dims) : dims_(std::move(dims)) {
  VISION_CHECK(std::count(dims_.begin(), dims_.end(), -1) <= 1, "reshape: at most one dim may be -1 (inferred)");
  for (int64_t d : dims_) VISION_CHECK(d >= -1, "reshape: dim {} is invalid (0 keeps, -1 infers)", d);
}

Shape ReshapeOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, -1, name());
  const Shape& in = inputs[0];
  auto product = [](auto begin, auto end) {
    int64_t p = 1;
    for (auto it = begin; it != end; ++it) p = (*it == Shape::kAny || p == Shape::kAny) ? Shape::kAny : p * *it;
    return p;
  };
  if (flatten_) {
    const int64_t r = static_cast<int64_t>(in.rank());
    const int64_t a = normalized_axis(start_, in.rank(), "flatten"), b = normalized_axis(end_, in.rank(), "flatten");
    VISION_CHECK(a <= b, "flatten: start dim {} is after end dim {}", a, b);
    std::vector<int64_t> d(in.dims().begin(), in.dims().begin() + a);
    d.push_back(product(in.dims().begin() + a, in.dims().begin() + b + 1));
    d.insert(d.end(), in.dims().begin() + b + 1, in.dims().begin() + r);
    return Shape(d);
  }
  std::vector<int64_t> d = dims_;
  for (size_t i = 0; i < d.size(); ++i)
    if (d[i] == 0) {
      VISION_CHECK(i < in.rank(), "reshape: dim {} keeps the input's, but the input {} has rank {}", i, in.str(),
                   in.rank());
      d[i] = in[i];
    }
  const int64_t total = product(in.dims().begin(), in.dims().end());
  const auto inferred = std::find(d.begin(), d.end(), int64_t{-1});
  if (inferred != d.end()) {
    *inferred = 1;
    const int64_t rest = product(d.begin(), d.end());
    if (total == Shape::kAny || rest == Shape::kAny) {
      *inferred = Shape::kAny;
    } else {
      VISION_CHECK(rest > 0 && total % rest == 0, "reshape: {} elements of {} cannot be arranged as {}", total,
                   in.str(), Shape(dims_).str());
      *inferred = total / rest;
    }
  }
  const int64_t out_total = product(d.begin(), d.end());
  VISION_CHECK(total == Shape::kAny || out_total == Shape::kAny || total == out_total,
               "reshape: {} has {} elements, the shape {} has {}", in.str(), total, Shape(d).str(), out_total);
  return Shape(d);
}

std::optional<graph::OutputView> ReshapeOp::output_view(size_t, const std::vector<Shape>&, core::Layout) const {
  return graph::OutputView{0, 0};
}

std::unique_ptr<RuntimeOp> ReshapeOp::lower(Backend, Mode) const {
  return std::make_unique<SameBytesRuntime>(name(), true, false);
}

// ---- PermuteOp

PermuteOp::PermuteOp(std::vector<int64_t> perm) : perm_(std::move(perm)) {
  std::vector<int64_t> sorted = perm_;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    VISION_CHECK(sorted[i] == static_cast<int64_t>(i), "permute: {} is not a permutation of 0..{}", Shape(perm_).str(),
                 perm_.size() - 1);
}

Shape PermuteOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, static_cast<int>(perm_.size()), "permute");
  std::vector<int64_t> d;
  for (int64_t p : perm_) d.push_back(inputs[0][static_cast<size_t>(p)]);
  return Shape(d);
}

std::unique_ptr<RuntimeOp> PermuteOp::lower(Backend backend, Mode) const {
  return lower_cpu_or_cuda<PermuteRuntime>(*this, backend,
                                           VISION_CUDA_FACTORY(cuda_impl::make_permute(std::move(twin), perm_)), perm_);
}

// ---- DetachOp

Shape DetachOp::infer_output_shape(const std::vector<Shape>& inputs) const {
  expect_inputs(inputs, 1, -1, "detach");
  return inputs[0];
}

std::optional<graph::OutputView> DetachOp::output_view(size_t, const std::vector<Shape>&, core::Layout) const {
  return graph::OutputView{0, 0};
}

std::unique_ptr<RuntimeOp> DetachOp::lower(Backend, Mode) const {
  return std::make_unique<SameBytesRuntime>("ops.detach", false, true);
}

// ---- recording

SymTensor concat(const std::vector<SymTensor>& xs, const std::string& name) { return concat(xs, 1, name); }

SymTensor concat(const std::vector<SymTensor>& xs, int64_t axis, const std::string& name) {
  return record<ConcatOp>(xs, name, static_cast<int>(xs.size()), axis);
}

SymTensor channel_slice(SymTensor x, int64_t begin, int64_t count, const std::string& name) {
  return record<ChannelSliceOp>({x}, name, begin, count);
}

std::vector<SymTensor> split(SymTensor x, const std::vector<int64_t>& sizes, const std::string& name) {
  return split(x, sizes, 1, name);
}

std::vector<SymTensor> split(SymTensor x, const std::vector<int64_t>& sizes, int64_t axis, const std::string& name) {
  VISION_CHECK(x.valid(), "split needs a valid input tensor");
  return x.graph()->apply_multi(std::make_shared<SplitOp>(sizes, axis), {x}, name);
}

SymTensor reshape(SymTensor x, const std::vector<int64_t>& dims, const std::string& name) {
  return record<ReshapeOp>({x}, name, dims);
}

SymTensor flatten(SymTensor x, int64_t start, int64_t end, const std::string& name) {
  VISION_CHECK(x.valid(), "flatten needs a valid input tensor");
  return x.graph()->apply(std::make_shared<ReshapeOp>(ReshapeOp::flatten(start, end)), {x}, name);
}

SymTensor permute(SymTensor x, const std::vector<int64_t>& perm, const std::string& name) {
  return record<PermuteOp>({x}, name, perm);
}

SymTensor detach(SymTensor x, const std::string& name) { return record<DetachOp>({x}, name); }

}  // namespace vision::ops
