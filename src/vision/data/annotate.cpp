#include "vision/data/annotate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "vision/core/error.h"

namespace vision::data {

namespace {

// The class palette: 24 vivid colours (CIELAB lightness 40–85, chroma ≥ 35) chosen greedily from a 15-step RGB grid,
// each the one farthest (CIE76 ΔE) from all chosen before it, starting from red: any two differ by ΔE ≥ 31, and the
// first classes, which most models use most, get the most distinct colours.
constexpr std::array<Rgb, kPaletteSize> kPalette = {{
    {240, 30, 30}, {0, 240, 0},     {60, 60, 255},  {105, 225, 255}, {105, 105, 0},   {255, 135, 210},
    {0, 120, 225}, {60, 210, 135},  {255, 0, 240},  {255, 165, 0},   {255, 180, 150}, {195, 225, 60},
    {165, 60, 75}, {135, 60, 180},  {255, 0, 120},  {15, 120, 90},   {165, 75, 0},    {195, 210, 135},
    {0, 120, 0},   {195, 180, 255}, {120, 90, 150}, {0, 135, 180},   {225, 15, 165},  {75, 195, 45},
}};

double linear_srgb(uint8_t v) {
  const double c = v / 255.0;
  return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
}

// A half-open rectangle of pixels [x0, x1) × [y0, y1).
struct Rect {
  int64_t x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool empty() const { return x1 <= x0 || y1 <= y0; }
};

void fill(Image& image, Rect r, Rgb colour) {
  r.x0 = std::max<int64_t>(r.x0, 0), r.y0 = std::max<int64_t>(r.y0, 0);
  r.x1 = std::min(r.x1, image.width), r.y1 = std::min(r.y1, image.height);
  if (r.empty()) return;
  const uint8_t grey = grey_of(colour);
  for (int64_t y = r.y0; y < r.y1; ++y) {
    uint8_t* p = image.at(r.x0, y);
    for (int64_t x = r.x0; x < r.x1; ++x) {
      if (image.channels == 1) {
        *p++ = grey;
      } else {
        *p++ = colour[0], *p++ = colour[1], *p++ = colour[2];
      }
    }
  }
}

// The pixels of the box: corners sorted, clipped to the image and rounded to pixel edges, at least one pixel each
// way. nullopt when the box lies wholly outside the image or has a coordinate that is not finite.
std::optional<Rect> box_pixels(const Detection& d, int64_t width, int64_t height) {
  for (float v : d.box) {
    if (!std::isfinite(v)) return std::nullopt;
  }
  const double w = static_cast<double>(width), h = static_cast<double>(height);
  double x1 = std::min(d.box[0], d.box[2]), x2 = std::max(d.box[0], d.box[2]);
  double y1 = std::min(d.box[1], d.box[3]), y2 = std::max(d.box[1], d.box[3]);
  if (x2 < 0 || y2 < 0 || x1 > w || y1 > h) return std::nullopt;
  auto edge = [](double v, double limit) { return static_cast<int64_t>(std::nearbyint(std::clamp(v, 0.0, limit))); };
  Rect r{edge(x1, w), edge(y1, h), edge(x2, w), edge(y2, h)};
  if (r.x1 <= r.x0) r.x1 = std::min(r.x0 + 1, width), r.x0 = r.x1 - 1;
  if (r.y1 <= r.y0) r.y1 = std::min(r.y0 + 1, height), r.y0 = r.y1 - 1;
  return r;
}

void draw_outline(Image& image, const Rect& r, int64_t lw, Rgb colour) {
  fill(image, {r.x0, r.y0, r.x1, std::min(r.y0 + lw, r.y1)}, colour);  // top
  fill(image, {r.x0, std::max(r.y1 - lw, r.y0), r.x1, r.y1}, colour);  // bottom
  fill(image, {r.x0, r.y0, std::min(r.x0 + lw, r.x1), r.y1}, colour);  // left
  fill(image, {std::max(r.x1 - lw, r.x0), r.y0, r.x1, r.y1}, colour);  // right
}

std::string class_name(int64_t cls, std::span<const std::string> names) {
  return cls >= 0 && static_cast<uint64_t>(cls) < names.size() ? names[static_cast<size_t>(cls)] : std::to_string(cls);
}

// A float as the double of its shortest decimal form, so JSON shows 0.87 rather than 0.8700000047683716 and reads
// back as the same float. Non-finite values stay as they are (nlohmann::json writes them as null).
double json_number(float v) {
  if (!std::isfinite(v)) return v;
  return std::strtod(fmt::format("{}", v).c_str(), nullptr);
}

}  // namespace

Rgb class_colour(int64_t cls) {
  const uint64_t k = cls < 0 ? 0 - static_cast<uint64_t>(cls) : static_cast<uint64_t>(cls);
  return kPalette[k % kPaletteSize];
}

Rgb contrasting_text_colour(Rgb bg) {
  const double lum = 0.2126 * linear_srgb(bg[0]) + 0.7152 * linear_srgb(bg[1]) + 0.0722 * linear_srgb(bg[2]);
  const double with_white = 1.05 / (lum + 0.05), with_black = (lum + 0.05) / 0.05;
  return with_black > with_white ? Rgb{0, 0, 0} : Rgb{255, 255, 255};
}

int64_t default_line_width(int64_t width, int64_t height) {
  const double v = static_cast<double>(width + height) / 2 * 0.003;
  return std::max<int64_t>(static_cast<int64_t>(std::nearbyint(v)), 2);
}

float default_font_height(int64_t line_width) { return static_cast<float>(std::max<int64_t>(9 * line_width, 12)); }

void draw_polyline(Image& image, std::span<const std::array<float, 2>> points, Rgb colour, int64_t line_width) {
  VISION_CHECK(image.channels == 1 || image.channels == 3, "draw_polyline: images of 1 or 3 channels only, not {}",
               image.channels);
  const int64_t lw = line_width > 0 ? line_width : default_line_width(image.width, image.height);
  const double w = static_cast<double>(image.width), h = static_cast<double>(image.height), half = lw / 2.0;
  auto dot = [&](double x, double y) {
    const auto x0 = static_cast<int64_t>(std::floor(x - half + 0.5)), y0 = static_cast<int64_t>(std::floor(y - half + 0.5));
    fill(image, {x0, y0, x0 + lw, y0 + lw}, colour);
  };
  auto finite = [](const std::array<float, 2>& p) { return std::isfinite(p[0]) && std::isfinite(p[1]); };
  if (points.size() == 1 && finite(points[0])) dot(points[0][0], points[0][1]);
  for (size_t i = 1; i < points.size(); ++i) {
    const std::array<float, 2>&a = points[i - 1], &b = points[i];
    if (!finite(a) || !finite(b)) continue;
    // The segment clipped to the image widened by the line (Liang–Barsky), so far-away points cost nothing.
    double t0 = 0, t1 = 1;
    const double dx = b[0] - a[0], dy = b[1] - a[1];
    const double p[4] = {-dx, dx, -dy, dy}, q[4] = {a[0] + half, w + half - a[0], a[1] + half, h + half - a[1]};
    bool inside = true;
    for (int k = 0; k < 4 && inside; ++k) {
      if (p[k] == 0) {
        inside = q[k] >= 0;
      } else {
        const double r = q[k] / p[k];
        if (p[k] < 0) t0 = std::max(t0, r);
        else t1 = std::min(t1, r);
        inside = t0 <= t1;
      }
    }
    if (!inside) continue;
    const double length = std::hypot(dx, dy) * (t1 - t0);
    const auto steps = static_cast<int64_t>(std::ceil(length * 2));
    for (int64_t s = 0; s <= steps; ++s) {
      const double t = t0 + (t1 - t0) * (steps ? static_cast<double>(s) / static_cast<double>(steps) : 0.0);
      dot(a[0] + dx * t, a[1] + dy * t);
    }
  }
}

std::string detection_label(const Detection& d, std::span<const std::string> names, bool with_score) {
  std::string name = class_name(d.cls, names);
  return with_score ? fmt::format("{} {:.2f}", name, d.score) : name;
}

void draw_detections(Image& image, std::span<const Detection> detections, std::span<const std::string> names,
                     const DrawOptions& options) {
  const int64_t ch = image.channels;
  VISION_CHECK(ch == 1 || ch == 3, "draw_detections: images of 1 or 3 channels only, not {}", ch);
  VISION_CHECK(image.width > 0 && image.height > 0 &&
                   image.pixels.size() == static_cast<size_t>(image.width * image.height * ch),
               "draw_detections: the image ({}×{}×{}, {} bytes) is empty or inconsistent", image.width, image.height,
               ch, image.pixels.size());
  VISION_CHECK(options.line_width >= 0, "draw_detections: line width {} is negative (0 picks one by image size)",
               options.line_width);
  VISION_CHECK(options.font_height == 0 ||
                   (std::isfinite(options.font_height) && options.font_height > 0 && options.font_height <= 4096),
               "draw_detections: text height {} pixels is out of range; give one in (0, 4096], or 0 to pick one by "
               "the line width",
               options.font_height);
  // A width beyond the image's larger side draws the same as that side (and keeps the arithmetic small).
  const int64_t lw =
      std::min(options.line_width > 0 ? options.line_width : default_line_width(image.width, image.height),
               std::max(image.width, image.height));

  std::vector<std::pair<const Detection*, Rect>> boxes;
  for (const Detection& d : detections) {
    if (auto r = box_pixels(d, image.width, image.height)) boxes.emplace_back(&d, *r);
  }
  for (const auto& [d, r] : boxes) draw_outline(image, r, lw, class_colour(d->cls));
  if (!options.labels || boxes.empty()) return;

  std::shared_ptr<const Font> owned;
  const Font* font = options.font;
  if (!font) {
    owned = Font::default_font();
    font = owned.get();
  }
  if (!font) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      std::fprintf(stderr,
                   "vision: warning: no font found for the labels (DejaVuSans.ttf); drawing boxes without labels. "
                   "Install fonts-dejavu-core or set VISION_FONT to a TrueType (.ttf) file\n");
    }
    return;
  }
  const float px = options.font_height != 0 ? options.font_height : default_font_height(lw);
  const int64_t line = font->line_height(px), pad_x = lw, pad_y = std::max<int64_t>(lw / 2, 1);
  for (const auto& [d, r] : boxes) {
    const std::string text = detection_label(*d, names, options.show_score);
    const int64_t w = std::min(font->text_width(text, px) + 2 * pad_x, image.width);
    const int64_t h = std::min(line + 2 * pad_y, image.height);
    const int64_t x = std::clamp<int64_t>(r.x0, 0, image.width - w);
    const int64_t y = r.y0 >= h ? r.y0 - h : std::min(r.y0, image.height - h);
    const Rgb colour = class_colour(d->cls);
    fill(image, {x, y, x + w, y + h}, colour);
    // In a grey image the label is the colour's grey: the text contrasts with that.
    const uint8_t grey = grey_of(colour);
    const Rgb text_colour = contrasting_text_colour(ch == 1 ? Rgb{grey, grey, grey} : colour);
    font->draw_text(image, text, x + pad_x, y + pad_y, px, text_colour);
  }
}

