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
//
// BatchNorm → SiLU in a training plan: fuse_with(SiluOp) gives "ops.batchnorm2d_silu", which outputs silu(y) and
// takes its gradient in one op: on CUDA one pass over the activations after the statistics' forward, and a backward
// that recomputes y from x instead of storing it (batchnorm.cuh). Its state keeps the BatchNorm's names below
// `state_prefix` ("bn." after the fusion of "m.bn" and "m.act"). Training plans only: an inference plan folds
// BatchNorm into the convolution instead.
class BatchNorm2dOp final : public FloatOp {
 public:
  BatchNorm2dOp(float eps, float momentum, bool silu = false, std::string state_prefix = {});
  float eps() const { return eps_; }
  float momentum() const { return momentum_; }
  bool silu() const { return silu_; }
  std::string name() const override { return silu_ ? "ops.batchnorm2d_silu" : "ops.batchnorm2d"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  std::shared_ptr<const graph::Op> fuse_with(const graph::Op& next, graph::Mode mode, const std::string& self_prefix,
                                             const std::string& next_prefix) const override;

 private:
  float eps_, momentum_;
  bool silu_;
  std::string prefix_;
};

graph::SymTensor batchnorm2d(graph::SymTensor x, float eps = 1e-3f, float momentum = 0.03f,
                             const std::string& name = "bn");

}  // namespace vision::ops
