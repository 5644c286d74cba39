// YUV 4:2:0 → RGB (data/yuv.h), the CPU twin of the fused GPU letterbox's conversion: black and white at both ranges'
// ends, every sample within 1 of the ITU-R BT.601 / BT.709 matrices computed in float64, the same RGB from I420 and
// NV12 planes with any row pitch, odd sizes (the last chroma column and row shared by one pixel), and clear errors for
// views that cannot hold their frame.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "test_util.h"
#include "vision/data/yuv.h"

namespace vision::data {
namespace {

Yuv420View one_pixel_view(const uint8_t* y, const uint8_t* u, const uint8_t* v, YuvMatrix m, bool full) {
  Yuv420View view;
  view.y = y, view.u = u, view.v = v, view.width = 1, view.height = 1, view.y_pitch = 1, view.uv_pitch = 1;
  view.matrix = m, view.full_range = full;
  return view;
}

TEST(YuvToRgb, BlackAndWhiteAtBothRanges) {
  const uint8_t grey = 128;
  for (YuvMatrix m : {YuvMatrix::bt601, YuvMatrix::bt709}) {
    for (const auto& [y, full, want] : {std::tuple{uint8_t{16}, false, 0}, {uint8_t{235}, false, 255},
                                        {uint8_t{0}, true, 0}, {uint8_t{255}, true, 255}, {uint8_t{128}, true, 128}}) {
      const Image rgb = yuv420_to_rgb(one_pixel_view(&y, &grey, &grey, m, full));
      EXPECT_EQ(rgb.pixels, (std::vector<uint8_t>(3, static_cast<uint8_t>(want)))) << int(y) << " full " << full;
    }
  }
}

// Every (Y, U, V) on a grid against the matrices in float64 (Kr, Kb of each standard; limited range scaling Y by
// 255/219 and chroma by 255/224), rounded and clamped: within 1 everywhere.
TEST(YuvToRgb, WithinOneOfTheFloat64Matrices) {
  for (YuvMatrix m : {YuvMatrix::bt601, YuvMatrix::bt709}) {
    const double kr = m == YuvMatrix::bt709 ? 0.2126 : 0.299, kb = m == YuvMatrix::bt709 ? 0.0722 : 0.114;
    const double kg = 1 - kr - kb;
    for (bool full : {false, true}) {
      int worst = 0;
      for (int y = 0; y < 256; y += 3)
        for (int u = 0; u < 256; u += 5)
          for (int v = 0; v < 256; v += 5) {
            const auto yy = static_cast<uint8_t>(y), uu = static_cast<uint8_t>(u), vv = static_cast<uint8_t>(v);
            const Image rgb = yuv420_to_rgb(one_pixel_view(&yy, &uu, &vv, m, full));
            const double l = full ? y : (y - 16) * 255.0 / 219.0;
            const double cb = full ? u - 128.0 : (u - 128) * 255.0 / 224.0;
            const double cr = full ? v - 128.0 : (v - 128) * 255.0 / 224.0;
            const double r = l + 2 * (1 - kr) * cr, b = l + 2 * (1 - kb) * cb;
            const double g = l - 2 * kb * (1 - kb) / kg * cb - 2 * kr * (1 - kr) / kg * cr;
            const double ref[3] = {r, g, b};
            for (int c = 0; c < 3; ++c) {
              const int want = static_cast<int>(std::clamp(std::lround(ref[c]), 0L, 255L));
              worst = std::max(worst, std::abs(int(rgb.pixels[c]) - want));
            }
          }
      EXPECT_LE(worst, 1) << (m == YuvMatrix::bt709 ? "bt709" : "bt601") << (full ? " full" : " limited");
    }
  }
}

// The same random frame as I420 with padded rows, I420 packed (Yuv420Image) and NV12: the same RGB; each pixel's
// chroma is its 2 × 2 block's (odd sizes: the last column and row alone in theirs).
TEST(YuvToRgb, I420AndNv12AndPitchesGiveTheSameRgb) {
  const auto sizes = {std::pair<int64_t, int64_t>{7, 5}, {64, 48}, {1, 1}, {33, 2}};
  uint32_t seed = 5;
  for (const auto& [w, h] : sizes) {
    const int64_t cw = (w + 1) / 2, ch = (h + 1) / 2;
    std::mt19937 rng(seed++);
    Yuv420Image packed;
    packed.width = w, packed.height = h, packed.matrix = YuvMatrix::bt709;
    packed.bytes.resize(Yuv420Image::packed_bytes(w, h));
    for (auto& b : packed.bytes) b = static_cast<uint8_t>(rng() & 0xff);
    const Yuv420View p = packed.view();
    const Image expected = yuv420_to_rgb(p);
    // Every pixel from its own formula (the chroma sample of its block).
    const YuvCoefficients k = yuv_coefficients(YuvMatrix::bt709, false);
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const int c = k.y_scale * (p.y[y * w + x] - 16) + 128, d = p.u[(y / 2) * cw + x / 2] - 128,
                  e = p.v[(y / 2) * cw + x / 2] - 128;
        EXPECT_EQ(expected.at(x, y)[0], std::clamp((c + k.r_v * e) >> 8, 0, 255)) << x << "," << y;
        EXPECT_EQ(expected.at(x, y)[2], std::clamp((c + k.b_u * d) >> 8, 0, 255)) << x << "," << y;
      }
    // Padded I420.
    std::vector<uint8_t> padded(static_cast<size_t>((w + 3) * h + 2 * (cw + 2) * ch), 0xee);
    Yuv420View q;
    q.width = w, q.height = h, q.matrix = YuvMatrix::bt709, q.y_pitch = w + 3, q.uv_pitch = cw + 2;
    q.y = padded.data(), q.u = padded.data() + (w + 3) * h, q.v = q.u + (cw + 2) * ch;
    for (int64_t y = 0; y < h; ++y) std::copy_n(p.y + y * w, w, padded.data() + y * (w + 3));
    for (int64_t y = 0; y < ch; ++y) {
      std::copy_n(p.u + y * cw, cw, const_cast<uint8_t*>(q.u) + y * (cw + 2));
      std::copy_n(p.v + y * cw, cw, const_cast<uint8_t*>(q.v) + y * (cw + 2));
    }
    EXPECT_EQ(yuv420_to_rgb(q), expected) << w << "x" << h;
    // NV12, packed.
    Yuv420Image nv12 = packed;
    nv12.nv12 = true;
    uint8_t* uv = nv12.bytes.data() + w * h;
    for (int64_t i = 0; i < cw * ch; ++i) uv[2 * i] = p.u[i], uv[2 * i + 1] = p.v[i];
    EXPECT_TRUE(nv12.view().nv12());
    EXPECT_EQ(yuv420_to_rgb(nv12.view()), expected) << w << "x" << h;
  }
}

TEST(YuvToRgb, ViewsThatCannotHoldTheirFrameAreErrors) {
  std::vector<uint8_t> bytes(64, 0);
  Yuv420View v;
  v.y = v.u = v.v = bytes.data();
  v.width = 4, v.height = 4, v.y_pitch = 4, v.uv_pitch = 2;
  EXPECT_NO_THROW(yuv420_to_rgb(v));
  Yuv420View bad = v;
  bad.y_pitch = 3;
  EXPECT_NE(test::error_of([&] { yuv420_to_rgb(bad); }).find("Y pitch 3"), std::string::npos);
  bad = v, bad.uv_pitch = 1;
  EXPECT_NE(test::error_of([&] { yuv420_to_rgb(bad); }).find("chroma pitch 1"), std::string::npos);
  bad = v, bad.uv_step = 3;
  EXPECT_NE(test::error_of([&] { yuv420_to_rgb(bad); }).find("chroma step"), std::string::npos);
  bad = v, bad.v = nullptr;
  EXPECT_NE(test::error_of([&] { yuv420_to_rgb(bad); }).find("plane pointers"), std::string::npos);
  Yuv420Image short_frame;
  short_frame.width = 4, short_frame.height = 4, short_frame.bytes.resize(10);
  EXPECT_NE(test::error_of([&] { (void)short_frame.view(); }).find("cannot hold a 4×4"), std::string::npos);
}

}  // namespace
}  // namespace vision::data
