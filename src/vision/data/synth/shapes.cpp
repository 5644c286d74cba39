#include "vision/data/synth/shapes.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numbers>
#include <optional>

#include "vision/core/error.h"
#include "vision/data/random.h"
#include "vision/data/video.h"

namespace vision::data::synth {

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Geometry: every shape is a union of convex polygons, or a disk / ring

struct Vec {
  double x = 0, y = 0;
};

double square(double x) { return x * x; }

// A convex polygon as half-planes n·p ≥ offset (n a unit inward normal). A pixel (a unit square) is wholly inside a
// half-plane when n·centre − offset ≥ reach and wholly outside when ≤ −reach, reach = (|n.x| + |n.y|) / 2.
struct HalfPlane {
  double nx, ny, offset, reach;
  double distance(double x, double y) const { return nx * x + ny * y - offset; }
};
struct Polygon {
  std::vector<Vec> vertices;
  std::vector<HalfPlane> edges;
};

struct Geometry {
  std::vector<Polygon> polygons;
  bool round = false;  // a disk (inner 0) or a ring around `centre`
  Vec centre;
  double outer = 0, inner = 0;
};

Polygon make_polygon(std::vector<Vec> vertices) {
  Polygon p;
  double area2 = 0;
  const size_t n = vertices.size();
  for (size_t i = 0; i < n; ++i) {
    const Vec a = vertices[i], b = vertices[(i + 1) % n];
    area2 += a.x * b.y - b.x * a.y;
  }
  const double inward = area2 > 0 ? 1.0 : -1.0;  // left of each edge when the vertices turn positively
  for (size_t i = 0; i < n; ++i) {
    const Vec a = vertices[i], b = vertices[(i + 1) % n];
    const double len = std::sqrt(square(b.x - a.x) + square(b.y - a.y));
    const double nx = -(b.y - a.y) / len * inward, ny = (b.x - a.x) / len * inward;
    p.edges.push_back({nx, ny, nx * a.x + ny * a.y, (std::abs(nx) + std::abs(ny)) / 2});
  }
  p.vertices = std::move(vertices);
  return p;
}

// The unit shape (size 1, centred on the origin, unrotated) as convex parts.
std::vector<std::vector<Vec>> unit_parts(ShapeClass shape) {
  constexpr double kPi = std::numbers::pi;
  switch (shape) {
    case ShapeClass::square: return {{{-0.5, -0.5}, {0.5, -0.5}, {0.5, 0.5}, {-0.5, 0.5}}};
    case ShapeClass::triangle: {
      const double r = 1 / std::sqrt(3.0);  // circumradius of side 1
      return {{{0, -r}, {0.5, r / 2}, {-0.5, r / 2}}};
    }
    case ShapeClass::star: {  // the inner pentagon and the five points
      constexpr double kOuter = 0.5, kInner = 0.21;
      auto at = [](double radius, double angle) { return Vec{radius * std::cos(angle), radius * std::sin(angle)}; };
      std::vector<Vec> pentagon;
      std::vector<std::vector<Vec>> parts;
      for (int k = 0; k < 5; ++k) {
        const double tip = -kPi / 2 + 2 * kPi * k / 5;
        pentagon.push_back(at(kInner, tip + kPi / 5));
        parts.push_back({at(kInner, tip - kPi / 5), at(kOuter, tip), at(kInner, tip + kPi / 5)});
      }
      parts.push_back(pentagon);
      return parts;
    }
    case ShapeClass::cross: {
      constexpr double t = 1.0 / 6;
      return {{{-0.5, -t}, {0.5, -t}, {0.5, t}, {-0.5, t}}, {{-t, -0.5}, {t, -0.5}, {t, 0.5}, {-t, 0.5}}};
    }
    case ShapeClass::circle:
    case ShapeClass::ring: return {};
  }
  fail("synth: unknown shape class {}", static_cast<int>(shape));
}

Geometry geometry(const Object& o) {
  Geometry g;
  if (o.shape == ShapeClass::circle || o.shape == ShapeClass::ring) {
    g.round = true;
    g.centre = {o.cx, o.cy};
    g.outer = o.size / 2;
    g.inner = o.shape == ShapeClass::ring ? 0.55 * o.size / 2 : 0.0;
    return g;
  }
  const double c = std::cos(o.angle), s = std::sin(o.angle);
  for (const auto& part : unit_parts(o.shape)) {
    std::vector<Vec> v;
    for (const Vec& p : part) v.push_back({o.cx + o.size * (c * p.x - s * p.y), o.cy + o.size * (s * p.x + c * p.y)});
    g.polygons.push_back(make_polygon(std::move(v)));
  }
  return g;
}

Box geometry_box(const Geometry& g) {
  if (g.round) return {g.centre.x - g.outer, g.centre.y - g.outer, g.centre.x + g.outer, g.centre.y + g.outer};
  Box b{INFINITY, INFINITY, -INFINITY, -INFINITY};
  for (const Polygon& p : g.polygons) {
    for (const Vec& v : p.vertices) {
      b.x1 = std::min(b.x1, v.x), b.y1 = std::min(b.y1, v.y);
      b.x2 = std::max(b.x2, v.x), b.y2 = std::max(b.y2, v.y);
    }
  }
  return b;
}

// ---------------------------------------------------------------------------------------------------------------
// Rasterisation

enum class PixelCover { none, full, partial };

PixelCover classify(const Polygon& p, double x, double y) {
  bool full = true;
  for (const HalfPlane& e : p.edges) {
    const double d = e.distance(x, y);
    if (d <= -e.reach) return PixelCover::none;
    if (d < e.reach) full = false;
  }
  return full ? PixelCover::full : PixelCover::partial;
}

bool inside(const Polygon& p, double x, double y) {
  return std::all_of(p.edges.begin(), p.edges.end(), [&](const HalfPlane& e) { return e.distance(x, y) >= 0; });
}

// The coverage of the pixel whose top-left corner is (px, py).
float pixel_coverage(const Geometry& g, double px, double py) {
  constexpr int n = kSupersampling;
  const double cx = px + 0.5, cy = py + 0.5;
  if (g.round) {
    constexpr double kHalfDiagonal = std::numbers::sqrt2 / 2;
    const double r = std::sqrt(square(cx - g.centre.x) + square(cy - g.centre.y));
    if (r - g.outer >= kHalfDiagonal || (g.inner > 0 && g.inner - r >= kHalfDiagonal)) return 0.0f;
    if (g.outer - r >= kHalfDiagonal && (g.inner == 0 || r - g.inner >= kHalfDiagonal)) return 1.0f;
    const double outer2 = square(g.outer), inner2 = square(g.inner);
    int hits = 0;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        const double d2 = square(px + (j + 0.5) / n - g.centre.x) + square(py + (i + 0.5) / n - g.centre.y);
        hits += d2 <= outer2 && d2 >= inner2;
      }
    }
    return static_cast<float>(hits) / (n * n);
  }
  bool any_partial = false;
  for (const Polygon& p : g.polygons) {
    const PixelCover c = classify(p, cx, cy);
    if (c == PixelCover::full) return 1.0f;
    any_partial |= c == PixelCover::partial;
  }
  if (!any_partial) return 0.0f;
  int hits = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const double x = px + (j + 0.5) / n, y = py + (i + 0.5) / n;
      hits += std::any_of(g.polygons.begin(), g.polygons.end(), [&](const Polygon& p) { return inside(p, x, y); });
    }
  }
  return static_cast<float>(hits) / (n * n);
}

