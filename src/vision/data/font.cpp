#include "vision/data/font.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>

#include "vision/core/error.h"

// stb_truetype's implementation, compiled here alone; its functions are static to this file (STBTT_STATIC), so they
// cannot clash with another copy (Debian's libstb, say) in the same program.
#define STB_TRUETYPE_IMPLEMENTATION
#define STBTT_STATIC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#include <stb/stb_truetype.h>
#pragma GCC diagnostic pop

namespace vision::data {

uint8_t grey_of(Rgb c) { return static_cast<uint8_t>((299 * c[0] + 587 * c[1] + 114 * c[2] + 500) / 1000); }

namespace {

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 | static_cast<uint32_t>(p[2]) << 8 |
         p[3];
}
uint32_t tag_of(const char* t) { return u32(reinterpret_cast<const uint8_t*>(t)); }

// Where a font's data lies in its file and how code points map to glyphs: what FontChecker found.
struct FontLayout {
  int start = 0;  // the table directory's offset (non-zero in a collection)
  uint64_t n_glyphs = 0;
  uint64_t cmap = 0;         // the offset of the Unicode character map subtable used (format 4 or 12)
  uint64_t cmap_length = 0;  // its length in bytes, all inside the file
  int cmap_format = 0;
};

// Checks a font file (the first font of a collection) as far as this file and stb_truetype read it, so that a
// truncated or corrupt file is an error here instead of reads past its end later. stb_truetype checks few bounds
// itself; this covers the table directory; 'head', 'hhea', 'maxp' and 'hmtx'; every glyph's outline in 'glyf' as
// loca locates it (contour ends, instructions, flags and coordinates; composite records, the glyphs they use, no
// cycles and at most kMaxComposite levels); the Unicode character map this file reads (format 4 or 12; stb's own
// lookup is not used); and the kerning data stb_truetype reads ('kern' format 0, GPOS pair adjustments).
class FontChecker {
 public:
  FontChecker(const std::vector<uint8_t>& data, const std::string& name) : d_(data), name_(name) {}

  FontLayout check() {
    FontLayout layout;
    const uint64_t size = d_.size();
    if (size < 12) throw bad(fmt::format("is not a TrueType font (only {} bytes)", size));
    if (size > (uint64_t{1} << 30)) throw bad(fmt::format("is {} bytes, too large for a font", size));
    uint64_t start = 0;
    if (u32(at(0)) == tag_of("ttcf")) {  // a collection: its first font
      if (size < 16 || u32(at(8)) < 1) throw bad("is a font collection with no fonts");
      start = u32(at(12));
      if (start + 12 > size) throw bad("is a truncated font collection");
    }
    const uint32_t version = u32(at(start));
    if (version == tag_of("OTTO"))
      throw bad("has CFF (PostScript) outlines, which are not supported; use a font with TrueType outlines");
    if (version != 0x00010000u && version != tag_of("true"))
      throw bad(fmt::format("is not a TrueType font (it starts with the bytes {:02x} {:02x} {:02x} {:02x})", d_[start],
                            d_[start + 1], d_[start + 2], d_[start + 3]));
    const uint64_t n_tables = u16(at(start + 4));
    if (start + 12 + 16 * n_tables > size) throw bad("is truncated (its table directory runs past the end)");
    for (uint64_t i = 0; i < n_tables; ++i) {
      const uint8_t* rec = at(start + 12 + 16 * i);
      const Table t{u32(rec + 8), u32(rec + 12)};
      if (t.offset + t.length > size) {
        throw bad(fmt::format("is truncated or corrupt (table '{}' at bytes {}..{} lies past the end, {} bytes)",
                              std::string(reinterpret_cast<const char*>(rec), 4), t.offset, t.offset + t.length, size));
      }
      tables_.emplace(u32(rec), t);
    }
    layout.start = static_cast<int>(start);

    const Table head = table("head", 54), hhea = table("hhea", 36), maxp = table("maxp", 6);
    const Table hmtx = table("hmtx", 0), loca = table("loca", 0);
    glyf_ = table("glyf", 0);
    n_glyphs_ = u16(at(maxp.offset + 4));
    if (n_glyphs_ == 0) throw bad("has no glyphs");
    layout.n_glyphs = n_glyphs_;
    // Horizontal metrics: numberOfHMetrics (advance, lsb) pairs, then one lsb per remaining glyph.
    const uint64_t n_long = u16(at(hhea.offset + 34));
    if (n_long == 0 || n_long > n_glyphs_ || hmtx.length < 4 * n_long + 2 * (n_glyphs_ - n_long))
      throw bad("is corrupt (its horizontal metrics do not cover its glyphs)");
    // The glyph index: numGlyphs + 1 offsets (16-bit halves or 32-bit) into 'glyf'.
    const int loca_format = static_cast<int16_t>(u16(at(head.offset + 50)));
    if (loca_format != 0 && loca_format != 1) throw bad("is corrupt (unknown glyph index format in 'head')");
    const uint64_t entry = loca_format == 0 ? 2 : 4;
    if (loca.length < (n_glyphs_ + 1) * entry) throw bad("is truncated or corrupt (its glyph index is too short)");
    glyph_start_.resize(n_glyphs_ + 1);
    for (uint64_t g = 0; g <= n_glyphs_; ++g) {
      const uint8_t* p = at(loca.offset + g * entry);
      glyph_start_[g] = loca_format == 0 ? uint64_t{u16(p)} * 2 : u32(p);
    }
    state_.assign(n_glyphs_, 0);
    for (uint64_t g = 0; g < n_glyphs_; ++g) check_glyph(g, 0);

    check_cmap(table("cmap", 4), layout);
    if (auto it = tables_.find(tag_of("kern")); it != tables_.end()) check_kern(it->second);
    if (auto it = tables_.find(tag_of("GPOS")); it != tables_.end()) check_gpos(it->second);
    return layout;
  }