std::string yolo_label_lines(std::span<const Detection> detections, int64_t width, int64_t height, bool with_conf) {
  VISION_CHECK(width > 0 && height > 0, "yolo_label_lines: the image size {}×{} must be positive", width, height);
  const double w = static_cast<double>(width), h = static_cast<double>(height);
  std::string out;
  for (const Detection& d : detections) {
    if (!std::all_of(d.box.begin(), d.box.end(), [](float v) { return std::isfinite(v); })) continue;
    const double x1 = std::clamp<double>(std::min(d.box[0], d.box[2]), 0, w);
    const double x2 = std::clamp<double>(std::max(d.box[0], d.box[2]), 0, w);
    const double y1 = std::clamp<double>(std::min(d.box[1], d.box[3]), 0, h);
    const double y2 = std::clamp<double>(std::max(d.box[1], d.box[3]), 0, h);
    out += fmt::format("{} {:.6f} {:.6f} {:.6f} {:.6f}", d.cls, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w,
                       (y2 - y1) / h);
    if (with_conf) out += fmt::format(" {:.6f}", static_cast<double>(d.score));
    out += '\n';
  }
  return out;
}

nlohmann::json detections_json(std::span<const Detection> detections, std::span<const std::string> names) {
  nlohmann::json out = nlohmann::json::array();
  for (const Detection& d : detections) {
    out.push_back({{"class", d.cls},
                   {"name", class_name(d.cls, names)},
                   {"confidence", json_number(d.score)},
                   {"box",
                    {{"x1", json_number(d.box[0])},
                     {"y1", json_number(d.box[1])},
                     {"x2", json_number(d.box[2])},
                     {"y2", json_number(d.box[3])}}}});
  }
  return out;
}

