#pragma once
// What compute-sanitizer cannot see for itself. Its initcheck tool tracks which device bytes have been written, but
// it does not see the stores of cuBLAS's Hopper GEMM kernels: a kernel of ours, or a copy, that reads a GEMM's output
// is then reported as reading uninitialised memory, though every element was written (NewtonSchulzGpu.FreshScratch
// GivesThePoisonedScratchResult: 2,540 such reports on an H100 without the marks below, none with them; the result
// equals, bit for bit, a run into poisoned memory). cuDNN's convolutions showed no such report
// (CudnnConvOutputs.EveryElementIsWrittenIntoFreshMemory), but which kernels cuDNN runs depends on the shape and the
// GPU: its outputs are marked the same way.
//
// Within one cuDNN call too: a convolution in NCHW bf16 on the H100 ran an NHWC engine between layout transforms
// (NcclGpu.WorldOfOneMatchesARunWithoutNccl under initcheck: cuDNN's nhwcToNchwKernel reported 24,576 reads of
// "uninitialised" memory, the engine's result in the workspace, written by stores initcheck does not see). So the
// workspace of each cuDNN convolution is marked before the call: it is cuDNN's scratch, which it writes before reading.
//
// So each call into cuBLAS or cuDNN marks the outputs it wrote as initialised, through NVTX's memory extension
// (nvtxMemCudaMarkInitialized, header-only; tools/compute-sanitizer.sh runs with --nvtx yes). Without a tool attached
// that is a check of a null function pointer. VISION_SANITIZER_MARKS=0 turns the marks off, to see the reports.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace vision::cuda {

// [p, p + bytes) was written by a library call on `stream`. A null pointer or zero bytes is nothing.
void mark_written_by_library(cudaStream_t stream, const void* p, size_t bytes);

}  // namespace vision::cuda
