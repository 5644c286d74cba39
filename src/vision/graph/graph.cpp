#include "vision/graph/graph.h"

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

SymTensor Graph::input(const std::string& name, Shape shape, DType dtype) {
  VISION_CHECK(nodes_.empty(), "graph input '{}' declared after ops were recorded: declare inputs first", name);
  values_.push_back(Value{std::move(shape), dtype, -1, name});
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

SymTensor Graph::apply(std::shared_ptr<const Op> op, const std::vector<SymTensor>& inputs,
                       const std::string& local_name) {
  VISION_CHECK(op != nullptr, "Graph::apply: null op");
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
  Shape out;
  try {
    out = op->infer_output_shape(shapes);
  } catch (const Error& e) {
    fail("op '{}' ({}): {}", node_name, op->name(), e.what());
  }
  const DType dt = op->infer_output_dtype(dtypes);
  nodes_.push_back(Node{std::move(op), std::move(ids), -1, node_name});
  values_.push_back(Value{std::move(out), dt, static_cast<int>(nodes_.size()) - 1, node_name});
  nodes_.back().output = static_cast<int>(values_.size()) - 1;
  return SymTensor(this, nodes_.back().output);
}

void Graph::mark_output(SymTensor t) {
  VISION_CHECK(t.graph() == this, "mark_output: tensor of another graph");
  outputs_.push_back(t.id());
}

Graph::Scope::Scope(Graph& g, const std::string& name) : g_(g) { g_.scopes_.push_back(name); }
Graph::Scope::~Scope() { g_.scopes_.pop_back(); }

}  // namespace vision::graph
