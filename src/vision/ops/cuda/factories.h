// The CUDA RuntimeOps of the built-in ops: each op's lower() returns one of these for Backend::cuda.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "vision/graph/op.h"
#include "vision/ops/conv2d.h"

namespace vision::ops::cuda_impl {

// Each takes the op's CPU RuntimeOp (its twin), whose state specs and initial data it shares, so a model's state
// is the same whichever backend runs it.
using Twin = std::unique_ptr<graph::RuntimeOp>;

std::unique_ptr<graph::RuntimeOp> make_conv2d(Twin twin, const Conv2dAttrs& attrs);
std::unique_ptr<graph::RuntimeOp> make_fused_conv2d(Twin twin, const Conv2dAttrs& attrs, const ConvFusion& fusion);
std::unique_ptr<graph::RuntimeOp> make_batchnorm2d(Twin twin, float eps, float momentum, graph::Mode mode,
                                                   bool silu);
std::unique_ptr<graph::RuntimeOp> make_silu(Twin twin);
std::unique_ptr<graph::RuntimeOp> make_sigmoid(Twin twin);
std::unique_ptr<graph::RuntimeOp> make_add(Twin twin);
std::unique_ptr<graph::RuntimeOp> make_mul(Twin twin);
std::unique_ptr<graph::RuntimeOp> make_maxpool2d(Twin twin, int64_t kernel, int64_t stride, int64_t padding,
                                                 graph::Mode mode);
std::unique_ptr<graph::RuntimeOp> make_upsample_nearest(Twin twin, int64_t scale);
std::unique_ptr<graph::RuntimeOp> make_permute(Twin twin, const std::vector<int64_t>& perm);
std::unique_ptr<graph::RuntimeOp> make_sum_squares(Twin twin);
std::unique_ptr<graph::RuntimeOp> make_mean(Twin twin);

}  // namespace vision::ops::cuda_impl
