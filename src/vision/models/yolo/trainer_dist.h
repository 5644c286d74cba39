// The data-parallel side of Yolo26Trainer: the NCCL reducer on the CUDA backend's stream, and SyncBatchNorm's
// collective over the job's ranks (graph::Collective for the training plans' BatchNorm).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "vision/dist/communicator.h"
#include "vision/dist/device_reducer.h"
#include "vision/graph/backend.h"
#include "vision/graph/collective.h"
#include "vision/graph/state.h"

namespace vision::models::yolo {

#ifdef VISION_HAS_CUDA
// The NCCL reducer of `comm`'s ranks on the CUDA backend's stream (a collective of every rank; trainer_dist_cuda.cpp).
std::unique_ptr<dist::DeviceReducer> make_cuda_reducer(graph::BackendContext& backend,
                                                       std::shared_ptr<dist::Communicator> comm);
#endif

// The gradient all-reduce of a data-parallel step in buckets over the flat gradient buffer, each started as soon as
// the backward has written its last gradient (graph::GradientReady: the backward runs last layer first, so the buckets
// at the buffer's end go first), beside the rest of the backward, as PyTorch's DDP does; the buckets nothing finished
// start when the backward is done. Every rank starts the same buckets in the same order (the plans are the same).
class GradientBuckets {
 public:
  using Start = std::function<void(float* data, size_t n)>;
  // Buckets of `bucket_floats` over `state`'s flat gradient buffer; a bucket waits for the parameters that lie in it.
  // `start` reduces one (not waited for), `progress` (may be empty) lets the started ones advance, `done` (may be
  // empty) follows a backward's last start.
  GradientBuckets(const graph::StateStore& state, size_t bucket_floats, Start start, std::function<void()> progress,
                  std::function<void()> done);
  // A backward whose gradients are reduced begins: every bucket waits again.
  void begin();
  // The backward's GradientReady hook: a final gradient, or undefined when the backward is done.
  void ready(const core::Tensor& grad);
  bool active() const { return active_; }
  size_t buckets() const { return pending_.size(); }
  // Of the last backward: the buckets started before it was done (beside it).
  size_t started_beside_backward() const { return beside_; }

 private:
  void start(size_t b);
  float* flat_ = nullptr;
  size_t n_ = 0, bucket_ = 0;
  std::vector<size_t> covered_;  // per bucket: the floats of parameters in it
  std::vector<size_t> pending_;  // per bucket: those not yet final in this backward
  std::vector<bool> started_;
  Start start_;
  std::function<void()> progress_, done_;
  bool active_ = false;
  size_t beside_ = 0;
};

// SyncBatchNorm's all-gather over `comm`'s ranks, for plans on `backend`: on the CPU through the communicator; on CUDA
// through `reducer` (NCCL, queued on the backend's stream, which a captured step can hold) or, without one, through
// host memory and the communicator (each gather then waits for the device, and the step cannot be captured: it runs
// eagerly). `reducer` must outlive the collective.
std::shared_ptr<graph::Collective> make_batchnorm_collective(std::shared_ptr<graph::BackendContext> backend,
                                                             std::shared_ptr<dist::Communicator> comm,
                                                             dist::DeviceReducer* reducer);

}  // namespace vision::models::yolo
