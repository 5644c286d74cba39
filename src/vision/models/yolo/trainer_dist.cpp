#include "vision/models/yolo/trainer_dist.h"

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

std::shared_ptr<graph::Collective> make_batchnorm_collective(std::shared_ptr<graph::BackendContext> backend,
                                                             std::shared_ptr<dist::Communicator> comm,
                                                             dist::DeviceReducer* reducer) {
  VISION_CHECK(backend && comm, "SyncBatchNorm needs a backend and the ranks' communicator");
  return std::make_shared<BatchNormCollective>(std::move(backend), std::move(comm), reducer);
}

}  // namespace vision::models::yolo
