// YOLO26's Attention (the PSABlock's attn, YOLO26.md): qkv = Conv(dim, 2·dim, 1, act=False) → PsaPackQkv →
// FlashAttention-2 (FlashAttn2PsaOp) → PsaMergeAttn (one PsaAttentionOp step unless config.fused is false), plus pe = Conv(dim, dim, 3, g=dim, act=False) of the V channels
// (PsaExtractV), added, then proj = Conv(dim, dim, 1, act=False). heads = dim / 64 in YOLO26; key_dim =
// dim / heads / 2. State keys as ultralytics': "<name>.qkv.conv.weight", "<name>.qkv.bn.running_mean",
// "<name>.pe.conv.weight", "<name>.proj.bn.bias", … (with ConvNorm::folded: "<name>.qkv.conv.bias", no "bn"). The
// feature-map size is read from x's shape when a plan is built: one graph serves every size.
#pragma once

#include <string>

#include "vision/graph/graph.h"
#include "vision/models/yolo/blocks/conv.h"
#include "vision/models/yolo/kernels/attention/psa.h"

namespace vision::models::yolo::blocks {

struct AttentionConfig {
  int64_t dim = 128;
  int64_t heads = 2;
  kernels::attention::PsaForm form = kernels::attention::PsaForm::one_pass;
  ConvNorm norm = ConvNorm::batchnorm;
  // pack → attention → merge as one step (PsaAttentionOp: on CUDA f16/bf16 NHWC inference the attention kernel
  // reads qkv and writes the merged image itself), or as the three ops (for inspection; the same numbers).
  bool fused = true;
  kernels::attention::PsaConfig psa() const;  // key_dim = dim / heads / 2
};

// x [B, dim, H, W] → [B, dim, H, W] (H and W may be symbolic).
graph::SymTensor attention(graph::SymTensor x, const AttentionConfig& config, const std::string& name = "attn");

}  // namespace vision::models::yolo::blocks
