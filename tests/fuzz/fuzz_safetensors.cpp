// libFuzzer target: core::read_safetensors on a file holding the input (the header's JSON, offsets, dtypes, shapes,
// coverage, metadata).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "vision/core/error.h"
#include "vision/core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = vision::fuzz::input_file(data, size, ".safetensors");
  if (path.empty()) return 0;
  try {
    const vision::core::SafetensorsFile file = vision::core::read_safetensors(path);
    for (const auto& [name, t] : file.tensors)
      if (t.nbytes() > size) __builtin_trap();  // a tensor larger than the file
  } catch (const vision::Error&) {
  }
  return 0;
}
