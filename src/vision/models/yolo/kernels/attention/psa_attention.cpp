#include "vision/models/yolo/kernels/attention/psa_attention.h"

#include <algorithm>
#include <cmath>

#include "vision/core/error.h"
#include "vision/graph/arena.h"
#include "vision/graph/backend.h"
#include "vision/ops/attention/flash_attn2.h"
#include "vision/ops/op_support.h"

namespace vision::models::yolo::kernels::attention {

// FlashAttention-2 (its op, kernels and launch shapes) is a built-in op: vision/ops/attention.
using namespace ::vision::ops::attention;

using core::DType;
using core::Shape;

PsaForm default_psa_form() { return PsaForm::one_pass; }

namespace {

size_t aligned(size_t bytes) { return graph::align_up(bytes, 256); }

// FlashAttention-2 once or twice on one backend's RuntimeOp of "ops.flash_attention2".
class FlashAttn2PsaRuntime final : public graph::RuntimeOp {
 public:
  FlashAttn2PsaRuntime(PsaConfig config, std::unique_ptr<graph::RuntimeOp> fa, graph::Mode mode)
      : config_(config), fa_(std::move(fa)), mode_(mode) {}
  std::string name() const override { return "yolo.flash_attention2_psa"; }
  int n_activation_inputs() const override { return 2 + static_cast<int>(config_.v_parts()); }
  bool supports(const graph::Format& f) const override { return fa_->supports(f); }
  bool has_backward() const override { return fa_->has_backward(); }
  std::vector<graph::KernelInfo> kernels() const override { return inner().kernels(); }

  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>& in, const Shape& out) const override {
    std::vector<graph::TensorSpec> specs;
    for (int64_t part = 0; part < config_.v_parts(); ++part) {
      const auto s = inner().saved_specs(part_inputs(in, part), out);
      specs.insert(specs.end(), s.begin(), s.end());
    }
    return specs;
  }
  size_t workspace_bytes(const graph::PlanContext& plan, const std::vector<Shape>& in, const Shape& out) const override {
    const size_t fa = aligned(inner().workspace_bytes(plan, part_inputs(in, 0), out));
    if (config_.v_parts() == 1 || plan.mode != graph::Mode::train) return fa;
    return fa + 2 * aligned(qk_bytes(in[0]));  // the second half's dQ and dK, added into the first's
  }

  void forward(graph::ForwardCtx& ctx) override {
    const size_t per_part = ctx.saved.size() / static_cast<size_t>(config_.v_parts());
    for (int64_t part = 0; part < config_.v_parts(); ++part) {
      graph::ForwardCtx f = ctx;
      f.inputs = {ctx.inputs.at(0), ctx.inputs.at(1), ctx.inputs.at(2 + static_cast<size_t>(part))};
      f.outputs = {ctx.outputs.at(static_cast<size_t>(part))};
      f.output = f.outputs[0];
      f.saved.assign(ctx.saved.begin() + static_cast<std::ptrdiff_t>(per_part * static_cast<size_t>(part)),
                     ctx.saved.begin() + static_cast<std::ptrdiff_t>(per_part * static_cast<size_t>(part + 1)));
      f.workspace = fa_workspace(ctx.workspace, ctx.inputs, ctx.backend, ctx.deterministic);
      inner().forward(f);
    }
  }

