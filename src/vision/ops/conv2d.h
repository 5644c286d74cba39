// conv2d — 2-D convolution of NCHW f32 activations (stride, padding, dilation, groups, optional bias), and
// its inference-time fusions: BatchNorm folded into the weights, SiLU as an epilogue.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vision/graph/graph.h"
#include "vision/ops/float_op.h"

namespace vision::ops {

struct Conv2dAttrs {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t kernel = 1;
  int64_t stride = 1;
  int64_t padding = -1;  // -1: "same" padding dilation·(kernel−1)/2, as ultralytics' autopad
  int64_t dilation = 1;
  int64_t groups = 1;  // in_channels for a depthwise convolution
  bool bias = false;
  // > 0: post-training int8 quantisation (vision export --int8): on the CPU, an NHWC inference forward quantises its
  // input to s8 with scale 127 / int8_absmax (the calibrated largest |input|, values beyond it saturate), runs
  // oneDNN's int8 convolution on s8 weights with a scale per output channel and writes f32. Everything else (CUDA,
  // NCHW, training) computes in floating point as if it were 0.
  float int8_absmax = 0.0f;

  int64_t pad() const { return padding >= 0 ? padding : dilation * (kernel - 1) / 2; }
  core::Shape weight_shape() const { return {out_channels, in_channels / groups, kernel, kernel}; }
  // Throws vision::Error for inconsistent attributes.
  void validate() const;
  // The output shape for input x (validated: rank 4, in_channels channels, output not empty).
  core::Shape output_shape(const core::Shape& x) const;
};

// The state of a convolution: "weight" [Cout, Cin/groups, k, k] (+ "bias" [Cout]), both trainable, and their
// default initialisation uniform(±1/sqrt(fan_in)) (PyTorch's kaiming-uniform with a = sqrt(5)).
std::vector<graph::ParamSpec> conv2d_state_specs(const Conv2dAttrs& a);
std::vector<std::byte> conv2d_state_init(const Conv2dAttrs& a, size_t i, uint64_t seed);

class Conv2dOp final : public FloatOp {
 public:
  explicit Conv2dOp(const Conv2dAttrs& a);
  const Conv2dAttrs& attrs() const { return attrs_; }
  std::string name() const override { return "ops.conv2d"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  // Inference: conv → batchnorm2d gives ops.conv2d_bn; conv → silu gives ops.conv2d_silu.
  std::shared_ptr<const graph::Op> fuse_with(const graph::Op& next, graph::Mode mode, const std::string& self_prefix,
                                             const std::string& next_prefix) const override;

 private:
  Conv2dAttrs attrs_;
};

// What a fused convolution folds in. Its state keeps the unfused ops' names under the given prefixes
// ("conv.weight", "bn.running_mean", ...), so a checkpoint of the unfused model loads unchanged.
struct ConvFusion {
  bool batchnorm = false;
  float bn_eps = 1e-3f;
  bool silu = false;
  std::string conv_prefix;  // with its trailing dot, e.g. "conv."
  std::string bn_prefix;    // e.g. "bn."
};

// Inference only: y = silu?(conv(x, W·γ/σ) + β + (b − μ)·γ/σ), σ = sqrt(running_var + eps). The folded weights
// are computed in the workspace on each call (cheap next to the convolution); SiLU is oneDNN's swish post-op.
class FusedConv2dOp final : public FloatOp {
 public:
  FusedConv2dOp(const Conv2dAttrs& a, ConvFusion f);
  const Conv2dAttrs& attrs() const { return attrs_; }
  const ConvFusion& fusion() const { return fusion_; }
  std::string name() const override;  // "ops.conv2d_bn", "ops.conv2d_bn_silu", "ops.conv2d_silu"
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  // conv_bn → silu gives ops.conv2d_bn_silu.
  std::shared_ptr<const graph::Op> fuse_with(const graph::Op& next, graph::Mode mode, const std::string& self_prefix,
                                             const std::string& next_prefix) const override;

 private:
  Conv2dAttrs attrs_;
  ConvFusion fusion_;
};

// Records conv2d(x) under `name`; x is [N, in_channels, H, W].
graph::SymTensor conv2d(graph::SymTensor x, const Conv2dAttrs& a, const std::string& name = "conv");

}  // namespace vision::ops
