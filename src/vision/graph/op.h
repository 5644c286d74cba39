// Op and RuntimeOp — the two halves of every operation: graph-level shape logic and launch-level execution.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
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

// The three kinds of state an op can own (DESIGN.md): trainable parameters live in the flat parameter and
// gradient buffers; buffers (BatchNorm statistics) are checkpointed but never optimized; constants are
// produced per plan by param_init_data (the anchor grid) and neither checkpointed nor optimized.
enum class StateKind : uint8_t { parameter, buffer, constant };

// What a plan computes in: an element type and, for rank-4 activations, a memory order. The shape of a rank-4
// value is always (N, C, H, W); the layout says how it lies in memory.
struct Format {
  DType dtype = DType::f32;
  core::Layout layout = core::Layout::nchw;
  bool operator==(const Format&) const = default;
};
std::string format_name(const Format& f);  // "f16 nhwc"

struct ParamSpec {
  std::string name;  // local name ("weight"); the checkpoint key is "<node name>.<name>"
  Shape shape;
  DType dtype = DType::f32;  // the stored dtype (f32 for every trainable parameter: the master copy)
  StateKind kind = StateKind::parameter;
  // The format the op reads this state in, when it is not the stored one: a convolution in f16 NHWC reads an f16
  // copy of its f32 weight with shape (K, C, R, S) laid out K, R, S, C. The plan binds a copy the state store
  // keeps per (state, format), shared by every plan of the model and refreshed when the state changes; the op
  // writes that parameter's gradient in the same format and the plan adds it into the f32 gradient buffer.
  std::optional<Format> compute_format = std::nullopt;
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
class Collective;      // the ranks of a data-parallel job (SyncBatchNorm); see graph/collective.h

// What a plan tells an op about itself while it is being built.
struct PlanContext {
  BackendContext* backend = nullptr;
  Mode mode = Mode::inference;
  // No floating-point atomics in reductions and backward passes, deterministic library algorithms: two runs
  // of the plan on the same inputs give bit-identical results.
  bool deterministic = false;
  bool tf32 = false;  // PlanOptions::tf32: f32 convolutions may use TF32 tensor cores
  Collective* collective = nullptr;  // PlanOptions::collective: BatchNorm's statistics over every rank's batch
};

// What an op sees in forward: concrete tensors, views into the plan's memory.
struct ForwardCtx {
  BackendContext* backend = nullptr;
  std::vector<Tensor> inputs;   // n_activation_inputs() activations
  std::vector<Tensor> outputs;  // one per output of the op (Op::n_outputs())
  Tensor output;                // outputs[0], for the many ops with one output
  std::vector<Tensor> params;   // one per param_specs() entry, in that order
  std::vector<Tensor> saved;    // one per saved_specs() entry (train mode only), kept until backward
  std::vector<Tensor> derived;  // one per derived_specs() entry: kept by the plan, written by refresh()
  Tensor workspace;             // workspace_bytes() of scratch (u8), undefined when 0
  bool training = false;
  bool deterministic = false;   // PlanContext::deterministic of the plan
  bool tf32 = false;            // PlanContext::tf32 of the plan
  Collective* collective = nullptr;  // PlanContext::collective of the plan (training plans only)
};

// What an op sees in backward. The op overwrites grad_inputs[i] (an undefined tensor means that input
// needs no gradient) and grad_params[j] for each parameter (undefined for buffers and constants).
// grad_outputs[k] is defined for every output that carries a gradient (a floating output not detached);
// an output the loss does not reach gets zeros, never stale memory. Integer outputs have none.
struct BackwardCtx {
  BackendContext* backend = nullptr;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  Tensor output;  // outputs[0]
  std::vector<Tensor> grad_outputs;
  Tensor grad_output;  // grad_outputs[0]
  std::vector<Tensor> grad_inputs;
  std::vector<Tensor> params;
  std::vector<Tensor> grad_params;
  std::vector<Tensor> saved;
  std::vector<Tensor> derived;
  Tensor workspace;
  bool deterministic = false;
  bool tf32 = false;
  Collective* collective = nullptr;
};

// Launch level: concrete shapes only, one backend, one format.
class RuntimeOp {
 public:
  virtual ~RuntimeOp() = default;
  virtual std::string name() const = 0;
  virtual int n_activation_inputs() const = 0;

