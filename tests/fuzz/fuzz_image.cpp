// libFuzzer target: the image decoders through data::decode_image and data::probe_image (JPEG, PNG, EXIF, the size
// checks). Any vision::Error is a correct answer; a crash, a sanitizer report, a leak or an allocation over the limit
// is a finding.
#include <cstddef>
#include <cstdint>
#include <span>

#include "vision/core/error.h"
#include "vision/data/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  try {
    (void)vision::data::probe_image(bytes, "fuzz");
  } catch (const vision::Error&) {
  }
  try {
    std::vector<std::string> warnings;
    // A limit of 4 megapixels keeps each run fast; the checks are the same at any limit.
    const vision::data::Image im = vision::data::decode_image(bytes, "fuzz", {.max_pixels = 1 << 22, .warnings = &warnings});
    if (im.pixels.size() != static_cast<size_t>(im.width * im.height * 3)) __builtin_trap();
  } catch (const vision::Error&) {
  }
  return 0;
}
