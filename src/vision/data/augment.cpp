#include "vision/data/augment.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <utility>
#include <vector>

#include "vision/core/error.h"
#include "vision/data/letterbox.h"

namespace vision::data {
namespace {

constexpr Matrix3 kIdentity = {1, 0, 0, 0, 1, 0, 0, 0, 1};

Matrix3 inverse(const Matrix3& m) {
  const double a = m[0], b = m[1], c = m[2], d = m[3], e = m[4], f = m[5], g = m[6], h = m[7], i = m[8];
  const double A = e * i - f * h, B = -(d * i - f * g), C = d * h - e * g;
  const double det = a * A + b * B + c * C;
  VISION_CHECK(std::abs(det) > 1e-12, "augment: the affine matrix is singular (scale or perspective too large?)");
  const double r = 1.0 / det;
  return {A * r, -(b * i - c * h) * r, (b * f - c * e) * r, B * r, (a * i - c * g) * r, -(a * f - c * d) * r,
          C * r, -(a * h - b * g) * r, (a * e - b * d) * r};
}

std::array<double, 2> apply(const Matrix3& m, double x, double y) {
  const double u = m[0] * x + m[1] * y + m[2], v = m[3] * x + m[4] * y + m[5], w = m[6] * x + m[7] * y + m[8];
  if (w == 1.0) return {u, v};
  const double s = w != 0 ? 1.0 / w : 0.0;
  return {u * s, v * s};
}


}  // namespace

Matrix3 matmul(const Matrix3& a, const Matrix3& b) {
  Matrix3 c{};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) c[i * 3 + j] = a[i * 3] * b[j] + a[i * 3 + 1] * b[3 + j] + a[i * 3 + 2] * b[6 + j];
  return c;
}

LabeledImage load_for_training(Image image, std::span<const LabelBox> labels, int64_t imgsz) {
  VISION_CHECK(imgsz > 0, "augment: imgsz must be positive, got {}", imgsz);
  VISION_CHECK(!image.empty() && image.channels == 3, "augment: the training load needs a 3-channel image");
  LabeledImage out;
  const int64_t w0 = image.width, h0 = image.height;
  const double r = static_cast<double>(imgsz) / static_cast<double>(std::max(w0, h0));
  if (r != 1.0) {
    const auto side = [&](int64_t s) {
      return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(static_cast<double>(s) * r)), 1, imgsz);
    };
    out.image = resize_bilinear(image, side(w0), side(h0));
  } else {
    out.image = std::move(image);
  }
  out.boxes = training_boxes(labels, out.image.width, out.image.height);
  return out;
}