  // The formats this op computes in. A plan picks one per step (its compute dtype and layout when the op has
  // them, else f32 and/or NCHW with cast and layout steps around it) and calls set_format() before anything
  // else; the op's floating activations (inputs and outputs) are then of format().dtype and its rank-4
  // activations in format().layout. An op with no rank-4 activation is asked with NCHW. Default: f32 NCHW only.
  virtual bool supports(const Format& f) const { return f == Format{}; }
  // An op that only moves bytes (concat, split, reshape) runs in the format its first input has when it can,
  // rather than in the plan's, so that no conversion is added for it.
  virtual bool follows_input_format() const { return false; }
  // False for an input whose values the op never reads (only its shape: the detect decode's level maps): the plan
  // adds no conversion for it, and the op sees it in whatever format it has.
  virtual bool reads_input(size_t input) const {
    (void)input;
    return true;
  }
  // The dtype the op takes floating input `input` in whatever the step's format (a loss's f32 targets and weights),
  // or nullopt for the step's dtype. The plan converts that input to it (and its rank-4 layout to the step's).
  virtual std::optional<DType> input_dtype(size_t input) const {
    (void)input;
    return std::nullopt;
  }
  const Format& format() const { return format_; }
  void set_format(const Format& f) { format_ = f; }

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
  // Scratch bytes needed by forward or backward; shared between ops. plan.backend is the backend the op
  // runs on (library handles for algorithm queries).
  virtual size_t workspace_bytes(const PlanContext& plan, const std::vector<Shape>& inputs,
                                 const Shape& output) const {
    (void)plan, (void)inputs, (void)output;
    return 0;
  }
  // Tensors computed from the model's state rather than from the inputs (BatchNorm folded into a
  // convolution's weights): the plan keeps them across runs and calls refresh() before the first forward
  // and again whenever the state changed (StateStore::version()), outside any captured graph.
  virtual std::vector<TensorSpec> derived_specs(const std::vector<Shape>& inputs, const Shape& output) const {
    (void)inputs, (void)output;
    return {};
  }
  virtual void refresh(ForwardCtx& ctx) { (void)ctx; }
  // The op keeps private copies computed from its state (a convolution's weights in oneDNN's blocked layout): the
  // plan then calls refresh() whenever the state changed, as it does for derived tensors, and the op recomputes
  // them from the state its next forward reads. An op run outside a plan is never refreshed and must not rely on
  // refresh() to see new state.
  virtual bool caches_state() const { return false; }

  virtual void forward(ForwardCtx& ctx) = 0;
  virtual bool has_backward() const { return false; }
  virtual void backward(BackwardCtx& ctx);

  // The GPU kernels this op launches (empty on the CPU backend).
  virtual std::vector<KernelInfo> kernels() const { return {}; }

 private:
  Format format_;
};

// An output that shares memory with an input: elements [offset, offset + its numel) of input `input`.
struct OutputView {
  size_t input = 0;
  size_t offset = 0;
};

// Graph level: namespaced name, symbolic shape inference, lowering to a RuntimeOp. Holds configuration,
// never per-inference state.
class Op {
 public:
  virtual ~Op() = default;
  virtual std::string name() const = 0;  // "ops.conv2d", "yolo.detect_decode"

  // Output shapes and dtypes. An op of one output overrides infer_output_shape (and infer_output_dtype
  // when its output is not of its first input's dtype); an op of several overrides n_outputs and the
  // plural forms.
  virtual size_t n_outputs() const { return 1; }
  virtual Shape infer_output_shape(const std::vector<Shape>& inputs) const;
  virtual DType infer_output_dtype(const std::vector<DType>& inputs) const {
    return inputs.empty() ? DType::f32 : inputs.front();
  }
  virtual std::vector<Shape> infer_output_shapes(const std::vector<Shape>& inputs) const {
    return {infer_output_shape(inputs)};
  }
  virtual std::vector<DType> infer_output_dtypes(const std::vector<DType>& inputs) const {
    return std::vector<DType>(n_outputs(), infer_output_dtype(inputs));
  }
  virtual std::unique_ptr<RuntimeOp> lower(Backend backend, Mode mode) const = 0;

  // Stop-gradient: the op's outputs carry no gradient, so nothing flows back to its inputs (detach).
  virtual bool stops_gradient() const { return false; }
  // Output `output` is a view of an input's memory (reshape, detach, a split along an outer axis): the plan
  // gives it no memory of its own and the op's forward then copies nothing. nullopt: the op writes it.
  // layout is the memory order of the step's rank-4 values (a channel split is a view in NCHW, not in NHWC).
  virtual std::optional<OutputView> output_view(size_t output, const std::vector<Shape>& inputs,
                                                core::Layout layout) const {
    (void)output, (void)inputs, (void)layout;
    return std::nullopt;
  }
  // Input `input` may be produced directly inside output 0, at this element offset (concat along an outer
  // axis): the plan places the producer's value there and the op's forward skips the copy.
  virtual std::optional<size_t> input_in_output(size_t input, const std::vector<Shape>& inputs,
                                                core::Layout layout) const {
    (void)input, (void)inputs, (void)layout;
    return std::nullopt;
  }

  // Fusion. When this op's output feeds only `next`, an op may return one op computing next(this(x)) in plans of
  // `mode` (inference: conv → batchnorm folding, conv → SiLU epilogue; training, PlanOptions::fuse_training:
  // batchnorm → SiLU, whose fused op has a backward), or nullptr. The fused op names its
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
