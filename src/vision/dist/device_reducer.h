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
  // Every rank's `bytes` at `send`, in rank order at `recv` (world × bytes), device memory: queued (the stream waits
  // for it, behind any bucket started before) and not waited for on the host (SyncBatchNorm's statistics, inside a
  // step that a CUDA graph may capture); a rank that died is found by the next collective that waits.
  virtual void all_gather(const void* send, void* recv, size_t bytes) = 0;
  // A bucket of the gradient all-reduce started beside the rest of the backward: on a stream of the reducer's own (where
  // all_gather runs too, so that the communicator's collectives never run side by side), behind what the stream has
  // queued so far (so after the backward steps that wrote the bucket), not waited for; the data must stay untouched
  // until join(). join() makes the stream wait for every bucket started (queued, nothing
  // waits on the host: a captured step can hold both); finish() then waits on the host as all_reduce_sum does.
  virtual void start_all_reduce_sum(float* device, size_t n) = 0;
  virtual void join() = 0;
  virtual void finish() = 0;
};

}  // namespace vision::dist