 private:
  struct Table {
    uint64_t offset = 0, length = 0;
  };
  static constexpr int kMaxComposite = 16;  // nesting levels of composite glyphs

  const uint8_t* at(uint64_t offset) const { return d_.data() + offset; }
  Error bad(const std::string& why) const {
    return Error(
        fmt::format("font {}: {}; give a TrueType (.ttf) file such as DejaVuSans.ttf (Debian's "
                    "fonts-dejavu-core)",
                    name_, why));
  }
  Table table(const char* tag, uint64_t min_length) const {
    auto it = tables_.find(tag_of(tag));
    if (it == tables_.end()) throw bad(fmt::format("has no '{}' table", tag));
    if (it->second.length < min_length)
      throw bad(
          fmt::format("is corrupt (its '{}' table is {} bytes, less than {})", tag, it->second.length, min_length));
    return it->second;
  }

  // Glyph g's outline, as stb_truetype's GetGlyphShapeTT reads it.
  void check_glyph(uint64_t g, int depth) {
    if (state_[g] == 2) return;
    if (state_[g] == 1) throw bad(fmt::format("is corrupt (composite glyph {} contains itself)", g));
    if (depth > kMaxComposite) throw bad(fmt::format("has composite glyphs nested over {} deep", kMaxComposite));
    const uint64_t a = glyph_start_[g], b = glyph_start_[g + 1];
    auto outside = [&] {
      return bad(fmt::format("is truncated or corrupt (glyph {} lies outside its 'glyf' table)", g));
    };
    if (b > glyf_.length || a > b) throw outside();
    state_[g] = 1;
    const uint64_t length = b - a;
    const uint8_t* p = at(glyf_.offset + a);
    auto need = [&](uint64_t n) {
      if (n > length) throw outside();
    };
    if (length > 0) {
      need(10);
      const int contours = static_cast<int16_t>(u16(p));
      if (contours > 0) {
        const uint64_t nc = static_cast<uint64_t>(contours);
        need(10 + 2 * nc + 2);
        int64_t previous = -1;
        std::vector<uint64_t> ends(nc);
        for (uint64_t j = 0; j < nc; ++j) {
          const int64_t e = u16(p + 10 + 2 * j);
          if (e <= previous) throw bad(fmt::format("is corrupt (glyph {}'s contour ends are out of order)", g));
          ends[j] = static_cast<uint64_t>(e);
          previous = e;
        }
        const uint64_t n = ends.back() + 1;
        uint64_t q = 10 + 2 * nc + 2 + u16(p + 10 + 2 * nc);  // after the instructions
        std::vector<uint8_t> flags(n);
        for (uint64_t i = 0; i < n;) {
          need(q + 1);
          const uint8_t f = p[q++];
          uint64_t repeat = 0;
          if (f & 8) need(q + 1), repeat = p[q++];
          for (uint64_t k = 0; k <= repeat && i < n; ++k) flags[i++] = f;
        }
        uint64_t coords = 0;
        for (uint8_t f : flags) coords += ((f & 2) ? 1 : (f & 16) ? 0 : 2) + ((f & 4) ? 1 : (f & 32) ? 0 : 2);
        need(q + coords);
        // stb_truetype reads the point after a contour's first when that one is off the curve: a contour of one
        // such point would read past the last.
        for (uint64_t j = 0; j < nc; ++j) {
          const uint64_t first = j == 0 ? 0 : ends[j - 1] + 1;
          if (first == ends[j] && !(flags[first] & 1))
            throw bad(fmt::format("is corrupt (glyph {} has a contour of one off-curve point)", g));
        }
      } else if (contours < 0) {
        uint64_t q = 10;
        for (bool more = true; more;) {
          need(q + 4);
          const uint16_t f = u16(p + q);
          const uint64_t part = u16(p + q + 2);
          q += 4;
          if (!(f & 2)) throw bad(fmt::format("has a composite glyph ({}) placed by matching points, unsupported", g));
          q += (f & 1) ? 4 : 2;
          q += (f & 8) ? 2 : (f & 64) ? 4 : (f & 128) ? 8 : 0;
          need(q);
          if (part >= n_glyphs_)
            throw bad(fmt::format("is corrupt (glyph {} uses glyph {}, which does not exist)", g, part));
          check_glyph(part, depth + 1);
          more = f & 32;
        }
      }
    }
    state_[g] = 2;
  }

