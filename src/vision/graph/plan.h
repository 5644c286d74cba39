// Plan — one graph lowered for one backend, mode and input shape: op order, arena layout, state bindings.
#pragma once

#include <algorithm>
#include <array>
#include <functional>

#include <map>
#include <memory>
#include <tuple>
#include <optional>
#include <string>
#include <vector>

#include "vision/graph/arena.h"
#include "vision/graph/backend.h"
#include "vision/graph/collective.h"
#include "vision/graph/graph.h"
#include "vision/graph/state.h"

namespace vision::graph {

// Concrete shape of every value of the graph for the given shapes of all its inputs (symbolic dims bound).
std::vector<Shape> bind_shapes(const Graph& graph, const std::vector<Shape>& input_shapes);
// The same for some of the inputs (value ids): values that depend on another input stay unbound
// (*bound says which are bound).
std::vector<Shape> bind_shapes(const Graph& graph, const std::vector<int>& input_ids,
                               const std::vector<Shape>& input_shapes, std::vector<bool>* bound);

// Choices made once, when a plan is built.
struct PlanOptions {
  // No floating-point atomics in reductions and backward passes and deterministic library algorithms:
  // running the plan twice on the same inputs and state gives bit-identical outputs and gradients.
  bool deterministic = false;
  // The element type activations are computed in (f32, f16 or bf16) and the memory order of rank-4
  // activations. Each step runs in this format when its op has it, else in f32 and/or NCHW (the built-in CPU
  // ops compute in f32 NCHW), with cast and layout steps only where two formats meet: graph inputs and outputs
  // whose declared format differs, and ops that lack the format. Losses, reductions and BatchNorm statistics
  // stay f32. Parameters stay f32 masters; an op reading one in f16/bf16 gets a copy (StateStore::compute_copy).
  DType compute_dtype = DType::f32;
  core::Layout layout = core::Layout::nchw;
  // Training plans fuse what their ops offer to fuse in training (BatchNorm → SiLU: one op, one pass over the
  // activations each way). Off: every node runs as recorded (the tests compare the two).
  bool fuse_training = true;
  // f32 convolutions on CUDA may use TF32 tensor cores (products of 10-bit mantissas, f32 accumulation), as PyTorch's
  // torch.backends.cudnn.allow_tf32: faster, no longer exact f32. Off by default, because f32 means exact f32.
  bool tf32 = false;
  // Data-parallel training with SyncBatchNorm: BatchNorm in a training plan takes its batch statistics (and their
  // gradients) over every rank's batch through this collective, as PyTorch's SyncBatchNorm does. Null: each rank's
  // own batch (DDP's default, ultralytics').
  std::shared_ptr<Collective> collective = nullptr;
};

// Told, during a backward, of each parameter's gradient (an f32 view into the flat gradient buffer) once the backward
// has run (on CUDA: queued) the last step that writes or adds to it — at once for a parameter the loss does not reach
// — and then once with an undefined tensor when every step is done. Data-parallel training starts reducing a bucket
// of gradients there, beside the rest of the backward. What it queues on the backend is part of a captured step.
using GradientReady = std::function<void(const Tensor& grad)>;

struct PlanStep {
  std::string name;                       // node name ("model.0.conv", or the common scope of a fused pair)
  std::shared_ptr<const Op> op;           // after fusion
  std::unique_ptr<RuntimeOp> runtime;
  std::vector<int> inputs;                // value ids
  std::vector<int> outputs;               // value ids
  std::vector<ParamSpec> specs;
  std::vector<Tensor> params;             // views: state store entries or plan constants
  std::vector<Tensor> grad_params;        // views into the flat gradient buffer (parameters only)
  std::vector<TensorSpec> saved_specs;
  std::vector<Tensor> saved;              // views into the arena (train mode)
  std::vector<TensorSpec> derived_specs;
  std::vector<Tensor> derived;            // kept across runs, written by RuntimeOp::refresh
  size_t workspace = 0;
  bool backward = false;                  // train mode: a gradient reaches one of its outputs
  std::vector<std::string> fused_from;    // node names merged into this step
  Format format;                          // what the step computes in (RuntimeOp::format())
  std::vector<bool> param_copy;           // per spec: params[k] is a compute copy; its gradient is converted
};

class Plan {
 public:
  Plan(const Graph& graph, std::shared_ptr<BackendContext> backend, Mode mode, const std::vector<Shape>& input_shapes,
       StateStore& state, PlanOptions options = {});
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // What making this plan cost, in milliseconds of wall clock on the calling thread: its construction (shapes,
  // formats, memory layout), its first run (eager: every op's lazy preparation — kernels loaded, library algorithms
  // chosen, workspaces — plus queuing the work, not waiting for it) and, for a replayable plan, the CUDA-graph capture
  // and instantiation of its second run. Zero for what has not happened.
  struct BuildTimes {
    double construct_ms = 0, first_run_ms = 0, capture_ms = 0;
  };
  const BuildTimes& build_times() const { return build_times_; }

