// The NCCL DeviceReducer: a communicator of every rank's GPU, set up over a dist::Communicator (rank 0's unique id
// broadcast through it), collectives on a CUDA stream. NCCL is loaded on first use (cuda/lazy_library.h); NVLink
// multicast stays off (NCCL_NVLS_ENABLE=0 unless the environment says otherwise).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "vision/dist/communicator.h"
#include "vision/dist/device_reducer.h"

namespace vision::dist {

// A collective of every rank of `bootstrap` (each calls it with its own GPU current and its own stream). Throws
// vision::Error (a device error) when NCCL cannot be loaded or set up; every rank then throws, since NCCL's set-up is
// itself collective.
std::unique_ptr<DeviceReducer> make_nccl_reducer(std::shared_ptr<Communicator> bootstrap, cudaStream_t stream);

}  // namespace vision::dist