std::vector<TargetBox> training_boxes(std::span<const LabelBox> labels, int64_t width, int64_t height) {
  const double w = static_cast<double>(width), h = static_cast<double>(height);
  std::vector<TargetBox> out;
  out.reserve(labels.size());
  for (const LabelBox& l : labels)
    out.push_back({l.cls, static_cast<float>((l.cx - l.w / 2) * w), static_cast<float>((l.cy - l.h / 2) * h),
                   static_cast<float>((l.cx + l.w / 2) * w), static_cast<float>((l.cy + l.h / 2) * h)});
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Geometry

Matrix3 random_affine_matrix(Random& rng, const AugmentOptions& o, int64_t in_w, int64_t in_h, int64_t out_w,
                             int64_t out_h, double* scale) {
  constexpr double kDeg = std::numbers::pi / 180.0;
  Matrix3 C = kIdentity;
  C[2] = -static_cast<double>(in_w) / 2;
  C[5] = -static_cast<double>(in_h) / 2;
  Matrix3 P = kIdentity;
  P[6] = rng.uniform(-o.perspective, o.perspective);
  P[7] = rng.uniform(-o.perspective, o.perspective);
  const double a = rng.uniform(-o.degrees, o.degrees) * kDeg;
  const double s = rng.uniform(1 - o.scale, 1 + o.scale);
  Matrix3 R = kIdentity;
  R[0] = s * std::cos(a);
  R[1] = s * std::sin(a);
  R[3] = -R[1];
  R[4] = R[0];
  Matrix3 S = kIdentity;
  S[1] = std::tan(rng.uniform(-o.shear, o.shear) * kDeg);
  S[3] = std::tan(rng.uniform(-o.shear, o.shear) * kDeg);
  Matrix3 T = kIdentity;
  T[2] = rng.uniform(0.5 - o.translate, 0.5 + o.translate) * static_cast<double>(out_w);
  T[5] = rng.uniform(0.5 - o.translate, 0.5 + o.translate) * static_cast<double>(out_h);
  if (scale) *scale = s;
  return matmul(T, matmul(S, matmul(R, matmul(P, C))));
}

namespace {

bool is_affine(const Matrix3& m) { return m[6] == 0 && m[7] == 0 && m[8] == 1; }

// The inverse M⁻¹ warp samples by: OpenCV's invertAffineTransform for an affine M, the full inverse otherwise.
Matrix3 warp_inverse(const Matrix3& m) {
  if (is_affine(m)) {
    double d = m[0] * m[4] - m[1] * m[3];
    VISION_CHECK(d != 0, "augment: the affine matrix is singular (scale 0?)");
    d = 1.0 / d;
    const double a11 = m[4] * d, a22 = m[0] * d, a12 = -m[1] * d, a21 = -m[3] * d;
    return {a11, a12, -a11 * m[2] - a12 * m[5], a21, a22, -a21 * m[2] - a22 * m[5], 0, 0, 1};
  }
  return inverse(m);
}

// Where the warp writes output pixel (x, y): out_w × out_h × 3 bytes from `base`, rows back to back, mirrored
// left–right and/or upside down (the flips, fused into the warp: a mirrored write gives flip_lr/flip_ud's pixels).
struct WarpTarget {
  uint8_t* base = nullptr;
  bool mirror_x = false, mirror_y = false;
};

// warp's pixels written through `target`, from M⁻¹ (warp_inverse; `affine`: M's last row is (0, 0, 1)).
void warp_into(const Image& image, const Matrix3& inv, bool affine, int64_t out_w, int64_t out_h, uint8_t fill,
               WarpTarget target) {
  VISION_CHECK(image.channels == 3 && !image.empty(), "augment: warp needs a 3-channel image");
  VISION_CHECK(out_w > 0 && out_h > 0, "augment: warp to {}×{}: the output must not be empty", out_w, out_h);
  const int64_t w = image.width, h = image.height;
  const uint8_t border[3] = {fill, fill, fill};
  // Affine: the columns' parts of the positions once per warp, the rows' once per row (warp_math.cuh).
  std::vector<int64_t> adx, ady;
  if (affine) {
    adx.resize(static_cast<size_t>(out_w));
    ady.resize(static_cast<size_t>(out_w));
    for (int64_t x = 0; x < out_w; ++x)
      warp_column(inv.data(), x, &adx[static_cast<size_t>(x)], &ady[static_cast<size_t>(x)]);
  }
  const int64_t step = target.mirror_x ? -3 : 3;
  for (int64_t y = 0; y < out_h; ++y) {
    uint8_t* dst = target.base + (target.mirror_y ? out_h - 1 - y : y) * out_w * 3 +
                   (target.mirror_x ? (out_w - 1) * 3 : 0);
    int64_t x0r = 0, y0r = 0;
    if (affine) warp_row(inv.data(), y, &x0r, &y0r);
    for (int64_t x = 0; x < out_w; ++x, dst += step) {
      int64_t fx, fy;
      if (affine) {
        fx = (x0r + adx[static_cast<size_t>(x)]) >> 5;
        fy = (y0r + ady[static_cast<size_t>(x)]) >> 5;
      } else {
        warp_perspective(inv.data(), x, y, &fx, &fy);
      }
      const int64_t x0 = fx >> 5, y0 = fy >> 5;  // floor
      if (x0 < -1 || y0 < -1 || x0 >= w || y0 >= h) {  // all four neighbours outside: the fill
        dst[0] = dst[1] = dst[2] = fill;
        continue;
      }
      const int ax = static_cast<int>(fx & 31), ay = static_cast<int>(fy & 31);
      const uint8_t *p00, *p10, *p01, *p11;
      if (x0 >= 0 && y0 >= 0 && x0 + 1 < w && y0 + 1 < h) {
        p00 = image.at(x0, y0);
        p10 = p00 + 3;
        p01 = p00 + w * 3;
        p11 = p01 + 3;
      } else {
        const auto px = [&](int64_t xx, int64_t yy) {
          return xx >= 0 && yy >= 0 && xx < w && yy < h ? image.at(xx, yy) : border;
        };
        p00 = px(x0, y0);
        p10 = px(x0 + 1, y0);
        p01 = px(x0, y0 + 1);
        p11 = px(x0 + 1, y0 + 1);
      }
      for (int c = 0; c < 3; ++c) dst[c] = warp_blend(p00[c], p10[c], p01[c], p11[c], ax, ay);
    }
  }
}

}  // namespace

Image warp(const Image& image, const Matrix3& m, int64_t out_w, int64_t out_h, uint8_t fill) {
  VISION_CHECK(out_w > 0 && out_h > 0, "augment: warp to {}×{}: the output must not be empty", out_w, out_h);
  Image out(out_w, out_h, 3);
  warp_into(image, warp_inverse(m), is_affine(m), out_w, out_h, fill, {out.pixels.data()});
  return out;
}

TargetBox transform_box(const TargetBox& b, const Matrix3& m, int64_t width, int64_t height) {
  const std::array<std::array<double, 2>, 4> corners = {apply(m, b.x1, b.y1), apply(m, b.x2, b.y2),
                                                        apply(m, b.x1, b.y2), apply(m, b.x2, b.y1)};
  double x1 = corners[0][0], x2 = x1, y1 = corners[0][1], y2 = y1;
  for (const auto& c : corners) {
    x1 = std::min(x1, c[0]);
    x2 = std::max(x2, c[0]);
    y1 = std::min(y1, c[1]);
    y2 = std::max(y2, c[1]);
  }
  const double W = static_cast<double>(width), H = static_cast<double>(height);
  return {b.cls, static_cast<float>(std::clamp(x1, 0.0, W)), static_cast<float>(std::clamp(y1, 0.0, H)),
          static_cast<float>(std::clamp(x2, 0.0, W)), static_cast<float>(std::clamp(y2, 0.0, H))};
}

bool box_candidate(const TargetBox& before, const TargetBox& after, double scale) {
  constexpr double kMinSide = 2, kMinAreaRatio = 0.10, kMaxAspect = 100, kEps = 1e-16;
  const double w1 = (static_cast<double>(before.x2) - before.x1) * scale;
  const double h1 = (static_cast<double>(before.y2) - before.y1) * scale;
  const double w2 = static_cast<double>(after.x2) - after.x1, h2 = static_cast<double>(after.y2) - after.y1;
  const double aspect = std::max(w2 / (h2 + kEps), h2 / (w2 + kEps));
  return w2 > kMinSide && h2 > kMinSide && w2 * h2 / (w1 * h1 + kEps) > kMinAreaRatio && aspect < kMaxAspect;
}

namespace {

// The boxes through M (transform_box), those that pass box_candidate.
std::vector<TargetBox> affine_boxes(std::span<const TargetBox> boxes, const Matrix3& m, double scale, int64_t out_w,
                                    int64_t out_h) {
  std::vector<TargetBox> out;
  for (const TargetBox& b : boxes) {
    const TargetBox t = transform_box(b, m, out_w, out_h);
    if (box_candidate(b, t, scale)) out.push_back(t);
  }
  return out;
}

}  // namespace

LabeledImage random_affine(const LabeledImage& in, Random& rng, const AugmentOptions& o, int64_t out_w,
                           int64_t out_h) {
  double s = 1;
  const Matrix3 m = random_affine_matrix(rng, o, in.image.width, in.image.height, out_w, out_h, &s);
  LabeledImage out;
  if (out_w == in.image.width && out_h == in.image.height && m == kIdentity)
    out.image = in.image;
  else
    out.image = warp(in.image, m, out_w, out_h, kLetterboxFill);
  out.boxes = affine_boxes(in.boxes, m, s, out_w, out_h);
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Mosaic

namespace {

// The mosaic's centre (xc, yc), uniform in [imgsz/2, 3·imgsz/2], x drawn first, whole pixels.
std::array<int64_t, 2> draw_mosaic_centre(Random& rng, int64_t imgsz) {
  const int64_t s = imgsz, S = 2 * imgsz;
  const int64_t xc = static_cast<int64_t>(rng.uniform(static_cast<double>(s / 2), static_cast<double>(S - s / 2)));
  const int64_t yc = static_cast<int64_t>(rng.uniform(static_cast<double>(s / 2), static_cast<double>(S - s / 2)));
  return {xc, yc};
}

// Where mosaic image i (w × h) goes on the S × S canvas around the centre: the canvas rectangle and the source corner
// it shows (the four are disjoint quadrants of the canvas).
WarpTile mosaic_tile(size_t i, int64_t w, int64_t h, int64_t S, int64_t xc, int64_t yc) {
  int64_t x1a, y1a, x2a, y2a, x1b, y1b;  // canvas rectangle and the source's top-left corner
  switch (i) {
    case 0:  // top left of the centre
      x1a = std::max<int64_t>(xc - w, 0), y1a = std::max<int64_t>(yc - h, 0), x2a = xc, y2a = yc;
      x1b = w - (x2a - x1a), y1b = h - (y2a - y1a);
      break;
    case 1:  // top right
      x1a = xc, y1a = std::max<int64_t>(yc - h, 0), x2a = std::min(xc + w, S), y2a = yc;
      x1b = 0, y1b = h - (y2a - y1a);
      break;
    case 2:  // bottom left
      x1a = std::max<int64_t>(xc - w, 0), y1a = yc, x2a = xc, y2a = std::min(S, yc + h);
      x1b = w - (x2a - x1a), y1b = 0;
      break;
    default:  // bottom right
      x1a = xc, y1a = yc, x2a = std::min(xc + w, S), y2a = std::min(S, yc + h);
      x1b = 0, y1b = 0;
      break;
  }
  const int64_t cw = std::min(x2a - x1a, w - x1b), ch = std::min(y2a - y1a, h - y1b);
  const auto i32 = [](int64_t v) { return static_cast<int32_t>(v); };
  return {i32(x1a), i32(y1a), i32(std::max<int64_t>(cw, 0)), i32(std::max<int64_t>(ch, 0)), i32(x1b), i32(y1b),
          i32(w), i32(h)};
}

// A mosaic image's boxes moved with its tile, clipped to the S × S canvas, those left with no area dropped.
void mosaic_boxes(std::span<const TargetBox> in, const WarpTile& t, int64_t S, std::vector<TargetBox>& out) {
  const float padw = static_cast<float>(t.x - t.sx), padh = static_cast<float>(t.y - t.sy);
  const float lim = static_cast<float>(S);
  for (const TargetBox& b : in) {
    TargetBox c{b.cls, std::clamp(b.x1 + padw, 0.0f, lim), std::clamp(b.y1 + padh, 0.0f, lim),
                std::clamp(b.x2 + padw, 0.0f, lim), std::clamp(b.y2 + padh, 0.0f, lim)};
    if (c.x2 > c.x1 && c.y2 > c.y1) out.push_back(c);
  }
}

// A canvas of side S filled with kLetterboxFill and the tiles' pixels copied onto it; its buffer is reused when it
// has the room.
void compose_canvas(std::span<const WarpTile> tiles, std::span<const Image* const> sources, int64_t S, Image& canvas) {
  canvas.width = canvas.height = S;
  canvas.channels = 3;
  canvas.pixels.assign(static_cast<size_t>(S * S * 3), kLetterboxFill);
  for (size_t i = 0; i < tiles.size(); ++i) {
    const WarpTile& t = tiles[i];
    for (int64_t y = 0; y < t.h; ++y) std::copy_n(sources[i]->at(t.sx, t.sy + y), t.w * 3, canvas.at(t.x, t.y + y));
  }
}

// mosaic4 onto `canvas` (compose_canvas).
std::vector<TargetBox> mosaic4_onto(std::span<const LabeledImage> images, int64_t imgsz, Random& rng, Image& canvas) {
  VISION_CHECK(images.size() == 4, "augment: a mosaic takes 4 images, got {}", images.size());
  const int64_t S = 2 * imgsz;
  const auto [xc, yc] = draw_mosaic_centre(rng, imgsz);
  std::vector<TargetBox> boxes;
  std::array<WarpTile, 4> tiles;
  std::array<const Image*, 4> sources{};
  for (size_t i = 0; i < 4; ++i) {
    tiles[i] = mosaic_tile(i, images[i].image.width, images[i].image.height, S, xc, yc);
    sources[i] = &images[i].image;
    mosaic_boxes(images[i].boxes, tiles[i], S, boxes);
  }
  compose_canvas(tiles, sources, S, canvas);
  return boxes;
}

}  // namespace

LabeledImage mosaic4(std::span<const LabeledImage> images, int64_t imgsz, Random& rng) {
  LabeledImage out;
  out.boxes = mosaic4_onto(images, imgsz, rng, out.image);
  return out;
}

LabeledImage letterbox_square(const LabeledImage& in, int64_t imgsz) {
  const LetterboxTransform t = letterbox_transform(in.image.height, in.image.width, imgsz, imgsz, false, 0);
  LabeledImage out;
  out.image = letterbox(in.image, t);
  const auto fx = [&](float v) { return static_cast<float>(v * t.scale + t.pad_x); };
  const auto fy = [&](float v) { return static_cast<float>(v * t.scale + t.pad_y); };
  for (const TargetBox& b : in.boxes) out.boxes.push_back({b.cls, fx(b.x1), fy(b.y1), fx(b.x2), fy(b.y2)});
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Colour

namespace {
constexpr int kHsvShift = 12;
struct HsvTables {
  std::array<int, 256> sdiv{}, hdiv{};
  HsvTables() {
    for (int i = 1; i < 256; ++i) {
      sdiv[i] = static_cast<int>(std::lround((255.0 * (1 << kHsvShift)) / i));
      hdiv[i] = static_cast<int>(std::lround((180.0 * (1 << kHsvShift)) / (6.0 * i)));
    }
  }
};
const HsvTables& hsv_tables() {
  static const HsvTables t;
  return t;
}

inline std::array<uint8_t, 3> rgb_to_hsv_inline(const HsvTables& t, int r, int g, int b) {
  const int v = std::max({r, g, b}), vmin = std::min({r, g, b}), diff = v - vmin;
  const int s = (diff * t.sdiv[v] + (1 << (kHsvShift - 1))) >> kHsvShift;
  // Selects rather than branches (the hue's sector is as random as the pixels).
  int h = v == r ? g - b : v == g ? b - r + 2 * diff : r - g + 4 * diff;
  h = (h * t.hdiv[diff] + (1 << (kHsvShift - 1))) >> kHsvShift;
  h += h < 0 ? 180 : 0;
  return {static_cast<uint8_t>(h), static_cast<uint8_t>(s), static_cast<uint8_t>(v)};
}
}  // namespace

std::array<uint8_t, 3> rgb_to_hsv(uint8_t r, uint8_t g, uint8_t b) { return rgb_to_hsv_inline(hsv_tables(), r, g, b); }

namespace {

// hsv_to_rgb's hue sector and position in it, per 8-bit hue (only 180 values occur).
struct HueTable {
  std::array<int, 256> sector{};
  std::array<float, 256> frac{};
  HueTable() {
    for (int i = 0; i < 256; ++i) {
      float h = static_cast<float>(i) * (6.0f / 180.0f);
      while (h >= 6) h -= 6;
      int s = static_cast<int>(std::floor(h));
      h -= static_cast<float>(s);
      if (s < 0 || s >= 6) s = 0, h = 0;
      sector[i] = s;
      frac[i] = h;
    }
  }
};
const HueTable& hue_table() {
  static const HueTable t;
  return t;
}

// x (in [0, 255]) rounded half to even as lrint does, without a libm call: adding 1.5·2^23 leaves no fraction bits.
inline uint8_t round_byte(float x) {
  constexpr float kMagic = 12582912.0f;
  return static_cast<uint8_t>(static_cast<int>((std::clamp(x, 0.0f, 255.0f) + kMagic) - kMagic));
}

inline void hsv_to_rgb_into(const HueTable& ht, int h8, int s8, int v8, uint8_t* out) {
  const float s = static_cast<float>(s8) * (1.0f / 255.0f), v = static_cast<float>(v8) * (1.0f / 255.0f);
  const float f = ht.frac[h8];
  // v, p, q, t of the six-sector formula, and per sector which of them r, g and b take: a lookup, not a branch.
  const float vpqt[4] = {v, v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))};
  static constexpr uint8_t kPick[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3}, {1, 2, 0}, {3, 1, 0}, {0, 1, 2}};
  const uint8_t* pick = kPick[ht.sector[h8]];
  out[0] = round_byte(vpqt[pick[0]] * 255.0f);
  out[1] = round_byte(vpqt[pick[1]] * 255.0f);
  out[2] = round_byte(vpqt[pick[2]] * 255.0f);
}

}  // namespace