  // The Unicode character map used for lookups: Windows full Unicode (3, 10) or Unicode full repertoire (0, 4/6) in
  // format 12, else Windows BMP (3, 1) or Unicode (0, 0–3) in format 4.
  void check_cmap(const Table& cmap, FontLayout& layout) const {
    const uint64_t n_maps = u16(at(cmap.offset + 2));
    if (cmap.length < 4 + 8 * n_maps) throw bad("is corrupt (its 'cmap' table is too short)");
    int best = 0;
    for (uint64_t i = 0; i < n_maps; ++i) {
      const uint8_t* rec = at(cmap.offset + 4 + 8 * i);
      const uint16_t platform = u16(rec), encoding = u16(rec + 2);
      const uint64_t sub = u32(rec + 4);
      if (sub + 8 > cmap.length) throw bad("is corrupt (a character map lies outside its 'cmap' table)");
      const uint16_t format = u16(at(cmap.offset + sub));
      int rank = 0;
      if (format == 12 && ((platform == 3 && encoding == 10) || (platform == 0 && (encoding == 4 || encoding == 6))))
        rank = 2;
      else if (format == 4 && ((platform == 3 && encoding == 1) || (platform == 0 && encoding <= 3)))
        rank = 1;
      if (rank <= best) continue;
      const uint8_t* s = at(cmap.offset + sub);
      const uint64_t length = format == 4 ? u16(s + 2) : u32(s + 4);
      if (sub + length > cmap.length || length < 16)
        throw bad("is corrupt (a Unicode character map runs past its 'cmap' table)");
      const uint64_t needed = format == 4 ? 16 + 8 * uint64_t{u16(s + 6) / 2u} : 16 + 12 * uint64_t{u32(s + 12)};
      if (needed > length) throw bad("is corrupt (a Unicode character map runs past its own end)");
      if (format == 4 && u16(s + 6) < 2) throw bad("is corrupt (a character map of no segments)");
      best = rank;
      layout.cmap = cmap.offset + sub;
      layout.cmap_length = length;
      layout.cmap_format = format;
    }
    if (best == 0) throw bad("has no Unicode character map (format 4 or 12)");
  }

  // 'kern' as stb_truetype reads it: the first subtable's pairs, when it is horizontal format 0.
  void check_kern(const Table& kern) const {
    if (kern.length < 4) throw bad("is corrupt (its 'kern' table is too short)");
    if (u16(at(kern.offset + 2)) < 1) return;
    if (kern.length < 18) throw bad("is corrupt (its 'kern' table is too short)");
    if (u16(at(kern.offset + 8)) != 1) return;
    if (18 + 6 * uint64_t{u16(at(kern.offset + 10))} > kern.length)
      throw bad("is corrupt (its kerning pairs run past the 'kern' table)");
  }

