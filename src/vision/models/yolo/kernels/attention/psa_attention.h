// FlashAttn2PsaOp — PSA's attention over the packed rows: FlashAttention-2 with QK head size KEY_DIM and V
// 2·KEY_DIM wide, in either form of PsaConfig:
//   two_pass: Q, K, V_lo, V_hi [B·heads, N, KEY_DIM] → O_lo, O_hi: FlashAttention-2 twice at HEAD_DIM = KEY_DIM (the
//             seed's form); backward adds dQ and dK over both halves.
//   one_pass: Q, K [B·heads, N, KEY_DIM], V [B·heads, N, 2·KEY_DIM] → O: once with HEAD_DIM_V = 2·KEY_DIM (QKᵀ and the
//             softmax once).
// Softmax scale KEY_DIM^-0.5 (YOLO26.md, Attention). A thin wrapper: lower() hands a RuntimeOp built on the
// FlashAttention-2 op's own RuntimeOp (CPU twin or CUDA kernels) through.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "vision/graph/graph.h"
#include "vision/models/yolo/kernels/attention/psa.h"

namespace vision::models::yolo::kernels::attention {

// The form PSA blocks use unless told otherwise: the faster at YOLO26's PSA shapes (bench/attention/NOTES.md).
PsaForm default_psa_form();

class FlashAttn2PsaOp final : public graph::Op {
 public:
  explicit FlashAttn2PsaOp(PsaConfig config);
  std::string name() const override { return "yolo.flash_attention2_psa"; }
  size_t n_outputs() const override { return static_cast<size_t>(config_.v_parts()); }
  std::vector<core::Shape> infer_output_shapes(const std::vector<core::Shape>& inputs) const override;
  std::vector<core::DType> infer_output_dtypes(const std::vector<core::DType>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  const PsaConfig& config() const { return config_; }
  float scale() const;

 private:
  PsaConfig config_;
};

// "yolo.psa_attention": qkv [B, 4·KEY_DIM·heads, H, W] → the merged attention image [B, 2·KEY_DIM·heads, H, W] in
// one step: PsaPackQkv → FlashAttn2Psa → PsaMergeAttn of config's form, the rows in between kept in the step's
// workspace (inference) or saved for backward (training). Where the backend has it (PsaCopies::
// has_direct_attention: CUDA on sm_90a in f16/bf16 NHWC, one_pass) inference reads Q, K and V straight from qkv
// and writes the image from inside the attention kernel: no rows, no pack or merge launches. Forward and backward
// equal the three ops' (the separate ops stay for inspection and as the reference).
// The image size is qkv's, so one graph serves every input size.
class PsaAttentionOp final : public graph::Op {
 public:
  explicit PsaAttentionOp(PsaConfig config);
  std::string name() const override { return "yolo.psa_attention"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  const PsaConfig& config() const { return config_; }

 private:
  PsaConfig config_;
};

// Records PsaAttentionOp on qkv.
graph::SymTensor psa_attention(graph::SymTensor qkv, const PsaConfig& config, const std::string& name = "attention");

// Records the attention of pack's outputs (Q, K, V_lo, V_hi or Q, K, V); returns O_lo, O_hi or O.
std::vector<graph::SymTensor> flash_attention2_psa(const std::vector<graph::SymTensor>& packed, const PsaConfig& config,
                                                   const std::string& name = "attention");

}  // namespace vision::models::yolo::kernels::attention
