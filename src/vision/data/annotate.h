// Annotation — what `vision predict` writes for its detections: the image with a box and a label per detection (a
// colour per class, "name 0.87" drawn with a TrueType font), YOLO-format label lines (--save-txt) and JSON.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "vision/data/detection.h"
#include "vision/data/font.h"
#include "vision/data/image.h"

namespace vision::data {

// ---------------------------------------------------------------------------------------------------------------
// Drawing

// The number of colours in the class palette; class k gets colour k mod kPaletteSize.
inline constexpr int64_t kPaletteSize = 24;
// The colour of class `cls` (negative classes are taken by their magnitude).
Rgb class_colour(int64_t cls);
// White or black, whichever contrasts more (WCAG contrast ratio of relative luminances) with `background`.
Rgb contrasting_text_colour(Rgb background);

// The box outline's width for an image of width × height: max(round((width + height) / 2 × 0.003), 2) pixels.
int64_t default_line_width(int64_t width, int64_t height);
// The label text's pixel height (Font::line_height) for a box outline width: max(9 × line_width, 12).
float default_font_height(int64_t line_width);

// A detection's label: the class name (names[cls]; the class number when names has none) and, with `with_score`,
// the score with two decimals: "person 0.87".
std::string detection_label(const Detection& detection, std::span<const std::string> names, bool with_score = true);

struct DrawOptions {
  int64_t line_width = 0;      // the box outline's width in pixels; 0: default_line_width of the image
  float font_height = 0;       // the label's text height in pixels; 0: default_font_height of the line width
  bool labels = true;          // false: boxes alone
  bool show_score = true;      // the score after the class name
  const Font* font = nullptr;  // nullptr: Font::default_font(); when no font is found, boxes alone (one warning)
};

// Draws each detection onto `image` (1 or 3 channels; others are a vision::Error) in its class colour: first every
// box, then every label, in the order given.
//
// Box: the box's corners are clipped to the image and rounded to pixel edges (x1 = 10.4, x2 = 20.6 → columns
// 10..20); the outline is the band of line_width pixels just inside those edges (all of the box when it is narrower
// than two widths). A box wholly outside the image, or with a coordinate that is not finite, is not drawn.
// Label: a rectangle filled with the class colour, text_width + 2 × line_width wide and line_height + 2 ×
// max(line_width / 2, 1) high, with its left edge at the box's (moved left to stay inside the image), sitting on the
// box's top edge; when there is no room above the box, it is drawn inside the box, at its top. The text is drawn in
// contrasting_text_colour of the label's colour (in a 1-channel image, of its grey). Labels wider or higher than the
// image are cut at its edges.
void draw_detections(Image& image, std::span<const Detection> detections, std::span<const std::string> names,
                     const DrawOptions& options = {});

// Draws the polyline through `points` (x, y in pixels) onto `image` (1 or 3 channels) in `colour`, `line_width` pixels
// wide (0: default_line_width of the image): a square of that side centred on every point of each segment, at most
// half a pixel apart, clipped to the image. Segments with a coordinate that is not finite are skipped; a single point
// is one square. `vision track --save` draws each track's recent centres with it (its trail).
void draw_polyline(Image& image, std::span<const std::array<float, 2>> points, Rgb colour, int64_t line_width = 0);

// ---------------------------------------------------------------------------------------------------------------
// Text and JSON output

// YOLO-format label lines of the detections in an image of width × height, one per detection:
// "cls cx cy w h" (with_conf: then " conf"), the box clipped to the image and normalised by its size, every number
// with 6 decimals, each line ending in '\n'. Detections with a non-finite box are left out. width and height must be
// positive.
std::string yolo_label_lines(std::span<const Detection> detections, int64_t width, int64_t height, bool with_conf);

// The detections as a JSON array of {"class": cls, "name": detection_label's name, "confidence": score,
// "box": {"x1", "y1", "x2", "y2"}}; numbers as the shortest decimals that read back as the same floats.
nlohmann::json detections_json(std::span<const Detection> detections, std::span<const std::string> names);
// The detections of detections_json's array (names are not checked); anything else is a vision::Error saying which
// item and field is wrong.
std::vector<Detection> detections_from_json(const nlohmann::json& json);

}  // namespace vision::data
