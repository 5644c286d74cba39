// libFuzzer target: a label cache's contents (data::parse_label_cache) for a split of three images: a cache that is
// accepted yields only good labels, one sample per image, and counts that agree.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vision/core/error.h"
#include "vision/data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::filesystem::path> images = {"/d/images/val/a.jpg", "/d/images/val/b.jpg",
                                                            "/d/images/val/c.jpg"};
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  vision::data::Dataset d;
  std::string why;
  if (vision::data::parse_label_cache(text, "fuzz.cache", "0123456789abcdef", images, 6, d, why)) {
    if (d.samples.size() != images.size()) __builtin_trap();
    int64_t instances = 0;
    for (const vision::data::Sample& s : d.samples) {
      instances += static_cast<int64_t>(s.labels.size());
      for (const vision::data::LabelBox& b : s.labels)
        if (!vision::data::label_box_problem(b, 6).empty()) __builtin_trap();
    }
    if (instances != d.counts.instances) __builtin_trap();
  }
  return 0;
}