  // GPOS as stb_truetype reads it: pair adjustment lookups (type 2) in format 1 (glyph pairs) and 2 (class pairs)
  // with x advances alone, their coverage and class definitions.
  void check_gpos(const Table& gpos) const {
    auto need = [&](uint64_t end) {
      if (end > gpos.length) throw bad("is corrupt (its 'GPOS' kerning data runs past the table)");
    };
    auto r16 = [&](uint64_t off) {
      need(off + 2);
      return uint64_t{u16(at(gpos.offset + off))};
    };
    if (r16(0) != 1 || r16(2) != 0) return;  // not version 1.0: stb_truetype reads nothing further
    const uint64_t list = r16(8), n_lookups = r16(list);
    for (uint64_t i = 0; i < n_lookups; ++i) {
      const uint64_t lookup = list + r16(list + 2 + 2 * i);
      if (r16(lookup) != 2) continue;
      const uint64_t n_sub = r16(lookup + 4);
      for (uint64_t k = 0; k < n_sub; ++k) {
        const uint64_t sub = lookup + r16(lookup + 6 + 2 * k);
        const uint64_t pos_format = r16(sub), coverage = sub + r16(sub + 2);
        // The largest coverage index a glyph can get (stb_truetype reads nothing more of other coverage formats).
        int64_t max_index = -1;
        const uint64_t cov_format = r16(coverage), count = r16(coverage + 2);
        if (cov_format == 1) {
          need(coverage + 4 + 2 * count);
          max_index = static_cast<int64_t>(count) - 1;
        } else if (cov_format == 2) {
          need(coverage + 4 + 6 * count);
          for (uint64_t r = 0; r < count; ++r) {
            const uint64_t rec = coverage + 4 + 6 * r, first = r16(rec), last = r16(rec + 2);
            if (last >= first)
              max_index = std::max<int64_t>(max_index, static_cast<int64_t>(r16(rec + 4) + last - first));
          }
        }
        if (max_index < 0) continue;
        if (r16(sub + 4) != 4 || r16(sub + 6) != 0) continue;  // value formats stb_truetype does not read
        if (pos_format == 1) {
          // stb_truetype reads a pair set's offset and count for any coverage index, its pairs below the count.
          const uint64_t n_sets = r16(sub + 8);
          for (uint64_t c = 0; c <= static_cast<uint64_t>(max_index); ++c) {
            const uint64_t set = sub + r16(sub + 10 + 2 * c), n_pairs = r16(set);
            if (c < n_sets) need(set + 2 + 4 * n_pairs);
          }
        } else if (pos_format == 2) {
          for (uint64_t def : {sub + r16(sub + 8), sub + r16(sub + 10)}) {
            const uint64_t def_format = r16(def);
            if (def_format == 1) need(def + 6 + 2 * r16(def + 4));
            if (def_format == 2) need(def + 4 + 6 * r16(def + 2));
          }
          need(sub + 16 + 2 * r16(sub + 12) * r16(sub + 14));
        }
      }
    }
  }

  const std::vector<uint8_t>& d_;
  const std::string& name_;
  std::map<uint32_t, Table> tables_;
  Table glyf_;
  uint64_t n_glyphs_ = 0;
  std::vector<uint64_t> glyph_start_;
  std::vector<uint8_t> state_;  // per glyph: 0 not checked, 1 being checked (its components), 2 checked
};

// The code points of UTF-8 text; a malformed sequence (a stray continuation byte, a truncated or overlong sequence,
// a surrogate, a value above U+10FFFF) becomes U+FFFD and decoding resumes at the next byte.
std::vector<char32_t> decode_utf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    int n = 0;
    char32_t cp = 0, min = 0;
    if (b0 < 0x80) {
      out.push_back(b0), ++i;
      continue;
    } else if ((b0 & 0xE0) == 0xC0) {
      n = 1, cp = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      n = 2, cp = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      n = 3, cp = b0 & 0x07, min = 0x10000;
    } else {
      out.push_back(0xFFFD), ++i;
      continue;
    }
    bool ok = i + static_cast<size_t>(n) < s.size();  // all n continuation bytes present
    for (int k = 1; ok && k <= n; ++k) {
      const auto b = static_cast<uint8_t>(s[i + static_cast<size_t>(k)]);
      if ((b & 0xC0) != 0x80) ok = false;
      cp = cp << 6 | (b & 0x3F);
    }
    if (!ok || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      out.push_back(0xFFFD), ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<size_t>(n) + 1;
  }
  return out;
}

std::vector<uint8_t> read_font_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail("font {}: no such file; install fonts-dejavu-core or give the path of a TrueType (.ttf) file", path.string());
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("font {}: cannot be opened ({})", path.string(), std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) fail("font {}: cannot be read ({})", path.string(), std::strerror(errno));
  return bytes;
}

}  // namespace

