#include "vision/data/augment.h"

#include <algorithm>
#include <cmath>
#include <numbers>
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
  const double w = static_cast<double>(out.image.width), h = static_cast<double>(out.image.height);
  out.boxes.reserve(labels.size());
  for (const LabelBox& l : labels)
    out.boxes.push_back({l.cls, static_cast<float>((l.cx - l.w / 2) * w), static_cast<float>((l.cy - l.h / 2) * h),
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

Image warp(const Image& image, const Matrix3& m, int64_t out_w, int64_t out_h, uint8_t fill) {
  VISION_CHECK(image.channels == 3 && !image.empty(), "augment: warp needs a 3-channel image");
  VISION_CHECK(out_w > 0 && out_h > 0, "augment: warp to {}×{}: the output must not be empty", out_w, out_h);
  const bool affine = m[6] == 0 && m[7] == 0 && m[8] == 1;
  Matrix3 inv;
  if (affine) {  // the inverse as OpenCV's invertAffineTransform computes it
    double d = m[0] * m[4] - m[1] * m[3];
    VISION_CHECK(d != 0, "augment: the affine matrix is singular (scale 0?)");
    d = 1.0 / d;
    const double a11 = m[4] * d, a22 = m[0] * d, a12 = -m[1] * d, a21 = -m[3] * d;
    inv = {a11, a12, -a11 * m[2] - a12 * m[5], a21, a22, -a21 * m[2] - a22 * m[5], 0, 0, 1};
  } else {
    inv = inverse(m);
  }
  Image out(out_w, out_h, 3, fill);
  const int64_t w = image.width, h = image.height;
  const uint8_t border[3] = {fill, fill, fill};
  // Affine: input positions in 1/1024 steps per row and column (rounded separately), then to 1/32 — OpenCV's
  // warpAffine arithmetic, so the output matches it; perspective: each position rounded to 1/32.
  constexpr double kAb = 1024;
  std::vector<int64_t> adx, ady;
  if (affine) {
    adx.resize(static_cast<size_t>(out_w));
    ady.resize(static_cast<size_t>(out_w));
    for (int64_t x = 0; x < out_w; ++x) {
      adx[static_cast<size_t>(x)] = std::lrint(std::clamp(inv[0] * static_cast<double>(x) * kAb, -1e12, 1e12));
      ady[static_cast<size_t>(x)] = std::lrint(std::clamp(inv[3] * static_cast<double>(x) * kAb, -1e12, 1e12));
    }
  }
  for (int64_t y = 0; y < out_h; ++y) {
    uint8_t* dst = out.row(y);
    const double yd = static_cast<double>(y);
    const int64_t x0r = affine ? std::lrint(std::clamp((inv[1] * yd + inv[2]) * kAb, -1e12, 1e12)) + 16 : 0;
    const int64_t y0r = affine ? std::lrint(std::clamp((inv[4] * yd + inv[5]) * kAb, -1e12, 1e12)) + 16 : 0;
    for (int64_t x = 0; x < out_w; ++x, dst += 3) {
      int64_t fx, fy;
      if (affine) {
        fx = (x0r + adx[static_cast<size_t>(x)]) >> 5;
        fy = (y0r + ady[static_cast<size_t>(x)]) >> 5;
      } else {
        const double xd = static_cast<double>(x);
        const double q = inv[6] * xd + inv[7] * yd + inv[8];
        const double r = q != 0 ? 32.0 / q : 0.0;
        fx = std::lrint(std::clamp((inv[0] * xd + inv[1] * yd + inv[2]) * r, -1e12, 1e12));
        fy = std::lrint(std::clamp((inv[3] * xd + inv[4] * yd + inv[5]) * r, -1e12, 1e12));
      }
      const int64_t x0 = fx >> 5, y0 = fy >> 5;  // floor
      if (x0 < -1 || y0 < -1 || x0 >= w || y0 >= h) continue;  // all four neighbours outside: the fill
      const int ax = static_cast<int>(fx & 31), ay = static_cast<int>(fy & 31);
      const int w00 = (32 - ax) * (32 - ay), w10 = ax * (32 - ay), w01 = (32 - ax) * ay, w11 = ax * ay;
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
      for (int c = 0; c < 3; ++c)
        dst[c] = static_cast<uint8_t>((p00[c] * w00 + p10[c] * w10 + p01[c] * w01 + p11[c] * w11 + 512) >> 10);
    }
  }
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

LabeledImage random_affine(const LabeledImage& in, Random& rng, const AugmentOptions& o, int64_t out_w,
                           int64_t out_h) {
  double s = 1;
  const Matrix3 m = random_affine_matrix(rng, o, in.image.width, in.image.height, out_w, out_h, &s);
  LabeledImage out;
  if (out_w == in.image.width && out_h == in.image.height && m == kIdentity)
    out.image = in.image;
  else
    out.image = warp(in.image, m, out_w, out_h, kLetterboxFill);
  for (const TargetBox& b : in.boxes) {
    const TargetBox t = transform_box(b, m, out_w, out_h);
    if (box_candidate(b, t, s)) out.boxes.push_back(t);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Mosaic

LabeledImage mosaic4(std::span<const LabeledImage> images, int64_t imgsz, Random& rng) {
  VISION_CHECK(images.size() == 4, "augment: a mosaic takes 4 images, got {}", images.size());
  const int64_t s = imgsz, S = 2 * imgsz;
  const int64_t xc = static_cast<int64_t>(rng.uniform(static_cast<double>(s / 2), static_cast<double>(S - s / 2)));
  const int64_t yc = static_cast<int64_t>(rng.uniform(static_cast<double>(s / 2), static_cast<double>(S - s / 2)));
  LabeledImage out;
  out.image = Image(S, S, 3, kLetterboxFill);
  for (size_t i = 0; i < 4; ++i) {
    const Image& img = images[i].image;
    const int64_t w = img.width, h = img.height;
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
    for (int64_t y = 0; y < ch; ++y)
      std::copy_n(img.at(x1b, y1b + y), cw * 3, out.image.at(x1a, y1a + y));
    const float padw = static_cast<float>(x1a - x1b), padh = static_cast<float>(y1a - y1b);
    const float lim = static_cast<float>(S);
    for (const TargetBox& b : images[i].boxes) {
      TargetBox t{b.cls, std::clamp(b.x1 + padw, 0.0f, lim), std::clamp(b.y1 + padh, 0.0f, lim),
                  std::clamp(b.x2 + padw, 0.0f, lim), std::clamp(b.y2 + padh, 0.0f, lim)};
      if (t.x2 > t.x1 && t.y2 > t.y1) out.boxes.push_back(t);
    }
  }
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

inline std::array<uint8_t, 3> rgb_to_hsv_inline(int r, int g, int b) {
  const HsvTables& t = hsv_tables();
  const int v = std::max({r, g, b}), vmin = std::min({r, g, b}), diff = v - vmin;
  const int s = (diff * t.sdiv[v] + (1 << (kHsvShift - 1))) >> kHsvShift;
  int h;
  if (v == r)
    h = g - b;
  else if (v == g)
    h = b - r + 2 * diff;
  else
    h = r - g + 4 * diff;
  h = (h * t.hdiv[diff] + (1 << (kHsvShift - 1))) >> kHsvShift;
  if (h < 0) h += 180;
  return {static_cast<uint8_t>(h), static_cast<uint8_t>(s), static_cast<uint8_t>(v)};
}
}  // namespace

std::array<uint8_t, 3> rgb_to_hsv(uint8_t r, uint8_t g, uint8_t b) { return rgb_to_hsv_inline(r, g, b); }

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

inline void hsv_to_rgb_into(int h8, int s8, int v8, uint8_t* out) {
  const HueTable& ht = hue_table();
  const float s = static_cast<float>(s8) * (1.0f / 255.0f), v = static_cast<float>(v8) * (1.0f / 255.0f);
  const float f = ht.frac[h8];
  const float p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  float r, g, b;
  switch (ht.sector[h8]) {
    case 0: r = v, g = t, b = p; break;
    case 1: r = q, g = v, b = p; break;
    case 2: r = p, g = v, b = t; break;
    case 3: r = p, g = q, b = v; break;
    case 4: r = t, g = p, b = v; break;
    default: r = v, g = p, b = q; break;
  }
  out[0] = round_byte(r * 255.0f);
  out[1] = round_byte(g * 255.0f);
  out[2] = round_byte(b * 255.0f);
}

}  // namespace

std::array<uint8_t, 3> hsv_to_rgb(uint8_t h, uint8_t s, uint8_t v) {
  std::array<uint8_t, 3> out;
  hsv_to_rgb_into(h, s, v, out.data());
  return out;
}

void apply_hsv(Image& image, double gain_h, double gain_s, double gain_v) {
  if (gain_h == 1 && gain_s == 1 && gain_v == 1) return;
  VISION_CHECK(image.channels == 3, "augment: HSV needs a 3-channel image");
  std::array<uint8_t, 256> lut_h{}, lut_s{}, lut_v{};
  for (int x = 0; x < 256; ++x) {
    const double xd = x;
    lut_h[x] = static_cast<uint8_t>(std::fmod(xd * gain_h, 180.0));  // gains are positive: x · g ≥ 0
    lut_s[x] = static_cast<uint8_t>(std::clamp(xd * gain_s, 0.0, 255.0));
    lut_v[x] = static_cast<uint8_t>(std::clamp(xd * gain_v, 0.0, 255.0));
  }
  uint8_t* p = image.pixels.data();
  const size_t n = image.pixels.size();
  for (size_t i = 0; i < n; i += 3) {
    const auto hsv = rgb_to_hsv_inline(p[i], p[i + 1], p[i + 2]);
    hsv_to_rgb_into(lut_h[hsv[0]], lut_s[hsv[1]], lut_v[hsv[2]], p + i);
  }
}

void random_hsv(Image& image, Random& rng, const AugmentOptions& o) {
  if (o.hsv_h == 0 && o.hsv_s == 0 && o.hsv_v == 0) return;
  const double gh = rng.uniform(-1, 1) * o.hsv_h + 1;
  const double gs = rng.uniform(-1, 1) * o.hsv_s + 1;
  const double gv = rng.uniform(-1, 1) * o.hsv_v + 1;
  apply_hsv(image, gh, gs, gv);
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

LabeledImage augment_sample(size_t index, size_t n, const SampleLoader& load, int64_t imgsz, const AugmentOptions& o,
                            bool mosaic, Random& rng) {
  VISION_CHECK(n > 0 && index < n, "augment: sample {} of a dataset of {}", index, n);
  LabeledImage x;
  if (mosaic && o.mosaic > 0 && rng.chance(o.mosaic)) {
    std::array<LabeledImage, 4> four;
    four[0] = load(index);
    for (size_t i = 1; i < 4; ++i) four[i] = load(static_cast<size_t>(rng.integer(0, static_cast<int64_t>(n) - 1)));
    x = random_affine(mosaic4(four, imgsz, rng), rng, o, imgsz, imgsz);
  } else {
    x = random_affine(letterbox_square(load(index), imgsz), rng, o, imgsz, imgsz);
  }
  random_hsv(x.image, rng, o);
  if (o.flipud > 0 && rng.chance(o.flipud)) flip_ud(x);
  if (o.fliplr > 0 && rng.chance(o.fliplr)) flip_lr(x);
  return x;
}

}  // namespace vision::data
