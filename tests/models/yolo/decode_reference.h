// Float64 reference of YOLO26's detect decode (anchor grid and the three modes), written independently of the engine's
// detect_decode_cpu, for the CPU and GPU tests.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace vision::test {

// Anchor a of an H×W input (levels of stride 8, 16, 32, row-major): {x + 0.5, y + 0.5, stride}.
inline std::array<double, 3> reference_anchor(int64_t a, int64_t h, int64_t w) {
  for (int64_t s = 8; s <= 32; s *= 2) {
    const int64_t gh = h / s, gw = w / s;
    if (a < gh * gw) return {double(a % gw) + 0.5, double(a / gw) + 0.5, double(s)};
    a -= gh * gw;
  }
  return {-1, -1, -1};  // past the last anchor
}

// boxes [B, 4, A] from ltrb [B, 4, A] of an H×W input; mode 0 pixels, 1 grid, 2 cxcywh (as DecodeMode).
inline std::vector<double> reference_decode(const std::vector<float>& ltrb, int64_t batch, int64_t n, int64_t h,
                                            int64_t w, int mode) {
  std::vector<double> out(ltrb.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t a = 0; a < n; ++a) {
      const auto [ax, ay, stride] = reference_anchor(a, h, w);
      const double s = mode == 1 ? 1.0 : stride;
      auto in = [&](int c) { return double(ltrb[static_cast<size_t>((b * 4 + c) * n + a)]); };
      const double x1 = ax - in(0), y1 = ay - in(1), x2 = ax + in(2), y2 = ay + in(3);
      const double v[4] = {mode == 2 ? (x1 + x2) / 2 : x1, mode == 2 ? (y1 + y2) / 2 : y1, mode == 2 ? x2 - x1 : x2,
                           mode == 2 ? y2 - y1 : y2};
      for (int c = 0; c < 4; ++c) out[static_cast<size_t>((b * 4 + c) * n + a)] = v[c] * s;
    }
  return out;
}

}  // namespace vision::test
