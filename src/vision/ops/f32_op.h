// in_f32 — an op that computes in f32 whatever the plan's compute dtype: a loss's inputs and intermediate values (boxes
// decoded from the head's distances, compared in CIoU) keep f32 precision in an f16 or bf16 plan.
#pragma once

#include <memory>

#include "vision/graph/op.h"

namespace vision::ops {

// The same op (name, shapes, state, kernels, backward) restricted to f32 NCHW: a plan runs it in f32, converting its
// floating inputs to f32 where they are not (and rank-4 ones to NCHW). The op must support f32 NCHW, as every CPU
// RuntimeOp does. Not fused at inference.
std::shared_ptr<const graph::Op> in_f32(std::shared_ptr<const graph::Op> op);

}  // namespace vision::ops
