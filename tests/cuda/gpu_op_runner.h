// GpuOpRunner — runs one Op's CUDA RuntimeOp on device copies of an OpHarness's inputs and state, so the GPU
// op can be compared with its CPU twin on identical data.
#pragma once

#include <memory>
#include <vector>

#include "ops/op_harness.h"
#include "vision/graph/cuda/cuda_backend.h"

namespace vision::test {

class GpuOpRunner {
 public:
  // Lowers op for CUDA in `mode`; inputs and state are copied from the CPU harness (which must be built for
  // the same op, inputs and mode).
  GpuOpRunner(const graph::Op& op, const OpHarness& cpu, graph::Mode mode)
      : backend_(graph::cuda_backend()), rt_(op.lower(graph::Backend::cuda, mode)) {
    std::vector<Shape> shapes;
    for (auto& t : cpu.inputs) {
      shapes.push_back(t.shape());
      inputs_.push_back(backend_->upload(t));
    }
    out_shape_ = cpu.output_shape();
    specs_ = rt_->param_specs(shapes, out_shape_);
    EXPECT_EQ(specs_.size(), cpu.params.size()) << "the CUDA op's state differs from its CPU twin's";
    for (auto& p : cpu.params) params_.push_back(backend_->upload(p));
    for (auto& s : rt_->saved_specs(shapes, out_shape_)) saved_.push_back(alloc(s.shape, s.dtype));
    if (size_t ws = rt_->workspace_bytes({backend_.get(), mode, false}, shapes, out_shape_))
      workspace_ = alloc(Shape{int64_t(ws)}, DType::u8);
    for (auto& s : rt_->derived_specs(shapes, out_shape_)) derived_.push_back(alloc(s.shape, s.dtype));
    output_ = alloc(out_shape_, DType::f32);
  }

  // Forward into a NaN-poisoned output; returns it on the host.
  Tensor forward(bool training = false) {
    poison(output_);
    graph::ForwardCtx ctx;
    ctx.backend = backend_.get();
    ctx.inputs = inputs_;
    ctx.outputs = {output_};
    ctx.output = output_;
    ctx.params = params_;
    ctx.saved = saved_;
    ctx.derived = derived_;
    ctx.workspace = workspace_;
    ctx.training = training;
    rt_->refresh(ctx);
    rt_->forward(ctx);
    return backend_->download(output_);
  }

  // Backward for a host grad_output; the gradients (NaN-poisoned first) on the host.
  OpHarness::Grads backward(const Tensor& grad_output) {
    OpHarness::Grads dev, host;
    for (auto& x : inputs_) dev.inputs.push_back(poisoned(x.shape()));
    for (size_t j = 0; j < specs_.size(); ++j)
      dev.params.push_back(specs_[j].kind == graph::StateKind::parameter ? poisoned(specs_[j].shape) : Tensor());
    graph::BackwardCtx ctx;
    ctx.backend = backend_.get();
    ctx.inputs = inputs_;
    ctx.outputs = {output_};
    ctx.output = output_;
    ctx.grad_output = backend_->upload(grad_output);
    ctx.grad_outputs = {ctx.grad_output};
    ctx.grad_inputs = dev.inputs;
    ctx.params = params_;
    ctx.grad_params = dev.params;
    ctx.saved = saved_;
    ctx.workspace = workspace_;
    rt_->backward(ctx);
    for (auto& t : dev.inputs) host.inputs.push_back(backend_->download(t));
    for (auto& t : dev.params) host.params.push_back(t.defined() ? backend_->download(t) : Tensor());
    return host;
  }

  // State after the run (BatchNorm's running statistics), on the host.
  Tensor param(size_t i) { return backend_->download(params_.at(i)); }

 private:
  Tensor alloc(const Shape& s, DType t) {
    auto mem = backend_->allocate(static_cast<size_t>(s.numel()) * core::dtype_size(t));
    void* p = mem.get();
    return Tensor::wrap(std::move(mem), p, s, t, core::Device::cuda);
  }
  Tensor poisoned(const Shape& s) {
    Tensor t = alloc(s, DType::f32);
    poison(t);
    return t;
  }
  void poison(const Tensor& t) {
    Tensor h = Tensor::zeros(t.shape(), t.dtype());
    h.fill(kPoison);
    backend_->copy_to_device(t.raw(), h.raw(), h.nbytes());
  }

  std::shared_ptr<graph::BackendContext> backend_;
  std::unique_ptr<graph::RuntimeOp> rt_;
  std::vector<graph::ParamSpec> specs_;
  Shape out_shape_;
  std::vector<Tensor> inputs_, params_, saved_, derived_;
  Tensor workspace_, output_;
};

}  // namespace vision::test
