#include "vision/data/warp_cuda.h"

#include <algorithm>

#include "vision/core/error.h"

namespace vision::data {
namespace {

constexpr int kWarpThreads = 256;

void register_warp_kernels(cuda::KernelRegistry& r) { r.add<AugmentWarpKernel>(); }
VISION_REGISTER_KERNELS(register_warp_kernels);

static_assert(sizeof(WarpPlan) % 8 == 0, "a WarpPlan is copied to shared memory in 4-byte words, plans 8-aligned");

}  // namespace

AugmentWarpKernel::AugmentWarpKernel()
    : KernelDescriptor({"augment_warp", "vision/data/warp.cuh", core::DType::u8, {}, "{T}*, int64_t, const uint8_t*",
                        "vision::data"}) {}

void launch_augment_warp(cudaStream_t stream, uint8_t* out, int64_t side, int64_t count, const WarpPlan* plans) {
  VISION_CHECK(side > 0 && side <= (int64_t{1} << 20) && count > 0 && count <= 65535 && out && plans,
               "augment_warp (GPU): {} samples of {}×{} (1–65535 samples, sides 1–2^20, device pointers)", count, side,
               side);
  // A few stretches of pixels a sample, each thread a few pixels.
  const int64_t pixels = side * side;
  const int64_t blocks = std::clamp<int64_t>((pixels + kWarpThreads * 16 - 1) / (kWarpThreads * 16), 1, 256);
  cuda::kernel_instance<AugmentWarpKernel>().launch(stream, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(count)),
                                                    dim3(kWarpThreads), 0, static_cast<void*>(out), side,
                                                    static_cast<const void*>(plans));
}

}  // namespace vision::data