  Mode mode() const { return mode_; }
  const PlanOptions& options() const { return options_; }
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  const std::vector<PlanStep>& steps() const { return steps_; }
  size_t arena_bytes() const { return arena_bytes_; }
  // The graph outputs of this plan's mode (value ids), in marking order.
  const std::vector<int>& output_ids() const { return graph_outputs_; }

  // Copies inputs (host or same-backend tensors) into the arena and runs every step.
  void forward(const std::vector<Tensor>& inputs);
  // Output views (valid until the next run of this plan).
  std::vector<Tensor> outputs() const;
  // Reverse pass (train mode, after forward), starting from the outputs marked with seed_gradient.
  // grad_outputs is empty (every seeded output is a scalar and gets 1) or has one entry per plan output;
  // entries of outputs that are not seeded are ignored. Parameter gradients are written into the flat
  // gradient buffer, or added to it when accumulate is true.
  // seed is the gradient every scalar seeded output starts from when grad_outputs is empty (the loss scale
  // of dynamic loss scaling; 1 otherwise).
  // ready: see GradientReady.
  void backward(const std::vector<Tensor>& grad_outputs = {}, bool accumulate = false, float seed = 1.0f,
                const GradientReady& ready = {});
  // Gradient of a value of the graph after backward (for tests), undefined if it carries none.
  Tensor value_grad(int value_id) const;
  Tensor value(int value_id) const { return values_.at(static_cast<size_t>(value_id)); }
  // The format a value of the graph has in this plan (dtype, and layout for rank 4).
  Format value_format(int value_id) const;
  // Cast and layout steps the format pass inserted.
  size_t conversion_steps() const;

  // One line per step: name, op, output shapes, fused nodes; then the values that share memory.
  std::string describe() const;

  // Where a forward's time goes: forward(inputs) run eagerly 1 + `repeats` times, each step bracketed by backend
  // timestamps (BackendContext::mark); per step the median over the repeats after the first, in step order. Eager
  // launches: on a GPU a step's time includes the gap before it when the host, not the device, is the bottleneck
  // (small batches). Leaves outputs (and, in train mode, saved tensors) as forward(inputs) does.
  struct StepTime {
    std::string name, op;
    Format format;
    double ms = 0;
  };
  std::vector<StepTime> profile_forward(const std::vector<Tensor>& inputs, int repeats = 10);
  // The same as a table: the steps sorted by time (the top `top`, 0 = all), ms, share, and totals per op name.
  static std::string format_profile(const std::vector<StepTime>& times, size_t top = 0);
  // Where a backward's time goes: while `into` is set, each backward brackets every step it runs (the op's backward
  // with its gradient additions and conversions) with backend timestamps and appends one StepTime per step, in the
  // order they ran (the first entry also holds the zeroing of the gradients and the seeding). Waits for the device at
  // the end of such a backward. nullptr stops it.
  void set_backward_profile(std::vector<StepTime>* into) { backward_profile_ = into; }

  // Inference on a backend with graph capture (CUDA): the first run is eager, the second captures the
  // steps into a graph, later runs replay it. On by default (for train_step too).
  void set_graph_replay(bool on) { graph_replay_ = on; }
  bool graph_replayed() const { return captured_ != nullptr; }

