#include "vision/models/yolo/blocks/attention.h"

#include "vision/core/error.h"
#include "vision/models/yolo/kernels/attention/psa_attention.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"

namespace vision::models::yolo::blocks {

using kernels::attention::PsaConfig;

PsaConfig AttentionConfig::psa() const {
  VISION_CHECK(dim > 0 && heads > 0 && dim % (2 * heads) == 0,
               "attention: dim {} must be a positive multiple of 2·heads = {}", dim, 2 * heads);
  return PsaConfig{dim / heads / 2, heads, form};
}

namespace {
// Conv2d (no bias) → BatchNorm, no activation (ultralytics' Conv with act=False), under scope `name`.
graph::SymTensor conv_bn(graph::SymTensor x, int64_t c2, int64_t k, int64_t groups, const std::string& name) {
  auto _ = x.graph()->scope(name);
  ops::Conv2dAttrs a;
  a.in_channels = x.dim(1);
  a.out_channels = c2;
  a.kernel = k;
  a.groups = groups;
  x = ops::conv2d(x, a, "conv");
  return ops::batchnorm2d(x, 1e-3f, 0.03f, "bn");
}
}  // namespace

graph::SymTensor attention(graph::SymTensor x, const AttentionConfig& config, const std::string& name) {
  VISION_CHECK(x.valid() && x.shape().rank() == 4 && x.dim(1) == config.dim,
               "attention: x must be [B, {}, H, W], got {}", config.dim, x.valid() ? x.shape().str() : "nothing");
  const int64_t h = x.dim(2), w = x.dim(3);
  VISION_CHECK(h != core::Shape::kAny && w != core::Shape::kAny,
               "attention: the feature map size must be known when the graph is recorded, got {}", x.shape().str());
  const PsaConfig psa = config.psa();
  auto _ = x.graph()->scope(name);
  auto qkv = conv_bn(x, psa.qkv_channels(), 1, 1, "qkv");
  graph::SymTensor merged;
  if (config.fused) {
    merged = kernels::attention::psa_attention(qkv, psa, h, w, "attention");
  } else {
    auto packed = kernels::attention::psa_pack_qkv(qkv, psa, "pack");
    auto attn = kernels::attention::flash_attention2_psa(packed, psa, "attention");
    merged = kernels::attention::psa_merge_attn(attn, psa, h, w, "merge");
  }
  auto v = kernels::attention::psa_extract_v(qkv, psa, "extract_v");
  auto pe = conv_bn(v, config.dim, 3, config.dim, "pe");
  auto sum = ops::add(merged, pe, "add");
  return conv_bn(sum, config.dim, 1, 1, "proj");
}

}  // namespace vision::models::yolo::blocks
