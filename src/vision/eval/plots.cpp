#include "vision/eval/plots.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/data/annotate.h"
#include "vision/data/font.h"
#include "vision/data/image.h"

namespace vision::eval {
namespace {

void plot_pixel(data::Image& im, int64_t x, int64_t y, data::Rgb c) {
  if (x < 0 || y < 0 || x >= im.width || y >= im.height) return;
  uint8_t* p = im.pixels.data() + (y * im.width + x) * 3;
  p[0] = c[0], p[1] = c[1], p[2] = c[2];
}

// A line from (x0, y0) to (x1, y1), two pixels wide.
void plot_line(data::Image& im, double x0, double y0, double x1, double y1, data::Rgb c) {
  const int steps = static_cast<int>(std::max(std::abs(x1 - x0), std::abs(y1 - y0))) + 1;
  for (int s = 0; s <= steps; ++s) {
    const double t = static_cast<double>(s) / steps;
    const auto x = static_cast<int64_t>(std::lround(x0 + t * (x1 - x0)));
    const auto y = static_cast<int64_t>(std::lround(y0 + t * (y1 - y0)));
    plot_pixel(im, x, y, c), plot_pixel(im, x + 1, y, c), plot_pixel(im, x, y + 1, c);
  }
}

}  // namespace

void write_pr_curve(const eval::MetricsResult& result, std::span<const std::string> names,
                    const std::filesystem::path& png) {
  data::Image im;
  im.width = 640, im.height = 480, im.channels = 3;
  im.pixels.assign(static_cast<size_t>(im.width * im.height * 3), 255);
  const double left = 60, right = 620, top = 40, bottom = 430;
  const data::Rgb axis{150, 150, 150};
  plot_line(im, left, bottom, right, bottom, axis);
  plot_line(im, left, top, left, bottom, axis);
  auto px = [&](double r) { return left + r * (right - left); };
  auto py = [&](double p) { return bottom - p * (bottom - top); };
  std::vector<double> mean(eval::kPrCurvePoints, 0.0);
  for (const eval::ClassMetrics& c : result.classes) {
    if (c.pr_curve.size() != static_cast<size_t>(eval::kPrCurvePoints)) continue;
    const data::Rgb colour = result.classes.size() <= 10 ? data::class_colour(c.cls) : data::Rgb{180, 180, 180};
    for (int i = 1; i < eval::kPrCurvePoints; ++i) {
      const double r0 = (i - 1.0) / (eval::kPrCurvePoints - 1), r1 = i / (eval::kPrCurvePoints - 1.0);
      plot_line(im, px(r0), py(c.pr_curve[static_cast<size_t>(i - 1)]), px(r1), py(c.pr_curve[static_cast<size_t>(i)]),
           colour);
    }
    for (int i = 0; i < eval::kPrCurvePoints; ++i)
      mean[static_cast<size_t>(i)] += c.pr_curve[static_cast<size_t>(i)] / static_cast<double>(result.classes.size());
  }
  const data::Rgb blue{31, 119, 180};
  for (int i = 1; i < eval::kPrCurvePoints && !result.classes.empty(); ++i) {
    const double r0 = (i - 1.0) / (eval::kPrCurvePoints - 1), r1 = i / (eval::kPrCurvePoints - 1.0);
    for (int d = -1; d <= 1; ++d)
      plot_line(im, px(r0), py(mean[static_cast<size_t>(i - 1)]) + d, px(r1), py(mean[static_cast<size_t>(i)]) + d, blue);
  }
  if (const auto font = data::Font::default_font()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "Precision-Recall (IoU 0.5): all classes %.3f mAP50", result.map50);
    font->draw_text(im, buf, 60, 8, 18.0f, {0, 0, 0});
    font->draw_text(im, "Recall", 310, 448, 14.0f, {60, 60, 60});
    font->draw_text(im, "Precision", 2, 20, 14.0f, {60, 60, 60});
    font->draw_text(im, "1", 44, static_cast<int64_t>(top) - 8, 12.0f, {90, 90, 90});
    font->draw_text(im, "0", 44, static_cast<int64_t>(bottom) - 8, 12.0f, {90, 90, 90});
    font->draw_text(im, "1", static_cast<int64_t>(right) - 4, static_cast<int64_t>(bottom) + 2, 12.0f, {90, 90, 90});
    if (result.classes.size() <= 10) {
      int64_t y = static_cast<int64_t>(bottom) - 18 * static_cast<int64_t>(result.classes.size()) - 10;
      for (const eval::ClassMetrics& c : result.classes) {
        const std::string name =
            c.cls < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(c.cls)] : std::to_string(c.cls);
        std::snprintf(buf, sizeof buf, "%s %.3f", name.c_str(), c.ap50);
        font->draw_text(im, buf, static_cast<int64_t>(left) + 20, y, 14.0f, data::class_colour(c.cls));
        y += 18;
      }
    }
  }
  data::write_image(im, png);
}

