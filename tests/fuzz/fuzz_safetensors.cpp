// libFuzzer target: core::read_safetensors on a file holding the input (the header's JSON, offsets, dtypes, shapes,
// coverage, metadata).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "vision/core/error.h"
#include "vision/core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("vision-fuzz-" + std::to_string(::getpid()) + ".safetensors")).string();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    const vision::core::SafetensorsFile file = vision::core::read_safetensors(path);
    for (const auto& [name, t] : file.tensors)
      if (t.nbytes() > size) __builtin_trap();  // a tensor larger than the file
  } catch (const vision::Error&) {
  }
  return 0;
}
