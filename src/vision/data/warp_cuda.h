// The augmentation's warp on the GPU — the kernel descriptor of warp.cuh and its launch. CUDA builds only. Id:
// augment_warp__u8.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "vision/cuda/kernel.h"
#include "vision/data/warp_math.cuh"

namespace vision::data {

struct AugmentWarpKernel
    : cuda::KernelDescriptor<void* /*out (u8)*/, int64_t /*side*/, const void* /*plans (WarpPlan)*/> {
  AugmentWarpKernel();
};

// `count` samples' pixels (side × side × 3 bytes each, back to back at `out`, device memory) from their WarpPlans at
// `plans` (device memory, one a sample, their sources' device addresses set; each plan's `out` must be `side`).
// Queued on `stream`; the bytes equal warp_plan_cpu's of the same plans with the sources' host addresses.
void launch_augment_warp(cudaStream_t stream, uint8_t* out, int64_t side, int64_t count, const WarpPlan* plans);

}  // namespace vision::data