std::array<uint8_t, 3> hsv_to_rgb(uint8_t h, uint8_t s, uint8_t v) {
  std::array<uint8_t, 3> out;
  hsv_to_rgb_into(hue_table(), h, s, v, out.data());
  return out;
}

namespace {

// The HSV jitter of one set of gains: its three lookup tables, applied to one RGB pixel in place.
struct HsvJitter {
  std::array<uint8_t, kHsvRecordBytes> record{};  // the tables: hue at 0, saturation at 256, value at 512
  const HsvTables& to_hsv = hsv_tables();
  const HueTable& to_rgb = hue_table();
  explicit HsvJitter(const HsvGains& gains) { hsv_record(gains, record.data()); }
  bool applies() const { return record[kHsvRecordApplies] != 0; }
  void operator()(uint8_t* p) const {
    const auto hsv = rgb_to_hsv_inline(to_hsv, p[0], p[1], p[2]);
    hsv_to_rgb_into(to_rgb, record[hsv[0]], record[256 + hsv[1]], record[512 + hsv[2]], p);
  }
};

// random_hsv's three draws (none when every option is 0).
std::optional<HsvGains> draw_hsv_gains(Random& rng, const AugmentOptions& o) {
  if (o.hsv_h == 0 && o.hsv_s == 0 && o.hsv_v == 0) return std::nullopt;
  const double gh = rng.uniform(-1, 1) * o.hsv_h + 1;
  const double gs = rng.uniform(-1, 1) * o.hsv_s + 1;
  const double gv = rng.uniform(-1, 1) * o.hsv_v + 1;
  return HsvGains{gh, gs, gv};
}

}  // namespace

