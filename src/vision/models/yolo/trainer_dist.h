// The device side of data-parallel training for Yolo26Trainer: an NCCL reducer on the CUDA backend's stream.
#pragma once

#include <memory>

#include "vision/dist/communicator.h"
#include "vision/dist/device_reducer.h"
#include "vision/graph/backend.h"

namespace vision::models::yolo {

#ifdef VISION_HAS_CUDA
// The NCCL reducer of `comm`'s ranks on the CUDA backend's stream (a collective of every rank; trainer_dist_cuda.cpp).
std::unique_ptr<dist::DeviceReducer> make_cuda_reducer(graph::BackendContext& backend,
                                                       std::shared_ptr<dist::Communicator> comm);
#endif

}  // namespace vision::models::yolo
