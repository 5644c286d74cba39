// F32Op — the base of the built-in ops whose inputs and output are f32 tensors: it rejects other dtypes when
// the graph is recorded.
#pragma once

#include <vector>

#include "vision/graph/op.h"

namespace vision::ops {

class F32Op : public graph::Op {
 public:
  core::DType infer_output_dtype(const std::vector<core::DType>& inputs) const override;
};

}  // namespace vision::ops
