#include "vision/models/yolo/yolo26_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "vision/core/error.h"

namespace vision::models::yolo {

namespace blocks {

std::array<std::string, 2> detect_head_prefixes(DetectHead head) {
  if (head == DetectHead::one_to_one) return {"one2one_cv2.", "one2one_cv3."};
  return {"cv2.", "cv3."};
}

namespace {
constexpr std::string_view kDetectLayer = "model.23.";
}  // namespace

bool is_detect_head_key(std::string_view key, DetectHead head) {
  if (!key.starts_with(kDetectLayer)) return false;
  const std::string_view rest = key.substr(kDetectLayer.size());
  for (const std::string& prefix : detect_head_prefixes(head))
    if (rest.starts_with(prefix)) return true;
  return false;
}

std::string detect_head_bias_key(DetectHead head, int branch, size_t level) {
  return fmt::format("{}{}{}.2.bias", kDetectLayer, detect_head_prefixes(head)[static_cast<size_t>(branch)], level);
}

}  // namespace blocks

namespace {

// YOLO26.md's table; parameters at nc = 80 with both heads (ultralytics' counts).
constexpr std::array<ScaleInfo, 5> kScales = {{
    {Scale::n, "n", 0.50, 0.25, 1024, 2'572'280},
    {Scale::s, "s", 0.50, 0.50, 1024, 10'009'784},
    {Scale::m, "m", 0.50, 1.00, 512, 21'896'248},
    {Scale::l, "l", 1.00, 1.00, 512, 26'299'704},
    {Scale::x, "x", 1.00, 1.50, 512, 58'993'368},
}};

}  // namespace

const ScaleInfo& scale_info(Scale scale) {
  for (const ScaleInfo& s : kScales)
    if (s.scale == scale) return s;
  fail("unknown YOLO26 scale {}", static_cast<int>(scale));
}

std::string_view scale_name(Scale scale) { return scale_info(scale).name; }

Scale parse_scale(std::string_view name) {
  std::string_view s = name;
  if (s.starts_with("yolo26")) s.remove_prefix(6);
  for (const ScaleInfo& info : kScales)
    if (s == info.name) return info.scale;
  fail("unknown YOLO26 scale '{}': the scales are n, s, m, l and x", name);
}

int64_t Yolo26Spec::channels(int64_t c) const {
  const ScaleInfo& s = scale_info(scale);
  const double scaled = static_cast<double>(std::min(c, s.max_channels)) * s.width;
  return static_cast<int64_t>(std::ceil(scaled / 8.0)) * 8;
}

int64_t Yolo26Spec::repeats(int64_t n) const {
  if (n <= 1) return n;
  // Python's round(): halves to even, as the default floating-point rounding mode does.
  return std::max<int64_t>(static_cast<int64_t>(std::nearbyint(static_cast<double>(n) * scale_info(scale).depth)), 1);
}

void Yolo26Spec::validate() const {
  scale_info(scale);
  VISION_CHECK(nc >= 1 && nc <= kMaxClasses, "YOLO26: the number of classes must be at least 1 and at most {}, got {}",
               kMaxClasses, nc);
}

void check_image_size(int64_t height, int64_t width) {
  VISION_CHECK(height > 0 && width > 0 && height % kSizeMultiple == 0 && width % kSizeMultiple == 0,
               "YOLO26 takes images whose height and width are positive multiples of {}, got {}x{} (H x W): letterbox "
               "or pad them to such a size",
               kSizeMultiple, height, width);
  VISION_CHECK(height <= kMaxImageSize && width <= kMaxImageSize,
               "YOLO26 takes images of at most {} pixels a side, got {}x{} (H x W): a plan's activations grow with the "
               "area (tens of GB at that size); choose a smaller size",
               kMaxImageSize, height, width);
}

}  // namespace vision::models::yolo
