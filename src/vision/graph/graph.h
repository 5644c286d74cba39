// Graph and SymTensor — recording operations on symbolic tensors, with dotted name scopes.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vision/graph/op.h"

namespace vision::graph {

class Graph;

// A value in a graph being recorded: its shape may have symbolic dimensions.
class SymTensor {
 public:
  SymTensor() = default;
  SymTensor(Graph* g, int id) : graph_(g), id_(id) {}
  Graph* graph() const { return graph_; }
  int id() const { return id_; }
  bool valid() const { return graph_ != nullptr; }
  const Shape& shape() const;
  DType dtype() const;
  int64_t dim(int i) const { return shape().dim(i); }

 private:
  Graph* graph_ = nullptr;
  int id_ = -1;
};

struct Value {
  Shape shape;
  DType dtype = DType::f32;
  int producer = -1;  // node index, -1 for a graph input
  int producer_output = 0;  // which output of the producer
  std::string name;
  // Whether a gradient can flow through this value: floating values not cut off by a stop-gradient op.
  // Integer and boolean values (indices, masks, counts) never carry one.
  bool differentiable = true;
  // Memory order of a rank-4 graph input (the shape is always N, C, H, W): what Plan::forward expects of the
  // tensor given for it. The layout of every other value is chosen per plan (PlanOptions).
  core::Layout layout = core::Layout::nchw;
};

struct Node {
  std::shared_ptr<const Op> op;
  std::vector<int> inputs;   // value ids
  std::vector<int> outputs;  // value ids, one per Op::n_outputs()
  std::string name;          // dotted, e.g. "model.0.conv"; prefix of its state's checkpoint keys
};

// Which plans a graph output belongs to, and whether a training plan seeds its gradient.
struct OutputUse {
  bool inference = true;  // an output of inference plans
  bool train = true;      // an output of training plans
  // In a training plan: backward starts from this output's gradient (a loss). False for values that are
  // only reported (loss components): they get no seed and are never counted twice.
  bool seed_gradient = true;
  // The dtype and (rank 4) layout the plan hands this output out in; by default its recorded dtype and NCHW.
  // A plan computing in another format converts it once at the end.
  std::optional<Format> format = std::nullopt;
};
inline constexpr OutputUse kInferenceOutput{.inference = true, .train = false, .seed_gradient = false};
inline constexpr OutputUse kTrainingLoss{.inference = false, .train = true, .seed_gradient = true};
inline constexpr OutputUse kTrainingLogged{.inference = false, .train = true, .seed_gradient = false};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // A graph input; symbolic dims (Shape::kAny) are bound when a plan is built.
  SymTensor input(const std::string& name, Shape shape, DType dtype = DType::f32,
                  core::Layout layout = core::Layout::nchw);
  // Records op applied to inputs; the node is named "<scope>.<local_name>" (local_name may be empty).
  // apply returns the op's only output; apply_multi all of them.
  SymTensor apply(std::shared_ptr<const Op> op, const std::vector<SymTensor>& inputs, const std::string& local_name);
  std::vector<SymTensor> apply_multi(std::shared_ptr<const Op> op, const std::vector<SymTensor>& inputs,
                                     const std::string& local_name);
  // Marks a graph output: by default of every plan, its gradient seeded in training (see OutputUse).
  void mark_output(SymTensor t, OutputUse use = {});
  // Node i computes with `op` instead (a graph transform: a convolution given its int8 calibration). The new op must
  // infer the node's output shapes and dtypes from its inputs; throws naming the node otherwise.
  void replace_op(size_t node, std::shared_ptr<const Op> op);

  // RAII name scope: while alive, recorded nodes are named under it ("model" → "model.0" → ...).
  class Scope {
   public:
    Scope(Graph& g, const std::string& name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Graph& g_;
  };
  Scope scope(const std::string& name) { return Scope(*this, name); }
  std::string scoped_name(const std::string& local) const;

  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int>& inputs() const { return inputs_; }
  // Every marked output, with its use; outputs(mode) those of one kind of plan, in marking order.
  const std::vector<std::pair<int, OutputUse>>& marked_outputs() const { return outputs_; }
  std::vector<int> outputs(Mode mode) const;
  // Whether node i is needed for the outputs of a mode, and the graph inputs those outputs depend on (in
  // declaration order): an inference plan takes no training targets, a training plan no inference-only input.
  std::vector<bool> needed_nodes(Mode mode) const;
  std::vector<int> inputs(Mode mode) const;
  const Value& value(int id) const { return values_.at(static_cast<size_t>(id)); }

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<int> inputs_;
  std::vector<std::pair<int, OutputUse>> outputs_;
  std::vector<std::string> scopes_;
};

}  // namespace vision::graph