  void backward(graph::BackwardCtx& ctx) override {
    const size_t parts = static_cast<size_t>(config_.v_parts());
    const size_t per_part = ctx.saved.size() / parts;
    const Tensor &gq = ctx.grad_inputs.at(0), &gk = ctx.grad_inputs.at(1);
    Tensor gq2, gk2;  // the second half's dQ and dK
    if (parts == 2) {
      auto* base = static_cast<std::byte*>(ctx.workspace.raw()) + aligned(fa_bytes(ctx));
      const Tensor& q = ctx.inputs.at(0);
      if (gq.defined()) gq2 = Tensor::view(base, q.shape(), q.dtype(), q.device());
      if (gk.defined()) gk2 = Tensor::view(base + aligned(qk_bytes(q.shape())), q.shape(), q.dtype(), q.device());
      VISION_CHECK(ctx.workspace.nbytes() >= aligned(fa_bytes(ctx)) + 2 * aligned(qk_bytes(q.shape())),
                   "flash_attention2_psa backward: the workspace ({} bytes) is too small", ctx.workspace.nbytes());
    }
    for (size_t part = 0; part < parts; ++part) {
      graph::BackwardCtx b = ctx;
      b.inputs = {ctx.inputs.at(0), ctx.inputs.at(1), ctx.inputs.at(2 + part)};
      b.outputs = {ctx.outputs.at(part)};
      b.output = b.outputs[0];
      b.grad_outputs = {ctx.grad_outputs.at(part)};
      b.grad_output = b.grad_outputs[0];
      b.grad_inputs = {part == 0 ? gq : gq2, part == 0 ? gk : gk2, ctx.grad_inputs.at(2 + part)};
      b.saved.assign(ctx.saved.begin() + static_cast<std::ptrdiff_t>(per_part * part),
                     ctx.saved.begin() + static_cast<std::ptrdiff_t>(per_part * (part + 1)));
      b.workspace = fa_workspace(ctx.workspace, ctx.inputs, ctx.backend, ctx.deterministic);
      VISION_CHECK(b.grad_output.defined(), "flash_attention2_psa backward: output {} has no gradient", part);
      inner().backward(b);
    }
    if (gq2.defined()) ctx.backend->add_into(gq, gq2);
    if (gk2.defined()) ctx.backend->add_into(gk, gk2);
  }

 private:
  // The FlashAttention-2 RuntimeOp in this op's format.
  graph::RuntimeOp& inner() const {
    fa_->set_format(format());
    return *fa_;
  }
  static std::vector<Shape> part_inputs(const std::vector<Shape>& in, int64_t part) {
    return {in.at(0), in.at(1), in.at(2 + static_cast<size_t>(part))};
  }
  static size_t qk_bytes(const Shape& q) { return static_cast<size_t>(q.numel()) * 4; }  // ≥ any dtype's bytes
  size_t fa_bytes(const graph::BackwardCtx& ctx) const {
    std::vector<Shape> in;
    for (size_t i = 0; i < 3; ++i) in.push_back(ctx.inputs.at(i).shape());
    const graph::PlanContext plan{ctx.backend, graph::Mode::train, ctx.deterministic};
    return inner().workspace_bytes(plan, in, ctx.outputs.at(0).shape());
  }
  // The part of the workspace FlashAttention-2 gets: what it asked for, ahead of this op's own scratch.
  Tensor fa_workspace(const Tensor& ws, const std::vector<Tensor>& inputs, graph::BackendContext* backend,
                      bool deterministic) const {
    if (!ws.defined()) return ws;
    std::vector<Shape> in;
    for (size_t i = 0; i < 3; ++i) in.push_back(inputs.at(i).shape());
    const graph::PlanContext plan{backend, mode_, deterministic};
    const size_t bytes = std::min(ws.nbytes(), inner().workspace_bytes(plan, in, Shape{}));
    return bytes ? Tensor::view(ws.raw(), Shape{static_cast<int64_t>(bytes)}, DType::u8, ws.device()) : Tensor();
  }

