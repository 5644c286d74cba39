// The engine's AVX-512 convolutions (cpu/conv_nhwc.h, f32 NHWC inference) against a float64 reference on fresh random
// inputs, their outputs poisoned first: 1×1 at every tail (pixels not a multiple of the 6-pixel tile or the 96-pixel
// block, output channels not a multiple of the 16-float vector or the 64-channel panel), 3×3 and 5×5 at strides 1 and
// 2 on images from 1×1 (every tap at a border) up, with and without bias and SiLU; SiLU at the extremes (±88, ±100,
// NaN); nothing written past the output; the same bits on 1 and 2 threads. The YOLO26 model tests run them inside
// whole CPU inference plans (NHWC).
#include <gtest/gtest.h>

#include <cmath>
#include <array>
#include <cstring>
#include <limits>
#include <vector>

#include "test_util.h"
#include "vision/cpu/conv_nhwc.h"
#include "vision/cpu/parallel.h"

namespace vision::cpu::test_conv_nhwc_cpp {
namespace {

double silu_ref(double v) { return v / (1.0 + std::exp(-v)); }

// The float64 result of the same inputs: x [N, H, W, Cin], w [Cout, Cin, k, k], zero padding k/2; and in `scale`,
// each output's Σ|term| (bias and products), the size its f32 rounding error scales with.
std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* b,
                              const ConvNhwcShape& s, bool silu, std::vector<double>& scale) {
  const int64_t oh = s.out_height(), ow = s.out_width(), k = s.kernel, pad = k / 2;
  std::vector<double> y(static_cast<size_t>(s.batch * oh * ow * s.cout));
  scale.assign(y.size(), 0.0);
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox)
        for (int64_t o = 0; o < s.cout; ++o) {
          double acc = b ? (*b)[static_cast<size_t>(o)] : 0.0, mag = std::abs(acc);
          for (int64_t ky = 0; ky < k; ++ky)
            for (int64_t kx = 0; kx < k; ++kx) {
              const int64_t iy = oy * s.stride + ky - pad, ix = ox * s.stride + kx - pad;
              if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
              for (int64_t c = 0; c < s.cin; ++c) {
                const double t =
                    static_cast<double>(x[static_cast<size_t>(((n * s.height + iy) * s.width + ix) * s.cin + c)]) *
                    w[static_cast<size_t>(((o * s.cin + c) * k + ky) * k + kx)];
                acc += t;
                mag += std::abs(t);
              }
            }
          const size_t i = static_cast<size_t>(((n * oh + oy) * ow + ox) * s.cout + o);
          y[i] = silu ? silu_ref(acc) : acc;
          scale[i] = mag;
        }
  return y;
}

// Runs one case with and without bias and SiLU; outputs poisoned, with a guard past the end.
void check(const ConvNhwcShape& s) {
  for (bool silu : {false, true})
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(testing::Message() << "N " << s.batch << " H " << s.height << " W " << s.width << " cin " << s.cin
                                      << " cout " << s.cout << " k " << s.kernel << " s " << s.stride
                                      << (silu ? " silu" : "") << (with_bias ? " bias" : ""));
      const int64_t k = s.kernel;
      const auto x = test::random_values(static_cast<size_t>(s.batch * s.height * s.width * s.cin), -2.0f, 2.0f);
      const auto w = test::random_values(static_cast<size_t>(s.cout * s.cin * k * k), -1.0f, 1.0f);
      const auto b = test::random_values(static_cast<size_t>(s.cout), -1.0f, 1.0f);
      const std::vector<float> packed = conv_nhwc_pack(w.data(), s.cout, s.cin, k);
      const size_t n = static_cast<size_t>(s.batch * s.out_height() * s.out_width() * s.cout);
      std::vector<float> y(n + 64, std::numeric_limits<float>::quiet_NaN());
      for (size_t i = n; i < y.size(); ++i) y[i] = 12345.0f;
      conv_nhwc(x.data(), packed.data(), with_bias ? b.data() : nullptr, y.data(), s, silu);
      std::vector<double> scale;
      const std::vector<double> ref = reference(x, w, with_bias ? &b : nullptr, s, silu, scale);
      for (size_t i = n; i < y.size(); ++i) ASSERT_EQ(y[i], 12345.0f) << "written past the output at " << i - n;
      y.resize(n);
      // f32 sums of cin·k² products: about sqrt of that many roundings of 2^-24, relative to the result's scale.
      EXPECT_LE(test::rel_error(y, ref), 2e-7 * std::sqrt(static_cast<double>(s.cin * k * k)) + 1e-7);
      // And each output on its own (a NaN, an unwritten output or one wrong element fails here): within the f32
      // error bound of its sum, (terms + 1)·2^-24·Σ|term|, plus SiLU's own few roundings.
      for (size_t i = 0; i < n; ++i)
        ASSERT_LE(std::abs(y[i] - ref[i]), (s.cin * k * k + 8) * 6e-8 * scale[i] + 1e-30)
            << "output " << i << ": " << y[i] << " against " << ref[i];
    }
}

