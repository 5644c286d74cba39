// PSA data movement — the copies between YOLO26's qkv convolution output and FlashAttention-2's head-major rows:
// pack (qkv → Q, K, V rows), extract (qkv → the V channels as an image) and merge (attention rows → an image), each
// a graph op with a CPU twin here and CUDA kernels in psa.cuh (psa_cuda.h).
//
// Layouts (every tensor contiguous; f32 on the CPU, f32/f16/bf16 on CUDA; qkv and image NCHW or NHWC, the plan's):
//   qkv    [B, 4·KEY_DIM·heads, H, W], N = H·W. Head h owns channels h·4·KEY_DIM + c, c in
//          [0, 4·KEY_DIM): Q (c < KEY_DIM) | K (KEY_DIM ≤ c < 2·KEY_DIM) | V (2·KEY_DIM ≤ c).
//   rows   [B·heads, N, w], row-major: element (b·heads + h, p, d).
//   image  [B, 2·KEY_DIM·heads, H, W]: channel h·2·KEY_DIM + d holds V dim d of head h (ultralytics' order).
// Each op is a pure copy: every output element comes from exactly one input element, so backward is the transpose
// (a scatter; channels no output reads get zero gradient).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "vision/graph/graph.h"

namespace vision::models::yolo::kernels::attention {

using core::Tensor;

// How attention runs over V (2·KEY_DIM wide): twice at head size KEY_DIM on V_lo and V_hi (two_pass), or once with a
// V of 2·KEY_DIM (one_pass).
enum class PsaForm : uint8_t { two_pass, one_pass };

// The configuration the three ops share. key_dim ≥ 1 and heads ≥ 1 (the CUDA kernels take key_dim a power of two
// up to 64).
struct PsaConfig {
  int64_t key_dim = 32;
  int64_t heads = 1;
  PsaForm form = PsaForm::two_pass;