struct Font::Impl {
  std::string name;
  std::vector<uint8_t> data;  // what info points into: never resized after stbtt_InitFont
  FontLayout layout;
  stbtt_fontinfo info{};
  int ascent = 0, descent = 0;  // font units

  // The glyph of a code point through the checked character map (0, the missing-glyph box, when there is none).
  int glyph(char32_t cp) const {
    const uint8_t* s = data.data() + layout.cmap;
    uint64_t g = 0;
    if (layout.cmap_format == 4) {
      if (cp > 0xFFFF) return 0;
      // Segments sorted by their last code: endCode[n], a pad, startCode[n], idDelta[n], idRangeOffset[n].
      const uint64_t n = u16(s + 6) / 2u;
      uint64_t lo = 0, hi = n;
      while (lo < hi) {
        const uint64_t mid = (lo + hi) / 2;
        if (u16(s + 14 + 2 * mid) < cp)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo == n || cp < u16(s + 16 + 2 * n + 2 * lo)) return 0;
      const uint64_t first = u16(s + 16 + 2 * n + 2 * lo), delta = u16(s + 16 + 4 * n + 2 * lo);
      const uint64_t range_at = 16 + 6 * n + 2 * lo, range = u16(s + range_at);
      if (range == 0) {
        g = (cp + delta) & 0xFFFF;
      } else {
        const uint64_t at = range_at + range + 2 * (cp - first);
        if (at + 2 > layout.cmap_length) return 0;
        g = u16(s + at);
        if (g != 0) g = (g + delta) & 0xFFFF;
      }
    } else {  // format 12: groups of (first code, last code, first glyph), sorted
      const uint64_t n = u32(s + 12);
      uint64_t lo = 0, hi = n;
      while (lo < hi) {
        const uint64_t mid = (lo + hi) / 2;
        if (u32(s + 16 + 12 * mid + 4) < cp)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo == n || cp < u32(s + 16 + 12 * lo)) return 0;
      g = uint64_t{u32(s + 16 + 12 * lo + 8)} + (cp - u32(s + 16 + 12 * lo));
    }
    return g < layout.n_glyphs ? static_cast<int>(g) : 0;
  }

  float scale(float pixel_height) const {
    VISION_CHECK(std::isfinite(pixel_height) && pixel_height > 0 && pixel_height <= 4096,
                 "font {}: text height {} pixels is out of range; give a height in (0, 4096]", name, pixel_height);
    return stbtt_ScaleForPixelHeight(&info, pixel_height);
  }

  struct Glyph {
    int index;
    float x;  // pen position, pixels from the start of the text
  };
  // The glyphs of `text` and where each starts; returns the pen position after the last.
  float place(std::string_view text, float scale, std::vector<Glyph>* glyphs) const {
    float pen = 0;
    int previous = -1;
    for (char32_t cp : decode_utf8(text)) {
      const int g = glyph(cp);
      if (previous >= 0) pen += scale * static_cast<float>(stbtt_GetGlyphKernAdvance(&info, previous, g));
      if (glyphs) glyphs->push_back({g, pen});
      int advance = 0, lsb = 0;
      stbtt_GetGlyphHMetrics(&info, g, &advance, &lsb);
      pen += scale * static_cast<float>(advance);
      previous = g;
    }
    return pen;
  }
};

Font::Font(const std::filesystem::path& path) : Font(read_font_file(path), path.string()) {}

Font::Font(std::vector<uint8_t> bytes, const std::string& name) {
  auto impl = std::make_shared<Impl>();
  impl->name = name;
  impl->data = std::move(bytes);
  impl->layout = FontChecker(impl->data, name).check();
  if (!stbtt_InitFont(&impl->info, impl->data.data(), impl->layout.start))
    fail(
        "font {}: stb_truetype cannot read it (no Unicode character map?); give a TrueType (.ttf) file such as "
        "DejaVuSans.ttf",
        name);
  int line_gap = 0;
  stbtt_GetFontVMetrics(&impl->info, &impl->ascent, &impl->descent, &line_gap);
  VISION_CHECK(impl->ascent - impl->descent > 0, "font {}: is corrupt (ascent {} not above descent {} in 'hhea')", name,
               impl->ascent, impl->descent);
  impl_ = std::move(impl);
}