  PsaConfig config_;
  std::unique_ptr<graph::RuntimeOp> fa_;
  graph::Mode mode_;
};

// PsaAttentionOp's runtime: the three ops' RuntimeOps in sequence over rows in the workspace (inference) or in saved
// tensors (training, where FlashAttention-2's backward needs Q, K, V and O), or the backend's direct attention.
class PsaAttentionRuntime final : public graph::RuntimeOp {
 public:
  PsaAttentionRuntime(PsaConfig config, graph::Backend backend, graph::Mode mode)
      : config_(config),
        copies_(psa_copies(backend)),
        pack_(PsaPackQkvOp(config).lower(backend, mode)),
        attention_(FlashAttn2PsaOp(config).lower(backend, mode)),
        merge_(make_psa_runtime(PsaOpKind::merge_attn, config, copies_)),  // reads the size from its output
        scale_(FlashAttn2PsaOp(config).scale()) {}
  std::string name() const override { return "yolo.psa_attention"; }
  int n_activation_inputs() const override { return 1; }
  bool supports(const graph::Format& f) const override {
    return pack_->supports(f) && attention_->supports(rows_format(f)) && merge_->supports(f);
  }
  bool has_backward() const override { return true; }
  std::vector<graph::KernelInfo> kernels() const override {
    std::vector<graph::KernelInfo> out = copies_->direct_attention_kernels(config_, format());
    if (direct()) return out;
    for (graph::RuntimeOp* op : {&inner(*pack_), &attention(), &inner(*merge_)}) {
      const auto k = op->kernels();
      out.insert(out.end(), k.begin(), k.end());
    }
    return out;
  }

  // Training keeps the rows (Q, K, V parts, O parts) and the attention's own saved tensors.
  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>& in, const Shape& out) const override {
    std::vector<graph::TensorSpec> specs;
    for (const Shape& s : row_shapes(in.at(0))) specs.push_back({s, format().dtype});
    const auto a = attention().saved_specs(packed_shapes(in.at(0)), out);
    specs.insert(specs.end(), a.begin(), a.end());
    return specs;
  }
  // Inference: the rows (unless direct) and the attention's workspace. Training: the attention's workspace and the
  // rows' gradients.
  size_t workspace_bytes(const graph::PlanContext& plan, const std::vector<Shape>& in, const Shape& out) const override {
    if (plan.mode == graph::Mode::inference && direct()) return 0;
    attention_bytes_ = attention().workspace_bytes(plan, packed_shapes(in.at(0)), out);
    return aligned(attention_bytes_) + rows_bytes(in.at(0));
  }

  void forward(graph::ForwardCtx& ctx) override {
    const Tensor& qkv = ctx.inputs.at(0);
    if (!ctx.training && direct()) return copies_->direct_attention(*ctx.backend, qkv, config_, scale_, ctx.output);
    const size_t n_rows = row_shapes(qkv.shape()).size();
    const std::vector<Tensor> rows = ctx.training ? std::vector<Tensor>(ctx.saved.begin(), ctx.saved.begin() +
                                                                        static_cast<std::ptrdiff_t>(n_rows))
                                                  : carve_rows(ctx.workspace, qkv);
    const auto [packed, attended] = split_rows(rows);
    graph::ForwardCtx f = ctx;
    f.saved.clear();
    f.inputs = {qkv}, f.outputs = packed, f.output = packed[0];
    inner(*pack_).forward(f);
    f.inputs = packed, f.outputs = attended, f.output = attended[0], f.workspace = attention_workspace(ctx.workspace);
    if (ctx.training)
      f.saved.assign(ctx.saved.begin() + static_cast<std::ptrdiff_t>(n_rows), ctx.saved.end());
    attention().forward(f);
    f.inputs = attended, f.outputs = {ctx.output}, f.output = ctx.output, f.saved.clear(), f.workspace = Tensor();
    inner(*merge_).forward(f);
  }