void hsv_record(const HsvGains& gains, uint8_t* record) {
  const auto [gain_h, gain_s, gain_v] = gains;
  for (int x = 0; x < 256; ++x) {
    const double xd = x;
    record[x] = static_cast<uint8_t>(std::fmod(xd * gain_h, 180.0));  // gains are positive: x · g ≥ 0
    record[256 + x] = static_cast<uint8_t>(std::clamp(xd * gain_s, 0.0, 255.0));
    record[512 + x] = static_cast<uint8_t>(std::clamp(xd * gain_v, 0.0, 255.0));
  }
  std::fill(record + kHsvRecordApplies, record + kHsvRecordBytes, uint8_t{0});
  record[kHsvRecordApplies] = gain_h == 1 && gain_s == 1 && gain_v == 1 ? 0 : 1;
}

void apply_hsv(uint8_t* rgb, int64_t pixels, const HsvGains& gains) {
  const HsvJitter jitter(gains);
  if (!jitter.applies()) return;
  for (int64_t i = 0; i < pixels; ++i) jitter(rgb + i * 3);
}

void apply_hsv(Image& image, double gain_h, double gain_s, double gain_v) {
  if (gain_h == 1 && gain_s == 1 && gain_v == 1) return;  // any image, as before: nothing to do
  VISION_CHECK(image.channels == 3, "augment: HSV needs a 3-channel image");
  apply_hsv(image.pixels.data(), image.width * image.height, {gain_h, gain_s, gain_v});
}

