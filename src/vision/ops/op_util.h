// Helpers shared by the built-in ops: input checks for shape inference, recording, CPU lowering, and the
// common base of their CPU RuntimeOps. Internal to src/vision/ops.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "vision/core/error.h"
#include "vision/graph/graph.h"
#include "vision/graph/op.h"
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
using graph::Mode;
using graph::Op;
using graph::ParamSpec;
using graph::RuntimeOp;
using graph::StateKind;
using graph::SymTensor;
using graph::TensorSpec;

// Checks that there are `count` inputs, each of rank `rank` (ranks unchecked when rank < 0).
void expect_inputs(const std::vector<Shape>& inputs, size_t count, int rank, std::string_view what);
// The common value of two dimensions that must agree (Shape::kAny matches anything); throws naming `what`.
int64_t merge_dim(int64_t a, int64_t b, std::string_view what);
// Elementwise merge_dim of two shapes of one rank; throws naming `what` when they disagree.
Shape merge_shapes(const Shape& a, const Shape& b, std::string_view what);
// Σ of dimensions; Shape::kAny when one of them is symbolic.
int64_t sum_dims(const std::vector<int64_t>& dims);

// Records a new OpT(args...) applied to inputs in their graph, under `name`.
template <typename OpT, typename... A>
SymTensor record(const std::vector<SymTensor>& inputs, const std::string& name, A&&... args) {
  VISION_CHECK(!inputs.empty() && inputs.front().valid(), "an op needs a valid input tensor");
  return inputs.front().graph()->apply(std::make_shared<OpT>(std::forward<A>(args)...), inputs, name);
}

// The error every op raises when asked for a backend it has no implementation for. A CUDA implementation
// plugs in by replacing this call in the op's lower() with its factory (declared in the op's header under
// VISION_HAS_CUDA, defined in the op's *_cuda.cpp).
[[noreturn]] void no_backend(const Op& op, Backend backend);

#ifdef VISION_HAS_CUDA
// The CUDA factory of an op's lower(): expr may use `twin`, the op's CPU RuntimeOp (see ops/cuda/factories.h).
#define VISION_CUDA_FACTORY(expr) [&](::vision::ops::cuda_impl::Twin twin) { return expr; }
#else
#define VISION_CUDA_FACTORY(expr) nullptr
#endif

// lower() of an op with a CPU RuntimeOp Rt(args...) and a CUDA one made from it by cuda (VISION_CUDA_FACTORY).
template <typename Rt, typename F, typename... A>
std::unique_ptr<RuntimeOp> lower_cpu_or_cuda(const Op& op, Backend backend, F&& cuda, A&&... args) {
  auto cpu = std::make_unique<Rt>(std::forward<A>(args)...);
  if (backend == Backend::cpu) return cpu;
  if constexpr (!std::is_null_pointer_v<std::decay_t<F>>) {
    if (backend == Backend::cuda) return cuda(std::move(cpu));
  }
  no_backend(op, backend);
}


// Base of the CPU RuntimeOps: a name, an input count, a backward.
class CpuRuntimeOp : public RuntimeOp {
 public:
  CpuRuntimeOp(std::string name, int n_inputs) : name_(std::move(name)), n_inputs_(n_inputs) {}
  std::string name() const override { return name_; }
  int n_activation_inputs() const override { return n_inputs_; }
  bool has_backward() const override { return true; }

 private:
  std::string name_;
  int n_inputs_;
};

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
