#include "vision/train/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <span>

#include "vision/core/error.h"
#include "vision/train/optim_kernels.h"
#include "vision/train/optim_engine.h"
#include "vision/train/optim_math.cuh"

namespace vision::train {

using core::DType;
using core::Shape;
using core::Tensor;

OptimizerChoice choose_auto_optimizer(int64_t n_train, int64_t batch, int64_t nbs, int64_t epochs, int64_t nc) {
  VISION_CHECK(n_train >= 0 && batch > 0 && nbs > 0 && epochs >= 0 && nc > 0,
               "optimizer auto: needs a training set size ≥ 0, batch > 0, nbs > 0, epochs ≥ 0 and nc > 0 (got {}, "
               "{}, {}, {}, {})",
               n_train, batch, nbs, epochs, nc);
  const int64_t per_epoch = std::max(batch, nbs);
  OptimizerChoice c;
  c.iterations = (n_train + per_epoch - 1) / per_epoch * epochs;
  c.warmup_bias_lr = 0.0;
  if (c.iterations > 10000) {
    c.kind = OptimizerKind::musgd;
    c.lr = 0.01;
    c.momentum = 0.9;
  } else {
    c.kind = OptimizerKind::adamw;
    c.lr = std::nearbyint(0.002 * 5.0 / (4.0 + static_cast<double>(nc)) * 1e6) / 1e6;  // round(x, 6)
    c.momentum = 0.9;
  }
  return c;
}

namespace {

void add_chunks(std::vector<OptimChunk>& out, int64_t tensor, int64_t numel) {
  for (int64_t s = 0; s < numel; s += kOptimChunk) out.push_back({tensor, s, std::min<int64_t>(kOptimChunk, numel - s)});
}

OptimTables build_tables(const GroupAssignment& a, bool musgd) {
  OptimTables t;
  t.tensor_of_param.assign(a.params.size(), -1);
  // Newton–Schulz batches by matrix shape (m, n), m ≤ n: a tensor and the transpose of another share one.
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> by_shape;
  std::vector<std::pair<int64_t, int64_t>> shape_order;
  for (size_t i = 0; i < a.params.size(); ++i) {
    const int g = a.group_of[i];
    if (g < 0) continue;
    const ParamTensor& p = a.params[i];
    OptimTensor r{};
    r.offset = p.offset;
    r.numel = p.shape.numel();
    r.group = g;
    r.ns_offset = -1;
    r.rows = r.numel;
    r.cols = 1;
    r.transposed = 0;
    r.muon_scale = 1.0f;
    const int64_t index = static_cast<int64_t>(t.tensors.size());
    if (musgd && a.groups[static_cast<size_t>(g)].kind == GroupKind::muon && r.numel > 0) {
      const Shape& s = p.shape;
      r.rows = s[0];
      r.cols = r.numel / r.rows;
      r.transposed = r.rows > r.cols ? 1 : 0;
      r.muon_scale = static_cast<float>(
          std::sqrt(std::max(1.0, static_cast<double>(s[static_cast<int>(s.rank()) - 2]) /
                                      static_cast<double>(s[static_cast<int>(s.rank()) - 1]))));
      const auto key = std::pair{std::min(r.rows, r.cols), std::max(r.rows, r.cols)};
      if (!by_shape.count(key)) shape_order.push_back(key);
      by_shape[key].push_back(index);
      t.muon_tensors.push_back(index);
    }
    t.tensor_of_param[i] = index;
    t.tensors.push_back(r);
    add_chunks(t.chunks, index, r.numel);
  }
  for (const auto& key : shape_order) {
    OptimTables::NsBatch b{key.first, key.second, 0, t.ns_elements};
    for (int64_t index : by_shape[key]) {
      t.tensors[static_cast<size_t>(index)].ns_offset = t.ns_elements;
      t.ns_elements += b.m * b.n;
      ++b.count;
    }
    t.ns_batches.push_back(b);
  }
  for (int64_t index : t.muon_tensors) add_chunks(t.muon_chunks, index, t.tensors[static_cast<size_t>(index)].numel);
  return t;
}

class CpuEngine final : public Engine {
 public:
  CpuEngine(const OptimTables& t, StatePointers p) : t_(t), p_(p), ns_(static_cast<size_t>(t.ns_elements)) {}

  void decide(float max_grad_norm) override {
    status_ = optim_math::decide_step(grad_sumsq_cpu(p_.grads, t_.tensors, t_.chunks), max_grad_norm);
  }
  OptimStatus status() override { return status_; }
  const OptimStatus* status_pointer() const override { return &status_; }
  void stage(std::span<const OptimGroup> groups) override { groups_.assign(groups.begin(), groups.end()); }
  bool capturable() const override { return false; }