void random_hsv(Image& image, Random& rng, const AugmentOptions& o) {
  if (const auto g = draw_hsv_gains(rng, o)) apply_hsv(image, (*g)[0], (*g)[1], (*g)[2]);
}

void flip_lr(LabeledImage& x) {
  Image& im = x.image;
  for (int64_t y = 0; y < im.height; ++y) {
    uint8_t* r = im.row(y);
    for (int64_t a = 0, b = im.width - 1; a < b; ++a, --b) std::swap_ranges(r + a * 3, r + a * 3 + 3, r + b * 3);
  }
  const float w = static_cast<float>(im.width);
  for (TargetBox& b : x.boxes) {
    const float x1 = w - b.x2, x2 = w - b.x1;
    b.x1 = x1, b.x2 = x2;
  }
}

void flip_ud(LabeledImage& x) {
  Image& im = x.image;
  for (int64_t a = 0, b = im.height - 1; a < b; ++a, --b) std::swap_ranges(im.row(a), im.row(a) + im.width * 3, im.row(b));
  const float h = static_cast<float>(im.height);
  for (TargetBox& b : x.boxes) {
    const float y1 = h - b.y2, y2 = h - b.y1;
    b.y1 = y1, b.y2 = y2;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The pipeline

std::vector<TargetBox> plan_sample(size_t index, size_t n, const SourceLoader& load, int64_t imgsz,
                                   const AugmentOptions& o, bool mosaic, Random& rng, SamplePlan& plan) {
  VISION_CHECK(n > 0 && index < n, "augment: sample {} of a dataset of {}", index, n);
  VISION_CHECK(imgsz > 0 && imgsz <= (int64_t{1} << 20), "augment: imgsz must be in [1, 2^20], got {}", imgsz);
  plan = SamplePlan{};
  WarpPlan& w = plan.warp;
  w.fill = kLetterboxFill;
  w.out = static_cast<int32_t>(imgsz);
  const auto source = [&](size_t i) {
    SourceImage x = load(i);
    VISION_CHECK(x.image && x.image->channels == 3 && !x.image->empty() &&
                     x.image->pixels.size() == static_cast<size_t>(x.image->width * x.image->height * 3),
                 "augment: sample {} did not load as a 3-channel image", i);
    return x;
  };
  // The draws in augment_sample's order: the mosaic's (its partners, its centre), the affine's, HSV's, the flips'.
  std::vector<TargetBox> boxes;
  if (mosaic && o.mosaic > 0 && rng.chance(o.mosaic)) {
    std::array<SourceImage, 4> four;
    four[0] = source(index);
    for (size_t i = 1; i < 4; ++i) four[i] = source(static_cast<size_t>(rng.integer(0, static_cast<int64_t>(n) - 1)));
    const int64_t S = 2 * imgsz;
    const auto [xc, yc] = draw_mosaic_centre(rng, imgsz);
    for (size_t i = 0; i < 4; ++i) {
      w.tile[i] = mosaic_tile(i, four[i].image->width, four[i].image->height, S, xc, yc);
      mosaic_boxes(four[i].boxes, w.tile[i], S, boxes);
      plan.sources[i] = std::move(four[i].image);
      plan.lasting[i] = four[i].lasting;
    }
    w.tiles = 4;
    w.canvas = static_cast<int32_t>(S);
  } else {  // letterbox_square: the image pasted at its offset when it needs no resizing (the training load's case)
    SourceImage x = source(index);
    const Image& img = *x.image;
    const LetterboxTransform t = letterbox_transform(img.height, img.width, imgsz, imgsz, false, 0);
    VISION_CHECK(t.input_w == imgsz && t.input_h == imgsz, "augment: a letterbox of {}×{} to {} is {}×{}", img.width,
                 img.height, imgsz, t.input_w, t.input_h);
    const auto i32 = [](int64_t v) { return static_cast<int32_t>(v); };
    if (t.resized_w == img.width && t.resized_h == img.height) {
      w.tile[0] = {i32(static_cast<int64_t>(t.pad_x)), i32(static_cast<int64_t>(t.pad_y)), i32(img.width),
                   i32(img.height), 0, 0, i32(img.width), i32(img.height)};
      plan.sources[0] = x.image;
      plan.lasting[0] = x.lasting;
    } else {
      w.tile[0] = {0, 0, i32(imgsz), i32(imgsz), 0, 0, i32(imgsz), i32(imgsz)};
      plan.sources[0] = std::make_shared<const Image>(letterbox(img, t));
    }
    const auto fx = [&](float v) { return static_cast<float>(v * t.scale + t.pad_x); };
    const auto fy = [&](float v) { return static_cast<float>(v * t.scale + t.pad_y); };
    for (const TargetBox& b : x.boxes) boxes.push_back({b.cls, fx(b.x1), fy(b.y1), fx(b.x2), fy(b.y2)});
    w.tiles = 1;
    w.canvas = static_cast<int32_t>(imgsz);
  }
  double s = 1;
  const Matrix3 m = random_affine_matrix(rng, o, w.canvas, w.canvas, imgsz, imgsz, &s);
  boxes = affine_boxes(boxes, m, s, imgsz, imgsz);
  const auto gains = draw_hsv_gains(rng, o);
  const bool up_down = o.flipud > 0 && rng.chance(o.flipud);
  const bool left_right = o.fliplr > 0 && rng.chance(o.fliplr);
  const float side = static_cast<float>(imgsz);
  for (TargetBox& b : boxes) {
    if (up_down) b.y1 = side - std::exchange(b.y2, side - b.y1);
    if (left_right) b.x1 = side - std::exchange(b.x2, side - b.x1);
  }
  const Matrix3 inv = warp_inverse(m);
  std::copy(inv.begin(), inv.end(), w.inv);
  w.affine = is_affine(m) ? 1 : 0;
  w.mirror_x = left_right ? 1 : 0;
  w.mirror_y = up_down ? 1 : 0;
  plan.hsv = gains.value_or(HsvGains{1, 1, 1});
  return boxes;
}

WarpPlan host_warp_plan(const SamplePlan& plan) {
  WarpPlan w = plan.warp;
  for (int i = 0; i < w.tiles; ++i) {
    VISION_CHECK(plan.sources[static_cast<size_t>(i)], "augment: the plan's tile {} has no image", i);
    w.source[i] = reinterpret_cast<uint64_t>(plan.sources[static_cast<size_t>(i)]->pixels.data());
  }
  return w;
}

void warp_plan_cpu(const WarpPlan& plan, uint8_t* out) {
  VISION_CHECK(plan.out > 0 && plan.canvas > 0 && plan.tiles >= 1 && plan.tiles <= kWarpMaxTiles,
               "augment: a warp plan of {} tiles to {}×{}", plan.tiles, plan.out, plan.out);
  for (int64_t y = 0; y < plan.out; ++y)
    for (int64_t x = 0; x < plan.out; ++x) warp_plan_pixel(plan, x, y, out + warp_plan_offset(plan, x, y));
}

std::vector<TargetBox> augment_sample_into(size_t index, size_t n, const SampleLoader& load, int64_t imgsz,
                                           const AugmentOptions& o, bool mosaic, Random& rng, uint8_t* out,
                                           AugmentScratch& scratch, HsvGains* defer_hsv) {
  const SourceLoader shared = [&](size_t i) {
    LabeledImage x = load(i);
    return SourceImage{std::make_shared<const Image>(std::move(x.image)), std::move(x.boxes), false};
  };
  SamplePlan plan;
  std::vector<TargetBox> boxes = plan_sample(index, n, shared, imgsz, o, mosaic, rng, plan);
  // The canvas composed (or the letterboxed image itself where it is the whole canvas), then each output pixel warped
  // (bilinear; an identity M samples every pixel exactly) and written at its mirrored place, then the HSV jitter over
  // the output (a pass of its own: fused into the warp's loop it ran slower).
  const WarpPlan& w = plan.warp;
  const WarpTile& t0 = w.tile[0];
  const Image* canvas = plan.sources[0].get();
  if (w.tiles != 1 || t0.x != 0 || t0.y != 0 || t0.sx != 0 || t0.sy != 0 || t0.width != w.canvas ||
      t0.height != w.canvas) {
    std::array<const Image*, kWarpMaxTiles> sources{};
    for (int i = 0; i < w.tiles; ++i) sources[static_cast<size_t>(i)] = plan.sources[static_cast<size_t>(i)].get();
    const auto tiles = static_cast<size_t>(w.tiles);
    compose_canvas(std::span(w.tile, tiles), std::span(sources.data(), tiles), w.canvas, scratch.canvas);
    canvas = &scratch.canvas;
  }
  Matrix3 inv;
  std::copy(w.inv, w.inv + 9, inv.begin());
  warp_into(*canvas, inv, w.affine != 0, imgsz, imgsz, kLetterboxFill, {out, w.mirror_x != 0, w.mirror_y != 0});
  const bool jitter = plan.hsv != HsvGains{1, 1, 1};
  if (defer_hsv)
    *defer_hsv = plan.hsv;
  else if (jitter)
    apply_hsv(out, imgsz * imgsz, plan.hsv);
  return boxes;
}

LabeledImage augment_sample(size_t index, size_t n, const SampleLoader& load, int64_t imgsz, const AugmentOptions& o,
                            bool mosaic, Random& rng) {
  VISION_CHECK(imgsz > 0, "augment: imgsz must be positive, got {}", imgsz);
  LabeledImage x;
  x.image = Image(imgsz, imgsz, 3);
  AugmentScratch scratch;
  x.boxes = augment_sample_into(index, n, load, imgsz, o, mosaic, rng, x.image.pixels.data(), scratch);
  return x;
}

}  // namespace vision::data
