#include "vision/train/ema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "vision/core/error.h"
#include "vision/train/optim_kernels.h"
#ifdef VISION_HAS_CUDA
#include "vision/cuda/memory.h"
#include "vision/train/optim_kernels_cuda.h"
#endif

namespace vision::train {

using core::DType;
using core::Tensor;

double ema_decay(int64_t n, double decay, double tau) {
  return decay * (1.0 - std::exp(-static_cast<double>(n) / tau));
}

namespace {

struct Slot {
  std::string key;
  core::Shape shape;
  graph::StateKind kind;
  size_t entry_offset = 0;  // bytes, as in the entry
  int64_t dst = 0;          // first element in the EMA buffer
};

// The buffer region's base address (StateEntry::offset of a buffer counts from it); null without f32 buffers.
const float* buffer_base(const graph::StateStore& model, const std::vector<Slot>& slots) {
  const std::byte* base = nullptr;
  for (const Slot& s : slots) {
    if (s.kind != graph::StateKind::buffer) continue;
    const auto* b = static_cast<const std::byte*>(model.tensor(s.key).raw()) - s.entry_offset;
    VISION_CHECK(base == nullptr || base == b, "EMA: the model's buffers do not share one region");
    base = b;
  }
  return reinterpret_cast<const float*>(base);
}

}  // namespace

struct ModelEma::Impl {
  EmaOptions options;
  graph::BackendContext* backend = nullptr;
  std::vector<Slot> slots;
  std::map<std::string, size_t> index;
  std::vector<graph::StateEntry> entries;  // the model's, to check later updates against
  std::vector<EmaChunk> chunks;
  int64_t total = 0, updates = 0;
  bool pending = false;  // an update staged (and launched, or replayed) and not yet finished
  std::shared_ptr<void> memory, device_chunks;
  float staged[2] = {0.0f, 1.0f};  // {d, 1 − d} of the update staged last
#ifdef VISION_HAS_CUDA
  std::unique_ptr<cuda::ReplayableUpload> decay;  // on CUDA: `staged` for the kernel (a replay reads the last one)
#endif

  void stage(float d, float omd) {
    staged[0] = d;
    staged[1] = omd;
#ifdef VISION_HAS_CUDA
    if (decay) decay->stage(staged, sizeof(staged));
#endif
  }

  // The staged update; status: an optimizer step's decision (host memory on the CPU, device memory on CUDA), or null:
  // always update.
  void run(const graph::StateStore& model, const OptimStatus* status = nullptr) {
    check_model(model);
    const auto* params = static_cast<const float*>(model.flat_params().raw());
    const float* buffers = buffer_base(model, slots);
    auto* ema = static_cast<float*>(memory.get());
    if (backend->backend() == graph::Backend::cpu) {
      if (status == nullptr || status->applied) ema_update_cpu(ema, params, buffers, chunks, staged[0], staged[1]);
      return;
    }
#ifdef VISION_HAS_CUDA
    launch_ema_update(*backend, ema, params, buffers, static_cast<const EmaChunk*>(device_chunks.get()),
                      static_cast<int64_t>(chunks.size()), *decay, status);
#else
    fail("EMA: this build has no CUDA backend");
#endif
  }

  void check_model(const graph::StateStore& model) const {
    VISION_CHECK(&model.backend() == backend, "EMA: the model's state is on another backend than the average");
    const auto& e = model.entries();
    bool same = e.size() == entries.size();
    for (size_t i = 0; same && i < e.size(); ++i)
      same = e[i].key == entries[i].key && e[i].offset == entries[i].offset && e[i].shape == entries[i].shape &&
             e[i].kind == entries[i].kind;
    VISION_CHECK(same, "EMA: the model's state is not the one the average was made from (other tensors)");
  }