// ---------------------------------------------------------------------------------------------------------------
// Backgrounds

// A float RGB canvas (values 0–255, unclamped until quantised).
struct Canvas {
  int64_t size;
  std::vector<float> rgb;
  explicit Canvas(int64_t n) : size(n), rgb(static_cast<size_t>(n * n * 3)) {}
  float* at(int64_t x, int64_t y) { return rgb.data() + (y * size + x) * 3; }
};

// Smooth value noise in [−1, 1]: random values on a grid of `cell`-pixel cells, smoothstep-interpolated.
class ValueNoise {
 public:
  ValueNoise(Random& rng, int64_t image_size, double cell) : cell_(cell) {
    cols_ = static_cast<int64_t>(std::ceil(static_cast<double>(image_size) / cell)) + 2;
    values_.resize(static_cast<size_t>(cols_ * cols_));
    for (double& v : values_) v = rng.uniform(-1.0, 1.0);
  }
  double at(double x, double y) const {
    const double gx = x / cell_, gy = y / cell_;
    const auto ix = static_cast<int64_t>(gx), iy = static_cast<int64_t>(gy);
    const double tx = smooth(gx - static_cast<double>(ix)), ty = smooth(gy - static_cast<double>(iy));
    auto v = [&](int64_t i, int64_t j) { return values_[static_cast<size_t>(j * cols_ + i)]; };
    const double top = v(ix, iy) + (v(ix + 1, iy) - v(ix, iy)) * tx;
    const double bottom = v(ix, iy + 1) + (v(ix + 1, iy + 1) - v(ix, iy + 1)) * tx;
    return top + (bottom - top) * ty;
  }

