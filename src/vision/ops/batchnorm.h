// batchnorm2d — BatchNorm2d of NCHW f32 activations: batch statistics and running-stat update in training,
// running statistics in inference (PyTorch semantics).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vision/graph/graph.h"
#include "vision/ops/float_op.h"

namespace vision::ops {

// The state of a BatchNorm2d over `channels` channels, in ultralytics state_dict order: "weight" (γ, init 1) and
// "bias" (β, init 0) are trainable; "running_mean" (0), "running_var" (1) and "num_batches_tracked" (i64
// scalar, 0) are buffers.
std::vector<graph::ParamSpec> batchnorm2d_state_specs(int64_t channels);
std::vector<std::byte> batchnorm2d_state_init(size_t i, int64_t channels);

// Training (ForwardCtx::training): y = γ·(x − μ_B)/sqrt(σ²_B + eps) + β with the batch's mean and biased
// variance; running_mean = (1 − momentum)·running_mean + momentum·μ_B, running_var likewise with the unbiased
// batch variance, num_batches_tracked += 1. Inference: the running statistics stand in for the batch's.
class BatchNorm2dOp final : public FloatOp {
 public:
  BatchNorm2dOp(float eps, float momentum);
  float eps() const { return eps_; }
  float momentum() const { return momentum_; }
  std::string name() const override { return "ops.batchnorm2d"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;

 private:
  float eps_, momentum_;
};

graph::SymTensor batchnorm2d(graph::SymTensor x, float eps = 1e-3f, float momentum = 0.03f,
                             const std::string& name = "bn");

}  // namespace vision::ops
