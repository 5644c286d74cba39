// Annotation: the class palette and text contrast; box outlines pixel by pixel against an independent model of the
// band (rounding, clipping, 1- and 3-channel images); labels (placement above the box, inside it at the top edge,
// moved left at the right edge, text pixels that depend on the string); the TrueType font (widths, kerning, UTF-8,
// corrupt files named in errors, VISION_FONT); YOLO label lines against hand-computed values; JSON exactly and
// round-tripped. Font tests skip when DejaVu (fonts-dejavu-core) is not installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <limits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"
#include "vision/data/annotate.h"

namespace vision::data {
namespace {

using test::error_of;
using test::ScopedEnv;

constexpr uint8_t kGrey = 128;

// The installed DejaVu (or VISION_FONT's font), or a skip — a plain one: a missing font is not a missing GPU, and
// VISION_REQUIRE_GPU=1 must not turn it into a failure (the GPU host keeps its fonts outside /usr/share).
#define REQUIRE_FONT(var)                                 \
  std::shared_ptr<const Font> var = Font::default_font(); \
  if (!var) GTEST_SKIP() << "no DejaVuSans.ttf (install fonts-dejavu-core, or set VISION_FONT)"

Rgb pixel(const Image& img, int64_t x, int64_t y) {
  const uint8_t* p = img.at(x, y);
  return img.channels == 1 ? Rgb{p[0], p[0], p[0]} : Rgb{p[0], p[1], p[2]};
}
bool is_grey(const Image& img, int64_t x, int64_t y) { return pixel(img, x, y) == Rgb{kGrey, kGrey, kGrey}; }

// The bounding rectangle [x0, x1) × [y0, y1) of the pixels where a and b differ (empty: x1 = 0).
struct Changed {
  int64_t x0 = INT64_MAX, y0 = INT64_MAX, x1 = 0, y1 = 0, count = 0;
};
Changed changed(const Image& a, const Image& b) {
  Changed c;
  for (int64_t y = 0; y < a.height; ++y) {
    for (int64_t x = 0; x < a.width; ++x) {
      if (pixel(a, x, y) == pixel(b, x, y)) continue;
      c.x0 = std::min(c.x0, x), c.y0 = std::min(c.y0, y), c.x1 = std::max(c.x1, x + 1), c.y1 = std::max(c.y1, y + 1);
      ++c.count;
    }
  }
  return c;
}

// Checks every pixel: those of the outline band (lw wide inside [x0, x1) × [y0, y1)) are `colour`, all others grey.
void expect_outline(const Image& img, int64_t x0, int64_t y0, int64_t x1, int64_t y1, int64_t lw, Rgb colour,
                    const std::string& what) {
  int64_t wrong = 0;
  for (int64_t y = 0; y < img.height; ++y) {
    for (int64_t x = 0; x < img.width; ++x) {
      const bool inside = x >= x0 && x < x1 && y >= y0 && y < y1;
      const bool band = inside && (x < x0 + lw || x >= x1 - lw || y < y0 + lw || y >= y1 - lw);
      const Rgb want = band ? colour : Rgb{kGrey, kGrey, kGrey};
      if (pixel(img, x, y) != want && wrong++ < 5) {
        ADD_FAILURE() << what << ": pixel (" << x << ", " << y << ") is " << int(pixel(img, x, y)[0]) << ","
                      << int(pixel(img, x, y)[1]) << "," << int(pixel(img, x, y)[2]) << (band ? ", in" : ", not in")
                      << " the outline";
      }
    }
  }
  EXPECT_EQ(wrong, 0) << what;
}

DrawOptions boxes_only(int64_t lw) {
  DrawOptions o;
  o.line_width = lw;
  o.labels = false;
  return o;
}

const std::vector<std::string> kNames = {"person", "bicycle", "dog", "cat", "traffic light"};

// ---------------------------------------------------------------------------------------------------------------
// Palette, contrast, sizes

TEST(AnnotatePalette, DistinctColoursCyclingPerClass) {
  std::set<Rgb> seen;
  for (int64_t k = 0; k < kPaletteSize; ++k) {
    const Rgb c = class_colour(k);
    seen.insert(c);
    for (int64_t j = 0; j < k; ++j) {
      const Rgb o = class_colour(j);
      const double d = std::hypot(c[0] - o[0], c[1] - o[1], c[2] - o[2]);
      EXPECT_GE(d, 40.0) << "classes " << j << " and " << k << " look alike";
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kPaletteSize));
  EXPECT_GE(kPaletteSize, 20);
  EXPECT_EQ(class_colour(3), class_colour(3 + kPaletteSize));
  EXPECT_EQ(class_colour(79), class_colour(79 % kPaletteSize));
  EXPECT_EQ(class_colour(-2), class_colour(2));
  EXPECT_NE(class_colour(0), class_colour(1));
}

TEST(AnnotatePalette, TextContrastsWithTheBackground) {
  EXPECT_EQ(contrasting_text_colour({255, 255, 255}), (Rgb{0, 0, 0}));
  EXPECT_EQ(contrasting_text_colour({0, 0, 0}), (Rgb{255, 255, 255}));
  EXPECT_EQ(contrasting_text_colour({255, 255, 0}), (Rgb{0, 0, 0}));      // yellow
  EXPECT_EQ(contrasting_text_colour({0, 0, 160}), (Rgb{255, 255, 255}));  // dark blue
  EXPECT_EQ(contrasting_text_colour({0, 240, 0}), (Rgb{0, 0, 0}));        // bright green
  EXPECT_EQ(contrasting_text_colour({160, 0, 0}), (Rgb{255, 255, 255}));  // dark red
  // Mid grey 118 is where the contrast ratios cross (relative luminance ≈ 0.179): below it white, above black.
  EXPECT_EQ(contrasting_text_colour({110, 110, 110}), (Rgb{255, 255, 255}));
  EXPECT_EQ(contrasting_text_colour({125, 125, 125}), (Rgb{0, 0, 0}));
}

TEST(AnnotatePalette, LineWidthAndFontHeightFollowTheImageSize) {
  EXPECT_EQ(default_line_width(640, 480), 2);    // 1.68 → 2
  EXPECT_EQ(default_line_width(100, 100), 2);    // 0.3 → the minimum 2
  EXPECT_EQ(default_line_width(1920, 1080), 4);  // 4.5 → 4 (half to even)
  EXPECT_EQ(default_line_width(2000, 1000), 4);  // 4.5 → 4
  EXPECT_EQ(default_line_width(2400, 1400), 6);  // 5.7 → 6
  EXPECT_EQ(default_line_width(3840, 2160), 9);  // 9.0
  EXPECT_EQ(default_font_height(2), 18.0f);
  EXPECT_EQ(default_font_height(1), 12.0f);
}

TEST(AnnotatePalette, LabelText) {
  const Detection d{{0, 0, 1, 1}, 0.8749f, 2};
  EXPECT_EQ(detection_label(d, kNames), "dog 0.87");
  EXPECT_EQ(detection_label(d, kNames, false), "dog");
  EXPECT_EQ(detection_label({{0, 0, 1, 1}, 0.124f, 4}, kNames), "traffic light 0.12");
  EXPECT_EQ(detection_label({{0, 0, 1, 1}, 1.0f, 7}, kNames), "7 1.00");  // no name for class 7
  EXPECT_EQ(detection_label({{0, 0, 1, 1}, 0.5f, -1}, kNames), "-1 0.50");
}

// ---------------------------------------------------------------------------------------------------------------
// Box outlines

TEST(AnnotateBoxes, OutlineIsExactlyTheBandInsideTheRoundedBox) {
  for (int64_t channels : {3, 1}) {
    Image img(100, 80, channels, kGrey);
    // Edges round to the nearest pixel edge: 20.4 → 20, 10.6 → 11, 60.2 → 60, 50.5 → 50 (half to even).
    const Detection d{{20.4f, 10.6f, 60.2f, 50.5f}, 0.9f, 5};
    draw_detections(img, std::span(&d, 1), kNames, boxes_only(3));
    const Rgb c = class_colour(5);
    const Rgb want = channels == 1 ? Rgb{grey_of(c), grey_of(c), grey_of(c)} : c;
    expect_outline(img, 20, 11, 60, 50, 3, want, fmt::format("{} channel(s)", channels));
  }
  // Corners given the other way round draw the same box; a thin box is filled.
  Image a(60, 40, 3, kGrey), b(60, 40, 3, kGrey);
  const Detection straight{{10, 5, 30, 25}, 0.5f, 1}, swapped{{30, 25, 10, 5}, 0.5f, 1};
  draw_detections(a, std::span(&straight, 1), kNames, boxes_only(2));
  draw_detections(b, std::span(&swapped, 1), kNames, boxes_only(2));
  EXPECT_EQ(a, b);
  Image thin(60, 40, 3, kGrey);
  const Detection narrow{{10, 5, 13, 25}, 0.5f, 1};
  draw_detections(thin, std::span(&narrow, 1), kNames, boxes_only(2));
  expect_outline(thin, 10, 5, 13, 25, 2, class_colour(1), "3 wide, line 2");
}

TEST(AnnotateBoxes, EachClassInItsColour) {
  Image img(120, 60, 3, kGrey);
  const std::vector<Detection> dets = {{{5, 5, 50, 50}, 0.9f, 0}, {{65, 5, 110, 50}, 0.8f, 1}};
  draw_detections(img, dets, kNames, boxes_only(2));
  EXPECT_EQ(pixel(img, 5, 30), class_colour(0));
  EXPECT_EQ(pixel(img, 49, 30), class_colour(0));
  EXPECT_EQ(pixel(img, 65, 30), class_colour(1));
  EXPECT_EQ(pixel(img, 80, 49), class_colour(1));
  EXPECT_NE(class_colour(0), class_colour(1));
  EXPECT_TRUE(is_grey(img, 30, 30));  // interiors untouched
  EXPECT_TRUE(is_grey(img, 90, 30));
  EXPECT_TRUE(is_grey(img, 57, 30));  // between the boxes
}

TEST(AnnotateBoxes, ClippedToTheImage) {
  // Partly outside: the box is clipped to the image first, so its outline runs along the image's edges.
  Image img(50, 40, 3, kGrey);
  const Detection left_top{{-20.0f, -10.0f, 30.0f, 25.0f}, 0.9f, 0};
  draw_detections(img, std::span(&left_top, 1), kNames, boxes_only(4));
  expect_outline(img, 0, 0, 30, 25, 4, class_colour(0), "left top");

  Image img2(50, 40, 3, kGrey);
  const Detection right_bottom{{40.0f, 30.0f, 1e30f, 90.0f}, 0.9f, 0};
  draw_detections(img2, std::span(&right_bottom, 1), kNames, boxes_only(4));
  expect_outline(img2, 40, 30, 50, 40, 4, class_colour(0), "right bottom");

  // Wholly outside, not finite, or a line width far beyond the image: nothing drawn or a filled box, no stray writes.
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<Detection> outside = {{{-100, -100, -50, -50}, 0.9f, 0},
                                          {{60, 10, 90, 30}, 0.9f, 0},
                                          {{10, 45, 30, 80}, 0.9f, 0},
                                          {{nan, 1, 10, 10}, 0.9f, 0},
                                          {{1, 1, inf, 10}, 0.9f, 0}};
  Image img3(50, 40, 3, kGrey);
  draw_detections(img3, outside, kNames, boxes_only(3));
  EXPECT_EQ(img3, Image(50, 40, 3, kGrey));
  Image img4(50, 40, 3, kGrey);
  DrawOptions huge = boxes_only(int64_t{1} << 62);
  draw_detections(img4, std::span(&left_top, 1), kNames, huge);
  expect_outline(img4, 0, 0, 30, 25, 1000, class_colour(0), "huge line width");
  // A box on the far edge (x1 = width) still shows as one column.
  Image img5(50, 40, 3, kGrey);
  const Detection edge{{50.0f, 10.0f, 50.0f, 20.0f}, 0.9f, 0};
  draw_detections(img5, std::span(&edge, 1), kNames, boxes_only(2));
  expect_outline(img5, 49, 10, 50, 20, 2, class_colour(0), "on the right edge");
}

TEST(AnnotateBoxes, BadImagesAndOptionsAreErrors) {
  const Detection d{{1, 1, 5, 5}, 0.9f, 0};
  Image rgba(10, 10, 4, 0);
  EXPECT_NE(error_of([&] { draw_detections(rgba, std::span(&d, 1), kNames); }).find("channels"), std::string::npos);
  Image empty;
  EXPECT_NE(error_of([&] { draw_detections(empty, std::span(&d, 1), kNames); }), "(no error)");
  Image img(10, 10, 3, 0);
  EXPECT_NE(error_of([&] { draw_detections(img, std::span(&d, 1), kNames, boxes_only(-1)); }).find("negative"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------------------------
// Labels

// Draws d with and without its label on a grey image and returns the rectangle the label changed.
struct LabelDraw {
  Image boxes, labelled;
  Changed label;
};
LabelDraw draw_label(int64_t w, int64_t h, const Detection& d, int64_t lw, const std::vector<std::string>& names) {
  LabelDraw r{Image(w, h, 3, kGrey), Image(w, h, 3, kGrey), {}};
  draw_detections(r.boxes, std::span(&d, 1), names, boxes_only(lw));
  DrawOptions o;
  o.line_width = lw;
  draw_detections(r.labelled, std::span(&d, 1), names, o);
  r.label = changed(r.boxes, r.labelled);
  return r;
}

// The pixels inside rectangle c of img that are not the label colour: the text's.
int64_t text_pixels(const Image& img, const Changed& c, Rgb label) {
  int64_t n = 0;
  for (int64_t y = c.y0; y < c.y1; ++y) {
    for (int64_t x = c.x0; x < c.x1; ++x) n += pixel(img, x, y) != label;
  }
  return n;
}

TEST(AnnotateLabels, FilledRectangleAboveTheBoxWithTheText) {
  REQUIRE_FONT(font);
  const Detection d{{50.0f, 60.0f, 150.0f, 130.0f}, 0.87f, 2};
  const int64_t lw = 2;
  const float px = default_font_height(lw);
  LabelDraw r = draw_label(200, 150, d, lw, kNames);
  // The label's rectangle: left edge at the box's, bottom on the box's top edge, text width + 2 lw by line + 2 pad.
  const int64_t want_w = font->text_width("dog 0.87", px) + 2 * lw, want_h = font->line_height(px) + 2 * 1;
  EXPECT_EQ(r.label.x0, 50);
  EXPECT_EQ(r.label.y1, 60);
  EXPECT_EQ(r.label.x1 - r.label.x0, want_w);
  EXPECT_EQ(r.label.y1 - r.label.y0, want_h);
  // Every pixel of it changed (filled), so the box and its interior are as the boxes-only drawing left them.
  EXPECT_EQ(r.label.count, want_w * want_h);
  // The text: pixels moved from the class colour towards the contrasting colour, inside the padding, and enough of
  // them ("dog 0.87" at 18 px covers well over a hundred pixels).
  const Rgb label = class_colour(2), text = contrasting_text_colour(label);
  int64_t n = 0, strong = 0;
  for (int64_t y = r.label.y0; y < r.label.y1; ++y) {
    for (int64_t x = r.label.x0; x < r.label.x1; ++x) {
      const Rgb p = pixel(r.labelled, x, y);
      if (p == label) continue;
      ++n;
      EXPECT_TRUE(x >= r.label.x0 + lw - 1 && x < r.label.x1 - lw + 1) << "text pixel in the padding at x " << x;
      for (int k = 0; k < 3; ++k) {
        // Each channel lies between the label's and the text's value.
        EXPECT_GE(p[k], std::min(label[k], text[k]));
        EXPECT_LE(p[k], std::max(label[k], text[k]));
      }
      int moved = 0, span = 0;
      for (int k = 0; k < 3; ++k) {
        moved = std::max(moved, std::abs(p[k] - label[k]));
        span = std::max(span, std::abs(text[k] - label[k]));
      }
      strong += 2 * moved > span;  // more than half way to the text colour
    }
  }
  EXPECT_GT(n, 100);
  EXPECT_GT(strong, 40);
  EXPECT_EQ(n, text_pixels(r.labelled, r.label, label));
}

TEST(AnnotateLabels, GreyImagesContrastWithTheGreyLabel) {
  REQUIRE_FONT(font);
  const float px = default_font_height(2);
  const int64_t h = font->line_height(px) + 2;
  for (int64_t k = 0; k < kPaletteSize; ++k) {
    Image img(200, 150, 1, kGrey);
    const Detection d{{50.0f, 60.0f, 150.0f, 130.0f}, 0.5f, k};
    draw_detections(img, std::span(&d, 1), kNames, {.line_width = 2});
    const int64_t w = font->text_width(detection_label(d, kNames), px) + 4;
    // The label's grey, and the text between it and the extreme (white or black) that contrasts with that grey.
    const uint8_t g = grey_of(class_colour(k)), t = contrasting_text_colour({g, g, g})[0];
    int64_t text = 0, outside = 0;
    for (int64_t y = 60 - h; y < 60; ++y) {
      for (int64_t x = 50; x < 50 + w; ++x) {
        const uint8_t v = *img.at(x, y);
        text += v != g;
        outside += v < std::min(g, t) || v > std::max(g, t);
      }
    }
    EXPECT_GT(text, 50) << "class " << k;
    EXPECT_EQ(outside, 0) << "class " << k << ": text not towards " << int(t) << " on grey " << int(g);
  }
}

TEST(AnnotateLabels, DifferentTextsRenderDifferently) {
  REQUIRE_FONT(font);
  const Detection dog{{50.0f, 60.0f, 150.0f, 130.0f}, 0.87f, 2};
  Detection cat = dog, low = dog;
  const std::vector<std::string> same_colour = {"a", "b", "cat"};  // class 2 named "cat": the colour stays
  LabelDraw a = draw_label(200, 150, dog, 2, kNames), b = draw_label(200, 150, cat, 2, same_colour);
  low.score = 0.12f;
  LabelDraw c = draw_label(200, 150, low, 2, kNames);
  EXPECT_NE(a.labelled, b.labelled);
  EXPECT_NE(a.labelled, c.labelled);
  EXPECT_EQ(a.boxes, b.boxes);
  // Same length and colour ("dog 0.87" and "dog 0.12"): only the text pixels differ, and only where the digits are.
  const Changed diff = changed(a.labelled, c.labelled);
  EXPECT_GT(diff.count, 10);
  EXPECT_GE(diff.x0, a.label.x0 + 2 + font->text_width("dog 0.", default_font_height(2)) - 2);
  EXPECT_GE(diff.y0, a.label.y0);
  EXPECT_LE(diff.y1, a.label.y1);
  // No score: a narrower label.
  DrawOptions o;
  o.line_width = 2;
  o.show_score = false;
  Image plain(200, 150, 3, kGrey);
  draw_detections(plain, std::span(&dog, 1), kNames, o);
  EXPECT_EQ(changed(a.boxes, plain).x1 - 50, font->text_width("dog", default_font_height(2)) + 4);
}

// The rows the label changed right of column x (where a narrow box's outline is not in the way).
Changed label_right_of(const LabelDraw& r, int64_t x) {
  Image a = r.boxes, b = r.labelled;
  for (int64_t y = 0; y < a.height; ++y) {
    for (int64_t c = 0; c < std::min(x, a.width); ++c) std::copy_n(a.at(c, y), a.channels, b.at(c, y));
  }
  return changed(a, b);
}

TEST(AnnotateLabels, InsideTheBoxWhenItTouchesTheTop) {
  REQUIRE_FONT(font);
  const float px = default_font_height(2);
  const int64_t h = font->line_height(px) + 2;
  // A box 10 pixels wide, its label ("person 0.50") far wider: right of the box, the label's rows are all changed.
  for (float top : {0.0f, 5.0f, static_cast<float>(h - 1)}) {
    const Detection d{{30.0f, top, 40.0f, 100.0f}, 0.5f, 0};
    LabelDraw r = draw_label(200, 150, d, 2, kNames);
    const int64_t y0 = static_cast<int64_t>(top);
    // It starts at the box's left edge: the column before is untouched, the label's bottom-left corner filled.
    for (int64_t y = 0; y < 150; ++y) EXPECT_TRUE(is_grey(r.labelled, 29, y)) << y;
    EXPECT_EQ(pixel(r.labelled, 32, y0 + h - 1), class_colour(0));
    const Changed right = label_right_of(r, 40);
    EXPECT_EQ(right.y0, y0) << "box top " << top;
    EXPECT_EQ(right.y1, y0 + h) << "box top " << top;
    EXPECT_EQ(right.x1, 30 + font->text_width("person 0.50", px) + 4);
  }
  // Room for the label just above: it goes above, its bottom on the box's top edge.
  const Detection d{{30.0f, static_cast<float>(h), 40.0f, 100.0f}, 0.5f, 0};
  const LabelDraw above = draw_label(200, 150, d, 2, kNames);
  EXPECT_EQ(above.label.y0, 0);
  EXPECT_EQ(above.label.y1, h);
  // At the bottom of the image, a label that must go inside a box too low for it stays inside the image.
  const Detection low{{30.0f, 5.0f, 40.0f, 8.0f}, 0.5f, 0};
  Image tall(200, 8, 3, kGrey);
  draw_detections(tall, std::span(&low, 1), kNames);
  EXPECT_FALSE(is_grey(tall, 100, 0));
  EXPECT_FALSE(is_grey(tall, 100, 7));
}

TEST(AnnotateLabels, MovedLeftAtTheRightEdgeAndCutInSmallImages) {
  REQUIRE_FONT(font);
  const Detection d{{180.0f, 60.0f, 200.0f, 100.0f}, 0.5f, 4};  // "traffic light 0.50" is far wider than 20 px
  LabelDraw r = draw_label(200, 150, d, 2, kNames);
  EXPECT_EQ(r.label.x1, 200);
  EXPECT_EQ(r.label.x1 - r.label.x0, font->text_width("traffic light 0.50", default_font_height(2)) + 4);
  EXPECT_EQ(r.label.y1, 60);
  // An image smaller than the label: the label fills what there is, nothing is written outside.
  for (int64_t channels : {3, 1}) {
    Image tiny(12, 9, channels, kGrey);
    const std::vector<Detection> dets = {{{-5, -5, 20, 20}, 0.5f, 4}, {{3, 4, 6, 6}, 0.5f, 1}};
    DrawOptions o;
    draw_detections(tiny, dets, kNames, o);
    EXPECT_EQ(tiny.pixels.size(), size_t(12 * 9 * channels));
    EXPECT_FALSE(is_grey(tiny, 0, 0));
    EXPECT_FALSE(is_grey(tiny, 11, 8));
  }
}

TEST(AnnotateLabels, FontHeightOption) {
  REQUIRE_FONT(font);
  const Detection d{{50.0f, 60.0f, 150.0f, 130.0f}, 0.87f, 2};
  Image img(200, 150, 3, kGrey);
  DrawOptions o;
  o.line_width = 2;
  o.font_height = -3;
  EXPECT_NE(error_of([&] { draw_detections(img, std::span(&d, 1), kNames, o); }).find("height"), std::string::npos);
  EXPECT_EQ(img, Image(200, 150, 3, kGrey));  // refused before anything was drawn
  // A larger height: a taller label.
  o.font_height = 30;
  o.font = font.get();
  Image big(200, 150, 3, kGrey), boxes(200, 150, 3, kGrey);
  draw_detections(big, std::span(&d, 1), kNames, o);
  draw_detections(boxes, std::span(&d, 1), kNames, boxes_only(2));
  EXPECT_EQ(changed(boxes, big).y0, 60 - (30 + 2));
}

// ---------------------------------------------------------------------------------------------------------------
// The font

TEST(AnnotateFont, WidthsGrowWithTheTextAndScaleWithTheHeight) {
  REQUIRE_FONT(font);
  const float px = 20;
  EXPECT_EQ(font->text_width("", px), 0);
  int64_t previous = 0;
  for (std::string s : {"i", "in", "int", "inte", "integer", "integer 0.87"}) {
    const int64_t w = font->text_width(s, px);
    EXPECT_GT(w, previous) << s;
    previous = w;
  }
  EXPECT_GT(font->text_width("W", px), font->text_width("i", px));
  const int64_t w20 = font->text_width("person 0.87", 20), w40 = font->text_width("person 0.87", 40);
  EXPECT_NEAR(static_cast<double>(w40), 2.0 * static_cast<double>(w20), 2.0);
  EXPECT_EQ(font->line_height(20), 20);
  EXPECT_EQ(font->line_height(17.5f), 18);
  EXPECT_GT(font->baseline(20), 10);
  EXPECT_LT(font->baseline(20), 20);
  // Kerning: "AV" is set tighter than "A" and "V" apart.
  EXPECT_LT(font->text_width("AV", 100), font->text_width("A", 100) + font->text_width("V", 100) - 1);
  // UTF-8: é has e's advance (DejaVu), and a stray byte is U+FFFD, not e.
  EXPECT_EQ(font->text_width("\xC3\xA9", px), font->text_width("e", px));
  EXPECT_EQ(font->text_width("\xC3", px), font->text_width("\xEF\xBF\xBD", px));
  EXPECT_EQ(font->text_width("\xC0\xAF", px), font->text_width("\xEF\xBF\xBD\xEF\xBF\xBD", px));  // overlong '/'
  for (float bad : {0.0f, -1.0f, NAN, 1e6f})
    EXPECT_NE(error_of([&] { (void)font->text_width("x", bad); }).find("height"), std::string::npos) << bad;
}

TEST(AnnotateFont, DrawsAntiAliasedTextWithinItsBox) {
  REQUIRE_FONT(font);
  const float px = 24;
  Image img(160, 40, 3, 255);
  font->draw_text(img, "Hello", 10, 5, px, {0, 0, 0});
  const Changed c = changed(img, Image(160, 40, 3, 255));
  ASSERT_GT(c.count, 50);
  EXPECT_GE(c.x0, 10 - 1);
  EXPECT_LE(c.x1, 10 + font->text_width("Hello", px) + 1);
  EXPECT_GE(c.y0, 5);
  EXPECT_LE(c.y1, 5 + font->line_height(px));
  // Anti-aliased: fully covered pixels (black) and partly covered ones (grey levels) both occur; channels stay equal.
  int64_t black = 0, partial = 0;
  for (int64_t y = 0; y < img.height; ++y) {
    for (int64_t x = 0; x < img.width; ++x) {
      const Rgb p = pixel(img, x, y);
      EXPECT_TRUE(p[0] == p[1] && p[1] == p[2]);
      black += p[0] == 0;
      partial += p[0] > 0 && p[0] < 255;
    }
  }
  EXPECT_GT(black, 20);
  EXPECT_GT(partial, 20);
  // The accent of é draws above the e.
  Image e(40, 40, 1, 255), eacute(40, 40, 1, 255);
  font->draw_text(e, "e", 5, 5, px, {0, 0, 0});
  font->draw_text(eacute, "\xC3\xA9", 5, 5, px, {0, 0, 0});
  EXPECT_LT(changed(eacute, Image(40, 40, 1, 255)).y0, changed(e, Image(40, 40, 1, 255)).y0);
  // Partly or wholly off the image: clipped, no stray writes.
  Image small(20, 10, 3, 255);
  font->draw_text(small, "Hello world", -7, -9, px, {0, 0, 0});
  font->draw_text(small, "Hello world", 15, 6, px, {0, 0, 0});
  font->draw_text(small, "Hello", -1000000, 1000000, px, {0, 0, 0});
  EXPECT_EQ(small.pixels.size(), size_t(20 * 10 * 3));
}

// Big-endian fields of a font file held in a string.
uint32_t be16(const std::string& f, size_t at) { return (uint32_t(uint8_t(f[at])) << 8) | uint8_t(f[at + 1]); }
uint32_t be32(const std::string& f, size_t at) { return (be16(f, at) << 16) | be16(f, at + 2); }
size_t table_offset(const std::string& f, const char* tag) {
  for (size_t i = 0; i < be16(f, 4); ++i) {
    if (f.compare(12 + 16 * i, 4, tag) == 0) return be32(f, 20 + 16 * i);
  }
  return 0;
}
std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

TEST(AnnotateFont, CorruptOrMissingFilesAreErrorsNamingThem) {
  test::TempDir dir;
  auto error_for = [&](const std::string& file, const std::string& bytes) {
    const auto path = dir.path() / file;
    test::write_file(path, bytes);
    return error_of([&] { Font f(path); });
  };
  const std::string missing = error_of([&] { Font f(dir.path() / "nope.ttf"); });
  EXPECT_NE(missing.find("nope.ttf"), std::string::npos) << missing;
  std::string noise(5000, '\0');
  std::mt19937 rng(7);
  for (char& c : noise) c = static_cast<char>(rng());
  for (const auto& [file, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"empty.ttf", ""}, {"noise.ttf", noise}, {"otf.otf", std::string("OTTO") + noise}}) {
    const std::string e = error_for(file, bytes);
    EXPECT_NE(e.find(file), std::string::npos) << e;
    EXPECT_NE(e.find("font"), std::string::npos) << e;
  }
  EXPECT_NE(error_for("cff.otf", std::string("OTTO") + noise).find("CFF"), std::string::npos);

  REQUIRE_FONT(font);
  const std::string good = test::read_file(Font::default_font_path());
  ASSERT_GT(good.size(), 10000u);
  // Truncated anywhere past the header; a required table renamed; a glyph offset past the glyph data.
  const size_t n_tables = be16(good, 4);
  size_t last_end = 0;
  for (size_t i = 0; i < n_tables; ++i)
    last_end = std::max<size_t>(last_end, be32(good, 20 + 16 * i) + be32(good, 24 + 16 * i));
  for (size_t keep : {size_t{11}, size_t{100}, good.size() / 2, last_end - 1}) {
    const std::string e = error_for("cut.ttf", good.substr(0, keep));
    EXPECT_NE(e.find("cut.ttf"), std::string::npos) << keep << ": " << e;
  }
  std::string renamed = good;
  const size_t cmap = renamed.find("cmap");
  ASSERT_NE(cmap, std::string::npos);
  renamed.replace(cmap, 4, "cmaq");
  EXPECT_NE(error_for("renamed.ttf", renamed).find("'cmap'"), std::string::npos);
  // The glyph data ('glyf') said to be 16 bytes long: the glyph index points past it.
  std::string short_glyf = good;
  for (size_t i = 0; i < n_tables; ++i) {
    if (short_glyf.compare(12 + 16 * i, 4, "glyf") == 0)
      short_glyf.replace(24 + 16 * i, 4, std::string("\0\0\0\x10", 4));
  }
  const std::string e = error_for("glyf.ttf", short_glyf);
  EXPECT_NE(e.find("glyf.ttf"), std::string::npos) << e;
  EXPECT_NE(e.find("outside its 'glyf' table"), std::string::npos) << e;
  // The intact file loads.
  EXPECT_EQ(error_for("good.ttf", good), "(no error)");
}

TEST(AnnotateFont, BothCharacterMapFormatsAgree) {
  REQUIRE_FONT(font);
  const std::string good = test::read_file(Font::default_font_path());
  // DejaVu has Unicode maps in format 12 (preferred) and 4: hide the format 12 ones (their platform set to 99) and
  // the format 4 map is read instead. Every character of the BMP must map to the same glyph either way.
  std::string bmp_only = good;
  const size_t cmap = table_offset(good, "cmap");
  ASSERT_NE(cmap, 0u);
  int hidden = 0;
  for (size_t i = 0; i < be16(good, cmap + 2); ++i) {
    const size_t rec = cmap + 4 + 8 * i;
    if (be16(good, cmap + be32(good, rec + 4)) == 12) bmp_only[rec] = 0, bmp_only[rec + 1] = 99, ++hidden;
  }
  if (hidden == 0) VISION_SKIP_OR_FAIL("the font has no format 12 character map to compare with");
  const Font format12(bytes_of(good), "format 12"), format4(bytes_of(bmp_only), "format 4");
  const std::string text =
      " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~"
      "\xC3\xA9\xC3\x9F\xC3\xB1 \xCE\xB1\xCE\xB2\xCE\xB3 \xD0\x9F\xD1\x80\xD0\xB8 \xE2\x82\xAC \xE2\x86\x92";
  Image a(1400, 30, 1, 255), b(1400, 30, 1, 255);
  format12.draw_text(a, text, 2, 2, 20, {0, 0, 0});
  format4.draw_text(b, text, 2, 2, 20, {0, 0, 0});
  EXPECT_EQ(a, b);
  EXPECT_EQ(format12.text_width(text, 20), format4.text_width(text, 20));
  EXPECT_GT(format12.text_width(text, 20), 1000);
  // A character DejaVu lacks (U+4E00) is the missing-glyph box in both, unlike a character it has.
  EXPECT_EQ(format12.text_width("\xE4\xB8\x80", 50), format4.text_width("\xE4\xB8\x80", 50));
  EXPECT_NE(format12.text_width("\xE4\xB8\x80", 50), format12.text_width("\xE2\x82\xAC", 50));
}

// Fonts damaged at random: each is refused with an error or, when the damage passed the checks (a changed coordinate
// or metric, say), draws without reading outside the file. A crash here (or an AddressSanitizer report in the
// sanitizer build) is the failure.
TEST(AnnotateFont, DamagedFontsAreRefusedOrDrawSafely) {
  REQUIRE_FONT(font);
  const std::string good = test::read_file(Font::default_font_path());
  const uint64_t seed = test::rng()();
  std::printf("damaged-font seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int refused = 0, loaded = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = good;
    // Half the trials damage the first 4 KiB (the table directory and the small tables), half anywhere.
    const size_t span = trial % 2 ? bad.size() : std::min<size_t>(4096, bad.size());
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) bad[rng() % span] = static_cast<char>(rng());
    try {
      const Font f(bytes_of(bad), "damaged.ttf");
      Image img(300, 40, 3, 128);
      f.draw_text(img, "AVg \xC3\xA9 0.87 \xD0\x9F\xD1\x80\xD0\xB8 \xE2\x82\xAC", 3, 3, 24, {255, 255, 255});
      (void)f.text_width("person 0.87", 20);
      ++loaded;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("damaged.ttf"), std::string::npos) << e.what();
      ++refused;
    }
  }
  std::printf("damaged fonts: %d refused, %d loaded and drawn\n", refused, loaded);
  EXPECT_GT(refused, 0);
}

TEST(AnnotateFont, VisionFontChoosesTheFile) {
  REQUIRE_FONT(font);
  const auto bold = Font::default_font_path().parent_path() / "DejaVuSans-Bold.ttf";
  test::TempDir dir;
  {
    // An explicit file that is corrupt: an error naming it, when drawing labels too.
    const auto path = dir.path() / "broken.ttf";
    test::write_file(path, "not a font at all");
    ScopedEnv env("VISION_FONT", path.string());
    EXPECT_EQ(Font::default_font_path(), path);
    const std::string e = error_of([] { (void)Font::default_font(); });
    EXPECT_NE(e.find("broken.ttf"), std::string::npos) << e;
    EXPECT_NE(e.find("VISION_FONT"), std::string::npos) << e;
    Image img(50, 50, 3, kGrey);
    const Detection d{{10, 10, 40, 40}, 0.5f, 0};
    EXPECT_NE(error_of([&] { draw_detections(img, std::span(&d, 1), kNames); }).find("broken.ttf"), std::string::npos);
  }
  if (!std::filesystem::exists(bold)) return;
  ScopedEnv env("VISION_FONT", bold.string());
  auto chosen = Font::default_font();
  ASSERT_TRUE(chosen);
  EXPECT_EQ(chosen->name(), bold.string());
  EXPECT_EQ(Font::default_font(), chosen);                                                // loaded once
  EXPECT_NE(chosen->text_width("person 0.87", 20), font->text_width("person 0.87", 20));  // bold is wider
}

// ---------------------------------------------------------------------------------------------------------------
// YOLO label lines and JSON

TEST(AnnotateOutput, YoloLabelLinesByHand) {
  const std::vector<Detection> dets = {
      // (100, 50)–(300, 250) in 640×480: cx 200/640, cy 150/480, w 200/640, h 200/480 = 0.4166…
      {{100, 50, 300, 250}, 0.875f, 3},
      // Clipped to x 0..640, y 470..480: cx 0.5, cy 475/480 = 0.98958…, w 1, h 10/480 = 0.020833…
      {{-10, 470, 650, 500}, 0.25f, 0},
      {{NAN, 1, 2, 3}, 0.5f, 1},  // left out
      // Corners swapped: the same box as (10, 20)–(74, 68): cx 42/640 = 0.065625, cy 44/480, w 0.1, h 0.1
      {{74, 68, 10, 20}, 0.5f, 12},
  };
  EXPECT_EQ(yolo_label_lines(dets, 640, 480, false),
            "3 0.312500 0.312500 0.312500 0.416667\n"
            "0 0.500000 0.989583 1.000000 0.020833\n"
            "12 0.065625 0.091667 0.100000 0.100000\n");
  EXPECT_EQ(yolo_label_lines(dets, 640, 480, true),
            "3 0.312500 0.312500 0.312500 0.416667 0.875000\n"
            "0 0.500000 0.989583 1.000000 0.020833 0.250000\n"
            "12 0.065625 0.091667 0.100000 0.100000 0.500000\n");
  EXPECT_EQ(yolo_label_lines({}, 640, 480, true), "");
  EXPECT_NE(error_of([&] { (void)yolo_label_lines(dets, 0, 480, false); }).find("positive"), std::string::npos);
}

TEST(AnnotateOutput, JsonFieldsAndRoundTrip) {
  const std::vector<Detection> two = {{{10.25f, 20.5f, 30.75f, 40.0f}, 0.87f, 2}, {{1, 2, 3, 4}, 0.5f, 9}};
  const nlohmann::json j = detections_json(two, kNames);
  EXPECT_EQ(j.dump(),
            R"([{"box":{"x1":10.25,"x2":30.75,"y1":20.5,"y2":40.0},"class":2,"confidence":0.87,"name":"dog"},)"
            R"({"box":{"x1":1.0,"x2":3.0,"y1":2.0,"y2":4.0},"class":9,"confidence":0.5,"name":"9"}])");
  EXPECT_EQ(detections_json({}, kNames).dump(), "[]");

  // Random floats survive dump → parse → detections_from_json bit for bit.
  std::uniform_real_distribution<float> coord(-50.0f, 2000.0f), score(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> cls(0, 200);
  std::vector<Detection> dets(64);
  for (auto& d : dets)
    d = {{coord(test::rng()), coord(test::rng()), coord(test::rng()), coord(test::rng())},
         score(test::rng()),
         cls(test::rng())};
  const std::vector<Detection> back = detections_from_json(nlohmann::json::parse(detections_json(dets, kNames).dump()));
  ASSERT_EQ(back.size(), dets.size());
  for (size_t i = 0; i < dets.size(); ++i) {
    EXPECT_EQ(back[i].cls, dets[i].cls) << i;
    EXPECT_EQ(back[i].score, dets[i].score) << i;
    EXPECT_EQ(back[i].box, dets[i].box) << i;
  }

  // Malformed input says which item and field.
  auto error_for = [](const char* text) {
    return error_of([&] { (void)detections_from_json(nlohmann::json::parse(text)); });
  };
  EXPECT_NE(error_for(R"({"class": 1})").find("array"), std::string::npos);
  EXPECT_NE(error_for(R"([{"class": 1, "confidence": 0.5}])").find("item 0 has no \"box\""), std::string::npos);
  EXPECT_NE(error_for(R"([{"class": 1.5, "confidence": 0.5, "box": {}}])").find("integer"), std::string::npos);
  const std::string e =
      error_for(R"([{"class": 1, "confidence": 0.5, "box": {"x1": 0, "y1": 0, "x2": "3", "y2": 4}}])");
  EXPECT_NE(e.find("box.x2"), std::string::npos) << e;
}

}  // namespace
}  // namespace vision::data

namespace vision::data {
namespace {

bool painted(const Image& im, int64_t x, int64_t y, Rgb c) {
  const uint8_t* p = im.at(x, y);
  return p[0] == c[0] && p[1] == c[1] && p[2] == c[2];
}

// draw_polyline (vision track's trails): a 3-pixel line through two segments covers the pixels along them and nothing
// more than 2 pixels away; a single point is one square; points far outside the image, non-finite points and a
// 4-channel image are handled (clipped, skipped, refused) without drawing out of bounds.
TEST(AnnotatePolyline, DrawsAlongTheSegmentsOnly) {
  const Rgb red{255, 0, 0};
  Image im(60, 40, 3, 0);
  const std::vector<std::array<float, 2>> pts = {{5, 5}, {45, 5}, {45, 30}};
  draw_polyline(im, pts, red, 3);
  for (int64_t x = 5; x <= 45; ++x) EXPECT_TRUE(painted(im, x, 5, red)) << x;
  for (int64_t y = 5; y <= 30; ++y) EXPECT_TRUE(painted(im, 45, y, red)) << y;
  int64_t on = 0;
  for (int64_t y = 0; y < im.height; ++y)
    for (int64_t x = 0; x < im.width; ++x) {
      if (!painted(im, x, y, red)) continue;
      ++on;
      const bool near_first = x >= 3 && x <= 47 && y >= 3 && y <= 7;
      const bool near_second = x >= 43 && x <= 47 && y >= 3 && y <= 32;
      EXPECT_TRUE(near_first || near_second) << x << "," << y;
    }
  EXPECT_GE(on, 3 * 41 + 3 * 25 - 9);

  Image dot(10, 10, 1, 0);
  const std::vector<std::array<float, 2>> one = {{4.5f, 4.5f}};
  draw_polyline(dot, one, red, 2);
  EXPECT_EQ(std::count_if(dot.pixels.begin(), dot.pixels.end(), [](uint8_t v) { return v != 0; }), 4);

  Image clipped(20, 20, 3, 0);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::array<float, 2>> wild = {{-1e5f, 10}, {1e5f, 10}, {nan, 3}, {5, inf}, {-50, -50}, {-40, -60},
                                                  {-1e30f, 10}, {1e30f, 10}};
  draw_polyline(clipped, wild, red, 1);  // only the horizontal lines through y = 10 reach the image
  for (int64_t x = 0; x < 20; ++x) EXPECT_TRUE(painted(clipped, x, 10, red)) << x;
  int64_t clipped_on = 0;
  for (int64_t y = 0; y < 20; ++y)
    for (int64_t x = 0; x < 20; ++x) clipped_on += painted(clipped, x, y, red);
  EXPECT_EQ(clipped_on, 20);

  Image rgba(8, 8, 4, 0);
  EXPECT_THROW(draw_polyline(rgba, pts, red, 1), Error);
}

}  // namespace
}  // namespace vision::data