  void sgd(bool musgd, int ns_steps) override {
    if (!status_.applied) return;
    const float coef = status_.coef;
    const std::span<const OptimGroup> groups(groups_);
    if (musgd && !t_.muon_tensors.empty()) {
      muon_prepare_cpu(p_.grads, p_.second, ns_.data(), t_.tensors, t_.muon_chunks, groups, coef);
      muon_normalize_cpu(ns_.data(), t_.tensors, t_.muon_tensors);
      for (const auto& b : t_.ns_batches) newton_schulz_cpu(ns_.data() + b.ns_offset, b.count, b.m, b.n, ns_steps);
    }
    sgd_step_cpu(p_.params, p_.grads, p_.momentum, ns_.empty() ? nullptr : ns_.data(), t_.tensors, t_.chunks, groups,
                 coef);
  }

  void adamw() override {
    if (!status_.applied) return;
    adamw_step_cpu(p_.params, p_.grads, p_.momentum, p_.second, t_.tensors, t_.chunks, groups_, status_.coef);
  }

 private:
  const OptimTables& t_;
  StatePointers p_;
  std::vector<OptimGroup> groups_;
  std::vector<uint16_t> ns_;
  OptimStatus status_{};
};

}  // namespace

struct Optimizer::Impl {
  OptimizerOptions options;
  graph::StateStore* store = nullptr;
  std::shared_ptr<graph::BackendContext> backend;
  Tensor params, grads;
  GroupAssignment assignment;
  std::vector<GroupSettings> settings;
  OptimTables tables;
  std::shared_ptr<void> momentum_mem, second_mem;
  std::unique_ptr<Engine> engine;
  int64_t steps = 0, skipped = 0;
  bool pending = false;  // a step staged (and launched, or replayed) and not yet finished

  struct StateSlot {
    std::string name;
    int which = 0;  // 0: momentum buffer, 1: second buffer
    int64_t offset = 0;
    Shape shape;
  };
  std::vector<StateSlot> slots;
  std::map<std::string, size_t> slot_index;

  void init(const std::vector<graph::StateEntry>& entries) {
    VISION_CHECK(options.ns_steps >= 0, "optimizer: ns_steps must be ≥ 0, got {}", options.ns_steps);
    VISION_CHECK(options.lr >= 0 && options.weight_decay >= 0 && options.momentum >= 0 && options.momentum < 1 &&
                     options.beta2 >= 0 && options.beta2 < 1 && options.eps > 0,
                 "optimizer {}: lr {}, momentum {}, weight decay {}, beta2 {}, eps {} out of range",
                 optimizer_name(options.kind), options.lr, options.momentum, options.weight_decay, options.beta2,
                 options.eps);
    assignment = assign_param_groups(entries, options.kind, options.rules);
    int64_t n = 0;
    for (const auto& p : assignment.params) n = std::max(n, p.offset + p.shape.numel());
    VISION_CHECK(params.defined() && grads.defined() && params.dtype() == DType::f32 &&
                     grads.dtype() == DType::f32 && params.numel() >= n && grads.numel() == params.numel() &&
                     params.device() == backend->device() && grads.device() == backend->device(),
                 "optimizer: the flat parameters {} and gradients {} must be f32 tensors of at least {} elements on "
                 "the {} backend",
                 params.defined() ? params.str() : "(none)", grads.defined() ? grads.str() : "(none)", n,
                 graph::backend_name(backend->backend()));
    for (const auto& g : assignment.groups)
      settings.push_back({options.lr * g.lr_scale, options.momentum, g.decay ? options.weight_decay : 0.0});
    tables = build_tables(assignment, options.kind == OptimizerKind::musgd);

    const size_t bytes = static_cast<size_t>(std::max<int64_t>(params.numel(), 1)) * sizeof(float);
    momentum_mem = backend->allocate(bytes);
    backend->fill_zero(momentum_mem.get(), bytes);
    if (options.kind != OptimizerKind::sgd) {
      second_mem = backend->allocate(bytes);
      backend->fill_zero(second_mem.get(), bytes);
    }
    StatePointers p{static_cast<float*>(params.raw()), static_cast<const float*>(grads.raw()),
                    static_cast<float*>(momentum_mem.get()), static_cast<float*>(second_mem.get())};
    if (backend->backend() == graph::Backend::cpu) {
      engine = std::make_unique<CpuEngine>(tables, p);
    } else {
#ifdef VISION_HAS_CUDA
      engine = make_cuda_engine(tables, p, *backend);
#else
      fail("optimizer: this build has no CUDA backend");
#endif
    }

    // Named state.
    for (size_t i = 0; i < assignment.params.size(); ++i) {
      if (tables.tensor_of_param[i] < 0) continue;
      const ParamTensor& p = assignment.params[i];
      const auto& t = tables.tensors[static_cast<size_t>(tables.tensor_of_param[i])];
      auto add = [&](const char* suffix, int which) {
        slot_index[fmt::format("optimizer.{}.{}", p.key, suffix)] = slots.size();
        slots.push_back({fmt::format("optimizer.{}.{}", p.key, suffix), which, p.offset, p.shape});
      };
      switch (options.kind) {
        case OptimizerKind::sgd: add("momentum_buffer", 0); break;
        case OptimizerKind::adamw:
          add("exp_avg", 0);
          add("exp_avg_sq", 1);
          break;
        case OptimizerKind::musgd:
          add("momentum_buffer", 0);
          if (t.ns_offset >= 0) add("muon_momentum_buffer", 1);
          break;
      }
    }
  }