 private:
  static double smooth(double t) { return t * t * (3 - 2 * t); }
  double cell_;
  int64_t cols_;
  std::vector<double> values_;
};

std::array<double, 3> random_colour(Random& rng) {
  return {rng.uniform(0, 256), rng.uniform(0, 256), rng.uniform(0, 256)};
}

Canvas background(Random& rng, int64_t n) {
  const auto from = random_colour(rng), to = random_colour(rng);
  const double direction = rng.uniform(0, 2 * std::numbers::pi);
  const double dx = std::cos(direction), dy = std::sin(direction);
  const double size = static_cast<double>(n);
  const double amplitude = rng.uniform(10, 40);
  const double cell = size / rng.uniform(4, 12);
  const ValueNoise coarse(rng, n, cell), fine(rng, n, cell / 2);
  // The gradient's parameter runs over [0, 1] across the image along the direction.
  const double lo = std::min(0.0, dx * size) + std::min(0.0, dy * size);
  const double span = std::abs(dx) * size + std::abs(dy) * size;
  Canvas canvas(n);
  for (int64_t y = 0; y < n; ++y) {
    for (int64_t x = 0; x < n; ++x) {
      const double px = static_cast<double>(x) + 0.5, py = static_cast<double>(y) + 0.5;
      const double t = (dx * px + dy * py - lo) / span;
      const double noise = amplitude * (coarse.at(px, py) + 0.5 * fine.at(px, py));
      float* p = canvas.at(x, y);
      for (size_t c = 0; c < 3; ++c) p[c] = static_cast<float>(from[c] + (to[c] - from[c]) * t + noise);
    }
  }
  return canvas;
}

// ---------------------------------------------------------------------------------------------------------------
// Placement

bool overlaps(const Coverage& a, const Coverage& b) {
  return a.x0 < b.x0 + b.width && b.x0 < a.x0 + a.width && a.y0 < b.y0 + b.height && b.y0 < a.y0 + a.height;
}

// An object placed so far: its coverage, what of it still shows (0 outside the image) and its whole coverage.
struct Placed {
  Object object;
  Coverage cover;
  std::vector<double> visible;  // in double: the test recomputes it in the same order, to the same bits
  double total = 0;
};

// What of `below` would still show under `above`.
double visible_under(const Placed& below, const Coverage& above) {
  double sum = 0;
  const Coverage& c = below.cover;
  for (int64_t y = c.y0; y < c.y0 + c.height; ++y)
    for (int64_t x = c.x0; x < c.x0 + c.width; ++x) sum += below.visible[c.index(x, y)] * (1.0 - above.at(x, y));
  return sum;
}

