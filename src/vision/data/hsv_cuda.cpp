#include "vision/data/hsv_cuda.h"

#include <algorithm>

#include "vision/core/error.h"

namespace vision::data {
namespace {

constexpr int kHsvThreads = 256;  // the kernel builds its 256-entry tables with one thread each

void register_hsv_kernels(cuda::KernelRegistry& r) { r.add<HsvJitterKernel>(); }
VISION_REGISTER_KERNELS(register_hsv_kernels);

}  // namespace

HsvJitterKernel::HsvJitterKernel()
    : KernelDescriptor({"hsv_jitter", "vision/data/hsv.cuh", core::DType::u8, {}, "{T}*, int64_t, const uint8_t*",
                        "vision::data"}) {}

void launch_hsv_jitter(cudaStream_t stream, uint8_t* images, int64_t pixels, int64_t count, const uint8_t* records) {
  VISION_CHECK(pixels > 0 && count > 0 && count <= 65535 && images && records,
               "hsv_jitter (GPU): {} images of {} pixels (1–65535 images of at least one pixel, device pointers)",
               count, pixels);
  // A few stretches of pixels an image (each block builds its tables first), at most a pixel a thread.
  const int64_t blocks = std::clamp<int64_t>((pixels + kHsvThreads * 32 - 1) / (kHsvThreads * 32), 1, 64);
  cuda::kernel_instance<HsvJitterKernel>().launch(stream, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(count)),
                                                  dim3(kHsvThreads), 0, static_cast<void*>(images), pixels,
                                                  static_cast<const void*>(records));
}

}  // namespace vision::data
