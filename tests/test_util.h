// Shared helpers for the test suite: random inputs, float64 comparisons, GPU skips.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "vision/core/tensor.h"

namespace vision::test {

// Fresh random values in [lo, hi) (never zeros); the seed varies per call unless VISION_TEST_SEED is set.
inline std::mt19937_64& rng() {
  static std::mt19937_64 r([] {
    const char* s = std::getenv("VISION_TEST_SEED");
    return s ? std::strtoull(s, nullptr, 10) : std::random_device{}();
  }());
  return r;
}

inline std::vector<float> random_values(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

inline core::Tensor random_tensor(core::Shape shape, float lo = -1.0f, float hi = 1.0f) {
  auto v = random_values(static_cast<size_t>(shape.numel()), lo, hi);
  return core::Tensor::from_vector(std::move(shape), v);
}

// ‖out − ref‖ / ‖ref‖ in float64 (NaN in out gives +inf).
template <typename A, typename B>
double rel_error(const A& out, const B& ref) {
  double num = 0, den = 0;
  EXPECT_EQ(out.size(), ref.size());
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    const double o = static_cast<double>(out[i]), r = static_cast<double>(ref[i]);
    if (!std::isfinite(o)) return INFINITY;
    num += (o - r) * (o - r);
    den += r * r;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// A value no correct kernel writes: outputs are filled with it before each run.
constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

inline bool require_gpu() {
  const char* s = std::getenv("VISION_REQUIRE_GPU");
  return s && std::string(s) == "1";
}

}  // namespace vision::test

// Skips the test when no usable GPU is present, or fails it when VISION_REQUIRE_GPU=1.
#define VISION_SKIP_WITHOUT_GPU(has_gpu)                                                   \
  do {                                                                                     \
    if (!(has_gpu)) {                                                                      \
      if (::vision::test::require_gpu()) FAIL() << "VISION_REQUIRE_GPU=1 but no usable GPU"; \
      GTEST_SKIP() << "no usable GPU";                                                     \
    }                                                                                      \
  } while (0)
