// What an op needs to be written outside src/vision/ops (a model's own op, a custom kernel's graph op): shape-
// inference checks, recording, lowering to a CPU RuntimeOp and its CUDA twin, and the base of CPU RuntimeOps.
// Public: the built-in ops use the same helpers (through ops/op_util.h, which adds their internal ones).
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

namespace vision::ops {

// Shape inference: checks that there are `count` inputs, each of rank `rank` (ranks unchecked when rank < 0).
void expect_inputs(const std::vector<core::Shape>& inputs, size_t count, int rank, std::string_view what);
// The common value of two dimensions that must agree (Shape::kAny matches anything); throws naming `what`.
int64_t merge_dim(int64_t a, int64_t b, std::string_view what);
// Elementwise merge_dim of two shapes of one rank; throws naming `what` when they disagree.
core::Shape merge_shapes(const core::Shape& a, const core::Shape& b, std::string_view what);
// Σ of dimensions; Shape::kAny when one of them is symbolic.
int64_t sum_dims(const std::vector<int64_t>& dims);

// Records a new OpT(args...) applied to inputs in their graph, under `name`.
template <typename OpT, typename... A>
graph::SymTensor record(const std::vector<graph::SymTensor>& inputs, const std::string& name, A&&... args) {
  VISION_CHECK(!inputs.empty() && inputs.front().valid(), "an op needs a valid input tensor");
  return inputs.front().graph()->apply(std::make_shared<OpT>(std::forward<A>(args)...), inputs, name);
}

// The error an op raises when asked for a backend it has no implementation for.
[[noreturn]] void no_backend(const graph::Op& op, graph::Backend backend);

// The CUDA factory of an op's lower(), for lower_cpu_or_cuda: expr may use `twin`, the op's CPU RuntimeOp
// (std::unique_ptr<graph::RuntimeOp>), whose state specs and initial data the CUDA RuntimeOp shares. In a CPU-only
// build it is nullptr and expr is not compiled, so expr may name CUDA-only factories.
#ifdef VISION_HAS_CUDA
#define VISION_CUDA_FACTORY(expr) [&](std::unique_ptr<::vision::graph::RuntimeOp> twin) { return expr; }
#else
#define VISION_CUDA_FACTORY(expr) nullptr
#endif

// lower() of an op with a CPU RuntimeOp Rt(args...) and a CUDA one made from it by `cuda` (VISION_CUDA_FACTORY):
//   return ops::lower_cpu_or_cuda<MyCpuRuntime>(*this, backend, VISION_CUDA_FACTORY(make_my_cuda(std::move(twin))),
//                                               args...);
// Any other backend (or CUDA in a CPU-only build) is no_backend's error.
template <typename Rt, typename F, typename... A>
std::unique_ptr<graph::RuntimeOp> lower_cpu_or_cuda(const graph::Op& op, graph::Backend backend, F&& cuda,
                                                    A&&... args) {
  auto cpu = std::make_unique<Rt>(std::forward<A>(args)...);
  if (backend == graph::Backend::cpu) return cpu;
  if constexpr (!std::is_null_pointer_v<std::decay_t<F>>) {
    if (backend == graph::Backend::cuda) return cuda(std::move(cpu));
  }
  no_backend(op, backend);
}

// A base for CPU RuntimeOps: a name, an input count, a backward.
class CpuRuntimeOp : public graph::RuntimeOp {
 public:
  CpuRuntimeOp(std::string name, int n_inputs) : name_(std::move(name)), n_inputs_(n_inputs) {}
  std::string name() const override { return name_; }
  int n_activation_inputs() const override { return n_inputs_; }
  bool has_backward() const override { return true; }

 private:
  std::string name_;
  int n_inputs_;
};

}  // namespace vision::ops
