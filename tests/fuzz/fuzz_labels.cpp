// libFuzzer target: YOLO label text (data::parse_labels): every box it returns is a good label.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vision/core/error.h"
#include "vision/data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const vision::data::LabelFile labels = vision::data::parse_labels(text, "fuzz.txt", 80);
  for (const vision::data::LabelBox& b : labels.boxes)
    if (!vision::data::label_box_problem(b, 80).empty()) __builtin_trap();
  return 0;
}
