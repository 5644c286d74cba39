#include "vision/models/yolo/kernels/attention/psa.h"

#include <algorithm>
#include <utility>

#include "vision/core/error.h"
#include "vision/cpu/parallel.h"
#include "vision/graph/backend.h"
#include "vision/ops/op_support.h"

#ifdef VISION_HAS_CUDA
#include "vision/models/yolo/kernels/attention/psa_cuda.h"
#endif

namespace vision::models::yolo::kernels::attention {

using core::DType;
using core::Shape;

void check_psa_config(const PsaConfig& c, std::string_view what) {
  VISION_CHECK(c.key_dim > 0 && c.heads > 0, "{}: key_dim and heads must be positive, got key_dim {} and heads {}", what,
               c.key_dim, c.heads);
}

std::vector<PsaRowsBlock> psa_pack_blocks(const PsaConfig& c, int64_t batch, int64_t n, core::Layout layout) {
  const PsaRowsBlock base{batch, c.heads, n, c.qkv_channels(), 4 * c.key_dim, 0, c.key_dim, layout};
  std::vector<PsaRowsBlock> blocks{base, base};
  blocks[1].offset = c.key_dim;  // K
  for (int64_t part = 0; part < c.v_parts(); ++part) {
    PsaRowsBlock v = base;
    v.offset = 2 * c.key_dim + part * c.v_part_width();
    v.width = c.v_part_width();
    blocks.push_back(v);
  }
  return blocks;
}

std::vector<PsaRowsBlock> psa_merge_blocks(const PsaConfig& c, int64_t batch, int64_t n, core::Layout layout) {
  std::vector<PsaRowsBlock> blocks;
  for (int64_t part = 0; part < c.v_parts(); ++part)
    blocks.push_back(
        {batch, c.heads, n, c.v_channels(), 2 * c.key_dim, part * c.v_part_width(), c.v_part_width(), layout});
  return blocks;
}

namespace {

// The copies run row by row: a row of a block (b·heads + h, p) is `width` channels of one pixel — contiguous in NHWC,
// a stride of N apart in NCHW —, and extract_v's V channels of one head are 2·KEY_DIM consecutive qkv channels. So each
// parallel task is one row, pixel or channel plane, with its offsets computed once (no division per element).

// Calls f(row r, pointer to the row's first channel element, the stride between its channels) for every row of k in
// the image `base` (a float* or const float*).
template <typename P, typename F>
void for_block_rows(const PsaRowsBlock& k, P base, F f) {
  cpu::parallel_for(
      k.batch * k.heads * k.n,
      [&](int64_t r) {
        const int64_t p = r % k.n, bh = r / k.n, b = bh / k.heads, h = bh % k.heads;
        const int64_t c0 = h * k.head_stride + k.offset;
        if (k.layout == core::Layout::nhwc)
          f(r, base + (b * k.n + p) * k.channels + c0, int64_t{1});
        else
          f(r, base + (b * k.channels + c0) * k.n + p, k.n);
      },
      k.rows_numel());
}

// Calls f(qkv offset, image offset, length, qk) for every contiguous run of V values: in NHWC one pixel's 2·KEY_DIM V
// channels of one head, in NCHW one V channel's plane of N pixels (qkv channel h·4·KEY_DIM + 2·KEY_DIM + d is image
// channel h·2·KEY_DIM + d). qk: the values of the head's Q and K right before the run (2·KEY_DIM channels, or their
// planes) for the run that starts the head's V — once per head and pixel, or per head in NCHW —, 0 for the others.
template <typename F>
void for_v_runs(int64_t key_dim, int64_t heads, int64_t batch, int64_t n, core::Layout layout, F f) {
  const int64_t qc = 4 * key_dim * heads, ic = 2 * key_dim * heads;
  if (layout == core::Layout::nhwc) {
    cpu::parallel_for(
        batch * n,
        [&](int64_t px) {
          for (int64_t h = 0; h < heads; ++h)
            f(px * qc + h * 4 * key_dim + 2 * key_dim, px * ic + h * 2 * key_dim, 2 * key_dim, 2 * key_dim);
        },
        batch * n * ic);
  } else {
    cpu::parallel_for(
        batch * ic,
        [&](int64_t plane) {
          const int64_t b = plane / ic, ch = plane % ic, h = ch / (2 * key_dim), d = ch % (2 * key_dim);
          f((b * qc + h * 4 * key_dim + 2 * key_dim + d) * n, plane * n, n, d == 0 ? 2 * key_dim * n : 0);
        },
        batch * n * ic);
  }
}

void check_f32(const Tensor& t, int64_t numel, std::string_view what) {
  VISION_CHECK(t.defined() && t.dtype() == DType::f32 && t.numel() == numel,
               "psa (CPU): {} must be an f32 tensor of {} elements, got {}", what, numel,
               t.defined() ? t.str() : std::string("an undefined tensor"));
}

}  // namespace

void psa_channels_to_rows_cpu(const Tensor& channels, const PsaRowsBlock& block, const Tensor& rows) {
  check_f32(channels, block.batch * block.channels * block.n, "the channel-major tensor");
  check_f32(rows, block.rows_numel(), "the rows");
  float* dst = rows.data<float>();
  const int64_t w = block.width;
  for_block_rows(block, static_cast<const float*>(channels.data<float>()), [&](int64_t r, const float* in, int64_t stride) {
    float* out = dst + r * w;
    for (int64_t d = 0; d < w; ++d) out[d] = in[d * stride];
  });
}

void psa_rows_to_channels_cpu(const Tensor& rows, const PsaRowsBlock& block, const Tensor& channels) {
  check_f32(channels, block.batch * block.channels * block.n, "the channel-major tensor");
  check_f32(rows, block.rows_numel(), "the rows");
  const float* src = rows.data<float>();
  const int64_t w = block.width;
  for_block_rows(block, channels.data<float>(), [&](int64_t r, float* out, int64_t stride) {
    const float* in = src + r * w;
    for (int64_t d = 0; d < w; ++d) out[d * stride] = in[d];
  });
}

void psa_extract_v_cpu(const Tensor& qkv, int64_t key_dim, int64_t heads, const Tensor& image) {
  check_f32(image, qkv.numel() / 2, "the V image");
  check_f32(qkv, image.numel() * 2, "qkv");
  const int64_t n = qkv.dim(2) * qkv.dim(3);
  const float* src = qkv.data<float>();
  float* dst = image.data<float>();
  VISION_CHECK(qkv.layout() == image.layout(), "psa_extract_v: qkv is {}, the image {}", qkv.str(), image.str());
  for_v_runs(key_dim, heads, qkv.dim(0), n, qkv.layout(), [&](int64_t q, int64_t v, int64_t len, int64_t) {
    std::copy(src + q, src + q + len, dst + v);
  });
}

void psa_extract_v_backward_cpu(const Tensor& grad_image, int64_t key_dim, int64_t heads, const Tensor& grad_qkv) {
  check_f32(grad_image, grad_qkv.numel() / 2, "the V image gradient");
  check_f32(grad_qkv, grad_image.numel() * 2, "the qkv gradient");
  const int64_t n = grad_qkv.dim(2) * grad_qkv.dim(3);
  const float* src = grad_image.data<float>();
  float* dst = grad_qkv.data<float>();
  VISION_CHECK(grad_qkv.layout() == grad_image.layout(), "psa_extract_v backward: d_qkv is {}, the image gradient {}",
               grad_qkv.str(), grad_image.str());
  // Each run of V channels follows its head's Q and K (2·KEY_DIM channels, which get no gradient): zero those and
  // copy the V run, so every d_qkv element is written once.
  for_v_runs(key_dim, heads, grad_qkv.dim(0), n, grad_qkv.layout(), [&](int64_t q, int64_t v, int64_t len, int64_t qk) {
    std::fill(dst + q - qk, dst + q, 0.0f);
    std::copy(src + v, src + v + len, dst + q);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// RuntimeOps

namespace {

class CpuCopies final : public PsaCopies {
 public:
  void channels_to_rows(graph::BackendContext&, const Tensor& channels, const PsaRowsBlock& block,
                        const Tensor& rows) const override {
    psa_channels_to_rows_cpu(channels, block, rows);
  }
  void rows_to_channels(graph::BackendContext&, const Tensor& rows, const PsaRowsBlock& block,
                        const Tensor& channels) const override {
    psa_rows_to_channels_cpu(rows, block, channels);
  }
  void extract_v(graph::BackendContext&, const Tensor& qkv, const PsaConfig& c, const Tensor& image) const override {
    psa_extract_v_cpu(qkv, c.key_dim, c.heads, image);
  }
  void extract_v_backward(graph::BackendContext&, const Tensor& grad_image, const PsaConfig& c,
                          const Tensor& grad_qkv) const override {
    psa_extract_v_backward_cpu(grad_image, c.key_dim, c.heads, grad_qkv);
  }
};

// The three ops' forward and backward, once, on any backend's copies.
class PsaRuntime final : public graph::RuntimeOp {
 public:
  PsaRuntime(PsaOpKind op, PsaConfig config, std::shared_ptr<const PsaCopies> copies,
             std::unique_ptr<graph::RuntimeOp> twin, bool size_input)
      : op_(op), config_(config), copies_(std::move(copies)), twin_(std::move(twin)), size_input_(size_input) {
    VISION_CHECK(copies_ != nullptr, "make_psa_runtime: no copies for {}", psa_op_name(op_));
  }
  std::string name() const override { return psa_op_name(op_); }
  int n_activation_inputs() const override {
    return op_ == PsaOpKind::merge_attn ? static_cast<int>(config_.v_parts() + size_input_) : 1;
  }
  bool reads_input(size_t input) const override {
    return !(size_input_ && input == static_cast<size_t>(config_.v_parts()));
  }
  bool has_backward() const override { return true; }
  bool supports(const graph::Format& f) const override { return copies_->supports(f); }
  std::vector<graph::KernelInfo> kernels() const override { return copies_->kernels(op_, config_, format()); }

  void forward(graph::ForwardCtx& ctx) override {
    graph::BackendContext& b = *ctx.backend;
    if (op_ == PsaOpKind::extract_v) return copies_->extract_v(b, ctx.inputs.at(0), config_, ctx.outputs.at(0));
    if (op_ == PsaOpKind::pack_qkv) {
      const Tensor& qkv = ctx.inputs.at(0);
      const auto blocks = psa_pack_blocks(config_, qkv.dim(0), qkv.dim(2) * qkv.dim(3), qkv.layout());
      VISION_CHECK(ctx.outputs.size() == blocks.size(), "psa_pack_qkv: {} outputs given, {} expected",
                   ctx.outputs.size(), blocks.size());
      for (size_t k = 0; k < blocks.size(); ++k) copies_->channels_to_rows(b, qkv, blocks[k], ctx.outputs[k]);
      return;
    }
    const Tensor& image = ctx.outputs.at(0);
    const auto blocks = psa_merge_blocks(config_, image.dim(0), image.dim(2) * image.dim(3), image.layout());
    for (size_t k = 0; k < blocks.size(); ++k) copies_->rows_to_channels(b, ctx.inputs.at(k), blocks[k], image);
  }

  void backward(graph::BackwardCtx& ctx) override {
    graph::BackendContext& b = *ctx.backend;
    if (op_ == PsaOpKind::merge_attn) {
      const Tensor& grad_image = ctx.grad_outputs.at(0);
      const auto blocks =
          psa_merge_blocks(config_, grad_image.dim(0), grad_image.dim(2) * grad_image.dim(3), grad_image.layout());
      for (size_t k = 0; k < blocks.size(); ++k)
        if (ctx.grad_inputs.at(k).defined())
          copies_->channels_to_rows(b, grad_image, blocks[k], ctx.grad_inputs[k]);
      if (size_input_ && ctx.grad_inputs.back().defined())  // only its shape was read
        b.fill_zero(ctx.grad_inputs.back().raw(), ctx.grad_inputs.back().nbytes());
      return;
    }
    const Tensor& grad_qkv = ctx.grad_inputs.at(0);
    if (!grad_qkv.defined()) return;
    if (op_ == PsaOpKind::extract_v) return copies_->extract_v_backward(b, ctx.grad_outputs.at(0), config_, grad_qkv);
    // The blocks cover every qkv channel, so d_qkv is written whole.
    const auto blocks = psa_pack_blocks(config_, grad_qkv.dim(0), grad_qkv.dim(2) * grad_qkv.dim(3), grad_qkv.layout());
    for (size_t k = 0; k < blocks.size(); ++k) {
      VISION_CHECK(k < ctx.grad_outputs.size() && ctx.grad_outputs[k].defined(),
                   "psa_pack_qkv backward: output {} has no gradient (the executor passes zeros for unused ones)", k);
      copies_->rows_to_channels(b, ctx.grad_outputs[k], blocks[k], grad_qkv);
    }
  }

 private:
  PsaOpKind op_;
  PsaConfig config_;
  std::shared_ptr<const PsaCopies> copies_;
  std::unique_ptr<graph::RuntimeOp> twin_;  // the CPU RuntimeOp a CUDA one keeps (no state to share)
  bool size_input_;                         // merge_attn's size-input form
};

std::unique_ptr<graph::RuntimeOp> lower_psa(PsaOpKind kind, const PsaConfig& config, graph::Backend backend,
                                            bool size_input = false) {
  auto copies = psa_copies(backend);
  if (backend == graph::Backend::cpu) return make_psa_runtime(kind, config, std::move(copies), nullptr, size_input);
  return make_psa_runtime(kind, config, std::move(copies),
                          make_psa_runtime(kind, config, psa_copies(graph::Backend::cpu), nullptr, size_input),
                          size_input);
}

int64_t times(int64_t a, int64_t b) { return a == Shape::kAny || b == Shape::kAny ? Shape::kAny : a * b; }

// Checks qkv's shape against the config; returns N (symbolic when H or W is).
int64_t check_qkv(const std::vector<Shape>& in, const PsaConfig& c, std::string_view what) {
  VISION_CHECK(in.size() == 1 && in[0].rank() == 4, "{} takes one qkv tensor [B, 4·key_dim·heads, H, W], got {}",
               what, in.empty() ? std::string("none") : in[0].str());
  VISION_CHECK(in[0][1] == c.qkv_channels(),
               "{}: qkv {} must have 4·key_dim·heads = 4·{}·{} = {} channels (Q, K and 2·key_dim V per head); check "
               "key_dim and heads against the qkv convolution",
               what, in[0].str(), c.key_dim, c.heads, c.qkv_channels());
  return times(in[0][2], in[0][3]);
}

}  // namespace

void PsaCopies::direct_attention(graph::BackendContext&, const Tensor&, const PsaConfig&, float, const Tensor&) const {
  fail("psa: this backend has no direct attention (has_direct_attention() is false)");
}

std::shared_ptr<const PsaCopies> psa_copies(graph::Backend backend) {
  if (backend == graph::Backend::cpu) {
    static const auto cpu = std::make_shared<CpuCopies>();
    return cpu;
  }
#ifdef VISION_HAS_CUDA
  if (backend == graph::Backend::cuda) return psa_cuda_copies();
#endif
  fail("psa: no kernels for the {} backend in this build", graph::backend_name(backend));
}

std::string psa_op_name(PsaOpKind kind) {
  switch (kind) {
    case PsaOpKind::pack_qkv: return "yolo.psa_pack_qkv";
    case PsaOpKind::extract_v: return "yolo.psa_extract_v";
    case PsaOpKind::merge_attn: return "yolo.psa_merge_attn";
  }
  fail("unknown PSA op kind {}", static_cast<int>(kind));
}

std::unique_ptr<graph::RuntimeOp> make_psa_runtime(PsaOpKind op, PsaConfig config,
                                                   std::shared_ptr<const PsaCopies> copies,
                                                   std::unique_ptr<graph::RuntimeOp> twin, bool size_input) {
  return std::make_unique<PsaRuntime>(op, config, std::move(copies), std::move(twin), size_input);
}

// ---------------------------------------------------------------------------------------------------------------
// Graph ops

PsaPackQkvOp::PsaPackQkvOp(PsaConfig config) : config_(config) { check_psa_config(config_, "psa_pack_qkv"); }

std::vector<Shape> PsaPackQkvOp::infer_output_shapes(const std::vector<Shape>& in) const {
  const int64_t n = check_qkv(in, config_, name());
  const int64_t bh = times(in[0][0], config_.heads);
  std::vector<Shape> out{Shape{bh, n, config_.key_dim}, Shape{bh, n, config_.key_dim}};
  for (int64_t part = 0; part < config_.v_parts(); ++part) out.push_back(Shape{bh, n, config_.v_part_width()});
  return out;
}

std::unique_ptr<graph::RuntimeOp> PsaPackQkvOp::lower(graph::Backend backend, graph::Mode) const {
  return lower_psa(PsaOpKind::pack_qkv, config_, backend);
}

PsaExtractVOp::PsaExtractVOp(PsaConfig config) : config_(config) { check_psa_config(config_, "psa_extract_v"); }

Shape PsaExtractVOp::infer_output_shape(const std::vector<Shape>& in) const {
  check_qkv(in, config_, name());
  return Shape{in[0][0], config_.v_channels(), in[0][2], in[0][3]};
}

std::unique_ptr<graph::RuntimeOp> PsaExtractVOp::lower(graph::Backend backend, graph::Mode) const {
  return lower_psa(PsaOpKind::extract_v, config_, backend);
}

PsaMergeAttnOp::PsaMergeAttnOp(PsaConfig config, int64_t height, int64_t width)
    : config_(config), height_(height), width_(width) {
  check_psa_config(config_, "psa_merge_attn");
  VISION_CHECK(height > 0 && width > 0, "psa_merge_attn: the image size must be positive, got {}×{}", height, width);
}

PsaMergeAttnOp::PsaMergeAttnOp(PsaConfig config) : config_(config) { check_psa_config(config_, "psa_merge_attn"); }

Shape PsaMergeAttnOp::infer_output_shape(const std::vector<Shape>& in) const {
  const auto parts = static_cast<size_t>(config_.v_parts());
  VISION_CHECK(in.size() == parts + size_input(), "psa_merge_attn ({}) takes {} attention output(s){}, got {} inputs",
               config_.form == PsaForm::two_pass ? "two_pass" : "one_pass", parts,
               size_input() ? " and a tensor [B, any, H, W] giving the size" : "", in.size());
  int64_t height = height_, width = width_, batch = Shape::kAny;
  if (size_input()) {
    const Shape& like = in.back();
    VISION_CHECK(like.rank() == 4, "psa_merge_attn: the size input must be [B, any, H, W], got {}", like.str());
    height = like[2], width = like[3], batch = like[0];
  }
  const int64_t n = times(height, width);
  int64_t bh = Shape::kAny;
  for (size_t k = 0; k < parts; ++k) {
    const Shape& s = in[k];
    VISION_CHECK(s.rank() == 3 && (n == Shape::kAny || s[1] == Shape::kAny || s[1] == n) &&
                     s[2] == config_.v_part_width(),
                 "psa_merge_attn: each attention output must be [B·heads, H·W = {}, {}], got {}",
                 n == Shape::kAny ? std::string("?") : std::to_string(n), config_.v_part_width(), s.str());
    bh = ops::merge_dim(bh, s[0], "psa_merge_attn: the attention outputs' B·heads");
  }
  VISION_CHECK(bh == Shape::kAny || bh % config_.heads == 0,
               "psa_merge_attn: B·heads = {} is not a multiple of heads = {}", bh, config_.heads);
  batch = ops::merge_dim(batch, bh == Shape::kAny ? Shape::kAny : bh / config_.heads,
                         "psa_merge_attn: the batch of the size input and B·heads / heads");
  return Shape{batch, config_.v_channels(), height, width};
}

std::unique_ptr<graph::RuntimeOp> PsaMergeAttnOp::lower(graph::Backend backend, graph::Mode) const {
  return lower_psa(PsaOpKind::merge_attn, config_, backend, size_input());
}

std::vector<graph::SymTensor> psa_pack_qkv(graph::SymTensor qkv, const PsaConfig& config, const std::string& name) {
  VISION_CHECK(qkv.valid(), "psa_pack_qkv needs a recorded qkv tensor");
  return qkv.graph()->apply_multi(std::make_shared<PsaPackQkvOp>(config), {qkv}, name);
}

graph::SymTensor psa_extract_v(graph::SymTensor qkv, const PsaConfig& config, const std::string& name) {
  return ops::record<PsaExtractVOp>({qkv}, name, config);
}

graph::SymTensor psa_merge_attn(const std::vector<graph::SymTensor>& parts, const PsaConfig& config, int64_t height,
                                int64_t width, const std::string& name) {
  return ops::record<PsaMergeAttnOp>(parts, name, config, height, width);
}

graph::SymTensor psa_merge_attn(const std::vector<graph::SymTensor>& parts, const PsaConfig& config,
                                graph::SymTensor like, const std::string& name) {
  std::vector<graph::SymTensor> inputs = parts;
  inputs.push_back(like);
  return ops::record<PsaMergeAttnOp>(inputs, name, config);
}

}  // namespace vision::models::yolo::kernels::attention
