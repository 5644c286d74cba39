// libFuzzer target: a disk image cache file's contents (data::parse_cache_file) at imgsz 64 for a source of known size
// and time: a file that is accepted is a 3-channel image whose long side is 64, with exactly its pixels after the
// header, and encodes back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <span>
#include <vector>

#include "vision/core/error.h"
#include "vision/data/image_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const vision::data::CacheFileSource source{1234, 5678};
  try {
    const auto image = vision::data::parse_cache_file(std::span<const uint8_t>(data, size), "fuzz.vcache", 64, source);
    if (image) {
      if (image->channels != 3 || std::max(image->width, image->height) != 64 || image->width < 1 ||
          image->height < 1 || image->pixels.size() != static_cast<size_t>(image->width * image->height * 3))
        __builtin_trap();
      const std::vector<uint8_t> again = vision::data::encode_cache_file(*image, 64, source);
      if (again.size() != size || !std::equal(again.begin(), again.end(), data)) __builtin_trap();
    }
  } catch (const vision::Error&) {
  }
  return 0;
}
