// Random — seeded random numbers that are the same on every platform: std::mt19937_64 (whose output the C++ standard
// fixes) with distributions written here, since the std:: distributions differ between standard libraries.
#pragma once

#include <cstdint>
#include <random>

namespace vision::data {

// SplitMix64's finaliser: a well-mixed 64-bit value of x (streams of seeds that differ in one bit stay unrelated).
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The seed of item `index` of stream `stream` under a user's seed: per-item seeds make results independent of the
// order and the threads items are made on.
constexpr uint64_t derive_seed(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

class Random {
 public:
  explicit Random(uint64_t seed) : engine_(seed) {}

  uint64_t bits() { return engine_(); }
  // Uniform in [0, 1), from the top 53 bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [lo, hi] (inclusive), unbiased (rejection of the last partial range).
  int64_t integer(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    if (span == 0) return static_cast<int64_t>(engine_());                   // the whole 64-bit range
    const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % span + 1) % span;  // largest multiple of span, minus 1
    uint64_t x = engine_();
    while (x > limit) x = engine_();
    return lo + static_cast<int64_t>(x % span);
  }
  // True with probability p.
  bool chance(double p) { return uniform() < p; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace vision::data