// The candidate as a Placed object when it is kMinVisible inside the image and leaves every earlier object
// kMinVisible visible (updating what of those still shows); nullopt otherwise.
std::optional<Placed> try_place(const Object& candidate, std::vector<Placed>& placed, int64_t n) {
  Placed p{candidate, coverage(candidate), {}, 0};
  const Coverage& c = p.cover;
  p.total = c.total();
  p.visible.assign(c.values.size(), 0.0);
  double in_image = 0;
  for (int64_t y = std::max<int64_t>(c.y0, 0); y < std::min(c.y0 + c.height, n); ++y) {
    for (int64_t x = std::max<int64_t>(c.x0, 0); x < std::min(c.x0 + c.width, n); ++x) {
      p.visible[c.index(x, y)] = c.values[c.index(x, y)];
      in_image += c.values[c.index(x, y)];
    }
  }
  if (p.total <= 0 || in_image < kMinVisible * p.total) return std::nullopt;
  std::vector<size_t> under;
  for (size_t i = 0; i < placed.size(); ++i) {
    if (!overlaps(placed[i].cover, c)) continue;
    if (visible_under(placed[i], c) < kMinVisible * placed[i].total) return std::nullopt;
    under.push_back(i);
  }
  for (size_t i : under) {
    Placed& b = placed[i];
    for (int64_t y = b.cover.y0; y < b.cover.y0 + b.cover.height; ++y)
      for (int64_t x = b.cover.x0; x < b.cover.x0 + b.cover.width; ++x)
        b.visible[b.cover.index(x, y)] *= 1.0 - c.at(x, y);
  }
  return p;
}

int colour_distance(const std::array<uint8_t, 3>& a, const std::array<double, 3>& b) {
  int d = 0;
  for (size_t c = 0; c < 3; ++c) d += std::abs(int{a[c]} - static_cast<int>(std::clamp(b[c], 0.0, 255.0)));
  return d;
}

// A colour at least kMinContrast from each of `avoid` (the farthest of the tries if none is).
std::array<uint8_t, 3> contrasting_colour(Random& rng, const std::vector<std::array<double, 3>>& avoid) {
  std::array<uint8_t, 3> best{};
  int best_distance = -1;
  for (int attempt = 0; attempt < 64 && best_distance < kMinContrast; ++attempt) {
    std::array<uint8_t, 3> colour;
    for (auto& v : colour) v = static_cast<uint8_t>(rng.integer(0, 255));
    int distance = 765;
    for (const auto& a : avoid) distance = std::min(distance, colour_distance(colour, a));
    if (distance > best_distance) best = colour, best_distance = distance;
  }
  return best;
}

