#include "vision/graph/graph.h"

#include <fmt/format.h>

#include "vision/core/error.h"

namespace vision::graph {

const Shape& SymTensor::shape() const {
  VISION_CHECK(graph_, "use of an empty SymTensor");
  return graph_->value(id_).shape;
}

DType SymTensor::dtype() const {
  VISION_CHECK(graph_, "use of an empty SymTensor");
  return graph_->value(id_).dtype;
}

SymTensor Graph::input(const std::string& name, Shape shape, DType dtype, core::Layout layout) {
  values_.push_back(Value{std::move(shape), dtype, -1, 0, name, core::is_floating(dtype), layout});
  const int id = static_cast<int>(values_.size()) - 1;
  inputs_.push_back(id);
  return SymTensor(this, id);
}

std::string Graph::scoped_name(const std::string& local) const {
  std::string s;
  for (auto& p : scopes_) {
    if (p.empty()) continue;
    if (!s.empty()) s += '.';
    s += p;
  }
  if (!local.empty()) {
    if (!s.empty()) s += '.';
    s += local;
  }
  return s;
}

void Graph::replace_op(size_t node, std::shared_ptr<const Op> op) {
  VISION_CHECK(node < nodes_.size() && op != nullptr, "replace_op: no node {} (the graph has {}) or no op", node,
               nodes_.size());
  Node& n = nodes_[node];
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (int id : n.inputs) {
    shapes.push_back(value(id).shape);
    dtypes.push_back(value(id).dtype);
  }
  bool same = op->n_outputs() == n.outputs.size();
  try {
    const auto out = op->infer_output_shapes(shapes);
    const auto out_dtypes = op->infer_output_dtypes(dtypes);
    for (size_t k = 0; same && k < n.outputs.size(); ++k)
      same = out.at(k) == value(n.outputs[k]).shape && out_dtypes.at(k) == value(n.outputs[k]).dtype;
  } catch (const Error& e) {
    fail("replace_op: node '{}' ({} → {}): {}", n.name, n.op->name(), op->name(), e.what());
  }
  VISION_CHECK(same, "replace_op: node '{}': {} does not give the outputs of {}", n.name, op->name(), n.op->name());
  n.op = std::move(op);
}

SymTensor Graph::apply(std::shared_ptr<const Op> op, const std::vector<SymTensor>& inputs,
                       const std::string& local_name) {
  VISION_CHECK(op != nullptr, "Graph::apply: null op");
  VISION_CHECK(op->n_outputs() == 1, "op '{}' ({}) has {} outputs: record it with apply_multi",
               scoped_name(local_name), op->name(), op->n_outputs());
  return apply_multi(std::move(op), inputs, local_name).front();
}

std::vector<SymTensor> Graph::apply_multi(std::shared_ptr<const Op> op, const std::vector<SymTensor>& inputs,
                                          const std::string& local_name) {
  VISION_CHECK(op != nullptr, "Graph::apply_multi: null op");
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  std::vector<int> ids;
  const std::string node_name = scoped_name(local_name);
  for (auto& t : inputs) {
    VISION_CHECK(t.graph() == this, "op '{}' ({}): an input belongs to another graph", node_name, op->name());
    shapes.push_back(t.shape());
    dtypes.push_back(t.dtype());
    ids.push_back(t.id());
  }
  std::vector<Shape> out;
  std::vector<DType> out_dtypes;
  try {
    out = op->infer_output_shapes(shapes);
    out_dtypes = op->infer_output_dtypes(dtypes);
  } catch (const Error& e) {
    fail("op '{}' ({}): {}", node_name, op->name(), e.what());
  }
  VISION_CHECK(out.size() == op->n_outputs() && out_dtypes.size() == op->n_outputs(),
               "op '{}' ({}) declares {} outputs but infers {} shapes and {} dtypes", node_name, op->name(),
               op->n_outputs(), out.size(), out_dtypes.size());
  const int node = static_cast<int>(nodes_.size());
  const bool stops = op->stops_gradient();
  nodes_.push_back(Node{std::move(op), std::move(ids), {}, node_name});
  std::vector<SymTensor> result;
  for (size_t k = 0; k < out.size(); ++k) {
    const std::string name = out.size() == 1 ? node_name : fmt::format("{}:{}", node_name, k);
    const bool differentiable = core::is_floating(out_dtypes[k]) && !stops;
    values_.push_back(Value{std::move(out[k]), out_dtypes[k], node, static_cast<int>(k), name, differentiable});
    nodes_.back().outputs.push_back(static_cast<int>(values_.size()) - 1);
    result.emplace_back(this, nodes_.back().outputs.back());
  }
  return result;
}

void Graph::mark_output(SymTensor t, OutputUse use) {
  VISION_CHECK(t.graph() == this, "mark_output: tensor of another graph");
  VISION_CHECK(use.inference || use.train, "mark_output('{}'): an output must belong to inference or training plans",
               value(t.id()).name);
  for (auto& [id, u] : outputs_)
    VISION_CHECK(id != t.id(), "mark_output: '{}' is already an output", value(t.id()).name);
  outputs_.emplace_back(t.id(), use);
}

std::vector<int> Graph::outputs(Mode mode) const {
  std::vector<int> ids;
  for (auto& [id, use] : outputs_)
    if (mode == Mode::inference ? use.inference : use.train) ids.push_back(id);
  return ids;
}

std::vector<bool> Graph::needed_nodes(Mode mode) const {
  std::vector<bool> needed_value(values_.size(), false), needed(nodes_.size(), false);
  for (int o : outputs(mode)) needed_value[static_cast<size_t>(o)] = true;
  for (size_t i = nodes_.size(); i-- > 0;) {
    for (int o : nodes_[i].outputs) needed[i] = needed[i] || needed_value[static_cast<size_t>(o)];
    if (needed[i])
      for (int id : nodes_[i].inputs) needed_value[static_cast<size_t>(id)] = true;
  }
  return needed;
}

std::vector<int> Graph::inputs(Mode mode) const {
  const std::vector<bool> needed = needed_nodes(mode);
  std::vector<bool> used(values_.size(), false);
  for (int o : outputs(mode)) used[static_cast<size_t>(o)] = true;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (needed[i])
      for (int id : nodes_[i].inputs) used[static_cast<size_t>(id)] = true;
  std::vector<int> ids;
  for (int id : inputs_)
    if (used[static_cast<size_t>(id)]) ids.push_back(id);
  return ids;
}

Graph::Scope::Scope(Graph& g, const std::string& name) : g_(g) { g_.scopes_.push_back(name); }
Graph::Scope::~Scope() { g_.scopes_.pop_back(); }

}  // namespace vision::graph
