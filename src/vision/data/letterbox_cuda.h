// Letterbox on the GPU — the kernel descriptor of letterbox.cuh and its launch. CUDA builds only.
// Ids: letterbox_normalize__f32, letterbox_normalize__f16, letterbox_normalize__bf16; letterbox_yuv_normalize__f32,
// __f16, __bf16 (letterbox_yuv.cuh: a YUV 4:2:0 video frame converted and letterboxed in one pass).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "vision/core/tensor.h"
#include "vision/cuda/kernel.h"
#include "vision/data/letterbox.h"
#include "vision/data/yuv.h"

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

struct LetterboxYuvNormalize
    : cuda::KernelDescriptor<const void* /*y*/, int64_t /*y_pitch*/, const void* /*u*/, const void* /*v*/,
                             int64_t /*uv_pitch*/, int32_t /*uv_step*/, int64_t /*src_w*/, int64_t /*src_h*/,
                             void* /*dst*/, int64_t /*input_w*/, int64_t /*input_h*/, int64_t /*resized_w*/,
                             int64_t /*resized_h*/, int64_t /*pad_x*/, int64_t /*pad_y*/, int32_t /*nhwc*/,
                             int32_t /*y_offset*/, int32_t /*y_scale*/, int32_t /*r_v*/, int32_t /*g_u*/,
                             int32_t /*g_v*/, int32_t /*b_u*/> {
  explicit LetterboxYuvNormalize(core::DType dtype);
};

// As launch_letterbox_normalize, from a YUV 4:2:0 frame whose planes are in device memory (`frame.device` is not
// consulted: the pointers must be device pointers): item `index` of `batch` = letterbox(yuv420_to_rgb(frame), t) /
// 255. t is letterbox_transform's for the frame's size.
void launch_letterbox_yuv_normalize(cudaStream_t stream, const Yuv420View& frame, const LetterboxTransform& t,
                                    const core::Tensor& batch, int64_t index);

}  // namespace vision::data
