// ImageCache — the training images of a dataset, decoded once and kept resized so that the long side is imgsz (as
// load_for_training resizes them, and as ultralytics' `cache=ram|disk` keeps them), for the training loader:
//
//   none  every get() decodes and resizes the file (what the loader does without a cache);
//   ram   the first get() of a sample decodes it and keeps the resized pixels in memory; later ones copy them. The
//         constructor refuses (ErrorKind::out_of_memory) when the images would not fit in the memory available now;
//   disk  the resized pixels go to a file beside the image ("<image>.<imgsz>.vcache": a 40-byte header — magic
//         "VCACHE1\n", width, height, imgsz and 0 as u32, the source file's size and modification time as 64-bit
//         integers, little-endian — then the RGB rows), written atomically (a temporary in the same folder, renamed);
//         later get()s, in this run and the next, map that file into memory and copy its pixels. A cache file that
//         does not match its image (another size or time, another imgsz) is rewritten; one that is damaged (a bad
//         header, a size that does not match it) is reported and rewritten. A folder where a cache file cannot be
//         written leaves its images uncached, reported once.
//
// Each mode gives the same pixels: get(i) equals load_for_training(read_image(file), {}, imgsz).image. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vision/data/dataset.h"
#include "vision/data/image.h"

namespace vision::data {

enum class CacheMode { none, ram, disk };

// "none" (also "" and "false"), "ram" (also "true", as ultralytics' cache=True) or "disk"; anything else throws
// vision::Error naming the value.
CacheMode parse_cache_mode(std::string_view name);
const char* cache_mode_name(CacheMode mode);

// Bytes the resized training images of `dataset` take in memory: imgsz² · 3 per image times the mean fill
// (short side / long side) of up to `sample` images spread over the dataset, read from their headers. An image whose
// header cannot be read counts as square.
double estimate_cache_bytes(const Dataset& dataset, int64_t imgsz, size_t sample = 32);

// The memory this machine has available now (MemAvailable of /proc/meminfo; the physical memory where that cannot be
// read), in bytes.
double available_memory_bytes();

// The disk cache file of an image file at imgsz.
std::filesystem::path cache_file_path(const std::filesystem::path& image, int64_t imgsz);

// A disk cache file's pixels: the resized image when the file is a well-formed cache of `image` at imgsz (same size
// and modification time), nothing when it is absent or stale. Throws vision::Error naming the file when it is
// damaged (a bad header, a length or image size that does not match). `bytes` is the cache file's contents.
struct CacheFileSource {
  uint64_t bytes = 0;
  int64_t mtime = 0;  // the source's last write time, in the file clock's ticks
};
std::optional<Image> parse_cache_file(std::span<const uint8_t> bytes, const std::string& name, int64_t imgsz,
                                      const CacheFileSource& source);
std::vector<uint8_t> encode_cache_file(const Image& image, int64_t imgsz, const CacheFileSource& source);

struct ImageCacheStats {
  int64_t decoded = 0;      // images decoded and resized
  int64_t from_cache = 0;   // images served from memory or from a cache file
  int64_t files_written = 0;
  double ram_bytes = 0;     // pixels held in memory (ram)
};

class ImageCache {
 public:
  // `dataset` must outlive the cache. `available` (bytes) is what a ram cache may fill; < 0: available_memory_bytes()
  // less `reserve` (what the caller will hold besides, e.g. the loader's batches).
  ImageCache(const Dataset& dataset, int64_t imgsz, CacheMode mode, double reserve = 0, double available = -1);
  ImageCache(const ImageCache&) = delete;
  ImageCache& operator=(const ImageCache&) = delete;

  CacheMode mode() const { return mode_; }
  int64_t imgsz() const { return imgsz_; }

  // Sample i's image, resized so that its long side is imgsz. Throws vision::Error (naming the file) when it cannot be
  // read; a damaged or unwritable cache file is not an error (see warnings()).
  Image get(size_t i);
  // The same image shared rather than copied: with the ram cache the cache's own (it stays as it is while the cache
  // lives), otherwise a new one.
  std::shared_ptr<const Image> share(size_t i);

  ImageCacheStats stats() const;
  // Problems met with cache files, one per file ("path: why"), in the order met.
  std::vector<std::string> warnings() const;

 private:
  Image decode(size_t i) const;
  Image from_disk(size_t i);
  void warn(std::string message);

  const Dataset& dataset_;
  int64_t imgsz_;
  CacheMode mode_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const Image>> ram_;
  std::vector<char> decoding_;  // per sample: a worker is decoding it for the ram cache
  std::condition_variable ram_ready_;
  ImageCacheStats stats_;
  std::vector<std::string> warnings_;
  // Per sample (disk): its cache file is not known to be current, is being written, or was written by this cache.
  enum FileState : char { kFileNone, kFileWriting, kFileWritten };
  std::vector<FileState> file_state_;
  std::set<std::filesystem::path> unwritable_dirs_;  // folders where a cache file could not be written
};

}  // namespace vision::data