  // The groups' table for a step that is AdamW's t-th.
  std::vector<OptimGroup> group_table(int64_t step) const {
    std::vector<OptimGroup> out;
    for (const auto& s : settings) {
      OptimGroup g{};
      g.lr = static_cast<float>(s.lr);
      g.momentum = static_cast<float>(s.momentum);
      g.weight_decay = static_cast<float>(s.weight_decay);
      g.one_minus_momentum = static_cast<float>(1.0 - s.momentum);
      g.muon_lr = static_cast<float>(s.lr * 0.2);
      g.decay_factor = static_cast<float>(1.0 - s.lr * s.weight_decay);
      g.beta2 = static_cast<float>(options.beta2);
      g.one_minus_beta2 = static_cast<float>(1.0 - options.beta2);
      g.eps = static_cast<float>(options.eps);
      const double t = static_cast<double>(step);
      g.step_size = static_cast<float>(s.lr / (1.0 - std::pow(s.momentum, t)));
      g.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(options.beta2, t)));
      out.push_back(g);
    }
    return out;
  }

  Tensor slot_view(const StateSlot& s) const {
    auto* base = static_cast<float*>(s.which == 0 ? momentum_mem.get() : second_mem.get());
    return Tensor::view(base + s.offset, s.shape, DType::f32, backend->device());
  }
};

Optimizer::Optimizer(graph::StateStore& state, OptimizerOptions options)
    : Optimizer(state.entries(), state.flat_params(), state.flat_grads(),
                std::shared_ptr<graph::BackendContext>(std::shared_ptr<void>(), &state.backend()), std::move(options)) {
  impl_->store = &state;
}

Optimizer::Optimizer(const std::vector<graph::StateEntry>& entries, Tensor flat_params, Tensor flat_grads,
                     std::shared_ptr<graph::BackendContext> backend, OptimizerOptions options)
    : impl_(std::make_unique<Impl>()) {
  VISION_CHECK(backend != nullptr, "optimizer: no backend");
  impl_->options = std::move(options);
  impl_->backend = std::move(backend);
  impl_->params = std::move(flat_params);
  impl_->grads = std::move(flat_grads);
  impl_->init(entries);
}

Optimizer::~Optimizer() = default;

const OptimizerOptions& Optimizer::options() const { return impl_->options; }
const GroupAssignment& Optimizer::assignment() const { return impl_->assignment; }

const GroupSettings& Optimizer::group_settings(size_t i) const {
  VISION_CHECK(i < impl_->settings.size(), "optimizer: group {} of {}", i, impl_->settings.size());
  return impl_->settings[i];
}

void Optimizer::set_group_lr(size_t i, double lr) {
  VISION_CHECK(i < impl_->settings.size() && lr >= 0, "optimizer: lr {} for group {} of {}", lr, i,
               impl_->settings.size());
  impl_->settings[i].lr = lr;
}

void Optimizer::set_group_momentum(size_t i, double momentum) {
  VISION_CHECK(i < impl_->settings.size() && momentum >= 0 && momentum < 1,
               "optimizer: momentum {} for group {} of {} (0 ≤ momentum < 1)", momentum, i, impl_->settings.size());
  impl_->settings[i].momentum = momentum;
}

void Optimizer::set_group_weight_decay(size_t i, double weight_decay) {
  VISION_CHECK(i < impl_->settings.size() && weight_decay >= 0, "optimizer: weight decay {} for group {} of {}",
               weight_decay, i, impl_->settings.size());
  impl_->settings[i].weight_decay = weight_decay;
}

void Optimizer::queue_step() {
  stage_step();
  launch_step();
}

void Optimizer::stage_step() {
  Impl& m = *impl_;
  VISION_CHECK(!m.pending, "optimizer: a step was queued and not finished (finish_step) before the next one");
  // The tables as for an applied step (AdamW's t = steps + 1); a skipped step does not use them.
  m.engine->stage(m.group_table(m.steps + 1));
  m.pending = true;
}