  void backward(graph::BackwardCtx& ctx) override {
    const Tensor& qkv = ctx.inputs.at(0);
    const size_t n_rows = row_shapes(qkv.shape()).size();
    const std::vector<Tensor> rows(ctx.saved.begin(), ctx.saved.begin() + static_cast<std::ptrdiff_t>(n_rows));
    const auto [packed, attended] = split_rows(rows);
    const auto [d_packed, d_attended] = split_rows(carve_rows(ctx.workspace, qkv));
    graph::BackwardCtx b = ctx;
    b.saved.clear();
    b.workspace = Tensor();
    b.inputs = attended, b.grad_inputs = d_attended;  // merge: d_image → dO
    inner(*merge_).backward(b);
    b.inputs = packed, b.outputs = attended, b.output = attended[0], b.grad_outputs = d_attended,
    b.grad_output = d_attended[0], b.grad_inputs = d_packed, b.workspace = attention_workspace(ctx.workspace);
    b.saved.assign(ctx.saved.begin() + static_cast<std::ptrdiff_t>(n_rows), ctx.saved.end());
    attention().backward(b);
    b.inputs = {qkv}, b.outputs = packed, b.output = packed[0], b.grad_outputs = d_packed,
    b.grad_output = d_packed[0], b.grad_inputs = ctx.grad_inputs, b.saved.clear(), b.workspace = Tensor();
    inner(*pack_).backward(b);
  }

 private:
  bool direct() const { return config_.form == PsaForm::one_pass && copies_->has_direct_attention(format(), config_); }
  graph::RuntimeOp& inner(graph::RuntimeOp& op) const {
    op.set_format(format());
    return op;
  }
  // The attention sees rows, no rank-4 tensor: it is asked in NCHW, as a plan would ask it.
  static graph::Format rows_format(const graph::Format& f) { return {f.dtype, core::Layout::nchw}; }
  graph::RuntimeOp& attention() const {
    attention_->set_format(rows_format(format()));
    return *attention_;
  }
  // Pack's outputs (Q, K, V parts) then the attention's (O parts), for qkv's shape.
  std::vector<Shape> packed_shapes(const Shape& qkv) const {
    return PsaPackQkvOp(config_).infer_output_shapes({qkv});
  }
  std::vector<Shape> row_shapes(const Shape& qkv) const {
    std::vector<Shape> shapes = packed_shapes(qkv);
    const Shape o{qkv[0] * config_.heads, qkv[2] * qkv[3], config_.v_part_width()};
    for (int64_t part = 0; part < config_.v_parts(); ++part) shapes.push_back(o);
    return shapes;
  }
  size_t row_bytes(const Shape& rows) const {
    return static_cast<size_t>(rows.numel()) * core::dtype_size(format().dtype);
  }
  size_t rows_bytes(const Shape& qkv) const {
    size_t bytes = 0;
    for (const Shape& s : row_shapes(qkv)) bytes += aligned(row_bytes(s));
    return bytes;
  }
  // The rows laid out after the attention's workspace.
  std::vector<Tensor> carve_rows(const Tensor& ws, const Tensor& qkv) const {
    const size_t skip = aligned(attention_bytes_);
    VISION_CHECK(ws.defined() && ws.nbytes() >= skip + rows_bytes(qkv.shape()),
                 "psa_attention: the workspace ({} bytes) is smaller than the {} its rows need",
                 ws.defined() ? ws.nbytes() : 0, skip + rows_bytes(qkv.shape()));
    auto* p = static_cast<std::byte*>(ws.raw()) + skip;
    std::vector<Tensor> rows;
    for (const Shape& s : row_shapes(qkv.shape())) {
      rows.push_back(Tensor::view(p, s, format().dtype, ws.device()));
      p += aligned(row_bytes(s));
    }
    return rows;
  }
  std::pair<std::vector<Tensor>, std::vector<Tensor>> split_rows(const std::vector<Tensor>& rows) const {
    const auto n_packed = static_cast<std::ptrdiff_t>(2 + config_.v_parts());
    return {std::vector<Tensor>(rows.begin(), rows.begin() + n_packed),
            std::vector<Tensor>(rows.begin() + n_packed, rows.end())};
  }
  // The attention's part of the workspace: its front, as much as it asked for when the plan was built.
  Tensor attention_workspace(const Tensor& ws) const {
    if (!ws.defined() || attention_bytes_ == 0) return Tensor();
    return Tensor::view(ws.raw(), Shape{static_cast<int64_t>(attention_bytes_)}, DType::u8, ws.device());
  }

