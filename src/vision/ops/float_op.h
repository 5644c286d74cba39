// FloatOp — the base of the built-in ops whose floating inputs share one dtype (f32, f16 or bf16), which their
// output takes. A graph records them in f32; a plan runs them in its compute dtype where the backend has it.
#pragma once

#include <vector>

#include "vision/graph/op.h"

namespace vision::ops {

class FloatOp : public graph::Op {
 public:
  core::DType infer_output_dtype(const std::vector<core::DType>& inputs) const override;
};

}  // namespace vision::ops
