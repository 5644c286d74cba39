// Scalar reductions of f32 tensors, for tests and demos: sum_squares(x) = ½·Σx² and mean(x) = Σx / numel.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "vision/graph/graph.h"
#include "vision/ops/float_op.h"

namespace vision::ops {

// An op of one input of any shape with a rank-0 (Shape{}) output.
class ScalarReductionOp : public FloatOp {
 public:
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
};

// y = ½·Σ x² (the ½ makes dy/dx = x). Accumulated in float64.
class SumSquaresOp final : public ScalarReductionOp {
 public:
  std::string name() const override { return "ops.sum_squares"; }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

// y = Σ x / numel(x). Accumulated in float64.
class MeanOp final : public ScalarReductionOp {
 public:
  std::string name() const override { return "ops.mean"; }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

graph::SymTensor sum_squares(graph::SymTensor x, const std::string& name = "");
graph::SymTensor mean(graph::SymTensor x, const std::string& name = "");

}  // namespace vision::ops
