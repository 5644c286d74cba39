// A gradient probe for tests of losses whose inputs are graph inputs: plans propagate gradients only from parameters,
// so a loss fed straight from graph inputs would get no backward. grad_probe(x) is x itself (an output view, no copy)
// through a node that owns a one-element trainable parameter "probe" (its gradient always 0); the plan then computes
// the loss's gradient with respect to the probe's output: Plan::value_grad(probe.id()). Any backend, any format.
// Record the probes before the ops that consume them: a gradient buffer is free for reuse once its producer's backward
// has run, so value_grad stays valid after backward only when no step recorded before the probe runs backward.
#pragma once

#include <memory>
#include <string>

#include "vision/graph/backend.h"
#include "vision/graph/graph.h"

namespace vision::test {

class GradProbeRuntime final : public graph::RuntimeOp {
 public:
  std::string name() const override { return "test.grad_probe"; }
  int n_activation_inputs() const override { return 1; }
  bool supports(const graph::Format&) const override { return true; }
  bool follows_input_format() const override { return true; }
  std::vector<graph::ParamSpec> param_specs(const std::vector<core::Shape>&, const core::Shape&) const override {
    return {{"probe", core::Shape{1}}};
  }
  std::vector<std::byte> param_init_data(size_t, const std::vector<core::Shape>&, const core::Shape&,
                                         uint64_t) const override {
    return graph::bytes_of({0.0f});
  }
  void forward(graph::ForwardCtx&) override {}  // the output is a view of the input
  bool has_backward() const override { return true; }
  void backward(graph::BackwardCtx& ctx) override {
    const core::Tensor& gp = ctx.grad_params.at(0);
    ctx.backend->fill_zero(gp.raw(), gp.nbytes());
    if (const core::Tensor& gx = ctx.grad_inputs.at(0); gx.defined())
      ctx.backend->copy_on_device(gx.raw(), ctx.grad_output.raw(), gx.nbytes());
  }
};

class GradProbeOp final : public graph::Op {
 public:
  std::string name() const override { return "test.grad_probe"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& in) const override { return in.at(0); }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend, graph::Mode) const override {
    return std::make_unique<GradProbeRuntime>();
  }
  std::optional<graph::OutputView> output_view(size_t, const std::vector<core::Shape>&, core::Layout) const override {
    return graph::OutputView{0, 0};
  }
};

inline graph::SymTensor grad_probe(graph::SymTensor x, const std::string& name) {
  return x.graph()->apply(std::make_shared<GradProbeOp>(), {x}, name);
}

}  // namespace vision::test
