// Letterbox — ultralytics' LetterBox (YOLO26.md, "Preprocessing for predict"): an image scaled keeping its aspect
// ratio, resized bilinearly and padded with grey 114 around the centre; the transform it applied, so boxes found in
// the letterboxed input map back to the original image (LetterboxTransform::to_original, and letterbox_inverse_cpu in
// models/yolo/kernels/postprocess.h for a batch of detections).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "vision/data/image.h"

namespace vision::data {

// The grey of ultralytics' padding.
inline constexpr uint8_t kLetterboxFill = 114;

// What a letterbox did to an image of orig_w × orig_h: scaled by `scale` to resized_w × resized_h, then padded by
// pad_x on the left and pad_y on top into an input_w × input_h image (ultralytics' LetterBox with center = True). An
// input-pixel point x maps back to (x − pad_x) / scale.
struct LetterboxTransform {
  double scale = 1.0;
  double pad_x = 0.0, pad_y = 0.0;
  int64_t orig_w = 0, orig_h = 0;
  int64_t resized_w = 0, resized_h = 0;
  int64_t input_w = 0, input_h = 0;

  // An xyxy box in input pixels → original-image pixels, clipped to [0, orig_w] × [0, orig_h].
  std::array<float, 4> to_original(const std::array<float, 4>& xyxy) const;
};

// The transform ultralytics' LetterBox applies to an orig_h × orig_w image for a target_h × target_w input: scale
// r = min(target_h / orig_h, target_w / orig_w) (at most 1 without scaleup), resized to round(orig · r) (half to even,
// as Python rounds); the padding dw = target_w − resized_w (dh likewise) is split left = round(dw / 2 − 0.1), right =
// round(dw / 2 + 0.1). stride = 0 pads to the whole target (input = target); stride > 0 is ultralytics' `auto`: only
// dw mod stride is padded, the smallest stride-aligned input (when the target is a multiple of stride).
LetterboxTransform letterbox_transform(int64_t orig_h, int64_t orig_w, int64_t target_h, int64_t target_w,
                                       bool scaleup = true, int64_t stride = 0);

// The transforms of a batch for predict, as ultralytics' predictor chooses them: when every image has the same size
// (H, W), the minimal stride-aligned padding (stride > 0, the same input size for all); otherwise each image padded
// to the whole target. sizes holds (height, width) pairs.
std::vector<LetterboxTransform> letterbox_batch(std::span<const std::pair<int64_t, int64_t>> sizes, int64_t target_h,
                                                int64_t target_w, int64_t stride = 32);

// The letterboxed image: `image` resized (bilinear, resize_bilinear) to resized_w × resized_h and placed at
// (pad_x, pad_y) on an input_w × input_h canvas of `fill`. t must be letterbox_transform's for this image's size.
Image letterbox(const Image& image, const LetterboxTransform& t, uint8_t fill = kLetterboxFill);
// The same from a view of caller-owned pixels (RGB or BGR, any row stride; RGB out), with no copy of them first.
Image letterbox(const ImageView& image, const LetterboxTransform& t, uint8_t fill = kLetterboxFill);

}  // namespace vision::data
