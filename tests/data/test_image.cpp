// Image IO: PNG of every colour type and bit depth (written by a small independent PNG writer here, so the decoder is
// tested on files it did not write) → 8-bit RGB as YOLO26.md says; PNG round trips exactly, JPEG within a tolerance;
// EXIF orientations 1–8 (JPEG APP1 in both byte orders, PNG eXIf); truncated, corrupt, unsupported and missing files
// give a vision::Error naming the file; bilinear resizing against hand-computed values and a float64 reference; the
// normalised input tensor in NCHW and NHWC.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"
#include "vision/data/image.h"
#include "vision/data/image_tensor.h"
#include "vision/data/random.h"

namespace vision::data::test_image_cpp {
namespace {

using Bytes = std::vector<uint8_t>;
using test::error_of;

// ---------------------------------------------------------------------------------------------------------------
// A minimal PNG writer: deflate "stored" blocks (no compression), filter type 0, any colour type and bit depth.

uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc = 0) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
  }
  return ~crc;
}

void put32(Bytes& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

void put_chunk(Bytes& out, const char* type, const Bytes& data) {
  put32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put32(out, crc32(out.data() + start, out.size() - start));
}

Bytes zlib_stored(const Bytes& raw) {
  Bytes z = {0x78, 0x01};
  size_t at = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - at);
    z.push_back(at + n == raw.size() ? 1 : 0);
    z.push_back(static_cast<uint8_t>(n)), z.push_back(static_cast<uint8_t>(n >> 8));
    z.push_back(static_cast<uint8_t>(~n)), z.push_back(static_cast<uint8_t>(~n >> 8));
    z.insert(z.end(), raw.begin() + static_cast<std::ptrdiff_t>(at), raw.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  } while (at < raw.size());
  uint32_t a = 1, b = 0;
  for (uint8_t v : raw) a = (a + v) % 65521, b = (b + a) % 65521;
  put32(z, b << 16 | a);
  return z;
}

struct PngSpec {
  uint32_t width = 0, height = 0;
  uint8_t depth = 8, colour_type = 2;  // 0 grey, 2 RGB, 3 palette, 4 grey+alpha, 6 RGBA
  std::vector<uint16_t> samples;       // row-major, samples per pixel as the colour type has them
  Bytes palette, trns, exif;
};

Bytes png_file(const PngSpec& s) {
  static const std::array<int, 7> kChannels = {1, 0, 3, 1, 2, 0, 4};
  const int channels = kChannels[s.colour_type];
  Bytes raw;
  size_t k = 0;
  for (uint32_t y = 0; y < s.height; ++y) {
    raw.push_back(0);  // filter: none
    uint32_t acc = 0;
    int bits = 0;
    for (uint32_t i = 0; i < s.width * channels; ++i) {
      const uint16_t v = s.samples[k++];
      if (s.depth == 16) {
        raw.push_back(static_cast<uint8_t>(v >> 8)), raw.push_back(static_cast<uint8_t>(v));
        continue;
      }
      acc = acc << s.depth | v, bits += s.depth;
      if (bits == 8) raw.push_back(static_cast<uint8_t>(acc)), acc = 0, bits = 0;
    }
    if (bits > 0) raw.push_back(static_cast<uint8_t>(acc << (8 - bits)));
  }
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  Bytes ihdr;
  put32(ihdr, s.width), put32(ihdr, s.height);
  ihdr.insert(ihdr.end(), {s.depth, s.colour_type, 0, 0, 0});
  put_chunk(out, "IHDR", ihdr);
  if (!s.exif.empty()) put_chunk(out, "eXIf", s.exif);
  if (!s.palette.empty()) put_chunk(out, "PLTE", s.palette);
  if (!s.trns.empty()) put_chunk(out, "tRNS", s.trns);
  put_chunk(out, "IDAT", zlib_stored(raw));
  put_chunk(out, "IEND", {});
  return out;
}

// Random samples below 2^depth.
std::vector<uint16_t> random_samples(size_t n, int depth) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = static_cast<uint16_t>(test::rng()() & ((1u << depth) - 1));
  return v;
}

Image decode(const Bytes& bytes, const std::string& name = "test.png") { return decode_image(bytes, name); }

// A random RGB image.
Image random_image(int64_t w, int64_t h, int64_t channels = 3) {
  Image im(w, h, channels);
  for (auto& v : im.pixels) v = static_cast<uint8_t>(test::rng()());
  return im;
}

// A smooth RGB image (what JPEG compresses well): gradients and a slow wave.
Image smooth_image(int64_t w, int64_t h) {
  Image im(w, h, 3);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      uint8_t* p = im.at(x, y);
      p[0] = static_cast<uint8_t>(255 * x / (w - 1));
      p[1] = static_cast<uint8_t>(255 * y / (h - 1));
      p[2] = static_cast<uint8_t>(128 + 100 * std::sin(0.2 * static_cast<double>(x + y)));
    }
  }
  return im;
}

