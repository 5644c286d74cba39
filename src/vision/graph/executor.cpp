#include "vision/graph/executor.h"

namespace vision::graph {

Executor::Executor(std::shared_ptr<const Graph> graph, std::shared_ptr<BackendContext> backend, PlanOptions options)
    : graph_(std::move(graph)), backend_(std::move(backend)), options_(options) {
  VISION_CHECK(graph_ && backend_, "Executor needs a graph and a backend");
}

StateStore& Executor::state(Mode mode, const std::vector<Shape>& input_shapes) {
  if (!state_) state_ = std::make_unique<StateStore>(*graph_, backend_, graph_->inputs(mode), input_shapes);
  return *state_;
}

StateStore& Executor::state(const std::vector<Shape>& all_input_shapes) {
  if (!state_) state_ = std::make_unique<StateStore>(*graph_, backend_, all_input_shapes);
  return *state_;
}

StateStore& Executor::state() {
  VISION_CHECK(state_ != nullptr, "the model's state does not exist yet: run forward or call state(mode, input_shapes)");
  return *state_;
}

Plan& Executor::plan(Mode mode, const std::vector<Shape>& input_shapes) {
  std::vector<std::vector<int64_t>> dims;
  for (auto& s : input_shapes) dims.push_back(s.dims());
  auto key = std::make_pair(mode, dims);
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    it->second.last_use = ++uses_;
    return *it->second.plan;
  }
  StateStore& st = state(mode, input_shapes);
  auto plan = std::make_unique<Plan>(*graph_, backend_, mode, input_shapes, st, options_);
  if (max_plans_) drop_least_recent(max_plans_ - 1);
  Plan& ref = *plan;
  plans_.emplace(std::move(key), CachedPlan{std::move(plan), ++uses_});
  return ref;
}

void Executor::set_max_plans(size_t n) {
  max_plans_ = n;
  if (n) drop_least_recent(n);
}

void Executor::drop_least_recent(size_t keep) {
  while (plans_.size() > keep) {
    auto oldest = plans_.begin();
    for (auto it = plans_.begin(); it != plans_.end(); ++it)
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    if (oldest->second.plan.get() == last_train_) last_train_ = nullptr;
    plans_.erase(oldest);
  }
}

std::vector<Shape> Executor::shapes_of(const std::vector<Tensor>& t) {
  std::vector<Shape> s;
  for (auto& x : t) {
    VISION_CHECK(x.defined(), "an input tensor is undefined");
    s.push_back(x.shape());
  }
  return s;
}

std::vector<Tensor> Executor::forward(const std::vector<Tensor>& inputs) {
  Plan& p = plan(Mode::inference, shapes_of(inputs));
  p.forward(inputs);
  return p.outputs();
}

std::vector<Tensor> Executor::forward_train(const std::vector<Tensor>& inputs) {
  Plan& p = plan(Mode::train, shapes_of(inputs));
  p.forward(inputs);
  last_train_ = &p;
  return p.outputs();
}

void Executor::train_step(const std::vector<Tensor>& inputs, bool accumulate, float seed,
                          const std::function<void(const std::vector<Tensor>&)>& after_forward,
                          const GradientReady& ready, const std::function<void()>& after_backward) {
  Plan& p = plan(Mode::train, shapes_of(inputs));
  last_train_ = &p;
  p.train_step(inputs, accumulate, seed, after_forward, ready, after_backward);
}

void Executor::backward(const std::vector<Tensor>& grad_outputs, bool accumulate, float seed,
                        const GradientReady& ready) {
  VISION_CHECK(last_train_ != nullptr,
               "backward called before forward_train, or its plan was dropped from the cache since (see max_plans)");
  last_train_->backward(grad_outputs, accumulate, seed, ready);
}

}  // namespace vision::graph
