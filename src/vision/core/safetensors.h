// Safetensors IO — reading (fully validated) and atomic writing of .safetensors files of host tensors.
//
// Format: an 8-byte little-endian u64 N, N bytes of JSON header
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
// then the data section; offsets are relative to its start, tensors are row-major and little-endian, and the
// tensors' byte ranges cover the data section exactly (no overlaps, no holes).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vision/core/tensor.h"

namespace vision::core {

struct SafetensorsFile {
  std::filesystem::path path;                            // where it was read from (used in messages)
  std::vector<std::pair<std::string, Tensor>> tensors;   // ordered by data offset (the file's data order)
  std::map<std::string, std::string> metadata;           // the header's "__metadata__" (empty when absent)

  // The tensor called name, or nullptr.
  const Tensor* find(const std::string& name) const;
  // The tensor called name; throws vision::Error naming the file when it is absent.
  const Tensor& at(const std::string& name) const;
};

// Reads and validates a whole file with one read of the data section. The tensors are host tensors (row-major,
// Layout::nchw) that share one allocation, kept alive for as long as any of them is; a tensor whose offset is not a
// multiple of its element size gets its own aligned copy. Throws vision::Error naming the file, the tensor and the
// problem for any I/O error or anything that does not follow the format.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

// Writes host tensors (any rank, including 0; NHWC rank-4 tensors are written in row-major NCHW order) and string
// metadata. Data go in order of decreasing element size, then name, so that every tensor starts at a multiple of its
// element size with no padding between tensors; the header is padded with spaces to a multiple of 8 bytes.
// Atomic: writes "<path>.tmp.<pid>", fsyncs it and renames it over path; on failure the temporary file is removed,
// whatever was at path is left as it was, and vision::Error is thrown. Names must be unique, non-empty and not
// "__metadata__".
void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Copies the file `from` to `to` atomically, as write_safetensors writes: "<to>.tmp.<pid>" is written, fsynced and
// renamed over `to`, so a copy killed at any moment leaves `to` as it was. Throws vision::Error naming both paths.
void copy_file_atomic(const std::filesystem::path& from, const std::filesystem::path& to);
// Writes `bytes` to `path` atomically in the same way (an ONNX model, a JSON file). Throws vision::Error naming path.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

}  // namespace vision::core
