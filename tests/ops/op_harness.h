// OpHarness — runs one Op's CPU RuntimeOp without a plan or executor: it allocates the inputs, output, state,
// saved tensors and workspace itself and calls forward / backward through ForwardCtx / BackwardCtx. Also a
// finite-difference gradient check built on it.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "vision/graph/backend.h"
#include "vision/graph/op.h"

namespace vision::test {

using core::DType;
using core::Shape;
using core::Tensor;

class OpHarness {
 public:
  // Lowers op for the CPU in `mode` and allocates everything for the given inputs (which it keeps and uses);
  // state i is initialised from param_init_data with the seed of "<node>.<name>".
  OpHarness(const graph::Op& op, std::vector<Tensor> inputs, graph::Mode mode = graph::Mode::inference,
            const std::string& node = "node")
      : inputs(std::move(inputs)), backend_(graph::cpu_backend()) {
    std::vector<Shape> shapes;
    for (auto& t : this->inputs) shapes.push_back(t.shape());
    out_shape_ = op.infer_output_shape(shapes);
    rt_ = op.lower(graph::Backend::cpu, mode);
    EXPECT_EQ(rt_->n_activation_inputs(), static_cast<int>(this->inputs.size()));
    specs_ = rt_->param_specs(shapes, out_shape_);
    for (size_t i = 0; i < specs_.size(); ++i) {
      Tensor t = Tensor::zeros(specs_[i].shape, specs_[i].dtype);
      auto bytes = rt_->param_init_data(i, shapes, out_shape_, graph::name_seed(node + "." + specs_[i].name));
      EXPECT_EQ(bytes.size(), t.nbytes()) << "init data of " << specs_[i].name;
      if (bytes.size() == t.nbytes() && !bytes.empty()) std::memcpy(t.raw(), bytes.data(), bytes.size());
      params.push_back(t);
    }
    for (auto& s : rt_->saved_specs(shapes, out_shape_)) saved.push_back(Tensor::zeros(s.shape, s.dtype));
    if (size_t ws = rt_->workspace_bytes({backend_.get(), mode, false}, shapes, out_shape_))
      workspace = Tensor::zeros(Shape{int64_t(ws)}, DType::u8);
    for (auto& s : rt_->derived_specs(shapes, out_shape_)) derived.push_back(Tensor::zeros(s.shape, s.dtype));
    output = Tensor::zeros(out_shape_);
  }

  graph::RuntimeOp& runtime() { return *rt_; }
  const Shape& output_shape() const { return out_shape_; }
  const std::vector<graph::ParamSpec>& specs() const { return specs_; }
  // The index of the state named `name`.
  size_t param_index(const std::string& name) const {
    for (size_t i = 0; i < specs_.size(); ++i)
      if (specs_[i].name == name) return i;
    ADD_FAILURE() << "no state named " << name;
    return 0;
  }
  Tensor& param(const std::string& name) { return params[param_index(name)]; }

  // Runs forward on a NaN-poisoned output; returns a copy of the output.
  Tensor forward(bool training = false) {
    output.fill(kPoison);
    for (auto& d : derived) d.fill(kPoison);
    graph::ForwardCtx ctx;
    ctx.backend = backend_.get();
    ctx.inputs = inputs;
    ctx.outputs = {output};
    ctx.output = output;
    ctx.params = params;
    ctx.saved = saved;
    ctx.derived = derived;
    ctx.workspace = workspace;
    ctx.training = training;
    rt_->refresh(ctx);
    rt_->forward(ctx);
    return output.clone();
  }

  struct Grads {
    std::vector<Tensor> inputs;  // one per input
    std::vector<Tensor> params;  // one per state tensor; undefined for buffers and constants
  };
  // Runs backward (after a forward) for grad_output, into NaN-poisoned gradient tensors.
  Grads backward(const Tensor& grad_output, const std::vector<bool>& need_input_grad = {}) {
    Grads g;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const bool need = need_input_grad.empty() || need_input_grad[i];
      g.inputs.push_back(need ? poisoned(inputs[i].shape()) : Tensor());
    }
    for (auto& s : specs_) g.params.push_back(s.kind == graph::StateKind::parameter ? poisoned(s.shape) : Tensor());
    graph::BackwardCtx ctx;
    ctx.backend = backend_.get();
    ctx.inputs = inputs;
    ctx.outputs = {output};
    ctx.output = output;
    ctx.grad_outputs = {grad_output};
    ctx.grad_output = grad_output;
    ctx.grad_inputs = g.inputs;
    ctx.params = params;
    ctx.grad_params = g.params;
    ctx.saved = saved;
    ctx.workspace = workspace;
    rt_->backward(ctx);
    return g;
  }

  std::vector<Tensor> inputs;
  std::vector<Tensor> params;
  std::vector<Tensor> saved;
  std::vector<Tensor> derived;
  Tensor workspace;
  Tensor output;

 private:
  static Tensor poisoned(const Shape& s) {
    Tensor t = Tensor::zeros(s);
    t.fill(kPoison);
    return t;
  }

  std::shared_ptr<graph::BackendContext> backend_;
  std::unique_ptr<graph::RuntimeOp> rt_;
  std::vector<graph::ParamSpec> specs_;
  Shape out_shape_;
};

// Σ r·out in float64.
inline double projected(const Tensor& out, const Tensor& r) {
  const float* o = out.data<float>();
  const float* w = r.data<float>();
  double s = 0;
  for (int64_t i = 0; i < out.numel(); ++i) s += static_cast<double>(o[i]) * w[i];
  return s;
}

struct GradCheckOptions {
  bool training = false;  // ForwardCtx::training of every forward
  double eps = 1e-2;      // finite-difference step
  double tol = 1e-2;      // bound on ‖analytic − fd‖ / ‖fd‖, per tensor
};

// Compares the analytic gradient of L = Σ r·out (r random) with central finite differences of L, element by
// element, for every input and every trainable parameter. Small shapes only: two forwards per element.
inline void check_gradients(OpHarness& h, const GradCheckOptions& o = {}) {
  h.forward(o.training);
  const Tensor r = random_tensor(h.output_shape());
  const auto grads = h.backward(r);
  auto check = [&](Tensor& value, const Tensor& grad, const std::string& what) {
    ASSERT_TRUE(grad.defined()) << what;
    float* v = value.data<float>();
    std::vector<double> fd(static_cast<size_t>(value.numel()));
    for (int64_t i = 0; i < value.numel(); ++i) {
      const float keep = v[i];
      const float hi = static_cast<float>(keep + o.eps), lo = static_cast<float>(keep - o.eps);
      v[i] = hi;
      const double up = projected(h.forward(o.training), r);
      v[i] = lo;
      const double down = projected(h.forward(o.training), r);
      v[i] = keep;
      fd[static_cast<size_t>(i)] = (up - down) / (static_cast<double>(hi) - lo);
    }
    EXPECT_LT(rel_error(grad.to_vector(), fd), o.tol) << "gradient of " << what;
  };
  for (size_t i = 0; i < h.inputs.size(); ++i) check(h.inputs[i], grads.inputs[i], "input " + std::to_string(i));
  for (size_t j = 0; j < h.params.size(); ++j)
    if (h.specs()[j].kind == graph::StateKind::parameter) check(h.params[j], grads.params[j], h.specs()[j].name);
}

}  // namespace vision::test
