// Letterbox on the GPU — the kernel descriptor of letterbox.cuh and its launch. CUDA builds only.
// Ids: letterbox_normalize__f32, letterbox_normalize__f16, letterbox_normalize__bf16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "vision/core/tensor.h"
#include "vision/cuda/kernel.h"
#include "vision/data/letterbox.h"

namespace vision::data {

struct LetterboxNormalize
    : cuda::KernelDescriptor<const void* /*image (u8)*/, int64_t /*src_w*/, int64_t /*src_h*/, void* /*dst*/,
                             int64_t /*input_w*/, int64_t /*input_h*/, int64_t /*resized_w*/, int64_t /*resized_h*/,
                             int64_t /*pad_x*/, int64_t /*pad_y*/, int32_t /*nhwc*/> {
  explicit LetterboxNormalize(core::DType dtype);
};

// Item `index` of `batch` (a device tensor [N, 3, H, W], f32, f16 or bf16, NCHW or NHWC) = letterbox(image, t) / 255,
// where `image` is the device copy of an RGB image of t.orig_w × t.orig_h (HWC, 3 bytes per pixel) and t is
// letterbox_transform's for it with input size W × H. Queued on `stream`; equal to letterbox + write_normalized on
// the CPU (then rounded to the batch's dtype).
void launch_letterbox_normalize(cudaStream_t stream, const uint8_t* image, const LetterboxTransform& t,
                                const core::Tensor& batch, int64_t index);

}  // namespace vision::data
