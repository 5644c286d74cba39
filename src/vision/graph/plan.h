// Plan — one graph lowered for one backend, mode and input shape: op order, arena layout, state bindings.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "vision/graph/arena.h"
#include "vision/graph/backend.h"
#include "vision/graph/graph.h"
#include "vision/graph/state.h"

namespace vision::graph {

// Concrete shape of every value of the graph for the given input shapes (symbolic dims bound).
std::vector<Shape> bind_shapes(const Graph& graph, const std::vector<Shape>& input_shapes);

struct PlanStep {
  std::string name;                       // node name ("model.0.conv", or the common scope of a fused pair)
  std::shared_ptr<const Op> op;           // after fusion
  std::unique_ptr<RuntimeOp> runtime;
  std::vector<int> inputs;                // value ids
  int output = -1;                        // value id
  std::vector<ParamSpec> specs;
  std::vector<Tensor> params;             // views: state store entries or plan constants
  std::vector<Tensor> grad_params;        // views into the flat gradient buffer (parameters only)
  std::vector<TensorSpec> saved_specs;
  std::vector<Tensor> saved;              // views into the arena (train mode)
  size_t workspace = 0;
  std::vector<std::string> fused_from;    // node names merged into this step
};

class Plan {
 public:
  Plan(const Graph& graph, std::shared_ptr<BackendContext> backend, Mode mode, const std::vector<Shape>& input_shapes,
       StateStore& state);
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  Mode mode() const { return mode_; }
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  const std::vector<PlanStep>& steps() const { return steps_; }
  size_t arena_bytes() const { return arena_bytes_; }

  // Copies inputs (host or same-backend tensors) into the arena and runs every step.
  void forward(const std::vector<Tensor>& inputs);
  // Output views (valid until the next run of this plan).
  std::vector<Tensor> outputs() const;
  // Reverse pass (train mode, after forward): grad_outputs default to ones for scalar outputs. Parameter
  // gradients are written into the flat gradient buffer, or added to it when accumulate is true.
  void backward(const std::vector<Tensor>& grad_outputs = {}, bool accumulate = false);
  // Gradient of a value of the graph after backward (for tests), undefined if it got none.
  Tensor value_grad(int value_id) const;
  Tensor value(int value_id) const { return values_.at(static_cast<size_t>(value_id)); }

  std::string describe() const;

  // Inference on a backend with graph capture (CUDA): the first run is eager, the second captures the
  // steps into a graph, later runs replay it. On by default.
  void set_graph_replay(bool on) { graph_replay_ = on; }
  bool graph_replayed() const { return captured_ != nullptr; }  // one line per step: name, op, output shape

 private:
  void build_steps(const Graph& graph, const std::vector<Shape>& shapes);
  void bind_state(StateStore& state, const std::vector<Shape>& shapes);
  void layout_memory(const Graph& graph, const std::vector<Shape>& shapes);
  void run_steps();

  std::shared_ptr<BackendContext> backend_;
  Mode mode_;
  std::vector<Shape> input_shapes_;
  std::vector<int> graph_inputs_, graph_outputs_;
  std::vector<DType> value_dtypes_;
  std::vector<PlanStep> steps_;
  std::vector<Tensor> values_;      // activation views (undefined for values no step needs)
  std::vector<Tensor> grads_;       // gradient views (train mode)
  std::vector<bool> needs_grad_;
  Tensor workspace_;
  Tensor grad_scratch_;             // accumulation space for multi-consumer gradients
  std::shared_ptr<void> arena_;
  std::shared_ptr<void> constants_;
  size_t arena_bytes_ = 0;
  bool forward_done_ = false;
  bool graph_replay_ = true;
  int64_t runs_ = 0;
  std::shared_ptr<void> captured_;
};

}  // namespace vision::graph
