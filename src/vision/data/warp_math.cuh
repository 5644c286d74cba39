// The augmentation's warp, one output pixel at a time — the arithmetic shared by the CPU warp (augment.cpp's
// warp_into), its per-pixel twin (augment.h's warp_plan_cpu) and the GPU kernel (warp.cuh), so they cannot drift apart.
//
// OpenCV's warpAffine / warpPerspective with INTER_LINEAR and BORDER_CONSTANT: output pixel (x, y) samples the input
// at M⁻¹·(x, y, 1) in 1/32-pixel steps — affine: round(M⁻¹ row · 1024) per column and per row, added, then >> 5;
// perspective: each position divided by its third coordinate and rounded to 1/32 — and blends the four neighbours
// with integer weights (the fill for a neighbour outside the input).
//
// WarpPlan describes the input without building it: a canvas of `canvas` × `canvas` pixels of `fill` on which up to
// four source images are placed (the mosaic's tiles, or the letterboxed image), each a rectangle of the canvas showing
// the source's pixels from a corner. A warp of that canvas reads each neighbour from the tile that covers it, so a
// device holding only the sources computes the pixels the CPU computes from the composed canvas.
#pragma once

#include "vision/cuda/host_device.cuh"

namespace vision::data {

inline constexpr int kWarpMaxTiles = 4;

// Canvas rectangle [x, x + w) × [y, y + h) shows source pixels from (sx, sy) on; the source is width × height.
struct WarpTile {
  int32_t x = 0, y = 0, w = 0, h = 0;
  int32_t sx = 0, sy = 0, width = 0, height = 0;
};

// One sample's warp (plain data: it is copied to the device as it is).
struct WarpPlan {
  double inv[9] = {};   // M⁻¹, row-major (augment.cpp's warp_inverse: OpenCV's invertAffineTransform when affine)
  int32_t affine = 1;   // M⁻¹'s last row is (0, 0, 1)
  int32_t canvas = 0;   // the canvas side; positions outside [0, canvas)² are the fill
  int32_t out = 0;      // the output side (imgsz): out × out × 3 bytes
  int32_t mirror_x = 0, mirror_y = 0;  // the output written mirrored (the flips)
  int32_t fill = 114;
  int32_t tiles = 0;    // 1–4
  int32_t pad = 0;
  WarpTile tile[kWarpMaxTiles];
  uint64_t source[kWarpMaxTiles] = {};  // each tile's pixels: RGB rows of width × 3 bytes (a host or device address)
};

// Correctly rounded f64 operations, never contracted into an FMA, and round-to-nearest-even to an integer.
#ifdef __CUDACC_RTC__
VISION_HD double warp_mul(double a, double b) { return __dmul_rn(a, b); }
VISION_HD double warp_add(double a, double b) { return __dadd_rn(a, b); }
VISION_HD double warp_div(double a, double b) { return __ddiv_rn(a, b); }
VISION_HD int64_t warp_lrint(double x) { return __double2ll_rn(x); }
#else
VISION_HD double warp_mul(double a, double b) { return a * b; }
VISION_HD double warp_add(double a, double b) { return a + b; }
VISION_HD double warp_div(double a, double b) { return a / b; }
VISION_HD int64_t warp_lrint(double x) { return llrint(x); }
#endif
VISION_HD int64_t warp_round(double x) {  // clamped first, as the CPU warp always did: far positions stay far
  return warp_lrint(x < -1e12 ? -1e12 : x > 1e12 ? 1e12 : x);
}

// The affine position's column part: round(M⁻¹[0][0] · x · 1024) and round(M⁻¹[1][0] · x · 1024).
VISION_HD void warp_column(const double* inv, int64_t x, int64_t* ax, int64_t* ay) {
  const double xd = static_cast<double>(x);
  *ax = warp_round(warp_mul(warp_mul(inv[0], xd), 1024.0));
  *ay = warp_round(warp_mul(warp_mul(inv[3], xd), 1024.0));
}

// Its row part, with the rounding offset of the final >> 5 (16 of 1024 / 32).
VISION_HD void warp_row(const double* inv, int64_t y, int64_t* bx, int64_t* by) {
  const double yd = static_cast<double>(y);
  *bx = warp_round(warp_mul(warp_add(warp_mul(inv[1], yd), inv[2]), 1024.0)) + 16;
  *by = warp_round(warp_mul(warp_add(warp_mul(inv[4], yd), inv[5]), 1024.0)) + 16;
}

// A perspective position in 1/32 steps.
VISION_HD void warp_perspective(const double* inv, int64_t x, int64_t y, int64_t* fx, int64_t* fy) {
  const double xd = static_cast<double>(x), yd = static_cast<double>(y);
  const double q = warp_add(warp_add(warp_mul(inv[6], xd), warp_mul(inv[7], yd)), inv[8]);
  const double r = q != 0 ? warp_div(32.0, q) : 0.0;
  *fx = warp_round(warp_mul(warp_add(warp_add(warp_mul(inv[0], xd), warp_mul(inv[1], yd)), inv[2]), r));
  *fy = warp_round(warp_mul(warp_add(warp_add(warp_mul(inv[3], xd), warp_mul(inv[4], yd)), inv[5]), r));
}

// The bilinear blend of one channel's four neighbours at fraction (ax, ay) of 32.
VISION_HD uint8_t warp_blend(int p00, int p10, int p01, int p11, int ax, int ay) {
  const int w00 = (32 - ax) * (32 - ay), w10 = ax * (32 - ay), w01 = (32 - ax) * ay, w11 = ax * ay;
  return static_cast<uint8_t>((p00 * w00 + p10 * w10 + p01 * w01 + p11 * w11 + 512) >> 10);
}

// The canvas pixel (cx, cy): the tile covering it, else null (the fill).
VISION_HD const uint8_t* warp_canvas_pixel(const WarpPlan& p, int64_t cx, int64_t cy) {
  if (cx < 0 || cy < 0 || cx >= p.canvas || cy >= p.canvas) return nullptr;
  for (int t = 0; t < p.tiles; ++t) {
    const WarpTile& k = p.tile[t];
    if (cx >= k.x && cy >= k.y && cx < k.x + k.w && cy < k.y + k.h)
      return reinterpret_cast<const uint8_t*>(p.source[t]) +
             ((int64_t(k.sy) + (cy - k.y)) * k.width + (int64_t(k.sx) + (cx - k.x))) * 3;
  }
  return nullptr;
}

// Output pixel (x, y) (before the mirroring) into dst[0..2].
VISION_HD void warp_plan_pixel(const WarpPlan& p, int64_t x, int64_t y, uint8_t* dst) {
  int64_t fx, fy;
  if (p.affine) {
    int64_t ax, ay, bx, by;
    warp_column(p.inv, x, &ax, &ay);
    warp_row(p.inv, y, &bx, &by);
    fx = (bx + ax) >> 5;
    fy = (by + ay) >> 5;
  } else {
    warp_perspective(p.inv, x, y, &fx, &fy);
  }
  const int64_t x0 = fx >> 5, y0 = fy >> 5;  // floor
  const uint8_t f = static_cast<uint8_t>(p.fill);
  if (x0 < -1 || y0 < -1 || x0 >= p.canvas || y0 >= p.canvas) {  // all four neighbours outside: the fill
    dst[0] = dst[1] = dst[2] = f;
    return;
  }
  const int ax = static_cast<int>(fx & 31), ay = static_cast<int>(fy & 31);
  const uint8_t* q00 = warp_canvas_pixel(p, x0, y0);
  const uint8_t* q10 = warp_canvas_pixel(p, x0 + 1, y0);
  const uint8_t* q01 = warp_canvas_pixel(p, x0, y0 + 1);
  const uint8_t* q11 = warp_canvas_pixel(p, x0 + 1, y0 + 1);
  for (int c = 0; c < 3; ++c)
    dst[c] = warp_blend(q00 ? q00[c] : f, q10 ? q10[c] : f, q01 ? q01[c] : f, q11 ? q11[c] : f, ax, ay);
}

// Where output pixel (x, y) is written: its byte offset in the out × out × 3 image, mirrored as the plan says.
VISION_HD int64_t warp_plan_offset(const WarpPlan& p, int64_t x, int64_t y) {
  const int64_t n = p.out;
  return ((p.mirror_y ? n - 1 - y : y) * n + (p.mirror_x ? n - 1 - x : x)) * 3;
}

}  // namespace vision::data
