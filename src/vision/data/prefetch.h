// Prefetcher — image files decoded on worker threads ahead of the model (a fixed pool, with bounded memory), for
// whatever runs a model over files in order (vision predict, vision::run_validation).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "vision/data/image.h"

namespace vision::data {

// The decoding threads when none are asked for: the cores, at most 8 (more only contend with the model).
inline size_t default_decode_workers() { return std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8); }

struct Loaded {
  std::filesystem::path path;
  Image image;
  std::string error;                  // why the image could not be read (empty when it was)
  std::vector<std::string> warnings;  // what was odd about a file that was read (a malformed EXIF block, …)
};

// The memory that images being decoded may hold at once, unless one image alone needs more.
inline constexpr uint64_t kDecodeBudgetBytes = uint64_t{1} << 30;

// Decodes the sources in order on a fixed pool of `workers` threads, at most `window` images ahead of the consumer.
// Memory is bounded whatever the files claim: an image's share (its file's bytes and its pixels, by its header) is
// reserved before it is decoded and given back when the consumer takes it, and no more than `budget` bytes are
// reserved at once — except by the image the consumer waits for, which always goes ahead (alone, when it is larger
// than the budget).
class Prefetcher {
 public:
  Prefetcher(std::vector<std::filesystem::path> paths, size_t workers, size_t window, DecodeOptions decode,
             uint64_t budget = kDecodeBudgetBytes)
      : paths_(std::move(paths)), window_(std::max<size_t>(window, 1)), decode_(decode), budget_(budget) {
    decode_.warnings = nullptr;  // each image's warnings go into its Loaded
    const size_t n = std::clamp<size_t>(workers, 1, std::max<size_t>(paths_.size(), 1));
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
  }
  ~Prefetcher() {
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  bool done() const { return taken_ >= paths_.size(); }
  Loaded next() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return ready_.count(taken_) > 0; });
    auto node = ready_.extract(taken_);
    reserved_ -= node.mapped().second;
    ++taken_;
    lk.unlock();
    cv_.notify_all();
    return std::move(node.mapped().first);
  }

 private:
  void work() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stopping_ || (claimed_ < paths_.size() && claimed_ < taken_ + window_); });
      if (stopping_) return;
      const size_t i = claimed_++;
      lk.unlock();
      Loaded l{paths_[i], {}, {}, {}};
      uint64_t share = 0;
      std::vector<uint8_t> bytes;
      try {
        bytes = read_file(paths_[i], max_image_file_bytes(decode_.max_pixels));
        share = bytes.size();
        const ImageSize size = probe_image(bytes, paths_[i].string());
        // Within the limit only (a larger one is refused before any allocation); checked without overflow.
        if (size.width > 0 && size.height > 0 && size.width <= decode_.max_pixels / size.height)
          share += 3 * static_cast<uint64_t>(size.width * size.height);
      } catch (const std::exception& e) {
        l.error = e.what();
      }
      lk.lock();
      cv_.wait(lk, [&] { return stopping_ || i == taken_ || reserved_ + share <= budget_; });
      if (stopping_) return;
      reserved_ += share;
      lk.unlock();
      if (l.error.empty()) {
        try {
          DecodeOptions d = decode_;
          d.warnings = &l.warnings;
          l.image = decode_image(bytes, paths_[i].string(), d);
        } catch (const std::exception& e) {
          l.error = e.what();
        }
      }
      bytes = {};
      lk.lock();
      ready_.emplace(i, std::make_pair(std::move(l), share));
      cv_.notify_all();
    }
  }

  std::vector<std::filesystem::path> paths_;
  size_t window_;
  DecodeOptions decode_;
  uint64_t budget_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t claimed_ = 0;           // paths handed to workers
  std::atomic<size_t> taken_ = 0;  // images handed to the consumer
  uint64_t reserved_ = 0;        // bytes reserved by images decoding or decoded and not yet taken
  bool stopping_ = false;
  std::map<size_t, std::pair<Loaded, uint64_t>> ready_;  // decoded (or failed) images and their shares, by index
  std::vector<std::thread> threads_;
};

}  // namespace vision::data
