// Font — a TrueType font read through stb_truetype: UTF-8 text measured and drawn anti-aliased (glyph coverage
// alpha-blended, kerning applied, positioned to a subpixel) into an Image at a given pixel height.
//
// stb_truetype trusts the file; this class does not: when a font is loaded, everything that will be read of it is
// checked to lie inside the file — the table directory, the metrics, every glyph's outline and the composite glyphs
// it uses, the Unicode character map (format 4 or 12, looked up here rather than by stb_truetype), the kerning
// tables — so that a truncated or corrupt font is a vision::Error naming the file, not a crash while drawing.
// Fonts with TrueType outlines only (.ttf; not CFF-based .otf).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "vision/data/image.h"

namespace vision::data {

using Rgb = std::array<uint8_t, 3>;

// The grey level of an RGB colour (ITU-R BT.601 luma, as 1-channel images show colours).
uint8_t grey_of(Rgb colour);

class Font {
 public:
  // The TrueType (.ttf, .otf) file at `path`; a missing, unreadable, truncated or corrupt file is a vision::Error
  // naming it.
  explicit Font(const std::filesystem::path& path);
  // The font file held in `bytes`; `name` (a path) is what errors call it.
  Font(std::vector<uint8_t> bytes, const std::string& name);

  // The file default_font() loads: the one the environment variable VISION_FONT names when it is set (not empty),
  // else the first of DejaVuSans.ttf and DejaVuSans-Bold.ttf found in /usr/share/fonts/truetype/dejavu (Debian's
  // fonts-dejavu-core) or the other usual font folders; empty when there is none.
  static std::filesystem::path default_font_path();
  // The font of default_font_path(), loaded once per path and shared; nullptr when no font is found. A font that
  // VISION_FONT names but that cannot be loaded is a vision::Error.
  static std::shared_ptr<const Font> default_font();

  // The file (or name) the font was loaded from.
  const std::string& name() const;

  // pixel_height is the height of a line, from the font's ascent to its descent (stb_truetype's
  // ScaleForPixelHeight): a number of pixels in (0, 4096]; anything else is a vision::Error.
  // Rows a line of text occupies: ceil(pixel_height).
  int64_t line_height(float pixel_height) const;
  // Rows from the top of a line to its baseline.
  int64_t baseline(float pixel_height) const;
  // The width in pixels of UTF-8 `text` (the glyphs' advances with kerning, rounded up); malformed UTF-8 bytes count
  // as U+FFFD.
  int64_t text_width(std::string_view text, float pixel_height) const;
  // Draws UTF-8 `text` in `colour` (its grey_of in a 1-channel image) with the top-left corner of its line at (x, y):
  // each pixel blended with the colour by the glyph's coverage, pixels outside the image left out. Images of 1 or 3
  // channels; others are a vision::Error.
  void draw_text(Image& image, std::string_view text, int64_t x, int64_t y, float pixel_height, Rgb colour) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace vision::data
