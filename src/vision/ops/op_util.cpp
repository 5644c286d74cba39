#include "vision/ops/op_util.h"

#include "vision/ops/f32_op.h"

namespace vision::ops {

DType F32Op::infer_output_dtype(const std::vector<DType>& inputs) const {
  for (size_t i = 0; i < inputs.size(); ++i)
    VISION_CHECK(inputs[i] == DType::f32, "{} takes f32 tensors, input {} is {}", name(), i, core::dtype_name(inputs[i]));
  return DType::f32;
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
