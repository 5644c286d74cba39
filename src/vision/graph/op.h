// Op and RuntimeOp — the two halves of every operation: graph-level shape logic and launch-level execution.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "vision/core/tensor.h"

namespace vision::graph {

using core::DType;
using core::Shape;
using core::Tensor;

enum class Backend : uint8_t { cpu, cuda };
enum class Mode : uint8_t { inference, train };
std::string_view backend_name(Backend b);
std::string_view mode_name(Mode m);

// The three kinds of state an op can own (DESIGN.md): trainable parameters live in the flat parameter and
// gradient buffers; buffers (BatchNorm statistics) are checkpointed but never optimized; constants are
// produced per plan by param_init_data (the anchor grid) and neither checkpointed nor optimized.
enum class StateKind : uint8_t { parameter, buffer, constant };

struct ParamSpec {
  std::string name;  // local name ("weight"); the checkpoint key is "<node name>.<name>"
  Shape shape;
  DType dtype = DType::f32;
  StateKind kind = StateKind::parameter;
};

struct TensorSpec {
  Shape shape;
  DType dtype = DType::f32;
};

// Printable description of a GPU kernel an op launches (the kernel system provides the real descriptors).
struct KernelInfo {
  std::string name;
  std::string id;
  std::string source;
};

class BackendContext;  // per-backend services (streams, library handles); see graph/backend.h

// What an op sees in forward: concrete tensors, views into the plan's memory.
struct ForwardCtx {
  BackendContext* backend = nullptr;
  std::vector<Tensor> inputs;  // n_activation_inputs() activations
  Tensor output;
  std::vector<Tensor> params;  // one per param_specs() entry, in that order
  std::vector<Tensor> saved;   // one per saved_specs() entry (train mode only), kept until backward
  Tensor workspace;            // workspace_bytes() of scratch (u8), undefined when 0
  bool training = false;
};

// What an op sees in backward. The op overwrites grad_inputs[i] (an undefined tensor means that input
// needs no gradient) and grad_params[j] for each parameter (undefined for buffers and constants).
struct BackwardCtx {
  BackendContext* backend = nullptr;
  std::vector<Tensor> inputs;
  Tensor output;
  Tensor grad_output;
  std::vector<Tensor> grad_inputs;
  std::vector<Tensor> params;
  std::vector<Tensor> grad_params;
  std::vector<Tensor> saved;
  Tensor workspace;
};

// Launch level: concrete shapes only, one backend.
class RuntimeOp {
 public:
  virtual ~RuntimeOp() = default;
  virtual std::string name() const = 0;
  virtual int n_activation_inputs() const = 0;

  // State the op owns, for the given concrete input and output shapes.
  virtual std::vector<ParamSpec> param_specs(const std::vector<Shape>& inputs, const Shape& output) const {
    (void)inputs, (void)output;
    return {};
  }
  // Initial bytes of state i: the default initialisation of a parameter or buffer (used once, when the
  // model's state is created) or the value of a per-plan constant (uploaded when a plan is built). The
  // byte count must equal numel × dtype size of param_specs()[i]; the plan checks it.
  // seed is derived from the state's checkpoint key, so initialisation is deterministic per name.
  virtual std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& inputs, const Shape& output,
                                                 uint64_t seed) const;

  // Tensors forward must keep for backward (train mode), allocated in the plan's arena.
  virtual std::vector<TensorSpec> saved_specs(const std::vector<Shape>& inputs, const Shape& output) const {
    (void)inputs, (void)output;
    return {};
  }
  // Scratch bytes needed by forward or backward; shared between ops.
  virtual size_t workspace_bytes(const std::vector<Shape>& inputs, const Shape& output) const {
    (void)inputs, (void)output;
    return 0;
  }

  virtual void forward(ForwardCtx& ctx) = 0;
  virtual bool has_backward() const { return false; }
  virtual void backward(BackwardCtx& ctx);

  // The GPU kernels this op launches (empty on the CPU backend).
  virtual std::vector<KernelInfo> kernels() const { return {}; }

  // Convenience views of param_specs().
  std::vector<Shape> param_shapes(const std::vector<Shape>& inputs, const Shape& output) const;
  std::vector<std::string> param_names(const std::vector<Shape>& inputs, const Shape& output) const;
};

// Graph level: namespaced name, symbolic shape inference, lowering to a RuntimeOp. Holds configuration,
// never per-inference state.
class Op {
 public:
  virtual ~Op() = default;
  virtual std::string name() const = 0;  // "ops.conv2d", "yolo.detect_decode"
  virtual Shape infer_output_shape(const std::vector<Shape>& inputs) const = 0;
  virtual DType infer_output_dtype(const std::vector<DType>& inputs) const {
    return inputs.empty() ? DType::f32 : inputs.front();
  }
  virtual std::unique_ptr<RuntimeOp> lower(Backend backend, Mode mode) const = 0;

  // Inference-time fusion. When this op's output feeds only `next`, an op may return one op computing
  // next(this(x)) (conv → batchnorm folding, conv → SiLU epilogue), or nullptr. The fused op names its
  // state relative to the two nodes' common scope: self_prefix / next_prefix are the nodes' names below
  // that scope with a trailing dot ("conv.", "bn."), so its specs are e.g. "conv.weight", "bn.running_mean".
  virtual std::shared_ptr<const Op> fuse_with(const Op& next, Mode mode, const std::string& self_prefix,
                                              const std::string& next_prefix) const {
    (void)next, (void)mode, (void)self_prefix, (void)next_prefix;
    return nullptr;
  }
};

// Helpers for param_init_data implementations.
std::vector<std::byte> bytes_of(const std::vector<float>& values);
std::vector<std::byte> filled_bytes(const Shape& shape, float value);
// Uniform(-bound, bound) values from a deterministic generator.
std::vector<float> uniform_init(const Shape& shape, float bound, uint64_t seed);
// FNV-1a hash of a name, the seed of its initialisation.
uint64_t name_seed(const std::string& name);

}  // namespace vision::graph
