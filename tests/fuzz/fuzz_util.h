// What the fuzz targets share.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace vision::fuzz {

// Writes the input to this process's own temporary file (name ends with suffix, e.g. ".pt") and returns its path;
// empty when it cannot be written (the target then skips the input).
inline std::string input_file(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string stem =
      (std::filesystem::temp_directory_path() / ("vision-fuzz-" + std::to_string(::getpid()))).string();
  const std::string path = stem + suffix;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return {};
  const bool written = std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && written ? path : std::string();
}

}  // namespace vision::fuzz
