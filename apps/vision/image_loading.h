// Shared by the CLI commands that run a model over image files (predict, val): images decoded on worker threads
// ahead of the model, and a one-line progress bar.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "vision/data/image.h"

namespace vision::cli {

namespace fs = std::filesystem;

struct Loaded {
  fs::path path;
  data::Image image;
  std::string error;  // why the image could not be read (empty when it was)
};

// Decodes the sources on worker threads, at most `window` ahead of the consumer, in order.
class Prefetcher {
 public:
  Prefetcher(std::vector<fs::path> paths, size_t window) : paths_(std::move(paths)), window_(window) { fill(); }
  bool done() const { return pending_.empty(); }
  Loaded next() {
    Loaded l = pending_.front().get();
    pending_.pop_front();
    fill();
    return l;
  }

 private:
  void fill() {
    while (pending_.size() < window_ && next_ < paths_.size()) {
      pending_.push_back(std::async(std::launch::async, [p = paths_[next_]] {
        Loaded l{p, {}, {}};
        try {
          l.image = data::read_image(p);
        } catch (const std::exception& e) {
          l.error = e.what();
        }
        return l;
      }));
      ++next_;
    }
  }
  std::vector<fs::path> paths_;
  size_t window_;
  size_t next_ = 0;
  std::deque<std::future<Loaded>> pending_;
};

// A one-line progress bar on standard error (only when it is a terminal).
class Progress {
 public:
  Progress(std::string verb, size_t total, bool enabled)
      : verb_(std::move(verb)),
        total_(total), enabled_(enabled && total > 1 && ::isatty(2)) {}
  void update(size_t done) {
    if (!enabled_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / std::max<size_t>(total_, 1));
    const double rate = s > 0 ? static_cast<double>(done) / s : 0.0;
    const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0.0;
    fmt::print(stderr, "\r{} {:>6}/{} [{}{}] {:.1f} img/s, ETA {:.0f} s ", verb_, done, total_, std::string(filled, '='),
               std::string(kWidth - filled, ' '), rate, eta);
    if (done == total_) fmt::print(stderr, "\n");
    std::fflush(stderr);
    shown_ = done != total_;
  }
  // A message on standard error, on a line of its own (the bar is redrawn by the next update).
  void message(const std::string& text) {
    fmt::print(stderr, "{}{}\n", shown_ ? "\r\033[K" : "", text);
    shown_ = false;
  }

 private:
  std::string verb_;
  size_t total_;
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace vision::cli