  Tensor view(const Slot& s) const {
    return Tensor::view(static_cast<float*>(memory.get()) + s.dst, s.shape, DType::f32, backend->device());
  }
};

ModelEma::ModelEma(const graph::StateStore& model, EmaOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  VISION_CHECK(options.decay >= 0 && options.decay <= 1 && options.tau > 0,
               "EMA: decay {} must be in [0, 1] and tau {} positive", options.decay, options.tau);
  m.options = options;
  m.backend = &model.backend();
  m.entries = model.entries();
  for (const auto& e : model.entries()) {
    if (!core::is_floating(e.dtype)) continue;  // num_batches_tracked and other counters
    VISION_CHECK(e.dtype == DType::f32,
                 "EMA: state '{}' is {}; the average covers f32 parameters and buffers only", e.key,
                 core::dtype_name(e.dtype));
    VISION_CHECK(e.offset % sizeof(float) == 0, "EMA: state '{}' is not f32-aligned in its region", e.key);
    Slot s{e.key, e.shape, e.kind, e.offset, m.total};
    const int64_t n = e.shape.numel();
    const int64_t src = static_cast<int64_t>(e.offset / sizeof(float));
    for (int64_t j = 0; j < n; j += kOptimChunk)
      m.chunks.push_back({e.kind == graph::StateKind::parameter ? 0 : 1, src + j, m.total + j,
                          std::min<int64_t>(kOptimChunk, n - j)});
    m.index[e.key] = m.slots.size();
    m.slots.push_back(std::move(s));
    m.total += n;
  }
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(m.total, 1)) * sizeof(float);
  m.memory = m.backend->allocate(bytes);
  m.backend->fill_zero(m.memory.get(), bytes);
  if (m.backend->backend() != graph::Backend::cpu && !m.chunks.empty()) {
    m.device_chunks = m.backend->allocate(m.chunks.size() * sizeof(EmaChunk));
    m.backend->copy_to_device(m.device_chunks.get(), m.chunks.data(), m.chunks.size() * sizeof(EmaChunk));
  }
#ifdef VISION_HAS_CUDA
  if (m.backend->backend() != graph::Backend::cpu) m.decay = std::make_unique<cuda::ReplayableUpload>(sizeof(m.staged));
#endif
  m.stage(0.0f, 1.0f);  // 0·0 + 1·x: the exact copy
  m.run(model);
}

ModelEma::~ModelEma() = default;

void ModelEma::update(const graph::StateStore& model) {
  queue_update(model, nullptr);
  finish_update(true);
}

void ModelEma::queue_update(const graph::StateStore& model, const OptimStatus* step_status) {
  stage_update();
  launch_update(model, step_status);
}

void ModelEma::stage_update() {
  Impl& m = *impl_;
  VISION_CHECK(!m.pending, "EMA: an update was queued and not finished (finish_update) before the next one");
  const double d = ema_decay(m.updates + 1, m.options.decay, m.options.tau);
  m.stage(static_cast<float>(d), static_cast<float>(1.0 - d));
  m.pending = true;
}

void ModelEma::launch_update(const graph::StateStore& model, const OptimStatus* step_status) {
  Impl& m = *impl_;
  VISION_CHECK(m.pending, "EMA: launch_update needs an update staged (stage_update)");
  m.run(model, step_status);
}

void ModelEma::finish_update(bool applied) {
  Impl& m = *impl_;
  VISION_CHECK(m.pending, "EMA: finish_update without a queued update");
  m.pending = false;
  if (applied) ++m.updates;
}

void ModelEma::cancel_update() { impl_->pending = false; }

int64_t ModelEma::updates() const { return impl_->updates; }
double ModelEma::next_decay() const { return ema_decay(impl_->updates + 1, impl_->options.decay, impl_->options.tau); }

std::vector<std::string> ModelEma::keys() const {
  std::vector<std::string> out;
  for (const auto& s : impl_->slots) out.push_back(s.key);
  return out;
}

Tensor ModelEma::tensor(const std::string& key) const {
  auto it = impl_->index.find(key);
  VISION_CHECK(it != impl_->index.end(), "the EMA has no tensor '{}' (it averages floating state only)", key);
  return impl_->view(impl_->slots[it->second]);
}

std::vector<std::pair<std::string, Tensor>> ModelEma::to_host() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& s : impl_->slots) out.emplace_back(s.key, impl_->backend->download(impl_->view(s)));
  return out;
}

void ModelEma::copy_to(graph::StateStore& target) const {
  impl_->check_model(target);
  for (const auto& s : impl_->slots)
    impl_->backend->copy_on_device(target.tensor(s.key).raw(), impl_->view(s).raw(), impl_->view(s).nbytes());
  target.mark_updated();
}

void ModelEma::load(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t updates) {
  Impl& m = *impl_;
  VISION_CHECK(updates >= 0, "EMA: {} updates", updates);
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : tensors) given[name] = &t;
  std::vector<std::string> problems;
  for (const auto& s : m.slots) {
    auto it = given.find(s.key);
    if (it == given.end()) problems.push_back(s.key + " (missing)");
    else if (it->second->shape() != s.shape || !core::is_floating(it->second->dtype()) ||
             it->second->device() != core::Device::cpu)
      problems.push_back(fmt::format("{} ({}, needs a host floating {})", s.key, it->second->str(), s.shape.str()));
  }
  if (!problems.empty()) {
    std::string list;
    for (size_t i = 0; i < problems.size() && i < 20; ++i) list += (i ? ", " : "") + problems[i];
    fail("the EMA state does not fit the model: {}", list);
  }
  for (const auto& s : m.slots) {
    const Tensor& t = *given.at(s.key);
    const Tensor f32 = t.dtype() == DType::f32 ? t : Tensor::from_vector(t.shape(), t.to_vector());
    m.backend->copy_to_device(m.view(s).raw(), f32.raw(), f32.nbytes());
  }
  m.updates = updates;
}

}  // namespace vision::train
