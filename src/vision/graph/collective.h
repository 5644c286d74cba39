// graph::Collective — what an op of a training plan may ask of the other ranks of a data-parallel job, inside a step:
// SyncBatchNorm's batch statistics over the job's batch (PlanOptions::collective; `vision train --sync-bn`). The
// trainer makes one over its dist::Communicator (models/yolo/trainer_dist.h); the graph layer knows only this.
#pragma once

#include <cstddef>

namespace vision::graph {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Every rank's `bytes` bytes at `send`, in rank order at `recv` (world() × bytes), on every rank. Both are memory of
  // the plan's backend, and the gather is ordered with the work queued before and after it: done on return on the CPU,
  // queued on the backend's stream on CUDA. Every rank calls it in the same order, with the same `bytes`.
  virtual void all_gather(const void* send, void* recv, size_t bytes) = 0;
};

}  // namespace vision::graph
