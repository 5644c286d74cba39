// Helpers internal to the built-in ops of src/vision/ops: the public op_support.h (checks, recording, lowering, the
// CPU RuntimeOp base), the CUDA factories, short names, and helpers only the built-in CPU RuntimeOps use. Code
// outside src/vision/ops includes op_support.h instead.
#pragma once

#include <string>
#include <vector>

#include "vision/ops/op_support.h"
#ifdef VISION_HAS_CUDA
#include "vision/ops/cuda/factories.h"
#endif

namespace vision::ops {

using core::DType;
using core::Shape;
using core::Tensor;
using graph::Backend;
using graph::BackwardCtx;
using graph::ForwardCtx;
using graph::Format;
using graph::Mode;
using graph::Op;
using graph::ParamSpec;
using graph::RuntimeOp;
using graph::StateKind;
using graph::SymTensor;
using graph::TensorSpec;

// The specs with `prefix` before each name (a fused op's state under its nodes' common scope: "bn.weight").
std::vector<ParamSpec> prefixed(std::vector<ParamSpec> specs, const std::string& prefix);

// Permutations (output dim k is input dim perm[k]): the input's element strides in output-dim order, and the
// inverse permutation (the backward's).
std::vector<int64_t> permuted_strides(const Shape& in, const std::vector<int64_t>& perm);
std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& perm);

// Row-major view helpers of an NCHW-like tensor: dim 0 = outer, dim 1 = channels, the rest = inner.
struct ChannelView {
  int64_t outer = 0, channels = 0, inner = 0;
  explicit ChannelView(const Shape& s);
};

// Float scratch that lives in a tensor when one is given, else in a local vector (rarely needed paths:
// a gradient nobody asked for that a library call still writes).
class F32Scratch {
 public:
  F32Scratch(const Tensor& t, size_t n);
  float* data() { return ptr_; }

 private:
  std::vector<float> local_;
  float* ptr_ = nullptr;
};

}  // namespace vision::ops
