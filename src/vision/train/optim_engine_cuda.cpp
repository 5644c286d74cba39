#include <algorithm>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "vision/core/error.h"
#include "vision/cuda/check.h"
#include "vision/cuda/memory.h"
#include "vision/graph/cuda/cuda_backend.h"
#include "vision/train/optim_engine.h"
#include "vision/train/optim_kernels_cuda.h"

namespace vision::train {
namespace {

class CudaEngine final : public Engine {
 public:
  CudaEngine(const OptimTables& t, StatePointers p, graph::BackendContext& backend)
      : t_(t), p_(p), backend_(backend), cuda_(graph::CudaBackendContext::of(&backend)) {
    tensors_ = upload(t.tensors);
    chunks_ = upload(t.chunks);
    muon_chunks_ = upload(t.muon_chunks);
    muon_tensors_ = upload(t.muon_tensors);
    partials_ = backend.allocate(std::max<size_t>(t.chunks.size(), 1) * sizeof(float));
    status_ = backend.allocate(sizeof(OptimStatus));
    if (t.ns_elements > 0) {
      std::vector<GroupedNewtonSchulz::Shape> shapes;
      for (const auto& b : t.ns_batches) shapes.push_back({b.m, b.n, b.count, b.ns_offset});
      const size_t ns_bytes = static_cast<size_t>(t.ns_elements) * 2,
                   sq_bytes = static_cast<size_t>(GroupedNewtonSchulz::square_elements(shapes)) * 2;
      VISION_CHECK(GroupedNewtonSchulz::elements(shapes) == t.ns_elements,
                   "optimizer: the Newton–Schulz batches hold {} elements, the buffer {}",
                   GroupedNewtonSchulz::elements(shapes), t.ns_elements);
      ns_x_ = backend.allocate(ns_bytes);
      // Zeroed: a skipped step leaves the Muon input unwritten, and the Newton–Schulz GEMMs still read it (their
      // result is then unused).
      backend.fill_zero(ns_x_.get(), ns_bytes);
      ns_y_ = backend.allocate(ns_bytes);
      ns_a_ = backend.allocate(sq_bytes);
      ns_b_ = backend.allocate(sq_bytes);
      // Zeroed: the scratch matrices' padding is copied (never read by a GEMM).
      backend.fill_zero(ns_a_.get(), sq_bytes);
      backend.fill_zero(ns_b_.get(), sq_bytes);
      ns_ = std::make_unique<GroupedNewtonSchulz>(
          shapes, as<uint16_t>(ns_x_), as<uint16_t>(ns_y_), as<uint16_t>(ns_a_), as<uint16_t>(ns_b_),
          [this](const void* host, size_t bytes) { return upload_bytes(host, bytes); }, newton_schulz_path_from_env());
    }
  }

  void decide(float max_grad_norm) override {
    launch_grad_sumsq(cuda_.stream(), p_.grads, as<OptimTensor>(tensors_), as<OptimChunk>(chunks_),
                      static_cast<int64_t>(t_.chunks.size()), as<float>(partials_), as<OptimStatus>(status_),
                      max_grad_norm);
  }

  OptimStatus status() override {
    OptimStatus host{};
    backend_.copy_to_host(&host, status_.get(), sizeof(host));  // waits for the stream
    return host;
  }

  const OptimStatus* status_pointer() const override { return as<OptimStatus>(status_); }

  // The step's group settings (lr, momentum, …) go to the device from a pinned buffer of the engine's own, so the
  // copy can be captured into a CUDA graph (a replay reads the buffer as stage() last wrote it).
  void stage(std::span<const OptimGroup> groups) override {
    VISION_CHECK(groups.size() <= std::max<size_t>(t_.tensors.size(), 1),
                 "optimizer: {} groups for {} tensors", groups.size(), t_.tensors.size());
    const size_t bytes = groups.size() * sizeof(OptimGroup);
    if (!groups_) groups_ = std::make_unique<cuda::ReplayableUpload>(bytes);
    VISION_CHECK(groups_->bytes() == bytes, "optimizer: {} groups staged, {} before", groups.size(),
                 groups_->bytes() / sizeof(OptimGroup));
    groups_->stage(groups.data(), bytes);
  }

