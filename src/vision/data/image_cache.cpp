#include "vision/data/image_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "vision/core/error.h"
#include "vision/core/safetensors.h"
#include "vision/data/augment.h"

namespace vision::data {
namespace fs = std::filesystem;

namespace {

// The source file's size and modification time, or nothing when it cannot be read.
std::optional<CacheFileSource> source_of(const fs::path& image) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(image, ec);
  if (ec) return std::nullopt;
  const auto time = fs::last_write_time(image, ec);
  if (ec) return std::nullopt;
  return CacheFileSource{static_cast<uint64_t>(size), static_cast<int64_t>(time.time_since_epoch().count())};
}

// A read-only mapping of a whole file (nothing when it cannot be opened).
struct MappedFile {
  void* data = MAP_FAILED;
  size_t size = 0;
  explicit MappedFile(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      size = static_cast<size_t>(st.st_size);
      data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data != MAP_FAILED) ::munmap(data, size);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  bool ok() const { return data != MAP_FAILED; }
  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(data), size}; }
};

}  // namespace

CacheMode parse_cache_mode(std::string_view name) {
  if (name.empty() || name == "none" || name == "false") return CacheMode::none;
  if (name == "ram" || name == "true") return CacheMode::ram;
  if (name == "disk") return CacheMode::disk;
  fail_as(ErrorKind::argument, "cache '{}': use ram, disk or none", name);
}

const char* cache_mode_name(CacheMode mode) {
  switch (mode) {
    case CacheMode::ram: return "ram";
    case CacheMode::disk: return "disk";
    default: return "none";
  }
}

double estimate_cache_bytes(const Dataset& dataset, int64_t imgsz, size_t sample) {
  const size_t n = dataset.samples.size();
  if (n == 0) return 0;
  const size_t k = std::clamp<size_t>(sample, 1, n);
  double fill = 0;
  for (size_t j = 0; j < k; ++j) {
    const fs::path& p = dataset.samples[j * n / k].image;
    double f = 1;
    try {
      const std::vector<uint8_t> bytes = read_file(p, max_image_file_bytes(kDefaultMaxPixels));
      const ImageSize s = probe_image(bytes, p.string());
      if (s.width > 0 && s.height > 0)
        f = static_cast<double>(std::min(s.width, s.height)) / static_cast<double>(std::max(s.width, s.height));
    } catch (const Error&) {
    }
    fill += f;
  }
  const double side = static_cast<double>(imgsz);
  return static_cast<double>(n) * side * side * 3.0 * fill / static_cast<double>(k);
}

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024.0;
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

fs::path cache_file_path(const fs::path& image, int64_t imgsz) {
  fs::path p = image;
  p += fmt::format(".{}.vcache", imgsz);
  return p;
}

ImageCache::ImageCache(const Dataset& dataset, int64_t imgsz, CacheMode mode, double reserve, double available)
    : dataset_(dataset), imgsz_(imgsz), mode_(mode) {
  VISION_CHECK(imgsz > 0, "image cache: imgsz must be positive, got {}", imgsz);
  const size_t n = dataset_.samples.size();
  if (mode_ == CacheMode::ram) {
    const double need = estimate_cache_bytes(dataset_, imgsz_);
    const double have = available >= 0 ? available : available_memory_bytes() - reserve;
    if (need > have)
      fail_as(ErrorKind::out_of_memory,
              "cache ram: the {} '{}' images of {} at imgsz {} take about {:.2f} GB in memory, more than the {:.2f} "
              "GB available; use --cache disk or --cache none",
              n, dataset_.split, dataset_.config.file.string(), imgsz_, need / 1e9, std::max(have, 0.0) / 1e9);
    ram_.resize(n);
    decoding_.assign(n, 0);
  }
  if (mode_ == CacheMode::disk) file_state_.assign(n, kFileNone);
}

Image ImageCache::decode(size_t i) const {
  return load_for_training(read_image(dataset_.samples[i].image), {}, imgsz_).image;
}