std::filesystem::path Font::default_font_path() {
  if (const char* env = std::getenv("VISION_FONT"); env && *env) return env;
  static const char* const kFolders[] = {"/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/dejavu",
                                         "/usr/share/fonts/TTF", "/usr/local/share/fonts"};
  static const char* const kFiles[] = {"DejaVuSans.ttf", "DejaVuSans-Bold.ttf"};
  for (const char* folder : kFolders) {
    for (const char* file : kFiles) {
      std::error_code ec;
      const std::filesystem::path p = std::filesystem::path(folder) / file;
      if (std::filesystem::is_regular_file(p, ec)) return p;
    }
  }
  return {};
}

std::shared_ptr<const Font> Font::default_font() {
  const std::filesystem::path path = default_font_path();
  if (path.empty()) return nullptr;
  static std::mutex mutex;
  static std::map<std::filesystem::path, std::shared_ptr<const Font>> loaded;
  std::lock_guard lock(mutex);
  auto& font = loaded[path];
  if (!font) {
    try {
      font = std::make_shared<const Font>(path);
    } catch (const Error& e) {
      loaded.erase(path);
      if (const char* env = std::getenv("VISION_FONT"); env && *env) fail("{} (VISION_FONT names it)", e.what());
      throw;
    }
  }
  return font;
}

const std::string& Font::name() const { return impl_->name; }

int64_t Font::line_height(float pixel_height) const {
  (void)impl_->scale(pixel_height);
  return static_cast<int64_t>(std::ceil(pixel_height));
}

int64_t Font::baseline(float pixel_height) const {
  return static_cast<int64_t>(std::lround(impl_->scale(pixel_height) * static_cast<float>(impl_->ascent)));
}

int64_t Font::text_width(std::string_view text, float pixel_height) const {
  return static_cast<int64_t>(std::ceil(impl_->place(text, impl_->scale(pixel_height), nullptr)));
}

void Font::draw_text(Image& image, std::string_view text, int64_t x, int64_t y, float pixel_height, Rgb colour) const {
  const int64_t ch = image.channels;
  VISION_CHECK(ch == 1 || ch == 3, "draw_text: images of 1 or 3 channels only, not {}", ch);
  VISION_CHECK(image.width >= 0 && image.height >= 0 &&
                   image.pixels.size() == static_cast<size_t>(image.width * image.height * ch),
               "draw_text: the image's {} bytes do not hold {}×{}×{} samples", image.pixels.size(), image.width,
               image.height, ch);
  const float scale = impl_->scale(pixel_height);
  const int64_t base = y + baseline(pixel_height);
  std::vector<Impl::Glyph> glyphs;
  impl_->place(text, scale, &glyphs);
  const uint8_t grey = grey_of(colour);
  std::vector<uint8_t> coverage;
  for (const auto& [g, pen] : glyphs) {
    const float whole = std::floor(pen), shift = pen - whole;
    int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    stbtt_GetGlyphBitmapBoxSubpixel(&impl_->info, g, scale, scale, shift, 0, &x0, &y0, &x1, &y1);
    const int w = x1 - x0, h = y1 - y0;
    if (w <= 0 || h <= 0) continue;  // a space
    // A glyph box far beyond the line (a corrupt bounding box in the glyph's header) is not rendered.
    if (w > 16 * line_height(pixel_height) || h > 16 * line_height(pixel_height)) continue;
    const int64_t left = x + static_cast<int64_t>(whole) + x0, top = base + y0;
    if (left >= image.width || top >= image.height || left + w <= 0 || top + h <= 0) continue;
    coverage.assign(static_cast<size_t>(w) * static_cast<size_t>(h), 0);
    stbtt_MakeGlyphBitmapSubpixel(&impl_->info, coverage.data(), w, h, w, scale, scale, shift, 0, g);
    for (int r = std::max<int>(0, static_cast<int>(-top)); r < h && top + r < image.height; ++r) {
      for (int c = std::max<int>(0, static_cast<int>(-left)); c < w && left + c < image.width; ++c) {
        const unsigned a = coverage[static_cast<size_t>(r) * static_cast<size_t>(w) + static_cast<size_t>(c)];
        if (a == 0) continue;
        uint8_t* p = image.at(left + c, top + r);
        for (int64_t k = 0; k < ch; ++k) {
          const unsigned target = ch == 1 ? grey : colour[static_cast<size_t>(k)];
          p[k] = static_cast<uint8_t>((p[k] * (255 - a) + target * a + 127) / 255);
        }
      }
    }
  }
}

}  // namespace vision::data
