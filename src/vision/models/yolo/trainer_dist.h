// The data-parallel side of Yolo26Trainer: the NCCL reducer on the CUDA backend's stream, and SyncBatchNorm's
// collective over the job's ranks (graph::Collective for the training plans' BatchNorm).
#pragma once

#include <memory>

#include "vision/dist/communicator.h"
#include "vision/dist/device_reducer.h"
#include "vision/graph/backend.h"
#include "vision/graph/collective.h"

namespace vision::models::yolo {

#ifdef VISION_HAS_CUDA
// The NCCL reducer of `comm`'s ranks on the CUDA backend's stream (a collective of every rank; trainer_dist_cuda.cpp).
std::unique_ptr<dist::DeviceReducer> make_cuda_reducer(graph::BackendContext& backend,
                                                       std::shared_ptr<dist::Communicator> comm);
#endif

// SyncBatchNorm's all-gather over `comm`'s ranks, for plans on `backend`: on the CPU through the communicator; on CUDA
// through `reducer` (NCCL, queued on the backend's stream, which a captured step can hold) or, without one, through
// host memory and the communicator (each gather then waits for the device, and the step cannot be captured: it runs
// eagerly). `reducer` must outlive the collective.
std::shared_ptr<graph::Collective> make_batchnorm_collective(std::shared_ptr<graph::BackendContext> backend,
                                                             std::shared_ptr<dist::Communicator> comm,
                                                             dist::DeviceReducer* reducer);

}  // namespace vision::models::yolo
