#include "vision/models/yolo/blocks/attention.h"

#include "vision/core/error.h"
#include "vision/models/yolo/kernels/attention/psa_attention.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/shape_ops.h"

namespace vision::models::yolo::blocks {

using kernels::attention::PsaConfig;

PsaConfig AttentionConfig::psa() const {
  VISION_CHECK(dim > 0 && heads > 0 && dim % (2 * heads) == 0,
               "attention: dim {} must be a positive multiple of 2·heads = {}", dim, 2 * heads);
  return PsaConfig{dim / heads / 2, heads, form};
}

graph::SymTensor attention(graph::SymTensor x, const AttentionConfig& config, const std::string& name) {
  VISION_CHECK(x.valid() && x.shape().rank() == 4 && x.dim(1) == config.dim,
               "attention: x must be [B, {}, H, W], got {}", config.dim, x.valid() ? x.shape().str() : "nothing");
  const PsaConfig psa = config.psa();
  const ConvNorm norm = config.norm;
  auto _ = x.graph()->scope(name);
  auto qkv = conv(x, {.c2 = psa.qkv_channels(), .act = false}, norm, "qkv");
  graph::SymTensor merged;
  if (config.fused) {  // the image size comes from qkv's shape
    merged = kernels::attention::psa_attention(qkv, psa, "attention");
  } else {
    auto packed = kernels::attention::psa_pack_qkv(qkv, psa, "pack");
    auto attn = kernels::attention::flash_attention2_psa(packed, psa, "attention");
    // The feature-map size comes from x's shape (detached: only its shape is read), so the graph fits any input size.
    merged = kernels::attention::psa_merge_attn(attn, psa, ops::detach(x, "size"), "merge");
  }
  auto v = kernels::attention::psa_extract_v(qkv, psa, "extract_v");
  auto pe = conv(v, {.c2 = config.dim, .k = 3, .g = config.dim, .act = false}, norm, "pe");
  auto sum = ops::add(merged, pe, "add");
  return conv(sum, {.c2 = config.dim, .act = false}, norm, "proj");
}

}  // namespace vision::models::yolo::blocks
