// OpHarness — runs one Op's RuntimeOp on a backend (the CPU, or CUDA through the same BackendContext interface)
// without a plan or executor: it allocates the output, state, saved tensors and workspace on the backend itself, and
// calls forward / backward through ForwardCtx / BackwardCtx with poisoned outputs. Inputs and state live on the host
// (tests read and change them freely) and go to the backend on every forward; results come back to the host. A
// harness built from another (its twin) runs the same op, mode, inputs and state on another backend. Also a
// finite-difference gradient check and random BatchNorm state built on it.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "vision/graph/backend.h"
#include "vision/graph/collective.h"
#include "vision/graph/op.h"

namespace vision::test {

using core::DType;
using core::Shape;
using core::Tensor;

class OpHarness {
 public:
  // Lowers op for `backend` in `mode` for the given inputs (which it keeps and uses); state i is initialised from
  // param_init_data with the seed of "<node>.<name>".
  OpHarness(const graph::Op& op, std::vector<Tensor> inputs, graph::Mode mode = graph::Mode::inference,
            const std::string& node = "node",
            std::shared_ptr<graph::BackendContext> backend = graph::cpu_backend())
      : inputs(std::move(inputs)), backend_(std::move(backend)) {
    lower(op, mode);
    for (size_t i = 0; i < specs_.size(); ++i) {
      Tensor t = Tensor::zeros(specs_[i].shape, specs_[i].dtype);
      auto bytes = rt_->param_init_data(i, shapes(), out_shape_, graph::name_seed(node + "." + specs_[i].name));
      EXPECT_EQ(bytes.size(), t.nbytes()) << "init data of " << specs_[i].name;
      if (bytes.size() == t.nbytes() && !bytes.empty()) std::memcpy(t.raw(), bytes.data(), bytes.size());
      params.push_back(t);
    }
  }

  // The twin of `other` on `backend`: op (the one `other` was built for) lowered in other's mode, with copies of
  // its inputs and current state, so that the two can be compared on identical data.
  OpHarness(const graph::Op& op, const OpHarness& other, std::shared_ptr<graph::BackendContext> backend)
      : backend_(std::move(backend)) {
    for (const Tensor& t : other.inputs) inputs.push_back(t.clone());
    lower(op, other.mode_);
    EXPECT_EQ(specs_.size(), other.specs_.size()) << "the " << backend_name() << " op's state differs from its twin's";
    for (size_t i = 0; i < specs_.size() && i < other.specs_.size(); ++i)
      EXPECT_TRUE(specs_[i].name == other.specs_[i].name && specs_[i].shape == other.specs_[i].shape &&
                  specs_[i].dtype == other.specs_[i].dtype && specs_[i].kind == other.specs_[i].kind)
          << "state " << i << ": " << specs_[i].name << " vs the twin's " << other.specs_[i].name;
    for (const Tensor& t : other.params) params.push_back(t.clone());
  }

  // SyncBatchNorm's ranks for the forward and backward calls from now on (null: none); the workspace is sized again
  // for them (PlanContext::collective).
  void use_collective(graph::Collective* c) {
    collective_ = c;
    workspace = Tensor();
    if (size_t ws = rt_->workspace_bytes({backend_.get(), mode_, false, false, c}, shapes(), out_shape_))
      workspace = allocate(Shape{int64_t(ws)}, DType::u8);
  }

  graph::RuntimeOp& runtime() { return *rt_; }
  graph::BackendContext& backend() { return *backend_; }
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

  // Runs forward on the backend into a NaN-poisoned output and returns the output on the host; the state it changed
  // (BatchNorm's running statistics in training) comes back into `params`. Inputs and state go to the backend first.
  Tensor forward(bool training = false) {
    dev_inputs_ = to_backend(inputs);
    dev_params_ = to_backend(params);
    dev_output_ = backend_->device() == core::Device::cpu ? output : allocate(output.shape(), output.dtype());
    poison(dev_output_);
    for (const Tensor& d : derived) poison(d);
    graph::ForwardCtx ctx;
    ctx.backend = backend_.get();
    ctx.inputs = dev_inputs_;
    ctx.outputs = {dev_output_};
    ctx.output = dev_output_;
    ctx.params = dev_params_;
    ctx.saved = saved;
    ctx.derived = derived;
    ctx.workspace = workspace;
    ctx.training = training;
    ctx.collective = collective_;
    rt_->refresh(ctx);
    rt_->forward(ctx);
    for (size_t i = 0; i < params.size(); ++i) to_host(dev_params_[i], params[i]);
    to_host(dev_output_, output);
    return output.clone();
  }