uint8_t quantise(double v) { return static_cast<uint8_t>(std::clamp(std::nearbyint(v), 0.0, 255.0)); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Objects and labels

Box shape_box(const Object& object) { return geometry_box(geometry(object)); }

Box label_box(const Object& object, int64_t imgsz) {
  const Box b = shape_box(object);
  const double n = static_cast<double>(imgsz);
  return {std::clamp(b.x1, 0.0, n), std::clamp(b.y1, 0.0, n), std::clamp(b.x2, 0.0, n), std::clamp(b.y2, 0.0, n)};
}

std::string label_line(const Object& object, int64_t imgsz) {
  const Box b = label_box(object, imgsz);
  const double n = static_cast<double>(imgsz);
  return fmt::format("{} {:.6f} {:.6f} {:.6f} {:.6f}", static_cast<int>(object.shape), (b.x1 + b.x2) / 2 / n,
                     (b.y1 + b.y2) / 2 / n, (b.x2 - b.x1) / n, (b.y2 - b.y1) / n);
}

double Coverage::total() const {
  double sum = 0;
  for (float v : values) sum += v;
  return sum;
}

Coverage coverage(const Object& object) {
  const Geometry g = geometry(object);
  const Box b = geometry_box(g);
  Coverage c;
  c.x0 = static_cast<int64_t>(std::floor(b.x1));
  c.y0 = static_cast<int64_t>(std::floor(b.y1));
  c.width = static_cast<int64_t>(std::ceil(b.x2)) - c.x0;
  c.height = static_cast<int64_t>(std::ceil(b.y2)) - c.y0;
  c.values.resize(static_cast<size_t>(c.width * c.height));
  for (int64_t y = 0; y < c.height; ++y)
    for (int64_t x = 0; x < c.width; ++x)
      c.values[static_cast<size_t>(y * c.width + x)] =
          pixel_coverage(g, static_cast<double>(c.x0 + x), static_cast<double>(c.y0 + y));
  return c;
}

// ---------------------------------------------------------------------------------------------------------------
// Images

Sample make_sample(uint64_t seed, int64_t imgsz) {
  VISION_CHECK(imgsz >= 32 && imgsz <= 4096, "synth: an image size of {} is outside 32–4096", imgsz);
  Random rng(seed);
  Canvas canvas = background(rng, imgsz);
  const double n = static_cast<double>(imgsz);

  std::vector<Placed> placed;
  const int64_t count = rng.integer(kMinObjects, kMaxObjects);
  for (int64_t k = 0; k < count; ++k) {
    Object o;
    o.shape = static_cast<ShapeClass>(rng.integer(0, static_cast<int64_t>(kClassNames.size()) - 1));
    o.size = rng.uniform(kMinSize, kMaxSize) * n;
    for (int attempt = 0; attempt < kPlacementTries; ++attempt) {
      o.cx = rng.uniform(0, n);
      o.cy = rng.uniform(0, n);
      o.angle = rng.uniform(0, 2 * std::numbers::pi);
      if (auto p = try_place(o, placed, imgsz)) {
        placed.push_back(std::move(*p));
        break;
      }
    }
  }

  // Colours, then the objects drawn in order over the background.
  for (size_t k = 0; k < placed.size(); ++k) {
    Placed& p = placed[k];
    const float* bg = canvas.at(std::clamp<int64_t>(static_cast<int64_t>(p.object.cx), 0, imgsz - 1),
                                std::clamp<int64_t>(static_cast<int64_t>(p.object.cy), 0, imgsz - 1));
    std::vector<std::array<double, 3>> avoid = {{bg[0], bg[1], bg[2]}};
    for (size_t i = 0; i < k; ++i) {
      if (!overlaps(placed[i].cover, p.cover)) continue;
      const auto& c = placed[i].object.colour;
      avoid.push_back({double(c[0]), double(c[1]), double(c[2])});
    }
    p.object.colour = contrasting_colour(rng, avoid);
  }
  for (const Placed& p : placed) {
    const Coverage& c = p.cover;
    for (int64_t y = std::max<int64_t>(c.y0, 0); y < std::min(c.y0 + c.height, imgsz); ++y) {
      for (int64_t x = std::max<int64_t>(c.x0, 0); x < std::min(c.x0 + c.width, imgsz); ++x) {
        const float a = c.values[c.index(x, y)];
        if (a == 0.0f) continue;
        float* px = canvas.at(x, y);
        for (size_t ch = 0; ch < 3; ++ch) px[ch] += (static_cast<float>(p.object.colour[ch]) - px[ch]) * a;
      }
    }
  }

  // Per-pixel noise, uniform ±amplitude per channel (eight 8-bit draws per 64 random bits), then 8 bits.
  const int64_t amplitude = rng.integer(0, 12);
  Sample sample{Image(imgsz, imgsz, 3), {}};
  uint64_t bits = 0;
  int left = 0;
  for (size_t i = 0; i < canvas.rgb.size(); ++i) {
    if (left == 0) bits = rng.bits(), left = 8;
    const auto u = static_cast<int64_t>(bits & 0xFF);  // 0–255 → −amplitude … +amplitude
    bits >>= 8, --left;
    const int64_t noise = (u * (2 * amplitude + 1)) / 256 - amplitude;
    sample.image.pixels[i] = quantise(canvas.rgb[i] + static_cast<double>(noise));
  }
  for (const Placed& p : placed) sample.objects.push_back(p.object);
  return sample;
}

// ---------------------------------------------------------------------------------------------------------------
// Datasets

DatasetSummary write_dataset(const DatasetOptions& o) {
  namespace fs = std::filesystem;
  VISION_CHECK(!o.out.empty(), "synth: give the output folder (--out)");
  VISION_CHECK(o.train >= 0 && o.val >= 0 && o.train + o.val > 0,
               "synth: --train {} and --val {}: give a non-negative number of images per split, at least one in all",
               o.train, o.val);
  VISION_CHECK(o.imgsz >= 32 && o.imgsz <= 4096, "synth: --imgsz {} is outside 32–4096", o.imgsz);
  VISION_CHECK(o.format == "jpg" || o.format == "png", "synth: --format {} is not jpg or png", o.format);
  const fs::path yaml = o.out / "data.yaml";
  const std::array<fs::path, 3> ours = {o.out / "images", o.out / "labels", yaml};
  std::error_code ec;
  for (const fs::path& p : ours) {
    if (!fs::exists(p, ec)) continue;
    VISION_CHECK(o.overwrite,
                 "synth: '{}' already exists; pass --overwrite to replace the dataset in '{}' (images/, labels/ and "
                 "data.yaml), or choose another folder",
                 p.string(), o.out.string());
    fs::remove_all(p, ec);
    VISION_CHECK(!ec, "synth: cannot remove '{}': {}", p.string(), ec.message());
  }

  const std::array<std::string, 2> splits = {"train", "val"};
  for (const std::string& s : splits) {
    for (const char* kind : {"images", "labels"}) {
      fs::create_directories(o.out / kind / s, ec);
      VISION_CHECK(!ec, "synth: cannot create '{}': {}", (o.out / kind / s).string(), ec.message());
    }
  }
  const int64_t digits = std::max<int64_t>(6, static_cast<int64_t>(std::to_string(std::max(o.train, o.val)).size()));

  // Every image on its own seed, in parallel; the first error (by image) is rethrown after the loop.
  const int64_t total = o.train + o.val;
  std::vector<int64_t> objects(static_cast<size_t>(total), 0);
  std::mutex error_mutex;
  std::optional<std::pair<int64_t, std::string>> error;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t i = 0; i < total; ++i) {
    const size_t split = i < o.train ? 0 : 1;
    const int64_t index = split == 0 ? i : i - o.train;
    try {
      const Sample s = make_sample(derive_seed(o.seed, split, static_cast<uint64_t>(index)), o.imgsz);
      const std::string stem = fmt::format("{:0{}d}", index, digits);
      write_image(s.image, o.out / "images" / splits[split] / (stem + "." + o.format), JpegOptions{kJpegQuality});
      std::string labels;
      for (const Object& obj : s.objects) labels += label_line(obj, o.imgsz) + "\n";
      write_file(o.out / "labels" / splits[split] / (stem + ".txt"),
                 {reinterpret_cast<const uint8_t*>(labels.data()), labels.size()});
      objects[static_cast<size_t>(i)] = static_cast<int64_t>(s.objects.size());
    } catch (const std::exception& e) {
      const std::lock_guard lock(error_mutex);
      if (!error || i < error->first) error = {i, e.what()};
    }
  }
  if (error) fail("{}", error->second);

  std::string text = fmt::format(
      "# A synthetic detection dataset: vision synth --train {} --val {} --imgsz {} --seed {} --format {}\n"
      "# (shapes on textured backgrounds; see docs/cli.md). Paths are relative to this file's folder, as ultralytics "
      "reads a data file without `path`.\n"
      "train: images/train\nval: images/val\nnc: {}\nnames:\n",
      o.train, o.val, o.imgsz, o.seed, o.format, kClassNames.size());
  for (size_t c = 0; c < kClassNames.size(); ++c) text += fmt::format("  {}: {}\n", c, kClassNames[c]);
  write_file(yaml, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});

  DatasetSummary summary{total, 0};
  for (int64_t n : objects) summary.objects += n;
  return summary;
}