void ImageCache::warn(std::string message) {
  std::lock_guard lk(mu_);
  warnings_.push_back(std::move(message));
}

Image ImageCache::from_disk(size_t i) {
  const fs::path& image = dataset_.samples[i].image;
  const fs::path file = cache_file_path(image, imgsz_);
  const std::optional<CacheFileSource> source = source_of(image);
  if (source) {
    const MappedFile map(file);
    if (map.ok()) {
      try {
        if (std::optional<Image> cached = parse_cache_file(map.bytes(), file.string(), imgsz_, *source)) {
          std::lock_guard lk(mu_);
          ++stats_.from_cache;
          return std::move(*cached);
        }
      } catch (const Error& e) {
        warn(fmt::format("{} (rewritten)", e.what()));
      }
      std::lock_guard lk(mu_);
      if (file_state_[i] == kFileWritten) file_state_[i] = kFileNone;  // stale or damaged: to be written again
    }
  }
  Image out = decode(i);  // throws for an unreadable image
  bool write = false;
  {
    std::lock_guard lk(mu_);
    ++stats_.decoded;
    // One writer per file at a time (the temporary's name is per process), once (a worker that missed the file while
    // another wrote it does not write it again), none in a folder that refused one.
    if (source && file_state_[i] == kFileNone && !unwritable_dirs_.contains(file.parent_path()))
      file_state_[i] = kFileWriting, write = true;
  }
  if (write) {
    bool written = false;
    try {
      const std::vector<uint8_t> bytes = encode_cache_file(out, imgsz_, *source);
      core::write_file_atomic(file, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
      written = true;
    } catch (const Error& e) {
      std::lock_guard lk(mu_);
      if (unwritable_dirs_.insert(file.parent_path()).second)
        warnings_.push_back(fmt::format("{}: cannot write image cache files there (its images stay uncached): {}",
                                        file.parent_path().string(), e.what()));
    }
    std::lock_guard lk(mu_);
    file_state_[i] = written ? kFileWritten : kFileNone;
    if (written) ++stats_.files_written;
  }
  return out;
}

std::shared_ptr<const Image> ImageCache::share(size_t i) {
  VISION_CHECK(i < dataset_.samples.size(), "image cache: sample {} of {}", i, dataset_.samples.size());
  if (mode_ != CacheMode::ram) return std::make_shared<const Image>(get(i));
  {
    // One decode per image: a second worker asking for an image being decoded waits for it.
    std::unique_lock lk(mu_);
    ram_ready_.wait(lk, [&] { return ram_[i] != nullptr || !decoding_[i]; });
    if (const std::shared_ptr<const Image>& kept = ram_[i]) {
      ++stats_.from_cache;
      return kept;
    }
    decoding_[i] = 1;
  }
  std::shared_ptr<const Image> made;
  try {
    made = std::make_shared<const Image>(decode(i));
  } catch (...) {
    {
      std::lock_guard lk(mu_);
      decoding_[i] = 0;  // a waiter tries again (and meets the same error)
    }
    ram_ready_.notify_all();
    throw;
  }
  {
    std::lock_guard lk(mu_);
    ++stats_.decoded;
    ram_[i] = made;
    decoding_[i] = 0;
    stats_.ram_bytes += static_cast<double>(made->pixels.size());
  }
  ram_ready_.notify_all();
  return made;
}

Image ImageCache::get(size_t i) {
  VISION_CHECK(i < dataset_.samples.size(), "image cache: sample {} of {}", i, dataset_.samples.size());
  switch (mode_) {
    case CacheMode::ram: return *share(i);
    case CacheMode::disk: return from_disk(i);
    default: {
      Image out = decode(i);
      std::lock_guard lk(mu_);
      ++stats_.decoded;
      return out;
    }
  }
}

ImageCacheStats ImageCache::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

std::vector<std::string> ImageCache::warnings() const {
  std::lock_guard lk(mu_);
  return warnings_;
}

}  // namespace vision::data