// ---------------------------------------------------------------------------------------------------------------
// PNG colour types and bit depths

TEST(ImagePng, EncodeDecodeRoundTripIsExact) {
  for (auto [w, h] : {std::pair{1, 1}, std::pair{17, 5}, std::pair{64, 48}}) {
    const Image rgb = random_image(w, h);
    EXPECT_EQ(decode(encode_png(rgb)), rgb) << w << "x" << h;
    const Image grey = random_image(w, h, 1);
    const Image back = decode(encode_png(grey));
    ASSERT_EQ(back.channels, 3);
    for (size_t i = 0; i < grey.pixels.size(); ++i)
      for (size_t c = 0; c < 3; ++c) ASSERT_EQ(back.pixels[i * 3 + c], grey.pixels[i]) << i;
  }
}

// The RGB value the reader must give for pixel i of a PNG spec, as YOLO26.md says OpenCV reads it in colour mode.
std::array<uint8_t, 3> expected_rgb(const PngSpec& s, size_t i) {
  auto to8 = [&](uint16_t v) -> uint8_t {
    if (s.depth == 16) return static_cast<uint8_t>(v >> 8);        // the high byte, not rounded
    return static_cast<uint8_t>(v * 255 / ((1u << s.depth) - 1));  // 1/2/4-bit grey scaled to 0–255
  };
  switch (s.colour_type) {
    case 0: return {to8(s.samples[i]), to8(s.samples[i]), to8(s.samples[i])};
    case 4: return {to8(s.samples[2 * i]), to8(s.samples[2 * i]), to8(s.samples[2 * i])};
    case 2: return {to8(s.samples[3 * i]), to8(s.samples[3 * i + 1]), to8(s.samples[3 * i + 2])};
    case 6: return {to8(s.samples[4 * i]), to8(s.samples[4 * i + 1]), to8(s.samples[4 * i + 2])};
    case 3: {
      const size_t e = s.samples[i] * size_t{3};
      return {s.palette[e], s.palette[e + 1], s.palette[e + 2]};
    }
  }
  return {};
}

void expect_decodes_as_specified(const PngSpec& spec, const std::string& what) {
  const Image im = decode(png_file(spec));
  ASSERT_EQ(im.width, spec.width) << what;
  ASSERT_EQ(im.height, spec.height) << what;
  ASSERT_EQ(im.channels, 3) << what;
  for (size_t i = 0; i < size_t{spec.width} * spec.height; ++i) {
    const auto want = expected_rgb(spec, i);
    for (size_t c = 0; c < 3; ++c)
      ASSERT_EQ(im.pixels[i * 3 + c], want[c]) << what << ": pixel " << i << " channel " << c;
  }
}

TEST(ImagePng, EveryColourTypeAndDepthBecomes8BitRgb) {
  const uint32_t w = 13, h = 7;  // odd width: packed rows end mid-byte
  const std::vector<std::pair<uint8_t, std::vector<uint8_t>>> types = {
      {0, {1, 2, 4, 8, 16}}, {2, {8, 16}}, {3, {1, 2, 4, 8}}, {4, {8, 16}}, {6, {8, 16}}};
  static const std::array<int, 7> kChannels = {1, 0, 3, 1, 2, 0, 4};
  for (const auto& [type, depths] : types) {
    for (uint8_t depth : depths) {
      PngSpec s{w, h, depth, type, random_samples(size_t{w} * h * kChannels[type], depth), {}, {}, {}};
      if (type == 3) {
        s.palette = Bytes(3u << depth);
        for (auto& v : s.palette) v = static_cast<uint8_t>(test::rng()());
        s.trns = {0, 128, 255};  // transparency is ignored, as alpha is
      }
      if (type == 0) s.trns = depth == 16 ? Bytes{0x12, 0x34} : Bytes{0, 1};  // a grey colour key: ignored
      if (depth == 16) s.samples[0] = 0x12FF;  // the high byte 0x12 (rounding would give 0x13)
      expect_decodes_as_specified(s, fmt::format("colour type {} depth {}", type, depth));
    }
  }
}

TEST(ImagePng, AlphaIsDroppedNotBlended) {
  // A half-transparent red pixel and a fully transparent blue one stay pure red and blue.
  PngSpec s{2, 1, 8, 6, {255, 0, 0, 128, 0, 0, 255, 0}, {}, {}, {}};
  const Image im = decode(png_file(s));
  EXPECT_EQ(im.pixels, (std::vector<uint8_t>{255, 0, 0, 0, 0, 255}));
}

// ---------------------------------------------------------------------------------------------------------------
// JPEG

