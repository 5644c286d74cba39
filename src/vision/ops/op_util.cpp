#include "vision/ops/op_util.h"

#include "vision/ops/f32_op.h"

namespace vision::ops {

void expect_inputs(const std::vector<Shape>& inputs, size_t count, int rank, std::string_view what) {
  VISION_CHECK(inputs.size() == count, "{} takes {} input(s), got {}", what, count, inputs.size());
  if (rank < 0) return;
  for (size_t i = 0; i < inputs.size(); ++i)
    VISION_CHECK(inputs[i].rank() == static_cast<size_t>(rank), "{} needs rank-{} input(s){}, input {} is {}", what,
                 rank, rank == 4 ? " (N, C, H, W)" : "", i, inputs[i].str());
}

int64_t merge_dim(int64_t a, int64_t b, std::string_view what) {
  if (a == Shape::kAny) return b;
  if (b == Shape::kAny) return a;
  VISION_CHECK(a == b, "{}: {} vs {}", what, a, b);
  return a;
}

Shape merge_shapes(const Shape& a, const Shape& b, std::string_view what) {
  VISION_CHECK(a.compatible(b), "{}: shapes {} and {} differ", what, a.str(), b.str());
  Shape out = a;
  for (size_t i = 0; i < a.rank(); ++i) out[i] = merge_dim(a[i], b[i], what);
  return out;
}

int64_t sum_dims(const std::vector<int64_t>& dims) {
  int64_t s = 0;
  for (int64_t d : dims) {
    if (d == Shape::kAny) return Shape::kAny;
    s += d;
  }
  return s;
}

DType F32Op::infer_output_dtype(const std::vector<DType>& inputs) const {
  for (size_t i = 0; i < inputs.size(); ++i)
    VISION_CHECK(inputs[i] == DType::f32, "{} takes f32 tensors, input {} is {}", name(), i, core::dtype_name(inputs[i]));
  return DType::f32;
}

void no_backend(const Op& op, Backend backend) {
  fail("op '{}' has no {} implementation yet: run this model on the CPU backend (--device cpu)", op.name(),
       graph::backend_name(backend));
}

ChannelView::ChannelView(const Shape& s) {
  VISION_CHECK(s.rank() >= 2, "expected a tensor with a channel dimension, got {}", s.str());
  outer = s[0];
  channels = s[1];
  inner = 1;
  for (size_t i = 2; i < s.rank(); ++i) inner *= s[i];
}

F32Scratch::F32Scratch(const Tensor& t, size_t n) {
  if (t.defined()) {
    VISION_CHECK(static_cast<size_t>(t.numel()) >= n, "scratch tensor {} holds fewer than {} floats", t.str(), n);
    ptr_ = t.data<float>();
  } else {
    local_.resize(n);
    ptr_ = local_.data();
  }
}

}  // namespace vision::ops
