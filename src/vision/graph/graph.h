// Graph and SymTensor — recording operations on symbolic tensors, with dotted name scopes.
#pragma once

#include <memory>
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
  std::string name;
};

struct Node {
  std::shared_ptr<const Op> op;
  std::vector<int> inputs;  // value ids
  int output = -1;          // value id
  std::string name;         // dotted, e.g. "model.0.conv"; prefix of its state's checkpoint keys
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // A graph input; symbolic dims (Shape::kAny) are bound when a plan is built.
  SymTensor input(const std::string& name, Shape shape, DType dtype = DType::f32);
  // Records op applied to inputs; the node is named "<scope>.<local_name>" (local_name may be empty).
  SymTensor apply(std::shared_ptr<const Op> op, const std::vector<SymTensor>& inputs, const std::string& local_name);
  void mark_output(SymTensor t);

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
  const std::vector<int>& outputs() const { return outputs_; }
  const Value& value(int id) const { return values_.at(static_cast<size_t>(id)); }

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
  std::vector<std::string> scopes_;
};

}  // namespace vision::graph