void write_prediction_grid(std::span<const data::Image> images, std::span<const std::vector<data::Detection>> found,
                           std::span<const std::string> names, const std::filesystem::path& jpg) {
  const size_t n = std::min<size_t>({images.size(), found.size(), 4});
  if (n == 0) return;
  const int64_t cols = n > 1 ? 2 : 1, rows = n > 2 ? 2 : 1;
  int64_t cw = 0, ch = 0;
  for (size_t i = 0; i < n; ++i) cw = std::max(cw, images[i].width), ch = std::max(ch, images[i].height);
  data::Image grid;
  grid.width = cw * cols, grid.height = ch * rows, grid.channels = 3;
  grid.pixels.assign(static_cast<size_t>(grid.width * grid.height * 3), 114);
  for (size_t i = 0; i < n; ++i) {
    data::Image im = images[i];
    data::draw_detections(im, found[i], names);
    const int64_t ox = static_cast<int64_t>(i % 2) * cw, oy = static_cast<int64_t>(i / 2) * ch;
    for (int64_t y = 0; y < im.height; ++y)
      std::copy_n(im.pixels.data() + y * im.width * 3, im.width * 3,
                  grid.pixels.data() + ((oy + y) * grid.width + ox) * 3);
  }
  data::write_image(grid, jpg);
}

void write_results_plot(const std::filesystem::path& csv, const std::filesystem::path& png) {
  std::ifstream in(csv);
  VISION_CHECK(in.good(), "{}: cannot be read", csv.string());
  std::string header, row;
  std::getline(in, header);
  std::vector<std::string> names;
  {
    std::stringstream ss(header);
    for (std::string f; std::getline(ss, f, ',');) names.push_back(f);
  }
  std::vector<std::vector<double>> cols(names.size());
  while (std::getline(in, row)) {
    std::stringstream ss(row);
    size_t i = 0;
    for (std::string f; std::getline(ss, f, ',') && i < cols.size(); ++i) cols[i].push_back(std::strtod(f.c_str(), nullptr));
  }
  if (cols.empty() || cols[0].empty()) return;
  // Every column after epoch and time, in a grid of 5 per row.
  const size_t first = 2, charts = names.size() > first ? names.size() - first : 0;
  const int64_t cw = 300, ch = 220, per_row = 5;
  const int64_t rows = static_cast<int64_t>((charts + per_row - 1) / per_row);
  data::Image im;
  im.width = cw * per_row, im.height = ch * std::max<int64_t>(rows, 1), im.channels = 3;
  im.pixels.assign(static_cast<size_t>(im.width * im.height * 3), 255);
  const auto font = data::Font::default_font();
  const std::vector<double>& epochs = cols[0];
  for (size_t k = 0; k < charts; ++k) {
    const std::vector<double>& v = cols[first + k];
    const int64_t ox = static_cast<int64_t>(k % per_row) * cw, oy = static_cast<int64_t>(k / per_row) * ch;
    const double left = ox + 40, right = ox + cw - 12, top = oy + 34, bottom = oy + ch - 24;
    double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
    if (!(hi > lo)) hi = lo + 1e-9 + std::abs(lo) * 0.1, lo -= std::abs(lo) * 0.1;
    const double e0 = epochs.front(), e1 = std::max(epochs.back(), e0 + 1);
    const data::Rgb axis{150, 150, 150}, blue{31, 119, 180};
    plot_line(im, left, bottom, right, bottom, axis);
    plot_line(im, left, top, left, bottom, axis);
    auto px = [&](size_t i) { return left + (epochs[i] - e0) / (e1 - e0) * (right - left); };
    auto py = [&](double y) { return bottom - (y - lo) / (hi - lo) * (bottom - top); };
    if (v.size() == 1) plot_line(im, px(0) - 2, py(v[0]), px(0) + 2, py(v[0]), blue);
    for (size_t i = 1; i < v.size(); ++i) plot_line(im, px(i - 1), py(v[i - 1]), px(i), py(v[i]), blue);
    if (font) {
      font->draw_text(im, names[first + k], ox + 40, oy + 6, 16.0f, {0, 0, 0});
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.4g", hi);
      font->draw_text(im, buf, ox + 2, static_cast<int64_t>(top) - 14, 11.0f, {90, 90, 90});
      std::snprintf(buf, sizeof buf, "%.4g", lo);
      font->draw_text(im, buf, ox + 2, static_cast<int64_t>(bottom) - 4, 11.0f, {90, 90, 90});
      std::snprintf(buf, sizeof buf, "epoch %g", epochs.back());
      font->draw_text(im, buf, static_cast<int64_t>(right) - 70, static_cast<int64_t>(bottom) + 4, 11.0f, {90, 90, 90});
    }
  }
  data::write_image(im, png);
}

}  // namespace vision::eval
