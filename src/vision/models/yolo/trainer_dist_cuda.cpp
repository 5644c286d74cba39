#include "vision/graph/cuda/cuda_backend.h"
#include "vision/dist/nccl_reducer_cuda.h"
#include "vision/models/yolo/trainer_dist.h"

namespace vision::models::yolo {

std::unique_ptr<dist::DeviceReducer> make_cuda_reducer(graph::BackendContext& backend,
                                                       std::shared_ptr<dist::Communicator> comm) {
  return dist::make_nccl_reducer(std::move(comm), graph::stream_of(&backend));
}

}  // namespace vision::models::yolo