std::vector<Detection> detections_from_json(const nlohmann::json& json) {
  VISION_CHECK(json.is_array(), "detections JSON: expected an array of detections, got a JSON {}", json.type_name());
  std::vector<Detection> out;
  for (size_t i = 0; i < json.size(); ++i) {
    const nlohmann::json& item = json[i];
    auto field = [&](const nlohmann::json& obj, const char* key, const std::string& where) -> const nlohmann::json& {
      VISION_CHECK(obj.is_object() && obj.contains(key), "detections JSON: item {} has no \"{}\"", i, where);
      return obj[key];
    };
    auto number = [&](const nlohmann::json& obj, const char* key, const std::string& where) {
      const nlohmann::json& v = field(obj, key, where);
      VISION_CHECK(v.is_number(), "detections JSON: item {}: \"{}\" is a {}, not a number", i, where, v.type_name());
      return v.get<float>();
    };
    Detection d;
    const nlohmann::json& cls = field(item, "class", "class");
    VISION_CHECK(cls.is_number_integer(), "detections JSON: item {}: \"class\" is not an integer", i);
    d.cls = cls.get<int64_t>();
    d.score = number(item, "confidence", "confidence");
    const nlohmann::json& box = field(item, "box", "box");
    const char* keys[] = {"x1", "y1", "x2", "y2"};
    for (size_t k = 0; k < 4; ++k) d.box[k] = number(box, keys[k], std::string("box.") + keys[k]);
    out.push_back(d);
  }
  return out;
}

}  // namespace vision::data
