// Elementwise ops on f32 tensors of any shape: silu, sigmoid, and add / mul of two tensors of one shape.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "vision/graph/graph.h"
#include "vision/ops/float_op.h"

namespace vision::ops {

// An op of one input whose output has the input's shape.
class UnaryElementwiseOp : public FloatOp {
 public:
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
};

// An op of two inputs of one shape, with an output of that shape.
class BinaryElementwiseOp : public FloatOp {
 public:
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
};

// The CPU ops' SiLU of one f32 value and its derivative (what SiluOp computes per element; the fused
// BatchNorm → SiLU twin uses them too).
float silu_value(float x);
float silu_derivative(float x);

// y = x·sigmoid(x)
class SiluOp final : public UnaryElementwiseOp {
 public:
  std::string name() const override { return "ops.silu"; }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

// y = 1 / (1 + exp(−x))
class SigmoidOp final : public UnaryElementwiseOp {
 public:
  std::string name() const override { return "ops.sigmoid"; }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

// y = a + b
class AddOp final : public BinaryElementwiseOp {
 public:
  std::string name() const override { return "ops.add"; }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

// y = a·b
class MulOp final : public BinaryElementwiseOp {
 public:
  std::string name() const override { return "ops.mul"; }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

graph::SymTensor silu(graph::SymTensor x, const std::string& name = "");
graph::SymTensor sigmoid(graph::SymTensor x, const std::string& name = "");
graph::SymTensor add(graph::SymTensor a, graph::SymTensor b, const std::string& name = "");
graph::SymTensor mul(graph::SymTensor a, graph::SymTensor b, const std::string& name = "");

}  // namespace vision::ops