  // A training step: forward (train mode), then `after_forward(outputs)` (work queued on the backend that reads the
  // outputs, e.g. copying the loss aside), then backward from the seeded scalar outputs (seed: the loss scale) —
  // forward_train + backward in one call. On a backend with graph capture (and graph replay on), the first call of
  // each value of `accumulate` runs eagerly (kernels compiled, library algorithms chosen, lazy buffers made) and the
  // next captures everything after the inputs are loaded — the compute copies of the parameters, the forward,
  // after_forward and the backward — into a graph that later calls replay (one per value of `accumulate`): a step
  // becomes one launch, and nothing in it waits for the host. The same numbers as the eager calls (in deterministic mode, bit for bit). A capture that fails (an
  // op that cannot be captured) leaves the plan eager, with train_step_replay_error() saying why. `ready` (see
  // GradientReady) is called in the eager calls and in the capture; a step with one and a step without are captured
  // apart (what the hook queues is part of the graph). `after_backward` (e.g. the optimizer's update and the EMA)
  // runs after the backward, in the eager calls and in the capture, and is part of the graph the same way; a replay
  // does not call it (what it reads from the host must be staged where the graph reads it, before the call).
  void train_step(const std::vector<Tensor>& inputs, bool accumulate, float seed,
                  const std::function<void(const std::vector<Tensor>&)>& after_forward = {},
                  const GradientReady& ready = {}, const std::function<void()>& after_backward = {});
  bool train_step_replayed() const {
    return std::any_of(captured_steps_.begin(), captured_steps_.end(), [](const auto& c) { return c != nullptr; });
  }
  const std::string& train_step_replay_error() const { return train_capture_error_; }

 private:
  void build_steps(const Graph& graph);
  void assign_formats(const Graph& graph);
  int converted_value(int value, const Format& format, std::vector<PlanStep>& steps);
  void mark_gradients(const Graph& graph);
  void bind_state(StateStore& state);
  void place_views();
  void layout_memory();
  void refresh_derived();
  void run_steps();
  void run_step(PlanStep& s);
  void load_inputs(const std::vector<Tensor>& inputs);
  std::vector<Shape> input_shapes_of(const PlanStep& s) const;
  // backward without its checks and its host-side seeding: the steps, queued on the backend (capturable when
  // grad_outputs is empty and the seed sits in seed_).
  void backward_steps(const std::vector<Tensor>& grad_outputs, bool accumulate, const GradientReady& ready);
  // Per step: the parameter gradients that are final once the backward has passed it (the steps run last to first).
  const std::vector<std::vector<Tensor>>& gradients_final_after();
  void upload_seed(float seed);

  // Memory of a value placed inside another's (a view, or an input written in place into a concat).
  struct Alias {
    int parent = -1;  // -1: the value has memory of its own
    size_t offset = 0;
  };

  std::shared_ptr<BackendContext> backend_;
  StateStore* state_;
  Mode mode_;
  PlanOptions options_;
  // PlanOptions::collective in a training plan (what its steps' contexts carry); null in an inference plan.
  Collective* collective() const { return mode_ == Mode::train ? options_.collective.get() : nullptr; }
  std::vector<Shape> input_shapes_;
  std::vector<int> graph_inputs_, graph_outputs_;
  std::vector<bool> seeded_;        // per graph output of this plan: backward starts from it
  // Per value: the graph's values, then those the format pass adds (the outputs of its conversions).
  std::vector<Shape> shapes_;
  std::vector<DType> value_dtypes_;
  std::vector<core::Layout> value_layouts_;
  std::vector<bool> differentiable_;
  std::vector<std::string> value_names_;
  std::map<std::tuple<int, DType, core::Layout>, int> conversions_;  // (value, format) → converted value
  std::vector<PlanStep> steps_;
  std::vector<Alias> alias_;        // per value
  std::vector<Tensor> values_;      // activation views (undefined for values no step needs)
  std::vector<Tensor> grads_;       // gradient views (train mode)
  std::vector<bool> needs_grad_;    // train mode: the value gets a gradient buffer
  Tensor workspace_;
  Tensor grad_scratch_;             // accumulation space for multi-consumer gradients
  std::shared_ptr<void> arena_;
  std::shared_ptr<void> constants_;  // per-plan constants and derived tensors
  size_t arena_bytes_ = 0;
  bool forward_done_ = false;
  std::vector<StepTime>* backward_profile_ = nullptr;
  bool graph_replay_ = true;
  bool has_derived_ = false;
  std::optional<uint64_t> refreshed_version_;  // the state version the derived tensors were computed from
  int64_t runs_ = 0;
  BuildTimes build_times_;
  std::shared_ptr<void> captured_;
  // Training steps (train_step): the captured graph per value of accumulate; the seed of the scalar outputs' gradient
  // on the backend (one f32), from which backward copies it.
  // Variants: accumulate (1), a GradientReady hook (2), an after_backward hook (4).
  std::array<std::shared_ptr<void>, 8> captured_steps_;
  std::array<int64_t, 8> eager_steps_ = {};
  std::optional<std::vector<std::vector<Tensor>>> gradients_final_after_;
  std::string train_capture_error_;
  Tensor seed_;
  std::shared_ptr<void> seed_memory_;
};

}  // namespace vision::graph
