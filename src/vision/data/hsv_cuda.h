// The HSV jitter on the GPU — the kernel descriptor of hsv.cuh and its launch. CUDA builds only. Id: hsv_jitter__u8.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "vision/core/tensor.h"
#include "vision/cuda/kernel.h"

namespace vision::data {

struct HsvJitterKernel
    : cuda::KernelDescriptor<void* /*images (u8)*/, int64_t /*pixels per image*/, const void* /*records (u8)*/> {
  HsvJitterKernel();
};

// apply_hsv on each of `count` u8 RGB images of `pixels` pixels each, back to back in device memory at `images`, in
// place: image i through the hsv_record at records + i · kHsvRecordBytes (device memory; one whose flag byte is 0 is
// left as it is). Queued on `stream`; the bytes equal apply_hsv's with the record's gains.
void launch_hsv_jitter(cudaStream_t stream, uint8_t* images, int64_t pixels, int64_t count, const uint8_t* records);

}  // namespace vision::data