  int64_t qkv_channels() const { return 4 * key_dim * heads; }
  int64_t v_channels() const { return 2 * key_dim * heads; }
  // The attention parts: 2 (V_lo, V_hi / O_lo, O_hi) in two_pass, 1 in one_pass; and the width of each.
  int64_t v_parts() const { return form == PsaForm::two_pass ? 2 : 1; }
  int64_t v_part_width() const { return form == PsaForm::two_pass ? key_dim : 2 * key_dim; }
};
// Throws vision::Error unless key_dim and heads are positive.
void check_psa_config(const PsaConfig& c, std::string_view what);

// One block of channels of a channel-major [B, channels, N] tensor seen as rows [B·heads, N, width]: row element
// (b·heads + h, p, d) is channel h·head_stride + offset + d of batch b. Pack's outputs are such blocks of qkv
// (head_stride 4·KEY_DIM), merge's inputs such blocks of the image (head_stride 2·KEY_DIM).
struct PsaRowsBlock {
  int64_t batch = 0, heads = 0, n = 0;
  int64_t channels = 0;     // of the channel-major tensor, per batch
  int64_t head_stride = 0;  // channels between heads
  int64_t offset = 0;       // first channel of the block within a head
  int64_t width = 0;        // channels of the block per head (row length)
  core::Layout layout = core::Layout::nchw;  // of the image tensor: NCHW [B, channels, N] or NHWC [B, N, channels]
  int64_t rows_numel() const { return batch * heads * n * width; }
};
// The blocks of pack's outputs (Q, K, V_lo, V_hi or Q, K, V) and of merge's inputs (O_lo, O_hi or O).
std::vector<PsaRowsBlock> psa_pack_blocks(const PsaConfig& c, int64_t batch, int64_t n,
                                          core::Layout layout = core::Layout::nchw);
std::vector<PsaRowsBlock> psa_merge_blocks(const PsaConfig& c, int64_t batch, int64_t n,
                                           core::Layout layout = core::Layout::nchw);

// CPU twin, f32 host tensors (qkv and image in their Tensor::layout()); outputs are overwritten.
// channel-major → rows (pack forward, merge backward) and rows → channel-major (pack backward, merge forward).
void psa_channels_to_rows_cpu(const Tensor& channels, const PsaRowsBlock& block, const Tensor& rows);
void psa_rows_to_channels_cpu(const Tensor& rows, const PsaRowsBlock& block, const Tensor& channels);
// image [B, 2·KEY_DIM·heads, H, W] = the V channels of qkv; backward: d_qkv = the image gradient in the V channels,
// zero in Q and K.
void psa_extract_v_cpu(const Tensor& qkv, int64_t key_dim, int64_t heads, const Tensor& image);
void psa_extract_v_backward_cpu(const Tensor& grad_image, int64_t key_dim, int64_t heads, const Tensor& grad_qkv);

// The three PSA data-movement ops, and their graph names ("yolo.psa_pack_qkv", …).
enum class PsaOpKind : uint8_t { pack_qkv, extract_v, merge_attn };
std::string psa_op_name(PsaOpKind kind);

// The copies a backend provides to the ops' RuntimeOps (the CPU twin above, or the CUDA kernels of psa_cuda.h), on
// tensors of that backend.
class PsaCopies {
 public:
  virtual ~PsaCopies() = default;
  virtual void channels_to_rows(graph::BackendContext& b, const Tensor& channels, const PsaRowsBlock& block,
                                const Tensor& rows) const = 0;
  virtual void rows_to_channels(graph::BackendContext& b, const Tensor& rows, const PsaRowsBlock& block,
                                const Tensor& channels) const = 0;
  virtual void extract_v(graph::BackendContext& b, const Tensor& qkv, const PsaConfig& c, const Tensor& image) const = 0;
  virtual void extract_v_backward(graph::BackendContext& b, const Tensor& grad_image, const PsaConfig& c,
                                  const Tensor& grad_qkv) const = 0;
  // The formats these copies take (the CPU twin: f32, either layout).
  virtual bool supports(const graph::Format& f) const { return f.dtype == core::DType::f32; }
  // Whether the backend runs PSA's one-pass attention straight from qkv to the merged image in format f (no rows in
  // between: PsaAttentionOp's inference path), and that attention: image = merge(attention(pack(qkv))) at softmax
  // scale `scale`. None by default.
  virtual bool has_direct_attention(const graph::Format& f, const PsaConfig& c) const {
    (void)f, (void)c;
    return false;
  }
  virtual void direct_attention(graph::BackendContext& b, const Tensor& qkv, const PsaConfig& c, float scale,
                                const Tensor& image) const;
  virtual std::vector<graph::KernelInfo> direct_attention_kernels(const PsaConfig& c, const graph::Format& f) const {
    (void)c, (void)f;
    return {};
  }
  // The GPU kernels these copies launch for one op in one format (empty on the CPU).
  virtual std::vector<graph::KernelInfo> kernels(PsaOpKind op, const PsaConfig& c, const graph::Format& f) const {
    (void)op, (void)c, (void)f;
    return {};
  }
};

// The copies of a backend (the CPU twin, or the CUDA kernels in a CUDA build).
std::shared_ptr<const PsaCopies> psa_copies(graph::Backend backend);

// The RuntimeOp of one of the ops on the given copies; twin (may be null) is the CPU RuntimeOp a CUDA RuntimeOp keeps.
// size_input: merge_attn's size-input form (one more input, whose values are never read).
std::unique_ptr<graph::RuntimeOp> make_psa_runtime(PsaOpKind op, PsaConfig config,
                                                   std::shared_ptr<const PsaCopies> copies,
                                                   std::unique_ptr<graph::RuntimeOp> twin = nullptr,
                                                   bool size_input = false);

// ---------------------------------------------------------------------------------------------------------------
// Graph ops (any floating dtype the backend has; qkv and image in the plan's layout). The batch may be symbolic.

// "yolo.psa_pack_qkv": qkv [B, 4·KEY_DIM·heads, H, W] → two_pass: Q, K, V_lo, V_hi [B·heads, N, KEY_DIM];
// one_pass: Q, K [B·heads, N, KEY_DIM] and V [B·heads, N, 2·KEY_DIM].
class PsaPackQkvOp final : public graph::Op {
 public:
  explicit PsaPackQkvOp(PsaConfig config);
  std::string name() const override { return psa_op_name(PsaOpKind::pack_qkv); }
  size_t n_outputs() const override { return config_.form == PsaForm::two_pass ? 4 : 3; }
  std::vector<core::Shape> infer_output_shapes(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  const PsaConfig& config() const { return config_; }

 private:
  PsaConfig config_;
};

// "yolo.psa_extract_v": qkv [B, 4·KEY_DIM·heads, H, W] → its V channels [B, 2·KEY_DIM·heads, H, W].
class PsaExtractVOp final : public graph::Op {
 public:
  explicit PsaExtractVOp(PsaConfig config);
  std::string name() const override { return psa_op_name(PsaOpKind::extract_v); }
  const PsaConfig& config() const { return config_; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;

 private:
  PsaConfig config_;
};

// "yolo.psa_merge_attn": two_pass O_lo, O_hi [B·heads, N, KEY_DIM] (or one_pass O [B·heads, N, 2·KEY_DIM]) →
// [B, 2·KEY_DIM·heads, H, W], head h dim d at channel h·2·KEY_DIM + d. N must equal H·W.
// H and W are fixed when the op is made, or (the size-input form) taken from one more input [B, any, H, W] of which
// only the shape is read: then one graph serves every feature-map size (a model's graph for any input size). That
// input gets a zero gradient; pass it detached (ops::detach) so that no gradient buffer is spent on it.
class PsaMergeAttnOp final : public graph::Op {
 public:
  PsaMergeAttnOp(PsaConfig config, int64_t height, int64_t width);
  explicit PsaMergeAttnOp(PsaConfig config);  // the size-input form
  std::string name() const override { return psa_op_name(PsaOpKind::merge_attn); }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  bool size_input() const { return height_ == 0; }

 private:
  PsaConfig config_;
  int64_t height_ = 0, width_ = 0;  // 0: from the size input
};

// Recording helpers. psa_pack_qkv returns the op's outputs in order (Q, K, V_lo, V_hi or Q, K, V).
std::vector<graph::SymTensor> psa_pack_qkv(graph::SymTensor qkv, const PsaConfig& config,
                                           const std::string& name = "pack_qkv");
graph::SymTensor psa_extract_v(graph::SymTensor qkv, const PsaConfig& config, const std::string& name = "extract_v");
graph::SymTensor psa_merge_attn(const std::vector<graph::SymTensor>& parts, const PsaConfig& config, int64_t height,
                                int64_t width, const std::string& name = "merge_attn");
// The size-input form: H and W are those of `like` [B, any, H, W] (only its shape is read).
graph::SymTensor psa_merge_attn(const std::vector<graph::SymTensor>& parts, const PsaConfig& config,
                                graph::SymTensor like, const std::string& name = "merge_attn");

}  // namespace vision::models::yolo::kernels::attention
