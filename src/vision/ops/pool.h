// maxpool2d — 2-D max pooling of NCHW f32 activations (PyTorch semantics: padding is −inf, floor output size).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vision/graph/graph.h"
#include "vision/ops/float_op.h"

namespace vision::ops {

// In training the op saves the argmax of each window (an i32 index into its input plane) for backward;
// ties go to the first maximum in row-major window order.
class MaxPool2dOp final : public FloatOp {
 public:
  MaxPool2dOp(int64_t kernel, int64_t stride, int64_t padding);
  int64_t kernel() const { return kernel_; }
  int64_t stride() const { return stride_; }
  int64_t padding() const { return padding_; }
  std::string name() const override { return "ops.maxpool2d"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;

 private:
  int64_t kernel_, stride_, padding_;
};

// stride < 0 means stride = kernel (PyTorch's default).
graph::SymTensor maxpool2d(graph::SymTensor x, int64_t kernel, int64_t stride = -1, int64_t padding = 0,
                           const std::string& name = "");

}  // namespace vision::ops