void Optimizer::launch_step() {
  Impl& m = *impl_;
  // Once per staged step, except after a capture that failed (it only recorded): the step then runs eagerly.
  VISION_CHECK(m.pending, "optimizer: launch_step needs a step staged (stage_step)");
  m.engine->decide(m.options.max_grad_norm > 0 ? static_cast<float>(m.options.max_grad_norm) : 0.0f);
  if (m.options.kind == OptimizerKind::adamw) m.engine->adamw();
  else m.engine->sgd(m.options.kind == OptimizerKind::musgd, m.options.ns_steps);
}

bool Optimizer::capturable() const { return impl_->engine->capturable(); }

void Optimizer::cancel_step() { impl_->pending = false; }

StepResult Optimizer::finish_step() {
  Impl& m = *impl_;
  VISION_CHECK(m.pending, "optimizer: finish_step without a queued step");
  m.pending = false;
  const OptimStatus s = m.engine->status();
  StepResult r;
  r.grad_norm = s.norm;
  if (!s.applied) {
    ++m.skipped;
    return r;
  }
  r.clip_coef = s.coef;
  r.applied = true;
  ++m.steps;
  if (m.store) m.store->mark_updated();
  return r;
}

StepResult Optimizer::step() {
  queue_step();
  return finish_step();
}

const OptimStatus* Optimizer::step_status() const { return impl_->engine->status_pointer(); }

void Optimizer::zero_grad() { impl_->backend->fill_zero(impl_->grads.raw(), impl_->grads.nbytes()); }

int64_t Optimizer::steps() const { return impl_->steps; }
int64_t Optimizer::skipped_steps() const { return impl_->skipped; }

std::vector<std::string> Optimizer::state_names() const {
  std::vector<std::string> out = {"optimizer.step"};
  for (const auto& s : impl_->slots) out.push_back(s.name);
  return out;
}

Tensor Optimizer::state_tensor(const std::string& name) const {
  if (name == "optimizer.step") {
    Tensor t = Tensor::zeros(Shape{}, DType::i64);
    *t.data<int64_t>() = impl_->steps;
    return t;
  }
  auto it = impl_->slot_index.find(name);
  VISION_CHECK(it != impl_->slot_index.end(), "the {} optimizer has no state tensor '{}'",
               optimizer_name(impl_->options.kind), name);
  return impl_->slot_view(impl_->slots[it->second]);
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("optimizer.step", state_tensor("optimizer.step"));
  for (const auto& s : impl_->slots) out.emplace_back(s.name, impl_->backend->download(impl_->slot_view(s)));
  return out;
}

void Optimizer::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  Impl& m = *impl_;
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : tensors)
    if (name.starts_with("optimizer.")) given[name] = &t;
  std::vector<std::string> problems;
  for (const auto& [name, t] : given)
    if (name != "optimizer.step" && !m.slot_index.count(name)) problems.push_back(name + " (unknown)");
  auto step_it = given.find("optimizer.step");
  int64_t steps = 0;
  if (step_it == given.end()) {
    problems.push_back("optimizer.step (missing)");
  } else {
    const Tensor& t = *step_it->second;
    if (t.numel() != 1 || t.device() != core::Device::cpu) problems.push_back("optimizer.step (not a host scalar)");
    else if (t.dtype() == DType::i64) steps = *t.data<int64_t>();
    else if (t.dtype() == DType::i32) steps = *t.data<int32_t>();
    else if (t.dtype() == DType::f32) steps = static_cast<int64_t>(*t.data<float>());
    else problems.push_back("optimizer.step (not an integer)");
    if (steps < 0) problems.push_back("optimizer.step (negative)");
  }
  for (const auto& s : m.slots) {
    auto it = given.find(s.name);
    if (it == given.end()) problems.push_back(s.name + " (missing)");
    else if (it->second->shape() != s.shape || it->second->dtype() != DType::f32 ||
             it->second->device() != core::Device::cpu)
      problems.push_back(fmt::format("{} ({}, the optimizer needs host f32{})", s.name, it->second->str(),
                                     s.shape.str()));
  }
  if (!problems.empty()) {
    std::string list;
    for (size_t i = 0; i < problems.size() && i < 20; ++i) list += (i ? ", " : "") + problems[i];
    if (problems.size() > 20) list += fmt::format(", … ({} in all)", problems.size());
    fail("the {} optimizer's state does not fit (a checkpoint of another optimizer, model or freeze setting?): {}",
         optimizer_name(m.options.kind), list);
  }
  for (const auto& s : m.slots) {
    const Tensor dst = m.slot_view(s);
    m.backend->copy_to_device(dst.raw(), given.at(s.name)->raw(), dst.nbytes());
  }
  m.steps = steps;
}

void Optimizer::load_state_dict(const core::SafetensorsFile& file) { load_state_dict(file.tensors); }

}  // namespace vision::train