TEST(ImageJpeg, RoundTripWithinTolerance) {
  const Image im = smooth_image(67, 45);  // not a multiple of the 8- and 16-pixel blocks
  for (bool subsample : {false, true}) {
    const Image back = decode(encode_jpeg(im, {.quality = 95, .subsample_chroma = subsample}), "a.jpg");
    ASSERT_EQ(back.width, im.width);
    ASSERT_EQ(back.height, im.height);
    double sum = 0;
    int worst = 0;
    for (size_t i = 0; i < im.pixels.size(); ++i) {
      const int d = std::abs(int{back.pixels[i]} - int{im.pixels[i]});
      worst = std::max(worst, d), sum += d;
    }
    EXPECT_LE(worst, subsample ? 24 : 12) << "4:2:0 " << subsample;
    EXPECT_LE(sum / static_cast<double>(im.pixels.size()), 2.0) << "4:2:0 " << subsample;
  }
  // A grey JPEG decodes to three equal channels.
  Image grey(40, 24, 1);
  for (int64_t i = 0; i < 40 * 24; ++i) grey.pixels[static_cast<size_t>(i)] = static_cast<uint8_t>(i % 40 * 6);
  const Image back = decode(encode_jpeg(grey), "grey.jpg");
  ASSERT_EQ(back.channels, 3);
  for (size_t i = 0; i < grey.pixels.size(); ++i) {
    ASSERT_EQ(back.pixels[3 * i], back.pixels[3 * i + 1]);
    ASSERT_EQ(back.pixels[3 * i], back.pixels[3 * i + 2]);
    ASSERT_NEAR(back.pixels[3 * i], grey.pixels[i], 8);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// EXIF orientation

// A TIFF block with IFD 0 holding one SHORT tag (the orientation), in either byte order.
Bytes tiff_with_orientation(int orientation, bool little) {
  Bytes t;
  auto u16 = [&](uint32_t v) {
    little ? t.insert(t.end(), {uint8_t(v), uint8_t(v >> 8)}) : t.insert(t.end(), {uint8_t(v >> 8), uint8_t(v)});
  };
  auto u32 = [&](uint32_t v) { little ? (u16(v & 0xFFFF), u16(v >> 16)) : (u16(v >> 16), u16(v & 0xFFFF)); };
  t.insert(t.end(), little ? std::initializer_list<uint8_t>{'I', 'I'} : std::initializer_list<uint8_t>{'M', 'M'});
  u16(42), u32(8);  // header, IFD 0 at 8
  u16(2);           // two entries: a width tag first, then the orientation
  u16(0x0100), u16(3), u32(1), u16(640), u16(0);
  u16(0x0112), u16(3), u32(1), u16(static_cast<uint32_t>(orientation)), u16(0);
  u32(0);  // no next IFD
  return t;
}

// The JPEG with APP1 segments inserted right after SOI.
Bytes with_app1(const Bytes& jpeg, const std::vector<Bytes>& payloads) {
  Bytes out(jpeg.begin(), jpeg.begin() + 2);
  for (const Bytes& p : payloads) {
    const size_t len = p.size() + 2;
    out.insert(out.end(), {0xFF, 0xE1, uint8_t(len >> 8), uint8_t(len)});
    out.insert(out.end(), p.begin(), p.end());
  }
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

Bytes exif_payload(int orientation, bool little) {
  Bytes p = {'E', 'x', 'i', 'f', 0, 0};
  const Bytes t = tiff_with_orientation(orientation, little);
  p.insert(p.end(), t.begin(), t.end());
  return p;
}

// Stored 32×16: quadrants top-left red, top-right green, bottom-left blue, bottom-right white (flat 8×8 blocks, so the
// JPEG keeps them nearly exact).
enum Corner { TL, TR, BL, BR };
const std::array<std::array<uint8_t, 3>, 4> kCornerColour = {{{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}}};

Image quadrants() {
  Image im(32, 16, 3);
  for (int64_t y = 0; y < 16; ++y)
    for (int64_t x = 0; x < 32; ++x) {
      const auto& c = kCornerColour[static_cast<size_t>((y >= 8) * 2 + (x >= 16))];
      std::copy(c.begin(), c.end(), im.at(x, y));
    }
  return im;
}

// For each orientation, which stored corner a viewer shows at its top-left, top-right, bottom-left and bottom-right
// (EXIF: 2 mirrors left-right, 3 turns 180°, 4 mirrors top-bottom, 5 transposes, 6 is shown turned 90° clockwise,
// 7 transverses, 8 is shown turned 90° counter-clockwise).
const std::array<std::array<Corner, 4>, 9> kShownCorners = {{{TL, TR, BL, BR},
                                                             {TL, TR, BL, BR},
                                                             {TR, TL, BR, BL},
                                                             {BR, BL, TR, TL},
                                                             {BL, BR, TL, TR},
                                                             {TL, BL, TR, BR},
                                                             {BL, TL, BR, TR},
                                                             {BR, TR, BL, TL},
                                                             {TR, BR, TL, BL}}};

void expect_shown_as(const Image& im, int orientation, const std::string& what) {
  const bool turned = orientation >= 5;
  ASSERT_EQ(im.width, turned ? 16 : 32) << what;
  ASSERT_EQ(im.height, turned ? 32 : 16) << what;
  const std::array<std::pair<int64_t, int64_t>, 4> corners = {
      {{0, 0}, {im.width - 1, 0}, {0, im.height - 1}, {im.width - 1, im.height - 1}}};
  for (size_t k = 0; k < 4; ++k) {
    const uint8_t* p = im.at(corners[k].first, corners[k].second);
    const auto& want = kCornerColour[kShownCorners[static_cast<size_t>(orientation)][k]];
    for (size_t c = 0; c < 3; ++c) EXPECT_NEAR(p[c], want[c], 6) << what << " corner " << k << " channel " << c;
  }
}

TEST(ImageExif, JpegOrientationsOneToEight) {
  const Bytes plain = encode_jpeg(quadrants(), {.quality = 100, .subsample_chroma = false});
  const Image upright = decode(plain, "plain.jpg");
  expect_shown_as(upright, 1, "no EXIF");
  for (bool little : {true, false}) {
    for (int o = 1; o <= 8; ++o) {
      const std::string what = fmt::format("orientation {} ({})", o, little ? "II" : "MM");
      const Image im = decode(with_app1(plain, {exif_payload(o, little)}), "exif.jpg");
      expect_shown_as(im, o, what);
      EXPECT_EQ(im, apply_exif_orientation(upright, o)) << what;  // the same pixels, moved
    }
  }
  // An XMP APP1 segment before the EXIF one is skipped.
  const Bytes xmp = {'h', 't', 't', 'p', ':', '/', '/', 'n', 's', '.', 'a', 'd', 'o', 'b', 'e', '.', 'c', 'o', 'm', 0};
  expect_shown_as(decode(with_app1(plain, {xmp, exif_payload(6, true)}), "xmp.jpg"), 6, "XMP then EXIF");
  // Malformed EXIF (IFD offset past the end, an orientation of 9, a cut-off block) is ignored, as viewers do.
  Bytes bad = exif_payload(6, true);
  bad[6 + 4] = 0xF0;
  expect_shown_as(decode(with_app1(plain, {bad}), "bad.jpg"), 1, "IFD offset past the end");
  expect_shown_as(decode(with_app1(plain, {exif_payload(9, false)}), "nine.jpg"), 1, "orientation 9");
  Bytes cut = exif_payload(6, true);
  cut.resize(20);
  expect_shown_as(decode(with_app1(plain, {cut}), "cut.jpg"), 1, "cut-off EXIF");
}

TEST(ImageExif, PngExifChunk) {
  const Image q = quadrants();
  PngSpec s{32, 16, 8, 2, {}, {}, {}, tiff_with_orientation(8, false)};
  s.samples.assign(q.pixels.begin(), q.pixels.end());
  const Image im = decode(png_file(s));
  expect_shown_as(im, 8, "PNG eXIf");
  EXPECT_EQ(im, apply_exif_orientation(q, 8));
}

// ---------------------------------------------------------------------------------------------------------------
// Bad files

void expect_error_naming(const Bytes& bytes, const std::string& name, const std::string& problem,
                         const std::string& what) {
  const std::string e = error_of([&] { (void)decode_image(bytes, name); });
  EXPECT_NE(e.find("'" + name + "'"), std::string::npos) << what << ": " << e;
  EXPECT_NE(e.find(problem), std::string::npos) << what << ": " << e;
}

// Every proper prefix of a file fails with an error naming it; half of the file with `problem`.
void expect_truncations_fail(const Bytes& file, const std::string& name, const std::string& problem) {
  for (size_t n = 0; n < file.size(); ++n) {
    const std::string e = error_of([&] { (void)decode_image({file.data(), n}, name); });
    ASSERT_NE(e.find("cannot read image '" + name + "'"), std::string::npos) << n << " bytes: " << e;
  }
  expect_error_naming({file.begin(), file.begin() + static_cast<std::ptrdiff_t>(file.size() / 2)}, name, problem,
                      "half the file");
}

TEST(ImageErrors, TruncatedFilesNameTheFile) {
  expect_truncations_fail(encode_jpeg(smooth_image(24, 16)), "dir/cut.jpg", "truncated or corrupt JPEG");
  expect_truncations_fail(encode_png(random_image(24, 16)), "dir/cut.png", "truncated PNG");
}

TEST(ImageErrors, StrayBytesBeforeTheEndOfAJpegAreHarmless) {
  // Some cameras pad the entropy-coded data before the end-of-image marker: libjpeg warns, the image is whole.
  const Bytes jpeg = encode_jpeg(smooth_image(40, 24));
  ASSERT_EQ(jpeg[jpeg.size() - 2], 0xFF);
  ASSERT_EQ(jpeg[jpeg.size() - 1], 0xD9);
  Bytes padded(jpeg.begin(), jpeg.end() - 2);
  padded.insert(padded.end(), {0x00, 0x11, 0x22, 0xFF, 0xD9});
  EXPECT_EQ(decode(padded, "padded.jpg"), decode(jpeg, "plain.jpg"));
  // The same bytes anywhere else in the data are corruption.
  Bytes inside = jpeg;
  inside.insert(inside.end() - 40, {0xFF, 0xD8, 0x00, 0x11});
  expect_error_naming(inside, "inside.jpg", "corrupt JPEG", "bytes in the data");
}

TEST(ImageErrors, CorruptFilesNeverCrash) {
  const Bytes png = encode_png(random_image(24, 16));
  // Every byte of a PNG's chunks is under a CRC: any change is an error.
  for (size_t at = 8; at < png.size(); ++at) {
    Bytes bad = png;
    bad[at] ^= static_cast<uint8_t>(1 + test::rng()() % 255);
    const std::string e = error_of([&] { (void)decode_image(bad, "bad.png"); });
    ASSERT_NE(e.find("cannot read image 'bad.png'"), std::string::npos) << "byte " << at << ": " << e;
  }
  // A JPEG's entropy-coded data has no checksum: a changed byte may decode to other pixels, or be an error — never a
  // crash or another exception.
  const Bytes jpeg = encode_jpeg(smooth_image(24, 16));
  for (int trial = 0; trial < 300; ++trial) {
    Bytes bad = jpeg;
    for (int k = 0; k < 1 + trial % 4; ++k)
      bad[2 + test::rng()() % (bad.size() - 2)] ^= uint8_t(1 + test::rng()() % 255);
    try {
      const Image im = decode_image(bad, "bad.jpg");
      EXPECT_EQ(im.pixels.size(), static_cast<size_t>(im.width * im.height * 3));
    } catch (const Error& e) {
      ASSERT_NE(std::string(e.what()).find("'bad.jpg'"), std::string::npos) << e.what();
    }
  }
  // Garbage after a valid signature, and garbage alone.
  for (const Bytes& magic : {Bytes{0xFF, 0xD8, 0xFF}, Bytes{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'}, Bytes{}}) {
    for (int trial = 0; trial < 50; ++trial) {
      Bytes bad = magic;
      for (int k = 0; k < 1 + trial * 7; ++k) bad.push_back(static_cast<uint8_t>(test::rng()()));
      if (magic.empty()) bad[0] = 'x';  // not a signature by chance
      const std::string e = error_of([&] { (void)decode_image(bad, "junk.bin"); });
      ASSERT_NE(e.find("cannot read image 'junk.bin'"), std::string::npos) << e;
    }
  }
  expect_error_naming({'x', 'y', 'z'}, "junk.bin", "only JPEG and PNG", "garbage");
  // A PNG whose header claims 100000 × 100000 pixels is refused before decoding.
  Bytes ihdr;
  put32(ihdr, 100000), put32(ihdr, 100000);
  ihdr.insert(ihdr.end(), {8, 0, 0, 0, 0});
  Bytes header = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  put_chunk(header, "IHDR", ihdr);
  expect_error_naming(header, "huge.png", "more than", "100000 × 100000");
}

TEST(ImageErrors, UnsupportedFormatsAreNamed) {
  expect_error_naming({'B', 'M', 0, 0, 0, 0}, "a.bmp", "a BMP image; only JPEG and PNG", "BMP");
  expect_error_naming({'G', 'I', 'F', '8', '9', 'a'}, "a.gif", "a GIF image", "GIF");
  expect_error_naming({'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'}, "a.webp", "a WebP image", "WebP");
  expect_error_naming({'I', 'I', '*', 0}, "a.tif", "a TIFF image", "TIFF");
  expect_error_naming({}, "empty.jpg", "the file is empty", "empty");
}

TEST(ImageErrors, FilesOnDisk) {
  test::TempDir dir;
  const auto missing = dir.path() / "missing.jpg";
  std::string e = error_of([&] { (void)read_image(missing); });
  EXPECT_NE(e.find("cannot read image '" + missing.string() + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("No such file"), std::string::npos) << e;
  e = error_of([&] { (void)read_image(dir.path()); });
  EXPECT_NE(e.find("directory"), std::string::npos) << e;
  test::write_file(dir.path() / "empty.png", "");
  EXPECT_NE(error_of([&] { (void)read_image(dir.path() / "empty.png"); }).find("empty"), std::string::npos);
  // write_image by extension, read back.
  const Image im = random_image(9, 7);
  write_image(im, dir.path() / "a.PNG");
  EXPECT_EQ(read_image(dir.path() / "a.PNG"), im);
  write_image(im, dir.path() / "a.jpeg");
  EXPECT_EQ(read_image(dir.path() / "a.jpeg").width, 9);
  e = error_of([&] { write_image(im, dir.path() / "a.bmp"); });
  EXPECT_NE(e.find("'.bmp'"), std::string::npos) << e;
  e = error_of([&] { write_image(im, dir.path() / "no" / "such" / "dir.png"); });
  EXPECT_NE(e.find("cannot write"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------------------------------------------
// Resizing

Image row_image(std::vector<uint8_t> values) {
  Image im(static_cast<int64_t>(values.size()), 1, 1);
  im.pixels = std::move(values);
  return im;
}

TEST(ImageResize, HandComputedBilinear) {
  // Upscaling 2 → 4: centres map to −0.25 (clamped to the edge), 0.25, 0.75, 1.25 (clamped).
  EXPECT_EQ(resize_bilinear(row_image({0, 100}), 4, 1).pixels, (std::vector<uint8_t>{0, 25, 75, 100}));
  // Downscaling 4 → 2: centres at 0.5 and 2.5, halfway between neighbours.
  EXPECT_EQ(resize_bilinear(row_image({0, 100, 200, 40}), 2, 1).pixels, (std::vector<uint8_t>{50, 120}));
  // 2×2 → 3×3: the middle is the mean of four (131.25 → 131), the edge middles means of two.
  Image sq(2, 2, 1);
  sq.pixels = {0, 90, 180, 255};
  EXPECT_EQ(resize_bilinear(sq, 3, 3).pixels, (std::vector<uint8_t>{0, 45, 90, 90, 131, 173, 180, 218, 255}));
  // 3 → 1: the centre pixel. 1 → 3: copies.
  EXPECT_EQ(resize_bilinear(row_image({10, 20, 30}), 1, 1).pixels, (std::vector<uint8_t>{20}));
  EXPECT_EQ(resize_bilinear(row_image({7}), 3, 1).pixels, (std::vector<uint8_t>{7, 7, 7}));
}

TEST(ImageResize, MatchesFloat64ReferenceWithinOneLevel) {
  for (auto [sw, sh, dw, dh] : {std::array<int64_t, 4>{37, 23, 64, 40}, {64, 48, 17, 31}, {5, 9, 5, 20}}) {
    const Image src = random_image(sw, sh);
    const Image out = resize_bilinear(src, dw, dh);
    auto tap = [](int64_t i, int64_t s, int64_t d) {
      double p = (static_cast<double>(i) + 0.5) * static_cast<double>(s) / static_cast<double>(d) - 0.5;
      p = std::clamp(p, 0.0, static_cast<double>(s - 1));
      const auto lo = static_cast<int64_t>(p);
      return std::pair{lo, p - static_cast<double>(lo)};
    };
    int worst = 0;
    for (int64_t y = 0; y < dh; ++y) {
      const auto [y0, fy] = tap(y, sh, dh);
      const int64_t y1 = std::min(y0 + 1, sh - 1);
      for (int64_t x = 0; x < dw; ++x) {
        const auto [x0, fx] = tap(x, sw, dw);
        const int64_t x1 = std::min(x0 + 1, sw - 1);
        for (int64_t c = 0; c < 3; ++c) {
          const double ref = (1 - fy) * ((1 - fx) * src.at(x0, y0)[c] + fx * src.at(x1, y0)[c]) +
                             fy * ((1 - fx) * src.at(x0, y1)[c] + fx * src.at(x1, y1)[c]);
          worst = std::max(worst, static_cast<int>(std::abs(out.at(x, y)[c] - ref) + 0.5));
        }
      }
    }
    EXPECT_LE(worst, 1) << sw << "x" << sh << " → " << dw << "x" << dh;
  }
  // A flat image stays flat at any size (the weights sum to one exactly).
  const Image flat(13, 11, 3, 201);
  const Image r = resize_bilinear(flat, 29, 4);
  EXPECT_TRUE(std::all_of(r.pixels.begin(), r.pixels.end(), [](uint8_t v) { return v == 201; }));
  EXPECT_EQ(resize_bilinear(flat, 13, 11), flat);
}

// ---------------------------------------------------------------------------------------------------------------
// Input tensors

TEST(ImageTensor, NormalisedNchwAndNhwc) {
  const std::vector<Image> images = {random_image(5, 3), random_image(5, 3)};
  const core::Tensor nchw = images_to_tensor(images, core::Layout::nchw);
  const core::Tensor nhwc = images_to_tensor(images, core::Layout::nhwc);
  EXPECT_EQ(nchw.shape(), core::Shape({2, 3, 3, 5}));
  EXPECT_EQ(nhwc.shape(), core::Shape({2, 3, 3, 5}));
  EXPECT_EQ(nhwc.layout(), core::Layout::nhwc);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < 3; ++y)
        for (int64_t x = 0; x < 5; ++x) {
          const float want = static_cast<float>(images[static_cast<size_t>(n)].at(x, y)[c]) / 255.0f;
          EXPECT_EQ(nchw.data<float>()[((n * 3 + c) * 3 + y) * 5 + x], want);
          EXPECT_EQ(nhwc.data<float>()[((n * 3 + y) * 5 + x) * 3 + c], want);
        }
  EXPECT_NE(error_of([&] { write_normalized(random_image(4, 3), nchw, 0); }).find("does not fit"), std::string::npos);
  EXPECT_NE(error_of([&] { write_normalized(images[0], nchw, 2); }).find("outside"), std::string::npos);
}


// ---------------------------------------------------------------------------------------------------------------
// Hostile files: sizes a header claims, metadata chunks, malformed EXIF (issue #33)

// A PNG of only a header claiming width × height (8-bit RGB) and the given image data (no pixels of that size).
Bytes png_claiming(uint32_t width, uint32_t height, const Bytes& idat) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  Bytes ihdr;
  put32(ihdr, width), put32(ihdr, height);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", idat);
  put_chunk(out, "IEND", {});
  return out;
}

// The JPEG with the size in its SOF segment replaced.
Bytes jpeg_claiming(Bytes jpeg, uint16_t width, uint16_t height) {
  for (size_t at = 2; at + 9 < jpeg.size(); ++at)
    if (jpeg[at] == 0xFF && (jpeg[at + 1] == 0xC0 || jpeg[at + 1] == 0xC2)) {
      jpeg[at + 5] = uint8_t(height >> 8), jpeg[at + 6] = uint8_t(height);
      jpeg[at + 7] = uint8_t(width >> 8), jpeg[at + 8] = uint8_t(width);
      return jpeg;
    }
  ADD_FAILURE() << "no SOF segment";
  return jpeg;
}

// Seconds a call takes.
template <typename F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ImageHostile, DecompressionBombsAreRefusedFromTheirSize) {
  // A 268-byte PNG and a JPEG of a few hundred bytes whose headers say 16384 × 16384 (it took 14 s and 800 MB before
  // the file was found corrupt): over the default pixel limit; and within a raised limit, or at 12000 × 12000 within
  // the default one, refused from the file's size before the pixels are allocated.
  const Bytes png = png_claiming(16384, 16384, zlib_stored(Bytes(200, 0)));
  const Bytes jpeg = jpeg_claiming(encode_jpeg(smooth_image(16, 16)), 16384, 16384);
  expect_error_naming(png, "bomb.png", "16384×16384 pixels is more than the 160000000 accepted", "PNG bomb");
  expect_error_naming(jpeg, "bomb.jpg", "16384×16384 pixels is more than the 160000000 accepted", "JPEG bomb");
  const DecodeOptions raised{.max_pixels = int64_t{1} << 30};
  EXPECT_NE(error_of([&] { (void)decode_image(png, "bomb.png", raised); }).find("cannot hold the 16384×16384 PNG"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)decode_image(jpeg, "bomb.jpg", raised); }).find("cannot hold the 16384×16384 JPEG"),
            std::string::npos);
  expect_error_naming(png_claiming(12000, 12000, zlib_stored(Bytes(200, 0))), "b.png", "cannot hold the 12000×12000",
                      "PNG bomb within the limit");
  expect_error_naming(jpeg_claiming(encode_jpeg(smooth_image(16, 16)), 12000, 12000), "b.jpg",
                      "cannot hold the 12000×12000", "JPEG bomb within the limit");
  // An honest small file is read.
  const Image honest = random_image(64, 48);
  EXPECT_EQ(decode(encode_png(honest), "ok.png"), honest);
  // Every single-bit flip of a small PNG is an error or the same image, never a large allocation: the header's
  // claims are checked against the file before anything is made (a flip in the height made 384 MiB before).
  const Bytes small = encode_png(random_image(7, 5));
  for (size_t at = 8; at < small.size(); ++at)
    for (int bit = 0; bit < 8; ++bit) {
      Bytes bad = small;
      bad[at] ^= uint8_t(1 << bit);
      try {
        const Image im = decode_image(bad, "flip.png");
        EXPECT_LE(im.pixels.size(), 7u * 5u * 3u);
      } catch (const Error&) {
      }
    }
}

TEST(ImageHostile, MaxPixelsIsTheLimit) {
  // 20000 × 20000 (400 megapixels) is over the default 160: refused before decoding, naming the option.
  const Bytes big = png_claiming(20000, 20000, zlib_stored(Bytes(1000, 0)));
  expect_error_naming(big, "big.png", "--max-pixels", "20000×20000");
  // The limit is an option: a 64×48 image with a limit below its 3072 pixels is refused, at the limit it is read.
  const Image im = random_image(64, 48);
  for (const Bytes& file : {encode_png(im), encode_jpeg(im)}) {
    EXPECT_NE(error_of([&] { (void)decode_image(file, "x", {.max_pixels = 3071}); }).find("more than the 3071"),
              std::string::npos);
    EXPECT_EQ(decode_image(file, "x", {.max_pixels = 3072}).width, 64);
  }
  // Sides whose product overflows 64 bits (found by fuzz_image: signed overflow in the pixel count before).
  expect_error_naming(png_claiming(4076008178u, 4076008178u, {}), "wide.png", "pixels is more than", "overflow");
  // 1 × 1 images read.
  const Image one = random_image(1, 1);
  EXPECT_EQ(decode(encode_png(one), "one.png"), one);
  EXPECT_EQ(decode(encode_jpeg(one), "one.jpg").width, 1);
  // A 0-byte file.
  expect_error_naming({}, "empty.png", "the file is empty", "0 bytes");
  // A file larger than any image within the limit could be is refused before it is read.
  test::TempDir dir;
  const auto path = dir.path() / "huge.png";
  write_file(path, encode_png(im));
  std::filesystem::resize_file(path, 4096);
  EXPECT_NE(error_of([&] { (void)read_file(path, 1000); }).find("more than an image"), std::string::npos);
  EXPECT_EQ(read_file(path, 4096).size(), 4096u);
  EXPECT_EQ(max_image_file_bytes(100), 800u + (1u << 26));
}

TEST(ImageHostile, MetadataChunksCostNothing) {
  const Image im = random_image(16, 8);
  PngSpec spec{16, 8, 8, 2, {}, {}, {}, {}};
  spec.samples.assign(im.pixels.begin(), im.pixels.end());
  const Bytes plain = png_file(spec);
  const size_t after_ihdr = 8 + 25;
  // 5,000 tEXt chunks (libspng refuses more than 1,000 by default) and a zTXt chunk that is not even valid zlib: the
  // image reads, quickly.
  Bytes texts(plain.begin(), plain.begin() + after_ihdr);
  for (int i = 0; i < 5000; ++i) {
    std::string t = "Comment";
    t.push_back('\0');
    t += fmt::format("text number {}", i);
    put_chunk(texts, "tEXt", Bytes(t.begin(), t.end()));
  }
  Bytes bogus_z = {'Z', 0, 0, 0xDE, 0xAD, 0xBE, 0xEF};
  put_chunk(texts, "zTXt", bogus_z);
  texts.insert(texts.end(), plain.begin() + after_ihdr, plain.end());
  Image got;
  const double s = seconds_of([&] { got = decode(texts, "texts.png"); });
  EXPECT_EQ(got, im);
  EXPECT_LT(s, 2.0);
  // A critical chunk is still checked: its CRC broken, the file is an error.
  Bytes broken = plain;
  broken[after_ihdr + 10] ^= 0x40;  // inside IDAT
  expect_error_naming(broken, "broken.png", "corrupt PNG", "IDAT CRC");
}

TEST(ImageHostile, MalformedExifMeansNoRotationAndAWarning) {
  const Image q = quadrants();
  const Bytes plain = encode_jpeg(q, {.quality = 100, .subsample_chroma = false});
  // IFD 0 at an odd offset (TIFF aligns IFDs to words): the orientation 6 after it is not applied.
  Bytes odd = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 9, 0, 0, 0, 0};  // IFD at 9, after a pad byte
  const Bytes t = tiff_with_orientation(6, true);
  odd.insert(odd.end(), t.begin() + 8, t.end());
  std::vector<std::string> warnings;
  const Image im = decode_image(with_app1(plain, {odd}), "odd.jpg", {.warnings = &warnings});
  EXPECT_EQ(im.width, 32);  // as stored, not 16 × 32
  EXPECT_EQ(im.height, 16);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("'odd.jpg'"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("IFD offset 9"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("without rotation"), std::string::npos) << warnings[0];
  // A well-formed block warns of nothing.
  warnings.clear();
  EXPECT_EQ(decode_image(with_app1(plain, {exif_payload(6, true)}), "ok.jpg", {.warnings = &warnings}).width, 16);
  EXPECT_TRUE(warnings.empty());
}

TEST(ImageHostile, ProbeReadsTheHeaderOnly) {
  const Image im = random_image(40, 24);
  for (const Bytes& file : {encode_png(im), encode_jpeg(im)}) {
    const ImageSize size = probe_image(file, "x");
    EXPECT_EQ(size.width, 40);
    EXPECT_EQ(size.height, 24);
  }
  const ImageSize bomb = probe_image(png_claiming(16384, 16384, {}), "bomb.png");
  EXPECT_EQ(bomb.width, 16384);
  EXPECT_NE(error_of([] { (void)probe_image(Bytes{'B', 'M', 1, 2}, "x.bmp"); }).find("a BMP image"),
            std::string::npos);
}

}  // namespace
}  // namespace vision::data::test_image_cpp