  // The engine's own Newton–Schulz kernel only: cuBLAS's grouped GEMM replayed wrong when captured (OptimizerGpu's
  // disabled launch-count test), and its per-shape GEMMs have not been captured yet.
  bool capturable() const override { return !ns_ || ns_->path() == NsPath::kernel; }

  void sgd(bool musgd, int ns_steps) override {
    const auto* status = as<OptimStatus>(status_);
    const OptimGroup* groups = queue_groups();
    const uint16_t* ns_out = nullptr;
    if (musgd && !t_.muon_tensors.empty()) {
      auto* x = as<uint16_t>(ns_x_);
      launch_muon_prepare(cuda_.stream(), p_.grads, p_.second, x, as<OptimTensor>(tensors_),
                          as<OptimChunk>(muon_chunks_), static_cast<int64_t>(t_.muon_chunks.size()), groups, 1.0f,
                          status);
      launch_muon_normalize(cuda_.stream(), x, as<OptimTensor>(tensors_), as<int64_t>(muon_tensors_),
                            static_cast<int64_t>(t_.muon_tensors.size()), status);
      ns_out = ns_->run(cuda_.cublas(), cuda_.stream(), ns_steps);
    }
    launch_sgd_step(cuda_.stream(), p_.params, p_.grads, p_.momentum, ns_out, as<OptimTensor>(tensors_),
                    as<OptimChunk>(chunks_), static_cast<int64_t>(t_.chunks.size()), groups, 1.0f, status);
  }

  void adamw() override {
    const OptimGroup* groups = queue_groups();
    launch_adamw_step(cuda_.stream(), p_.params, p_.grads, p_.momentum, p_.second, as<OptimTensor>(tensors_),
                      as<OptimChunk>(chunks_), static_cast<int64_t>(t_.chunks.size()), groups, 1.0f,
                      as<OptimStatus>(status_));
  }

 private:
  template <typename T>
  static T* as(const std::shared_ptr<void>& p) {
    return static_cast<T*>(p.get());
  }
  // Device memory holding a copy of host bytes (at least one byte allocated).
  std::shared_ptr<void> upload_bytes(const void* host, size_t bytes) {
    auto mem = backend_.allocate(std::max<size_t>(bytes, 1));
    if (bytes) backend_.copy_to_device(mem.get(), host, bytes);
    return mem;
  }
  template <typename T>
  std::shared_ptr<void> upload(const std::vector<T>& v) {
    return v.empty() ? backend_.allocate(sizeof(T)) : upload_bytes(v.data(), v.size() * sizeof(T));
  }
  // The staged group settings copied to the device on the stream (captured with the step).
  const OptimGroup* queue_groups() {
    VISION_CHECK(groups_ != nullptr, "optimizer: a step was launched before its group settings were staged");
    groups_->queue(cuda_.stream());
    return static_cast<const OptimGroup*>(groups_->device());
  }

  const OptimTables& t_;
  StatePointers p_;
  graph::BackendContext& backend_;
  graph::CudaBackendContext& cuda_;
  std::shared_ptr<void> tensors_, chunks_, muon_chunks_, muon_tensors_, partials_, status_;
  std::unique_ptr<cuda::ReplayableUpload> groups_;
  std::shared_ptr<void> ns_x_, ns_y_, ns_a_, ns_b_;
  std::unique_ptr<GroupedNewtonSchulz> ns_;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(const OptimTables& tables, StatePointers pointers,
                                         graph::BackendContext& backend) {
  return std::make_unique<CudaEngine>(tables, pointers, backend);
}

}  // namespace vision::train
