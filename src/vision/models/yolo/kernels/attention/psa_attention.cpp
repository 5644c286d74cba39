#include "vision/models/yolo/kernels/attention/psa_attention.h"

#include <algorithm>
#include <cmath>

#include "vision/core/error.h"
#include "vision/graph/arena.h"
#include "vision/graph/backend.h"
#include "vision/models/yolo/kernels/attention/flash_attn2.h"
#include "vision/ops/op_support.h"

namespace vision::models::yolo::kernels::attention {

using core::DType;
using core::Shape;

PsaForm default_psa_form() { return PsaForm::one_pass; }

namespace {

size_t aligned(size_t bytes) { return graph::align_up(bytes, 256); }

// FlashAttention-2 once or twice on one backend's RuntimeOp of "yolo.flash_attention2".
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

std::vector<graph::SymTensor> flash_attention2_psa(const std::vector<graph::SymTensor>& packed, const PsaConfig& config,
                                                   const std::string& name) {
  VISION_CHECK(!packed.empty() && packed[0].valid(), "flash_attention2_psa needs the packed Q, K, V");
  return packed[0].graph()->apply_multi(std::make_shared<FlashAttn2PsaOp>(config), packed, name);
}

}  // namespace vision::models::yolo::kernels::attention
