// dist::DeviceReducer — the collectives of data-parallel GPU ranks on device memory, queued on the backend's stream
// (NCCL: nccl_reducer_cuda.h). The trainer uses one where it can and reduces through host memory and the
// Communicator (MPI) otherwise.
#pragma once

#include <cstddef>
#include <string>

namespace vision::dist {

class DeviceReducer {
 public:
  virtual ~DeviceReducer() = default;
  virtual std::string name() const = 0;  // "nccl"
  // Sums n floats of device memory across the ranks, in place; queued on the stream and waited for (at most the
  // communicator's timeout: past it the job ends, as Communicator's collectives do).
  virtual void all_reduce_sum(float* device, size_t n) = 0;
  // Rank `root`'s bytes of device memory to every rank; queued and waited for as all_reduce_sum.
  virtual void broadcast(void* device, size_t bytes, int root) = 0;
  // Every rank's `bytes` at `send`, in rank order at `recv` (world × bytes), device memory: queued on the stream and
  // not waited for (SyncBatchNorm's statistics, inside a step that a CUDA graph may capture); a rank that died is
  // found by the next collective that waits.
  virtual void all_gather(const void* send, void* recv, size_t bytes) = 0;
};

}  // namespace vision::dist
