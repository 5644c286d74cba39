#include "vision/cuda/sanitizer.h"

#include <nvtx3/nvToolsExtMemCudaRt.h>

#include <cstdlib>
#include <cstring>

#include "vision/cuda/check.h"

namespace vision::cuda {

namespace {

bool sanitizer_marks_on() {
  static const bool on = [] {
    const char* v = std::getenv("VISION_SANITIZER_MARKS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

nvtxDomainHandle_t sanitizer_domain() {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("vision");
  return domain;
}

}  // namespace

void mark_written_by_library(cudaStream_t stream, const void* p, size_t bytes) {
  if (p == nullptr || bytes == 0 || !sanitizer_marks_on()) return;
  // Not while the stream is being captured into a CUDA graph (compute-sanitizer then crashed the process): the
  // engine runs each graph's work eagerly first, on the same memory, and that run marked it.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  VISION_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;
  nvtxMemVirtualRangeDesc_t range{};
  range.ptr = p;
  range.size = bytes;
  nvtxMemMarkInitializedBatch_t batch{};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof(batch);
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.regionDescCount = 1;
  batch.regionDescElementSize = sizeof(range);
  batch.regionDescElements = &range;
  nvtxMemCudaMarkInitialized(sanitizer_domain(), stream, 0, &batch);
}

}  // namespace vision::cuda
