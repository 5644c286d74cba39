// The engine's AVX-512 1×1 convolution (cpu/conv1x1.h, f32 NHWC inference) against a float64 reference on fresh
// random inputs, its outputs poisoned first: every tail (pixels not a multiple of the 6-row tile or the 96-pixel
// block, output channels not a multiple of the 16-float vector or the 64-channel panel), with and without bias and
// SiLU; SiLU at the extremes (±88, ±100, NaN); nothing written past the output; the same bits on 1 and 2 threads.
// The YOLO26 model tests run it inside whole CPU inference plans (NHWC, every 1×1 convolution).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "test_util.h"
#include "vision/cpu/conv1x1.h"
#include "vision/cpu/parallel.h"

namespace vision::cpu::test_conv1x1_cpp {
namespace {

double silu_ref(double v) { return v / (1.0 + std::exp(-v)); }

struct Conv1x1Case {
  int64_t pixels, cin, cout;
};

// The float64 result of the same inputs.
std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* b,
                              const Conv1x1Case& c, bool silu) {
  std::vector<double> y(static_cast<size_t>(c.pixels * c.cout));
  for (int64_t p = 0; p < c.pixels; ++p)
    for (int64_t o = 0; o < c.cout; ++o) {
      double acc = b ? (*b)[static_cast<size_t>(o)] : 0.0;
      for (int64_t k = 0; k < c.cin; ++k)
        acc += static_cast<double>(x[static_cast<size_t>(p * c.cin + k)]) * w[static_cast<size_t>(o * c.cin + k)];
      y[static_cast<size_t>(p * c.cout + o)] = silu ? silu_ref(acc) : acc;
    }
  return y;
}

TEST(Conv1x1Cpu, MatchesTheFloat64ReferenceAtEveryTail) {
  if (!conv1x1_available()) GTEST_SKIP() << "this CPU has no AVX-512 F (or VISION_CPU_CONV1X1=0)";
  const std::vector<Conv1x1Case> cases = {{1, 1, 1},    {5, 3, 6},     {7, 16, 16},  {13, 48, 64},
                                          {97, 32, 80}, {200, 67, 130}, {6 * 96 + 5, 20, 17}, {31, 256, 255}};
  for (const Conv1x1Case& c : cases)
    for (bool silu : {false, true})
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(testing::Message() << "pixels " << c.pixels << " cin " << c.cin << " cout " << c.cout
                                        << (silu ? " silu" : "") << (with_bias ? " bias" : ""));
        const auto x = test::random_values(static_cast<size_t>(c.pixels * c.cin), -2.0f, 2.0f);
        const auto w = test::random_values(static_cast<size_t>(c.cout * c.cin), -1.0f, 1.0f);
        const auto b = test::random_values(static_cast<size_t>(c.cout), -1.0f, 1.0f);
        const std::vector<float> packed = conv1x1_pack(w.data(), c.cout, c.cin);
        // Poisoned, with a guard of 64 floats past the end that must stay as it is.
        const size_t n = static_cast<size_t>(c.pixels * c.cout);
        std::vector<float> y(n + 64, std::numeric_limits<float>::quiet_NaN());
        for (size_t i = n; i < y.size(); ++i) y[i] = 12345.0f;
        conv1x1_nhwc(x.data(), packed.data(), with_bias ? b.data() : nullptr, y.data(), c.pixels, c.cin, c.cout, silu);
        const std::vector<double> ref = reference(x, w, with_bias ? &b : nullptr, c, silu);
        double err = 0, norm = 0;
        for (size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(std::isfinite(y[i])) << "output " << i << " was not written";
          err += (y[i] - ref[i]) * (y[i] - ref[i]);
          norm += ref[i] * ref[i];
        }
        for (size_t i = n; i < y.size(); ++i) ASSERT_EQ(y[i], 12345.0f) << "written past the output at " << i - n;
        // f32 sums of cin products: about sqrt(cin) roundings of 2^-24 each, relative to the result's scale.
        EXPECT_LE(std::sqrt(err / norm), 2e-7 * std::sqrt(static_cast<double>(c.cin)) + 1e-7);
      }
}

TEST(Conv1x1Cpu, SiluAtTheExtremes) {
  if (!conv1x1_available()) GTEST_SKIP() << "this CPU has no AVX-512 F (or VISION_CPU_CONV1X1=0)";
  const std::vector<float> x = {0.0f,   1e-3f,  -1e-3f, 1.0f,  -1.0f,   5.0f,   -5.0f,  20.0f, -20.0f, 87.0f,
                                -87.0f, 88.0f,  -88.0f, 89.0f, -89.0f,  100.0f, -100.0f, 3e38f, -3e38f,
                                std::numeric_limits<float>::quiet_NaN()};
  const float one = 1.0f;
  const std::vector<float> packed = conv1x1_pack(&one, 1, 1);
  std::vector<float> y(x.size(), -7.0f);
  conv1x1_nhwc(x.data(), packed.data(), nullptr, y.data(), static_cast<int64_t>(x.size()), 1, 1, true);
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    const double ref = silu_ref(x[i]);
    SCOPED_TRACE(testing::Message() << "x = " << x[i]);
    ASSERT_TRUE(std::isfinite(y[i]));
    // Within 4 f32 roundings of the value, or of the smallest normal float where the value underflows.
    EXPECT_LE(std::abs(y[i] - ref), 4 * 6e-8 * std::abs(ref) + 1.2e-38);
  }
  EXPECT_TRUE(std::isnan(y.back())) << "a NaN input gives NaN";
}

TEST(Conv1x1Cpu, TheSameBitsOnOneAndTwoThreads) {
  if (!conv1x1_available()) GTEST_SKIP() << "this CPU has no AVX-512 F (or VISION_CPU_CONV1X1=0)";
  const Conv1x1Case c{8 * 20 * 20 + 3, 96, 80};
  const auto x = test::random_values(static_cast<size_t>(c.pixels * c.cin));
  const auto w = test::random_values(static_cast<size_t>(c.cout * c.cin));
  const auto b = test::random_values(static_cast<size_t>(c.cout));
  const std::vector<float> packed = conv1x1_pack(w.data(), c.cout, c.cin);
  std::vector<float> one(static_cast<size_t>(c.pixels * c.cout)), two(one.size());
  {
    ThreadLimit limit(1);
    conv1x1_nhwc(x.data(), packed.data(), b.data(), one.data(), c.pixels, c.cin, c.cout, true);
  }
  {
    ThreadLimit limit(2);
    conv1x1_nhwc(x.data(), packed.data(), b.data(), two.data(), c.pixels, c.cin, c.cout, true);
  }
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
}

}  // namespace
}  // namespace vision::cpu::test_conv1x1_cpp
