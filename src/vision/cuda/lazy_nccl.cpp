// The NCCL functions the engine calls, forwarded to libnccl loaded on first use (lazy_library.h): only data-parallel
// GPU training (dist/nccl_reducer_cuda.cpp) reaches them. Each definition must match nccl.h's declaration.
#include <nccl.h>

#include "vision/cuda/lazy_library.h"

#define NCCL(fn, ...) VISION_LAZY_CALL(nccl_library, fn, __VA_ARGS__)

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) { return NCCL(ncclGetErrorString, result); }
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) { return NCCL(ncclGetUniqueId, id); }
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return NCCL(ncclCommInitRank, comm, nranks, id, rank);
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) { return NCCL(ncclCommDestroy, comm); }
ncclResult_t ncclCommAbort(ncclComm_t comm) { return NCCL(ncclCommAbort, comm); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  return NCCL(ncclCommGetAsyncError, comm, error);
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return NCCL(ncclAllReduce, send, recv, count, type, op, comm, stream);
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return NCCL(ncclBroadcast, send, recv, count, type, root, comm, stream);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  return NCCL(ncclAllGather, send, recv, send_count, type, comm, stream);
}

}  // extern "C"
