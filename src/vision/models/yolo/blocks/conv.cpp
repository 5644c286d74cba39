#include "vision/models/yolo/blocks/conv.h"

#include <numeric>

#include "vision/core/error.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"

namespace vision::models::yolo::blocks {

namespace {
ops::Conv2dAttrs conv_attrs(const graph::SymTensor& x, int64_t c2, int64_t k, int64_t s, int64_t g, bool bias) {
  VISION_CHECK(x.valid() && x.shape().rank() == 4, "a convolution needs a [B, C, H, W] input, got {}",
               x.valid() ? x.shape().str() : "nothing");
  ops::Conv2dAttrs a;
  a.in_channels = x.dim(1);
  a.out_channels = c2;
  a.kernel = k;
  a.stride = s;
  a.groups = g;
  a.bias = bias;
  return a;
}
}  // namespace

graph::SymTensor conv(graph::SymTensor x, const ConvArgs& a, ConvNorm norm, const std::string& name) {
  const ops::Conv2dAttrs attrs = conv_attrs(x, a.c2, a.k, a.s, a.g, norm == ConvNorm::folded);
  auto _ = x.graph()->scope(name);
  x = ops::conv2d(x, attrs, "conv");
  if (norm == ConvNorm::batchnorm) x = ops::batchnorm2d(x, kBatchNormEps, kBatchNormMomentum, "bn");
  return a.act ? ops::silu(x, "act") : x;
}

graph::SymTensor dwconv(graph::SymTensor x, int64_t c2, int64_t k, ConvNorm norm, const std::string& name) {
  return conv(x, {.c2 = c2, .k = k, .g = std::gcd(x.dim(1), c2)}, norm, name);
}

graph::SymTensor conv1x1_bias(graph::SymTensor x, int64_t c2, const std::string& name) {
  return ops::conv2d(x, conv_attrs(x, c2, 1, 1, 1, true), name);
}

}  // namespace vision::models::yolo::blocks
