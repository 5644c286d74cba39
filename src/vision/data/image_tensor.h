// The model's input tensor of decoded images: samples / 255 in f32, NCHW or NHWC (the engine's side of data/image.h,
// which the public API includes without the tensor types).
#pragma once

#include <cstdint>
#include <span>

#include "vision/core/tensor.h"
#include "vision/data/image.h"

namespace vision::data {

// Writes the 3-channel image into batch item `index` of `batch` — a host f32 tensor of shape [N, 3, H, W] in its own
// layout (NCHW: planes, NHWC: interleaved) — as sample / 255. The image must be W × H.
void write_normalized(const Image& image, const core::Tensor& batch, int64_t index);
// A u8 host tensor [N, H, W, 3] of RGB pixels (the loader's u8 batches) as a new f32 [N, 3, H, W] host tensor in
// `layout`: sample / 255, equal to write_normalized of each image.
core::Tensor normalize_u8_batch(const core::Tensor& pixels, core::Layout layout = core::Layout::nchw);
// A new f32 [N, 3, H, W] host tensor in `layout` holding the images (all of one size) / 255.
core::Tensor images_to_tensor(std::span<const Image> images, core::Layout layout = core::Layout::nchw);

}  // namespace vision::data
