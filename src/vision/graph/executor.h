// Executor — runs a graph on a backend: plans cached per (mode, input shapes), least recently used dropped beyond a
// bound; the model's state; backward.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "vision/graph/plan.h"

namespace vision::graph {

class Executor {
 public:
  Executor(std::shared_ptr<const Graph> graph, std::shared_ptr<BackendContext> backend, PlanOptions options = {});

  const Graph& graph() const { return *graph_; }
  BackendContext& backend() const { return *backend_; }
  const PlanOptions& options() const { return options_; }

  // The model's parameters and buffers, created (and initialised) on first use for the shapes of the
  // inputs a mode takes (Graph::inputs(mode)).
  StateStore& state(Mode mode, const std::vector<Shape>& input_shapes);
  // The same from the shapes of all the graph's inputs.
  StateStore& state(const std::vector<Shape>& all_input_shapes);
  // The state, which must exist already (after a forward or state(mode, shapes)).
  StateStore& state();

  // The plan for a mode and concrete shapes of the inputs it takes, built on first use and cached. At most
  // max_plans() plans are kept: building one more drops the least recently used (a reference to a plan is valid until
  // it is dropped).
  Plan& plan(Mode mode, const std::vector<Shape>& input_shapes);
  size_t cached_plans() const { return plans_.size(); }
  static constexpr size_t kDefaultMaxPlans = 8;
  size_t max_plans() const { return max_plans_; }
  // 0: no bound. Drops the least recently used plans beyond the new bound.
  void set_max_plans(size_t n);

  // Inference: takes the graph inputs inference outputs depend on; outputs are views into the plan's arena
  // on the backend, valid until its next run.
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs);
  // Training forward: takes the inputs training outputs depend on; keeps what backward needs.
  std::vector<Tensor> forward_train(const std::vector<Tensor>& inputs);
  // Reverse pass of the last forward_train; parameter gradients land in state().flat_grads().
  // seed: what scalar losses start from (the loss scale under dynamic loss scaling).
  // ready: told of each parameter gradient once it is final (GradientReady, plan.h).
  void backward(const std::vector<Tensor>& grad_outputs = {}, bool accumulate = false, float seed = 1.0f,
                const GradientReady& ready = {});
  // forward_train, then after_forward(outputs), then backward({}, accumulate, seed, ready), then after_backward(), as
  // one captured and replayed graph from the plan's second step on where the backend can capture (Plan::train_step).
  void train_step(const std::vector<Tensor>& inputs, bool accumulate, float seed,
                  const std::function<void(const std::vector<Tensor>&)>& after_forward = {},
                  const GradientReady& ready = {}, const std::function<void()>& after_backward = {});
  Plan* last_train_plan() const { return last_train_; }

 private:
  static std::vector<Shape> shapes_of(const std::vector<Tensor>& t);
  void drop_least_recent(size_t keep);  // until `keep` plans are left

  std::shared_ptr<const Graph> graph_;
  std::shared_ptr<BackendContext> backend_;
  PlanOptions options_;
  std::unique_ptr<StateStore> state_;
  struct CachedPlan {
    std::unique_ptr<Plan> plan;
    uint64_t last_use = 0;
  };
  std::map<std::pair<Mode, std::vector<std::vector<int64_t>>>, CachedPlan> plans_;
  size_t max_plans_ = kDefaultMaxPlans;
  uint64_t uses_ = 0;
  Plan* last_train_ = nullptr;
};

}  // namespace vision::graph
