#include "vision/models/yolo/trainer_dist.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "vision/core/error.h"

namespace vision::models::yolo {
namespace {

class BatchNormCollective final : public graph::Collective {
 public:
  BatchNormCollective(std::shared_ptr<graph::BackendContext> backend, std::shared_ptr<dist::Communicator> comm,
                      dist::DeviceReducer* reducer)
      : backend_(std::move(backend)), comm_(std::move(comm)), reducer_(reducer) {}
  int rank() const override { return comm_->rank(); }
  int world() const override { return comm_->world(); }

  void all_gather(const void* send, void* recv, size_t bytes) override {
    if (reducer_) return reducer_->all_gather(send, recv, bytes);
    const bool host = backend_->backend() == graph::Backend::cpu;
    std::string mine(bytes, '\0');
    if (host)
      std::memcpy(mine.data(), send, bytes);
    else
      backend_->copy_to_host(mine.data(), send, bytes);  // waits for the device (and fails inside a capture)
    const std::vector<std::string> all = comm_->all_gather(mine);
    VISION_CHECK(all.size() == static_cast<size_t>(world()), "SyncBatchNorm: {} ranks answered the all-gather, not {}",
                 all.size(), world());
    std::string joined;
    joined.reserve(bytes * all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      VISION_CHECK(all[r].size() == bytes,
                   "SyncBatchNorm: rank {} gathered {} bytes where this rank has {}: the ranks' batches differ in shape",
                   r, all[r].size(), bytes);
      joined += all[r];
    }
    if (host)
      std::memcpy(recv, joined.data(), joined.size());
    else
      backend_->copy_to_device(recv, joined.data(), joined.size());
  }

 private:
  std::shared_ptr<graph::BackendContext> backend_;
  std::shared_ptr<dist::Communicator> comm_;
  dist::DeviceReducer* reducer_;
};

}  // namespace

GradientBuckets::GradientBuckets(const graph::StateStore& state, size_t bucket_floats, Start start,
                                 std::function<void()> progress, std::function<void()> done)
    : flat_(static_cast<float*>(state.flat_grads().raw())),
      n_(static_cast<size_t>(state.flat_grads().numel())),
      bucket_(std::max<size_t>(bucket_floats, 1)),
      start_(std::move(start)),
      progress_(std::move(progress)),
      done_(std::move(done)) {
  const size_t count = (n_ + bucket_ - 1) / bucket_;
  covered_.assign(count, 0);
  for (const graph::StateEntry& e : state.entries()) {
    if (e.kind != graph::StateKind::parameter) continue;
    const size_t first = e.offset / sizeof(float), last = first + static_cast<size_t>(e.shape.numel());
    VISION_CHECK(last <= n_, "gradient buckets: parameter {} lies past the flat gradient buffer", e.key);
    for (size_t b = first / bucket_; b < count && b * bucket_ < last; ++b)
      covered_[b] += std::min(last, (b + 1) * bucket_) - std::max(first, b * bucket_);
  }
  pending_ = covered_;
  started_.assign(count, false);
}

void GradientBuckets::begin() {
  pending_ = covered_;
  started_.assign(started_.size(), false);
  beside_ = 0;
  active_ = true;
}

void GradientBuckets::start(size_t b) {
  started_[b] = true;
  start_(flat_ + b * bucket_, std::min(bucket_, n_ - b * bucket_));
}

void GradientBuckets::ready(const core::Tensor& grad) {
  VISION_CHECK(active_, "gradient buckets: a gradient reported outside a reduced backward");
  if (!grad.defined()) {  // the backward is done: whatever is left, in bucket order
    for (size_t b = 0; b < started_.size(); ++b)
      if (!started_[b]) start(b);
    if (done_) done_();
    active_ = false;
    return;
  }
  const auto* p = static_cast<const float*>(grad.raw());
  VISION_CHECK(grad.dtype() == core::DType::f32 && p >= flat_ && p + grad.numel() <= flat_ + n_,
               "gradient buckets: a gradient ({}) outside the flat gradient buffer", grad.str());
  const size_t first = static_cast<size_t>(p - flat_), last = first + static_cast<size_t>(grad.numel());
  for (size_t b = first / bucket_; b < pending_.size() && b * bucket_ < last; ++b) {
    const size_t overlap = std::min(last, (b + 1) * bucket_) - std::max(first, b * bucket_);
    VISION_CHECK(overlap <= pending_[b], "gradient buckets: bucket {} reported final twice", b);
    pending_[b] -= overlap;
    if (pending_[b] == 0 && !started_[b]) {
      start(b);
      ++beside_;
    }
  }
  if (progress_) progress_();
}

std::shared_ptr<graph::Collective> make_batchnorm_collective(std::shared_ptr<graph::BackendContext> backend,
                                                             std::shared_ptr<dist::Communicator> comm,
                                                             dist::DeviceReducer* reducer) {
  VISION_CHECK(backend && comm, "SyncBatchNorm needs a backend and the ranks' communicator");
  return std::make_shared<BatchNormCollective>(std::move(backend), std::move(comm), reducer);
}

}  // namespace vision::models::yolo
