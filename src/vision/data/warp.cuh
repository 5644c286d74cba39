// The augmentation's warp on the GPU (augment.h's SamplePlan, rendered where its sources are): each block copies one
// sample's WarpPlan to shared memory, then each thread computes output pixels through warp_math.cuh — the arithmetic
// of the CPU's warp (integers and correctly rounded f64, never contracted) — so the bytes equal warp_plan_cpu's and
// augment_sample_into's.
#pragma once

#include "vision/cuda/kernel_common.cuh"
#include "vision/data/warp_math.cuh"

namespace vision::data {

// grid (stretches of pixels, samples); out + i · side² · 3 is sample i's side × side × 3 image, plans (bytes) holds
// one WarpPlan a sample, its sources' device addresses set.
template <typename T>
__global__ void augment_warp(T* __restrict__ out, int64_t side, const uint8_t* __restrict__ plans) {
  __shared__ WarpPlan plan;
  {
    const auto* from = reinterpret_cast<const uint32_t*>(plans + int64_t(blockIdx.y) * sizeof(WarpPlan));
    auto* to = reinterpret_cast<uint32_t*>(&plan);
    for (int i = threadIdx.x; i < int(sizeof(WarpPlan) / 4); i += blockDim.x) to[i] = from[i];
  }
  __syncthreads();
  T* image = out + int64_t(blockIdx.y) * side * side * 3;
  const int32_t n = static_cast<int32_t>(side);  // side ≤ 2^20 (launch_augment_warp): pixels fit 32 bits per row
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < side * side;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t y = i / n, x = i - y * n;
    uint8_t px[3];
    warp_plan_pixel(plan, x, y, px);
    T* dst = image + warp_plan_offset(plan, x, y);
    dst[0] = px[0];
    dst[1] = px[1];
    dst[2] = px[2];
  }
}

}  // namespace vision::data