// ---------------------------------------------------------------------------------------------------------------
// Tracking sequences

std::vector<SequenceFrame> make_sequence(uint64_t seed, int64_t imgsz, int64_t frames, int64_t max_objects) {
  VISION_CHECK(imgsz >= 32 && imgsz <= 4096, "synth: an image size of {} is outside 32–4096", imgsz);
  VISION_CHECK(frames >= 1 && frames <= 100000, "synth: {} frames is outside 1–100000", frames);
  VISION_CHECK(max_objects >= 2 && max_objects <= 64, "synth: --objects {} is outside 2–64", max_objects);
  Random rng(seed);
  const Canvas bg = background(rng, imgsz);
  const double n = static_cast<double>(imgsz);
  struct Mover {
    Object object;
    double vx = 0, vy = 0, spin = 0;
  };
  std::vector<Mover> movers(static_cast<size_t>(rng.integer(2, max_objects)));
  std::vector<std::array<double, 3>> avoid;
  for (Mover& m : movers) {
    m.object.shape = static_cast<ShapeClass>(rng.integer(0, static_cast<int64_t>(kClassNames.size()) - 1));
    m.object.size = rng.uniform(0.10, 0.18) * n;
    const double margin = m.object.size / 2;
    m.object.cx = rng.uniform(margin, n - margin);
    m.object.cy = rng.uniform(margin, n - margin);
    m.object.angle = rng.uniform(0, 2 * std::numbers::pi);
    const double speed = rng.uniform(0.005, 0.02) * n, direction = rng.uniform(0, 2 * std::numbers::pi);
    m.vx = speed * std::cos(direction), m.vy = speed * std::sin(direction);
    m.spin = rng.uniform(-0.03, 0.03);
    const float* c = bg.rgb.data() + (static_cast<int64_t>(m.object.cy) * imgsz + static_cast<int64_t>(m.object.cx)) * 3;
    avoid.push_back({c[0], c[1], c[2]});
    m.object.colour = contrasting_colour(rng, avoid);
    avoid.back() = {double(m.object.colour[0]), double(m.object.colour[1]), double(m.object.colour[2])};
  }
  const int64_t amplitude = rng.integer(0, 8);

  std::vector<SequenceFrame> out;
  out.reserve(static_cast<size_t>(frames));
  for (int64_t f = 0; f < frames; ++f) {
    Canvas canvas = bg;
    std::vector<Coverage> covers;
    for (const Mover& m : movers) covers.push_back(coverage(m.object));
    for (size_t k = 0; k < movers.size(); ++k) {
      const Coverage& c = covers[k];
      for (int64_t y = std::max<int64_t>(c.y0, 0); y < std::min(c.y0 + c.height, imgsz); ++y)
        for (int64_t x = std::max<int64_t>(c.x0, 0); x < std::min(c.x0 + c.width, imgsz); ++x) {
          const float a = c.values[c.index(x, y)];
          if (a == 0.0f) continue;
          float* px = canvas.at(x, y);
          for (size_t ch = 0; ch < 3; ++ch) px[ch] += (static_cast<float>(movers[k].object.colour[ch]) - px[ch]) * a;
        }
    }
    SequenceFrame frame{Image(imgsz, imgsz, 3), {}};
    uint64_t bits = 0;
    int left = 0;
    for (size_t i = 0; i < canvas.rgb.size(); ++i) {
      if (left == 0) bits = rng.bits(), left = 8;
      const auto u = static_cast<int64_t>(bits & 0xFF);
      bits >>= 8, --left;
      const int64_t noise = (u * (2 * amplitude + 1)) / 256 - amplitude;
      frame.image.pixels[i] = quantise(canvas.rgb[i] + static_cast<double>(noise));
    }
    for (size_t k = 0; k < movers.size(); ++k) {
      // Visible: inside the image and under no later object.
      const Coverage& c = covers[k];
      double visible = 0;
      for (int64_t y = std::max<int64_t>(c.y0, 0); y < std::min(c.y0 + c.height, imgsz); ++y)
        for (int64_t x = std::max<int64_t>(c.x0, 0); x < std::min(c.x0 + c.width, imgsz); ++x) {
          double v = c.values[c.index(x, y)];
          for (size_t j = k + 1; j < movers.size() && v > 0; ++j) v *= 1.0 - covers[j].at(x, y);
          visible += v;
        }
      frame.boxes.push_back({.id = static_cast<int64_t>(k) + 1, .shape = movers[k].object.shape,
                             .box = label_box(movers[k].object, imgsz), .visibility = visible / c.total()});
    }
    out.push_back(std::move(frame));
    // Move: bounce the centre off the borders at half the size.
    for (Mover& m : movers) {
      const double margin = m.object.size / 2;
      m.object.cx += m.vx, m.object.cy += m.vy, m.object.angle += m.spin;
      if (m.object.cx < margin) m.object.cx = 2 * margin - m.object.cx, m.vx = -m.vx;
      if (m.object.cx > n - margin) m.object.cx = 2 * (n - margin) - m.object.cx, m.vx = -m.vx;
      if (m.object.cy < margin) m.object.cy = 2 * margin - m.object.cy, m.vy = -m.vy;
      if (m.object.cy > n - margin) m.object.cy = 2 * (n - margin) - m.object.cy, m.vy = -m.vy;
    }
  }
  return out;
}

