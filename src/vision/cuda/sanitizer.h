#pragma once
// What compute-sanitizer cannot see for itself. Its initcheck tool tracks which device bytes have been written, but
// it does not see the stores of some of cuDNN's and cuBLAS's Hopper kernels: a kernel of ours that reads a
// convolution's or a GEMM's output is then reported as reading uninitialised memory, though every element was
// written (CudnnConvOutputs.EveryElementIsWrittenIntoFreshMemory and NewtonSchulzGpu.FreshScratchGivesThePoisoned
// ScratchResult show both: equal bit for bit to a run into poisoned memory; docs/reliability.md).
//
// So each call into cuDNN or cuBLAS marks the outputs it wrote as initialised, through NVTX's memory extension
// (nvtxMemCudaMarkInitialized, header-only; tools/compute-sanitizer.sh runs with --nvtx yes). Without a tool attached
// that is a check of a null function pointer. VISION_SANITIZER_MARKS=0 turns the marks off, to see the reports.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace vision::cuda {

// [p, p + bytes) was written by a library call on `stream`. A null pointer or zero bytes is nothing.
void mark_written_by_library(cudaStream_t stream, const void* p, size_t bytes);

}  // namespace vision::cuda