  struct Grads {
    std::vector<Tensor> inputs;  // one per input; undefined where not asked for
    std::vector<Tensor> params;  // one per state tensor; undefined for buffers and constants
  };
  // Runs backward (after a forward, on its inputs, state and saved tensors) for grad_output (host), into
  // NaN-poisoned gradient tensors on the backend; returns the gradients on the host.
  Grads backward(const Tensor& grad_output, const std::vector<bool>& need_input_grad = {}) {
    Grads dev, host;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const bool need = need_input_grad.empty() || need_input_grad[i];
      dev.inputs.push_back(need ? poisoned_on_backend(inputs[i].shape()) : Tensor());
    }
    for (auto& s : specs_)
      dev.params.push_back(s.kind == graph::StateKind::parameter ? poisoned_on_backend(s.shape) : Tensor());
    graph::BackwardCtx ctx;
    ctx.backend = backend_.get();
    ctx.inputs = dev_inputs_;
    ctx.outputs = {dev_output_};
    ctx.output = dev_output_;
    ctx.grad_output = to_backend(grad_output);
    ctx.grad_outputs = {ctx.grad_output};
    ctx.grad_inputs = dev.inputs;
    ctx.params = dev_params_;
    ctx.grad_params = dev.params;
    ctx.saved = saved;
    ctx.workspace = workspace;
    ctx.collective = collective_;
    rt_->backward(ctx);
    for (const Tensor& t : dev.inputs) host.inputs.push_back(t.defined() ? backend_->download(t) : Tensor());
    for (const Tensor& t : dev.params) host.params.push_back(t.defined() ? backend_->download(t) : Tensor());
    return host;
  }

  // A tensor of the backend (a saved tensor, say) on the host.
  Tensor on_host(const Tensor& t) { return backend_->download(t); }

  std::vector<Tensor> inputs;  // host
  std::vector<Tensor> params;  // host, one per param_specs() entry
  std::vector<Tensor> saved;   // on the backend (host memory on the CPU), kept from forward to backward
  std::vector<Tensor> derived;  // on the backend: refreshed from the state before every forward
  Tensor workspace;            // on the backend
  Tensor output;               // host; tests may replace it with one of another shape together with the inputs

 private:
  std::string backend_name() const { return std::string(graph::backend_name(backend_->backend())); }
  std::vector<Shape> shapes() const {
    std::vector<Shape> s;
    for (auto& t : inputs) s.push_back(t.shape());
    return s;
  }
  void lower(const graph::Op& op, graph::Mode mode) {
    mode_ = mode;
    out_shape_ = op.infer_output_shape(shapes());
    rt_ = op.lower(backend_->backend(), mode);
    EXPECT_EQ(rt_->n_activation_inputs(), static_cast<int>(inputs.size()));
    specs_ = rt_->param_specs(shapes(), out_shape_);
    for (auto& s : rt_->saved_specs(shapes(), out_shape_)) saved.push_back(allocate(s.shape, s.dtype));
    if (size_t ws = rt_->workspace_bytes({backend_.get(), mode, false}, shapes(), out_shape_))
      workspace = allocate(Shape{int64_t(ws)}, DType::u8);
    for (auto& s : rt_->derived_specs(shapes(), out_shape_)) derived.push_back(allocate(s.shape, s.dtype));
    output = Tensor::zeros(out_shape_);
  }
  Tensor allocate(const Shape& s, DType t) {
    auto mem = backend_->allocate(std::max<size_t>(static_cast<size_t>(s.numel()) * core::dtype_size(t), 1));
    void* p = mem.get();
    return Tensor::wrap(std::move(mem), p, s, t, backend_->device());
  }
  // The host tensor itself on the CPU (the op works on the test's tensors), a copy on another backend.
  Tensor to_backend(const Tensor& host) {
    return backend_->device() == core::Device::cpu ? host : backend_->upload(host);
  }
  std::vector<Tensor> to_backend(const std::vector<Tensor>& host) {
    std::vector<Tensor> out;
    for (const Tensor& t : host) out.push_back(to_backend(t));
    return out;
  }
  void to_host(const Tensor& dev, Tensor& host) {
    if (dev.raw() != host.raw()) backend_->copy_to_host(host.raw(), dev.raw(), host.nbytes());
    backend_->synchronize();
  }
  // All bytes 0xff: NaN in f32 (and in f16/bf16), so that a value the op does not write shows.
  void poison(const Tensor& dev) {
    const std::vector<uint8_t> nan(dev.nbytes(), 0xff);
    backend_->copy_to_device(dev.raw(), nan.data(), nan.size());
  }
  Tensor poisoned_on_backend(const Shape& s) {
    Tensor t = allocate(s, DType::f32);
    poison(t);
    return t;
  }

  std::shared_ptr<graph::BackendContext> backend_;
  graph::Collective* collective_ = nullptr;
  std::unique_ptr<graph::RuntimeOp> rt_;
  graph::Mode mode_ = graph::Mode::inference;
  std::vector<graph::ParamSpec> specs_;
  Shape out_shape_;
  std::vector<Tensor> dev_inputs_, dev_params_;
  Tensor dev_output_;
};

// Random γ, β and running statistics (variance in [0.2, 2)) for the BatchNorm state under `prefix` ("" for a plain
// BatchNorm2d, "bn." in a fused convolution), so that no test sees the identity state γ = 1, β = 0, μ = 0, σ² = 1.
inline void randomize_batchnorm(OpHarness& h, const std::string& prefix = "") {
  h.param(prefix + "weight") = random_tensor(h.param(prefix + "weight").shape(), 0.5f, 1.5f);
  h.param(prefix + "bias") = random_tensor(h.param(prefix + "bias").shape());
  h.param(prefix + "running_mean") = random_tensor(h.param(prefix + "running_mean").shape());
  h.param(prefix + "running_var") = random_tensor(h.param(prefix + "running_var").shape(), 0.2f, 2.0f);
}

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
