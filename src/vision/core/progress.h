// ProgressBar — a one-line progress bar on standard error (drawn only when it is a terminal), with messages printed on
// lines of their own between its updates.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace vision::core {

// A one-line progress bar on standard error (only when it is a terminal).
class ProgressBar {
 public:
  ProgressBar(std::string verb, size_t total, bool enabled)
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

}  // namespace vision::core
