#include "vision/data/letterbox.h"

#include <algorithm>
#include <cmath>

#include "vision/core/error.h"

namespace vision::data {

std::array<float, 4> LetterboxTransform::to_original(const std::array<float, 4>& b) const {
  auto map = [](float v, double pad, double scale, int64_t limit) {
    const double x = (static_cast<double>(v) - pad) / scale;
    return static_cast<float>(std::clamp(x, 0.0, static_cast<double>(limit)));
  };
  return {map(b[0], pad_x, scale, orig_w), map(b[1], pad_y, scale, orig_h), map(b[2], pad_x, scale, orig_w),
          map(b[3], pad_y, scale, orig_h)};
}

LetterboxTransform letterbox_transform(int64_t orig_h, int64_t orig_w, int64_t target_h, int64_t target_w, bool scaleup,
                                       int64_t stride) {
  VISION_CHECK(orig_h > 0 && orig_w > 0 && target_h > 0 && target_w > 0,
               "letterbox: image sizes must be positive, got an original of {}×{} and an input of {}×{} (H×W)", orig_h,
               orig_w, target_h, target_w);
  VISION_CHECK(stride >= 0, "letterbox: stride {} is negative; give 0 (pad to the target) or the model's stride",
               stride);
  double r = std::min(static_cast<double>(target_h) / static_cast<double>(orig_h),
                      static_cast<double>(target_w) / static_cast<double>(orig_w));
  if (!scaleup) r = std::min(r, 1.0);
  LetterboxTransform t;
  t.scale = r;
  t.orig_w = orig_w;
  t.orig_h = orig_h;
  // Python's round: half to even, which nearbyint does in the default rounding mode.
  t.resized_w = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(static_cast<double>(orig_w) * r)));
  t.resized_h = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(static_cast<double>(orig_h) * r)));
  int64_t dw = std::max<int64_t>(0, target_w - t.resized_w), dh = std::max<int64_t>(0, target_h - t.resized_h);
  if (stride > 0) dw %= stride, dh %= stride;
  t.input_w = t.resized_w + dw;
  t.input_h = t.resized_h + dh;
  // left = round(dw / 2 − 0.1): never a tie (dw / 2 is a whole or a half number), so the rounding mode is moot.
  t.pad_x = std::nearbyint(static_cast<double>(dw) / 2 - 0.1);
  t.pad_y = std::nearbyint(static_cast<double>(dh) / 2 - 0.1);
  return t;
}

std::vector<LetterboxTransform> letterbox_batch(std::span<const std::pair<int64_t, int64_t>> sizes, int64_t target_h,
                                                int64_t target_w, int64_t stride) {
  const bool same = std::all_of(sizes.begin(), sizes.end(), [&](const auto& s) { return s == sizes.front(); });
  std::vector<LetterboxTransform> out;
  out.reserve(sizes.size());
  for (const auto& [h, w] : sizes)
    out.push_back(letterbox_transform(h, w, target_h, target_w, true, same ? stride : 0));
  return out;
}

namespace {

// The resized image placed at the transform's offset in a canvas of `fill`.
template <typename Source>
Image letterbox_from(const Source& image, int64_t channels, const LetterboxTransform& t, uint8_t fill) {
  VISION_CHECK(
      image.width == t.orig_w && image.height == t.orig_h && t.resized_w > 0 && t.resized_h > 0 && t.pad_x >= 0 &&
          t.pad_y >= 0 && t.pad_x + t.resized_w <= t.input_w && t.pad_y + t.resized_h <= t.input_h,
      "letterbox: the transform (for a {}×{} image, resized to {}×{} at ({}, {}) in {}×{}) does not fit a "
      "{}×{} image; make it with letterbox_transform",
      t.orig_w, t.orig_h, t.resized_w, t.resized_h, t.pad_x, t.pad_y, t.input_w, t.input_h, image.width, image.height);
  const Image resized = resize_bilinear(image, t.resized_w, t.resized_h);
  Image out(t.input_w, t.input_h, channels, fill);
  const auto left = static_cast<int64_t>(t.pad_x), top = static_cast<int64_t>(t.pad_y);
  const auto row_bytes = static_cast<size_t>(resized.width * resized.channels);
  for (int64_t y = 0; y < resized.height; ++y) std::copy_n(resized.row(y), row_bytes, out.at(left, top + y));
  return out;
}

}  // namespace

Image letterbox(const Image& image, const LetterboxTransform& t, uint8_t fill) {
  return letterbox_from(image, image.channels, t, fill);
}

Image letterbox(const ImageView& image, const LetterboxTransform& t, uint8_t fill) {
  check_image_view(image, "letterbox");
  return letterbox_from(image, 3, t, fill);
}

}  // namespace vision::data
