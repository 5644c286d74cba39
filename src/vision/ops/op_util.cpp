#include "vision/ops/op_util.h"

#include "vision/ops/float_op.h"

namespace vision::ops {

std::vector<ParamSpec> prefixed(std::vector<ParamSpec> specs, const std::string& prefix) {
  for (auto& s : specs) s.name = prefix + s.name;
  return specs;
}

DType FloatOp::infer_output_dtype(const std::vector<DType>& inputs) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    VISION_CHECK(core::is_floating(inputs[i]), "{} takes f32, f16 or bf16 tensors, input {} is {}", name(), i,
                 core::dtype_name(inputs[i]));
    VISION_CHECK(inputs[i] == inputs[0], "{}: input {} is {}, input 0 is {}", name(), i, core::dtype_name(inputs[i]),
                 core::dtype_name(inputs[0]));
  }
  return inputs.empty() ? DType::f32 : inputs[0];
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
