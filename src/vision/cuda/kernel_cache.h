// Kernel cache — compiled kernels on disk, one file per key (sha256 of source, options, arch and NVRTC version),
// written atomically, checked on read, with concurrent builders of one key serialised by a file lock.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vision/cuda/nvrtc.h"

namespace vision::cuda {

// $VISION_CACHE_DIR, else $XDG_CACHE_HOME/vision-cpp/kernels, else $HOME/.cache/vision-cpp/kernels.
std::filesystem::path default_kernel_cache_dir();

// sha256 (hex) of the compile inputs; any change of source, options, arch, NVRTC version or the kernel looked up
// gives another key.
std::string kernel_cache_key(std::string_view source, const std::vector<std::string>& options, std::string_view arch,
                             std::string_view nvrtc_version, std::string_view name_expression = {});

enum class CacheOutcome : uint8_t {
  hit,              // the entry was there and intact
  built,            // no entry: built and stored
  rebuilt_corrupt,  // the entry was truncated or failed its checksum: built again and replaced
  uncached,         // the cache directory is not usable: built, not stored
};

// A directory of entries "<key>.kernel": a header (magic, payload length, sha256 of the payload) and the payload.
class KernelCache {
 public:
  explicit KernelCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path entry_path(std::string_view key) const;

  // The payload stored under key; nullopt when there is no entry or it is corrupt (then *corrupt is set).
  std::optional<std::string> load(std::string_view key, bool* corrupt = nullptr) const;
  // Stores payload under key atomically (a temporary file renamed over the entry). Throws vision::Error on I/O errors.
  void store(std::string_view key, std::string_view payload) const;

  // The payload under key, or build()'s result, stored. While one thread or process builds a key, others wanting the
  // same key wait on "<key>.lock" (flock) and then read the stored entry instead of building it again. When the
  // directory cannot be created or written, builds without storing (outcome uncached).
  std::string get_or_build(std::string_view key, const std::function<std::string()>& build,
                           CacheOutcome* outcome = nullptr) const;

 private:
  std::filesystem::path dir_;
};

// CompiledKernel <-> cache payload.
std::string serialize(const CompiledKernel& kernel);
std::optional<CompiledKernel> deserialize(std::string_view payload);

// compile(request) through the cache in dir (default_kernel_cache_dir() when empty).
CompiledKernel compile_cached(const CompileRequest& request, const std::filesystem::path& dir = {},
                              CacheOutcome* outcome = nullptr);

}  // namespace vision::cuda