  PsaConfig config_;
  std::shared_ptr<const PsaCopies> copies_;
  std::unique_ptr<graph::RuntimeOp> pack_, attention_, merge_;
  float scale_;
  // What the attention asked for in workspace_bytes() (which the plan calls once, before any run; const there).
  mutable size_t attention_bytes_ = 0;
};

}  // namespace

FlashAttn2PsaOp::FlashAttn2PsaOp(PsaConfig config) : config_(config) { check_psa_config(config_, "flash_attention2_psa"); }

float FlashAttn2PsaOp::scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(config_.key_dim))); }

std::vector<Shape> FlashAttn2PsaOp::infer_output_shapes(const std::vector<Shape>& in) const {
  const size_t want = 2 + static_cast<size_t>(config_.v_parts());
  VISION_CHECK(in.size() == want, "flash_attention2_psa ({}) takes {} inputs (Q, K and {}), got {}",
               config_.form == PsaForm::two_pass ? "two_pass" : "one_pass", want,
               config_.form == PsaForm::two_pass ? "V_lo, V_hi" : "V", in.size());
  std::vector<Shape> out;
  for (size_t part = 2; part < in.size(); ++part) {
    const FlashAttention2Op fa(scale());
    const Shape o = fa.infer_output_shape({in[0], in[1], in[part]});
    VISION_CHECK(in[0][2] == config_.key_dim && in[part][2] == config_.v_part_width(),
                 "flash_attention2_psa: Q must be [B·heads, N, {}] and each V part [B·heads, N, {}], got Q {} and V {}",
                 config_.key_dim, config_.v_part_width(), in[0].str(), in[part].str());
    out.push_back(o);
  }
  return out;
}

std::vector<DType> FlashAttn2PsaOp::infer_output_dtypes(const std::vector<DType>& in) const {
  for (size_t i = 1; i < in.size(); ++i)
    VISION_CHECK(in[i] == in[0] && core::is_floating(in[0]), "flash_attention2_psa: Q, K and V must share one floating "
                 "dtype");
  return std::vector<DType>(n_outputs(), in.at(0));
}

std::unique_ptr<graph::RuntimeOp> FlashAttn2PsaOp::lower(graph::Backend backend, graph::Mode mode) const {
  return std::make_unique<FlashAttn2PsaRuntime>(config_, FlashAttention2Op(scale()).lower(backend, mode), mode);
}

PsaAttentionOp::PsaAttentionOp(PsaConfig config) : config_(config) { check_psa_config(config_, "psa_attention"); }

Shape PsaAttentionOp::infer_output_shape(const std::vector<Shape>& in) const {
  return PsaExtractVOp(config_).infer_output_shape(in);  // checks qkv; V's shape is the image's
}

std::unique_ptr<graph::RuntimeOp> PsaAttentionOp::lower(graph::Backend backend, graph::Mode mode) const {
  return std::make_unique<PsaAttentionRuntime>(config_, backend, mode);
}

graph::SymTensor psa_attention(graph::SymTensor qkv, const PsaConfig& config, const std::string& name) {
  return ops::record<PsaAttentionOp>({qkv}, name, config);
}

std::vector<graph::SymTensor> flash_attention2_psa(const std::vector<graph::SymTensor>& packed, const PsaConfig& config,
                                                   const std::string& name) {
  VISION_CHECK(!packed.empty() && packed[0].valid(), "flash_attention2_psa needs the packed Q, K, V");
  return packed[0].graph()->apply_multi(std::make_shared<FlashAttn2PsaOp>(config), packed, name);
}

}  // namespace vision::models::yolo::kernels::attention