DatasetSummary write_sequences(const SequenceOptions& o) {
  namespace fs = std::filesystem;
  VISION_CHECK(!o.out.empty(), "synth: give the output folder (--out)");
  VISION_CHECK(o.sequences >= 1 && o.sequences <= 1000, "synth: --sequences {} is outside 1–1000", o.sequences);
  VISION_CHECK(o.format == "jpg" || o.format == "png", "synth: --format {} is not jpg or png", o.format);
  std::error_code ec;
  for (int64_t k = 0; k < o.sequences; ++k) {
    const fs::path dir = o.out / fmt::format("seq-{:02d}", k + 1);
    if (fs::exists(dir, ec)) {
      VISION_CHECK(o.overwrite, "synth: '{}' already exists; pass --overwrite to replace it, or choose another folder",
                   dir.string());
      fs::remove_all(dir, ec);
      VISION_CHECK(!ec, "synth: cannot remove '{}': {}", dir.string(), ec.message());
    }
  }
  DatasetSummary summary;
  for (int64_t k = 0; k < o.sequences; ++k) {
    const fs::path dir = o.out / fmt::format("seq-{:02d}", k + 1);
    for (const char* sub : {"img1", "gt"}) {
      if (o.video && std::string_view(sub) == "img1") continue;
      fs::create_directories(dir / sub, ec);
      VISION_CHECK(!ec, "synth: cannot create '{}': {}", (dir / sub).string(), ec.message());
    }
    const std::vector<SequenceFrame> frames =
        make_sequence(derive_seed(o.seed, 2, static_cast<uint64_t>(k)), o.imgsz, o.frames, o.max_objects);
    if (o.video) {
      VideoWriter writer(dir / fmt::format("seq-{:02d}.mp4", k + 1), o.imgsz, o.imgsz, 30);
      for (const SequenceFrame& f : frames) writer.write(f.image);
      writer.close();
    } else {
      std::vector<std::string> errors(frames.size());
#pragma omp parallel for schedule(dynamic, 4)
      for (size_t f = 0; f < frames.size(); ++f) {
        try {
          write_image(frames[f].image, dir / "img1" / fmt::format("{:06d}.{}", f + 1, o.format),
                      JpegOptions{kJpegQuality});
        } catch (const std::exception& e) {
          errors[f] = e.what();
        }
      }
      for (const std::string& e : errors) VISION_CHECK(e.empty(), "{}", e);
    }
    std::string gt;
    for (size_t f = 0; f < frames.size(); ++f)
      for (const TrackedBox& b : frames[f].boxes)
        gt += fmt::format("{},{},{:.2f},{:.2f},{:.2f},{:.2f},1,{},{:.3f}\n", f + 1, b.id, b.box.x1, b.box.y1,
                          b.box.x2 - b.box.x1, b.box.y2 - b.box.y1, static_cast<int>(b.shape) + 1, b.visibility);
    write_file(dir / "gt" / "gt.txt", {reinterpret_cast<const uint8_t*>(gt.data()), gt.size()});
    const std::string ini = fmt::format(
        "[Sequence]\nname=seq-{:02d}\nimDir={}\nframeRate=30\nseqLength={}\nimWidth={}\nimHeight={}\nimExt=.{}\n",
        k + 1, o.video ? fmt::format("seq-{:02d}.mp4", k + 1) : "img1", frames.size(), o.imgsz, o.imgsz,
        o.video ? "mp4" : o.format);
    write_file(dir / "seqinfo.ini", {reinterpret_cast<const uint8_t*>(ini.data()), ini.size()});
    summary.images += static_cast<int64_t>(frames.size());
    for (const SequenceFrame& f : frames) summary.objects += static_cast<int64_t>(f.boxes.size());
  }
  return summary;
}

}  // namespace vision::data::synth
