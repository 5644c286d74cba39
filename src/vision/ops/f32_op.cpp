#include "vision/ops/f32_op.h"

#include <utility>

#include "vision/core/error.h"

namespace vision::ops {
namespace {

using core::DType;
using core::Shape;
using graph::Format;
using graph::RuntimeOp;

// Forwards everything to the wrapped RuntimeOp and supports f32 NCHW alone. The wrapped op never sees set_format(), so
// it keeps the default Format{}: f32 NCHW, the one format a plan can pick for this wrapper.
class F32Runtime final : public RuntimeOp {
 public:
  explicit F32Runtime(std::unique_ptr<RuntimeOp> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  int n_activation_inputs() const override { return inner_->n_activation_inputs(); }
  bool supports(const Format& f) const override { return f == Format{} && inner_->supports(f); }
  bool follows_input_format() const override { return false; }
  bool reads_input(size_t i) const override { return inner_->reads_input(i); }
  std::optional<DType> input_dtype(size_t i) const override { return inner_->input_dtype(i); }
  std::vector<graph::ParamSpec> param_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return inner_->param_specs(in, out);
  }
  std::vector<std::byte> param_init_data(size_t i, const std::vector<Shape>& in, const Shape& out,
                                         uint64_t seed) const override {
    return inner_->param_init_data(i, in, out, seed);
  }
  std::vector<graph::TensorSpec> saved_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return inner_->saved_specs(in, out);
  }
  size_t workspace_bytes(const graph::PlanContext& plan, const std::vector<Shape>& in,
                         const Shape& out) const override {
    return inner_->workspace_bytes(plan, in, out);
  }
  std::vector<graph::TensorSpec> derived_specs(const std::vector<Shape>& in, const Shape& out) const override {
    return inner_->derived_specs(in, out);
  }
  void refresh(graph::ForwardCtx& ctx) override { inner_->refresh(ctx); }
  void forward(graph::ForwardCtx& ctx) override { inner_->forward(ctx); }
  bool has_backward() const override { return inner_->has_backward(); }
  void backward(graph::BackwardCtx& ctx) override { inner_->backward(ctx); }
  std::vector<graph::KernelInfo> kernels() const override { return inner_->kernels(); }

 private:
  std::unique_ptr<RuntimeOp> inner_;
};

class F32Op final : public graph::Op {
 public:
  explicit F32Op(std::shared_ptr<const graph::Op> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  size_t n_outputs() const override { return inner_->n_outputs(); }
  Shape infer_output_shape(const std::vector<Shape>& in) const override { return inner_->infer_output_shape(in); }
  DType infer_output_dtype(const std::vector<DType>& in) const override { return inner_->infer_output_dtype(in); }
  std::vector<Shape> infer_output_shapes(const std::vector<Shape>& in) const override {
    return inner_->infer_output_shapes(in);
  }
  std::vector<DType> infer_output_dtypes(const std::vector<DType>& in) const override {
    return inner_->infer_output_dtypes(in);
  }
  std::unique_ptr<RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override {
    return std::make_unique<F32Runtime>(inner_->lower(backend, mode));
  }
  bool stops_gradient() const override { return inner_->stops_gradient(); }
  std::optional<graph::OutputView> output_view(size_t output, const std::vector<Shape>& in,
                                               core::Layout layout) const override {
    return inner_->output_view(output, in, layout);
  }
  std::optional<size_t> input_in_output(size_t input, const std::vector<Shape>& in,
                                        core::Layout layout) const override {
    return inner_->input_in_output(input, in, layout);
  }

 private:
  std::shared_ptr<const graph::Op> inner_;
};

}  // namespace

std::shared_ptr<const graph::Op> in_f32(std::shared_ptr<const graph::Op> op) {
  VISION_CHECK(op != nullptr, "in_f32: no op to wrap");
  return std::make_shared<F32Op>(std::move(op));
}

}  // namespace vision::ops