#define SKIP_WITHOUT_KERNELS() \
  if (!conv_nhwc_available()) GTEST_SKIP() << "this CPU has no AVX-512 F (or VISION_CPU_CONV=0)"

TEST(ConvNhwcCpu, PointwiseMatchesTheFloat64ReferenceAtEveryTail) {
  SKIP_WITHOUT_KERNELS();
  for (const auto& [pixels, cin, cout] : std::vector<std::array<int64_t, 3>>{
           {1, 1, 1}, {5, 3, 6}, {7, 16, 16}, {13, 48, 64}, {97, 32, 80}, {200, 67, 130}, {6 * 96 + 5, 20, 17},
           {31, 256, 255}})
    check({1, 1, pixels, cin, cout, 1, 1});
}

TEST(ConvNhwcCpu, KxKMatchesTheFloat64ReferenceAtEveryBorder) {
  SKIP_WITHOUT_KERNELS();
  const std::vector<ConvNhwcShape> shapes = {
      {1, 1, 1, 3, 5, 3, 1},    {1, 1, 1, 3, 5, 3, 2},    {2, 2, 3, 4, 17, 3, 2},  {1, 5, 7, 16, 32, 3, 1},
      {2, 9, 14, 3, 16, 3, 2},  {1, 8, 19, 32, 64, 3, 2}, {1, 6, 13, 8, 70, 3, 1}, {1, 7, 9, 5, 20, 5, 1},
      {1, 11, 12, 6, 33, 5, 2}, {1, 4, 30, 64, 130, 3, 1}};
  for (const ConvNhwcShape& s : shapes) check(s);
}

TEST(ConvNhwcCpu, StridedPointwiseMatchesTheFloat64Reference) {
  SKIP_WITHOUT_KERNELS();
  check({2, 7, 9, 24, 40, 1, 2});
}

TEST(ConvNhwcCpu, SiluAtTheExtremes) {
  SKIP_WITHOUT_KERNELS();
  const std::vector<float> x = {0.0f,   1e-3f,  -1e-3f, 1.0f,  -1.0f,   5.0f,   -5.0f,   20.0f, -20.0f, 87.0f,
                                -87.0f, 88.0f,  -88.0f, 89.0f, -89.0f,  100.0f, -100.0f, 3e38f, -3e38f,
                                std::numeric_limits<float>::quiet_NaN()};
  const float one = 1.0f;
  const std::vector<float> packed = conv_nhwc_pack(&one, 1, 1, 1);
  std::vector<float> y(x.size(), -7.0f);
  conv_nhwc(x.data(), packed.data(), nullptr, y.data(), {1, 1, static_cast<int64_t>(x.size()), 1, 1, 1, 1}, true);
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    const double ref = silu_ref(x[i]);
    SCOPED_TRACE(testing::Message() << "x = " << x[i]);
    ASSERT_TRUE(std::isfinite(y[i]));
    // Within 4 f32 roundings of the value, or of the smallest normal float where the value underflows.
    EXPECT_LE(std::abs(y[i] - ref), 4 * 6e-8 * std::abs(ref) + 1.2e-38);
  }
  EXPECT_TRUE(std::isnan(y.back())) << "a NaN input gives NaN";
}

TEST(ConvNhwcCpu, TheSameBitsOnOneAndTwoThreads) {
  SKIP_WITHOUT_KERNELS();
  for (const ConvNhwcShape& s : {ConvNhwcShape{8, 20, 20, 96, 80, 1, 1}, ConvNhwcShape{3, 21, 17, 32, 48, 3, 2}}) {
    const auto x = test::random_values(static_cast<size_t>(s.batch * s.height * s.width * s.cin));
    const auto w = test::random_values(static_cast<size_t>(s.cout * s.cin * s.kernel * s.kernel));
    const auto b = test::random_values(static_cast<size_t>(s.cout));
    const std::vector<float> packed = conv_nhwc_pack(w.data(), s.cout, s.cin, s.kernel);
    std::vector<float> one(static_cast<size_t>(s.batch * s.out_height() * s.out_width() * s.cout)), two(one.size());
    {
      ThreadLimit limit(1);
      conv_nhwc(x.data(), packed.data(), b.data(), one.data(), s, true);
    }
    {
      ThreadLimit limit(2);
      conv_nhwc(x.data(), packed.data(), b.data(), two.data(), s, true);
    }
    EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float))) << "kernel " << s.kernel;
  }
}

}  // namespace
}  // namespace vision::cpu::test_conv_nhwc_cpp
