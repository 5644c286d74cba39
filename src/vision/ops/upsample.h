// upsample_nearest — nearest-neighbour upsampling of NCHW f32 activations by an integer factor (×2 in YOLO26).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vision/graph/graph.h"
#include "vision/ops/float_op.h"

namespace vision::ops {

// y[n, c, i, j] = x[n, c, i / scale, j / scale]
class UpsampleNearestOp final : public FloatOp {
 public:
  explicit UpsampleNearestOp(int64_t scale);
  int64_t scale() const { return scale_; }
  std::string name() const override { return "ops.upsample_nearest"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;

 private:
  int64_t scale_;
};

graph::SymTensor upsample_nearest(graph::SymTensor x, int64_t scale = 2, const std::string& name = "");

}  // namespace vision::ops
