#include "vision/data/image.h"
#include "vision/data/image_tensor.h"

#include <spng.h>
#include <turbojpeg.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include "vision/core/error.h"

namespace vision::data {

Image::Image(int64_t width, int64_t height, int64_t channels, uint8_t fill)
    : width(width), height(height), channels(channels) {
  VISION_CHECK(width >= 0 && height >= 0 && channels >= 1 && channels <= 4,
               "image: a {}×{} image of {} channels is not possible (sizes ≥ 0, 1–4 channels)", width, height,
               channels);
  pixels.assign(static_cast<size_t>(width * height * channels), fill);
}

namespace {

// Every decoding error: "cannot read image 'NAME': PROBLEM".
template <typename... Args>
[[noreturn]] void unreadable(const std::string& name, fmt::format_string<Args...> f, Args&&... args) {
  fail_input("cannot read image '{}': {}", name, fmt::format(f, std::forward<Args>(args)...));
}

void check_pixel_count(const std::string& name, int64_t width, int64_t height, int64_t max_pixels) {
  if (width <= 0 || height <= 0) unreadable(name, "the header gives a size of {}×{} pixels", width, height);
  int64_t pixels = 0;
  if (__builtin_mul_overflow(width, height, &pixels) || pixels > max_pixels)
    unreadable(name, "{}×{} pixels is more than the {} accepted (--max-pixels); downscale the image or raise the limit",
               width, height, max_pixels);
}

// A warning about the file, when the caller collects them.
void warn(const DecodeOptions& options, const std::string& name, const std::string& problem) {
  if (options.warnings) options.warnings->push_back(fmt::format("image '{}': {}", name, problem));
}

uint32_t be32(std::span<const uint8_t> b, size_t at) {
  return uint32_t{b[at]} << 24 | uint32_t{b[at + 1]} << 16 | uint32_t{b[at + 2]} << 8 | b[at + 3];
}

// ---------------------------------------------------------------------------------------------------------------
// EXIF orientation

// The orientation tag (0x0112) of IFD 0 of an EXIF block in TIFF structure ("II*\0" or "MM\0*", then offsets from
// its start). 1 when the block has no orientation; also 1, with `problem` set, when the block cannot be parsed
// (a bad byte order or magic, an IFD offset that is odd — TIFF aligns them to words — or past the end, entries cut
// off, an orientation that is not one SHORT of 1–8): a viewer may guess, but a rotation read from a malformed block
// would be a silent wrong answer.
int tiff_orientation(std::span<const uint8_t> tiff, std::string& problem) {
  if (tiff.size() < 8) return problem = "the EXIF block is cut off", 1;
  const bool little = tiff[0] == 'I' && tiff[1] == 'I';
  if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) return problem = "the EXIF block has no TIFF byte order", 1;
  auto u16 = [&](size_t at) -> uint32_t {
    return little ? tiff[at] | tiff[at + 1] << 8 : tiff[at] << 8 | tiff[at + 1];
  };
  auto u32 = [&](size_t at) -> uint64_t {
    return little ? u16(at) | uint64_t{u16(at + 2)} << 16 : uint64_t{u16(at)} << 16 | u16(at + 2);
  };
  if (u16(2) != 42) return problem = "the EXIF block's TIFF header is malformed", 1;
  const uint64_t ifd = u32(4);
  if (ifd % 2 != 0 || ifd < 8) return problem = fmt::format("the EXIF block's IFD offset {} is malformed", ifd), 1;
  if (ifd + 2 > tiff.size()) return problem = fmt::format("the EXIF block's IFD offset {} is past its end", ifd), 1;
  const uint32_t entries = u16(ifd);
  if (ifd + 2 + 12 * uint64_t{entries} > tiff.size())
    return problem = fmt::format("the EXIF block's {} IFD entries run past its end", entries), 1;
  for (uint32_t i = 0; i < entries; ++i) {
    const uint64_t entry = ifd + 2 + 12 * uint64_t{i};
    if (u16(entry) != 0x0112) continue;
    const uint32_t type = u16(entry + 2);  // 3: SHORT, the value in the entry's first two value bytes
    const uint32_t value = u16(entry + 8);
    if (type != 3 || u32(entry + 4) != 1 || value < 1 || value > 8)
      return problem = fmt::format("the EXIF orientation (type {}, value {}) is not one of 1–8", type, value), 1;
    return static_cast<int>(value);
  }
  return 1;
}

int exif_orientation(std::span<const uint8_t> tiff, const std::string& name, const DecodeOptions& options) {
  std::string problem;
  const int orientation = tiff_orientation(tiff, problem);
  if (!problem.empty()) warn(options, name, problem + "; the image is used as stored, without rotation");
  return orientation;
}

// Calls visit(marker, at, length) for each segment with a length of a JPEG before its image data (at: the offset of
// the segment's 0xFF; length: of the segment, its two length bytes included), until visit returns true, the start
// of scan, the end of the bytes or a malformed segment.
template <typename Visit>
void for_each_jpeg_segment(std::span<const uint8_t> jpeg, Visit&& visit) {
  size_t at = 2;  // after SOI
  while (at + 4 <= jpeg.size()) {
    if (jpeg[at] != 0xFF) return;
    const uint8_t marker = jpeg[at + 1];
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {  // markers without a length
      at += 2;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return;  // start of scan, end of image
    const size_t length = size_t{jpeg[at + 2]} << 8 | jpeg[at + 3];
    if (length < 2 || at + 2 + length > jpeg.size()) return;
    if (visit(marker, at, length)) return;
    at += 2 + length;
  }
}

// The EXIF block (TIFF structure) of a JPEG: its first APP1 segment holding "Exif\0\0" before the image data;
// empty when there is none.
std::span<const uint8_t> jpeg_exif(std::span<const uint8_t> jpeg) {
  static constexpr std::array<uint8_t, 6> kExif = {'E', 'x', 'i', 'f', 0, 0};
  std::span<const uint8_t> exif;
  for_each_jpeg_segment(jpeg, [&](uint8_t marker, size_t at, size_t length) {
    if (marker != 0xE1 || length < 2 + kExif.size() || !std::equal(kExif.begin(), kExif.end(), &jpeg[at + 4]))
      return false;
    exif = jpeg.subspan(at + 4 + kExif.size(), length - 2 - kExif.size());
    return true;
  });
  return exif;
}

// The frame of a JPEG: its SOF marker and the largest sampling factors of its components (0s when no SOF is found
// before the image data).
struct JpegFrame {
  uint8_t marker = 0;
  int h_max = 0, v_max = 0;
};

JpegFrame jpeg_frame(std::span<const uint8_t> jpeg) {
  JpegFrame f;
  for_each_jpeg_segment(jpeg, [&](uint8_t marker, size_t at, size_t length) {
    if (marker < 0xC0 || marker > 0xCF || marker == 0xC4 || marker == 0xC8 || marker == 0xCC) return false;
    f = {marker, 1, 1};
    const size_t count = length >= 8 ? jpeg[at + 9] : 0;
    for (size_t c = 0; c < count && at + 10 + 3 * c + 1 < at + 2 + length; ++c) {
      const uint8_t factors = jpeg[at + 10 + 3 * c + 1];
      f.h_max = std::max(f.h_max, factors >> 4), f.v_max = std::max(f.v_max, factors & 15);
    }
    f.h_max = std::clamp(f.h_max, 1, 4), f.v_max = std::clamp(f.v_max, 1, 4);
    return true;
  });
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// JPEG (TurboJPEG)

// A TurboJPEG handle, one of each kind per thread (decoding runs on loader threads). A handle is replaced after a
// failed call: TurboJPEG 2.x leaves a decompressor whose header could not be read mid-header, and the next file would
// be read with the old file's marker state.
class TurboJpeg {
 public:
  enum class Kind { compress, decompress };
  static tjhandle get(Kind kind) { return slot(kind).handle_; }
  // The handle's error message; the handle is replaced.
  static std::string take_error(Kind kind) {
    TurboJpeg& t = slot(kind);
    std::string message = tjGetErrorStr2(t.handle_);
    tjDestroy(t.handle_);
    t.handle_ = create(kind);
    return message;
  }

  explicit TurboJpeg(Kind kind) : handle_(create(kind)) {}
  ~TurboJpeg() { tjDestroy(handle_); }
  TurboJpeg(const TurboJpeg&) = delete;
  TurboJpeg& operator=(const TurboJpeg&) = delete;

 private:
  static tjhandle create(Kind kind) {
    tjhandle h = kind == Kind::compress ? tjInitCompress() : tjInitDecompress();
    VISION_CHECK(h, "image: TurboJPEG could not create a handle ({})", tjGetErrorStr2(nullptr));
    return h;
  }
  static TurboJpeg& slot(Kind kind) {
    thread_local TurboJpeg compress(Kind::compress), decompress(Kind::decompress);
    return kind == Kind::compress ? compress : decompress;
  }
  tjhandle handle_;
};

ImageSize jpeg_size(std::span<const uint8_t> bytes, const std::string& name, int* colorspace_out = nullptr) {
  constexpr auto kind = TurboJpeg::Kind::decompress;
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(TurboJpeg::get(kind), bytes.data(), bytes.size(), &width, &height, &subsampling,
                          &colorspace) != 0)
    unreadable(name, "truncated or corrupt JPEG header ({})", TurboJpeg::take_error(kind));
  if (colorspace_out) *colorspace_out = colorspace;
  return {width, height};
}

Image decode_jpeg(std::span<const uint8_t> bytes, const std::string& name, const DecodeOptions& options) {
  constexpr auto kind = TurboJpeg::Kind::decompress;
  int colorspace = 0;
  const auto [w, h] = jpeg_size(bytes, name, &colorspace);
  const int width = static_cast<int>(w), height = static_cast<int>(h);
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK)
    unreadable(name, "a CMYK JPEG, which is not supported; convert it to RGB");
  check_pixel_count(name, width, height, options.max_pixels);
  // Huffman coding (baseline, extended, progressive) spends at least one bit on every MCU, in the first scan of its
  // DC coefficients: a file with fewer bits than its MCUs cannot hold the image its header claims (a 2 KB file that
  // says 16384×16384 is truncated or made to exhaust memory). Arithmetic-coded frames can go below one bit.
  const JpegFrame frame = jpeg_frame(bytes);
  if (frame.marker == 0xC0 || frame.marker == 0xC1 || frame.marker == 0xC2) {
    const uint64_t mcus = static_cast<uint64_t>((width + 8 * frame.h_max - 1) / (8 * frame.h_max)) *
                          static_cast<uint64_t>((height + 8 * frame.v_max - 1) / (8 * frame.v_max));
    if (8 * uint64_t{bytes.size()} < mcus)
      unreadable(name,
                 "the file's {} bytes cannot hold the {}×{} JPEG its header claims ({} MCUs need at least one bit "
                 "each): truncated or corrupt",
                 bytes.size(), width, height, mcus);
  }
  Image image(width, height, 3);
  // Warnings (a premature end of the data, corrupt entropy-coded data) stop decoding: the image would be partly grey.
  // All but one: stray bytes right before the end-of-image marker, after all of the image data (some cameras write
  // them). Such a file is decoded again without stopping: that warning comes first again, and nothing follows it.
  auto decompress = [&](int flags) {
    return tjDecompress2(TurboJpeg::get(kind), bytes.data(), bytes.size(), image.pixels.data(), width, 0, height,
                         TJPF_RGB, flags | TJFLAG_LIMITSCANS) == 0;
  };
  if (!decompress(TJFLAG_STOPONWARNING)) {
    const std::string problem = TurboJpeg::take_error(kind);
    if (problem.find("extraneous bytes before marker 0xd9") == std::string::npos)
      unreadable(name, "truncated or corrupt JPEG data ({})", problem);
    if (!decompress(0) && tjGetErrorCode(TurboJpeg::get(kind)) != TJERR_WARNING)
      unreadable(name, "corrupt JPEG data ({})", TurboJpeg::take_error(kind));
  }
  const std::span<const uint8_t> exif = jpeg_exif(bytes);
  return exif.empty() ? image : apply_exif_orientation(image, exif_orientation(exif, name, options));
}

// ---------------------------------------------------------------------------------------------------------------
// PNG (libspng)

using SpngContext = std::unique_ptr<spng_ctx, decltype(&spng_ctx_free)>;

constexpr std::array<uint8_t, 8> kPngSignature = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

// A PNG's chunks as they are laid out, read without decompressing anything: the header, the image data's size, and
// whether any ancillary chunk other than eXIf is present (those are dropped before libspng sees the file: text and
// other metadata is never used, and zTXt/iTXt/iCCP would be inflated — a 4 MB file can hold 4 GiB of text).
struct PngLayout {
  bool has_ihdr = false;
  uint32_t width = 0, height = 0;
  uint8_t depth = 0, colour_type = 0;
  uint64_t idat_bytes = 0;
  bool skipped_any = false;
};

bool png_keeps(std::span<const uint8_t> type) {
  const bool critical = (type[0] & 0x20) == 0;  // upper-case first letter
  return critical || std::equal(type.begin(), type.end(), "eXIf");
}

// Walks the chunks (stopping at IEND, at the end of the bytes or at a length that runs past them: libspng reports
// those); with `kept`, appends the signature and every chunk that png_keeps, byte for byte, CRC included.
PngLayout png_layout(std::span<const uint8_t> bytes, std::vector<uint8_t>* kept) {
  PngLayout l;
  if (kept) kept->assign(kPngSignature.begin(), kPngSignature.end());
  for (size_t at = kPngSignature.size(); at + 12 <= bytes.size();) {
    const uint64_t length = be32(bytes, at);
    const std::span<const uint8_t> type = bytes.subspan(at + 4, 4);
    const uint64_t end = at + 12 + length;
    if (end > bytes.size()) {  // cut short or a corrupt length: copied as it is, for libspng to report
      if (std::equal(type.begin(), type.end(), "IDAT")) l.idat_bytes += bytes.size() - at - 8;
      if (kept) kept->insert(kept->end(), bytes.begin() + static_cast<std::ptrdiff_t>(at), bytes.end());
      break;
    }
    if (std::equal(type.begin(), type.end(), "IHDR") && length == 13 && !l.has_ihdr) {
      l.has_ihdr = true;
      l.width = be32(bytes, at + 8), l.height = be32(bytes, at + 12);
      l.depth = bytes[at + 16], l.colour_type = bytes[at + 17];
    }
    if (std::equal(type.begin(), type.end(), "IDAT")) l.idat_bytes += length;
    if (png_keeps(type)) {
      if (kept) kept->insert(kept->end(), bytes.begin() + static_cast<std::ptrdiff_t>(at),
                             bytes.begin() + static_cast<std::ptrdiff_t>(end));
    } else {
      l.skipped_any = true;
    }
    at = static_cast<size_t>(end);
    if (std::equal(type.begin(), type.end(), "IEND")) {
      if (kept && at < bytes.size()) kept->insert(kept->end(), bytes.begin() + static_cast<std::ptrdiff_t>(at), bytes.end());
      break;
    }
  }
  return l;
}

Image decode_png(std::span<const uint8_t> bytes, const std::string& name, const DecodeOptions& options) {
  // The chunks first: the pixel count and the image data's size are checked before anything is allocated.
  const PngLayout layout = png_layout(bytes, nullptr);
  if (layout.has_ihdr) {
    check_pixel_count(name, layout.width, layout.height, options.max_pixels);
    static constexpr std::array<int, 7> kChannels = {1, 0, 3, 1, 2, 0, 4};
    const int channels = layout.colour_type < kChannels.size() ? kChannels[layout.colour_type] : 0;
    // Deflate expands at most 1032 times (a 258-byte match in 2 bits): fewer image-data bytes than that cannot hold
    // the image's filtered rows.
    const uint64_t bits = uint64_t{layout.width} * layout.height * static_cast<uint64_t>(channels) * layout.depth;
    if (channels > 0 && bits / 8 > 1032 * layout.idat_bytes + 4096)
      unreadable(name,
                 "its {} bytes of image data cannot hold the {}×{} PNG its header claims (deflate expands at most "
                 "1032 times): truncated or corrupt",
                 layout.idat_bytes, layout.width, layout.height);
  }
  std::vector<uint8_t> filtered;
  if (layout.skipped_any) {
    png_layout(bytes, &filtered);
    bytes = filtered;
  }

  SpngContext ctx(spng_ctx_new(0), spng_ctx_free);
  VISION_CHECK(ctx, "image: libspng could not create a decoder (out of memory)");
  // A bad checksum in a critical chunk is an error; an ancillary chunk with one is dropped (as libpng does).
  spng_set_crc_action(ctx.get(), SPNG_CRC_ERROR, SPNG_CRC_DISCARD);
  // The pixel limit, and chunk limits: no kept chunk but the image data needs more than a few MB.
  const uint32_t side = static_cast<uint32_t>(std::min<int64_t>(options.max_pixels, (int64_t{1} << 31) - 1));
  spng_set_image_limits(ctx.get(), side, side);
  spng_set_chunk_limits(ctx.get(), size_t{1} << 26, size_t{1} << 26);
  spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size());
  auto check = [&](int status, std::string_view stage) {
    if (status == SPNG_OK) return;
    if (status == SPNG_IO_EOF) unreadable(name, "truncated PNG (the data ends in the {})", stage);
    unreadable(name, "corrupt PNG ({} in the {})", spng_strerror(status), stage);
  };
  spng_ihdr ihdr{};
  check(spng_get_ihdr(ctx.get(), &ihdr), "header");
  check_pixel_count(name, ihdr.width, ihdr.height, options.max_pixels);
  size_t size = 0;
  check(spng_decoded_image_size(ctx.get(), SPNG_FMT_RGB8, &size), "header");
  Image image(ihdr.width, ihdr.height, 3);
  VISION_CHECK_INPUT(size == image.pixels.size(), "image: libspng gives {} bytes for a {}×{} RGB image", size, ihdr.width,
               ihdr.height);
  // RGB8 from any colour type and depth: alpha and tRNS ignored, palette expanded, 16-bit → high byte.
  check(spng_decode_image(ctx.get(), image.pixels.data(), size, SPNG_FMT_RGB8, 0), "image data");
  // The rest of the file up to IEND: the last image-data chunk's checksum, and whatever follows it.
  check(spng_decode_chunks(ctx.get()), "chunks after the image data");
  // libspng accepts a file that stops right before IEND; it is cut short all the same.
  static constexpr std::array<uint8_t, 12> kIend = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};
  if (std::search(bytes.begin(), bytes.end(), kIend.begin(), kIend.end()) == bytes.end())
    unreadable(name, "truncated PNG (the file ends without its IEND chunk)");
  spng_exif exif{};
  if (spng_get_exif(ctx.get(), &exif) == SPNG_OK)
    image = apply_exif_orientation(
        image, exif_orientation({reinterpret_cast<const uint8_t*>(exif.data), exif.length}, name, options));
  return image;
}

// What a file that is neither JPEG nor PNG looks like, for the error.
std::string describe_other_format(std::span<const uint8_t> b) {
  auto starts = [&](std::string_view magic, size_t at = 0) {
    return b.size() >= at + magic.size() &&
           std::equal(magic.begin(), magic.end(), b.begin() + at, [](char m, uint8_t c) { return uint8_t(m) == c; });
  };
  if (starts("BM")) return "a BMP image";
  if (starts("GIF8")) return "a GIF image";
  if (starts("RIFF") && starts("WEBP", 8)) return "a WebP image";
  if (starts("II*") || starts("MM\0*")) return "a TIFF image";
  if (starts("ftyp", 4)) return "an HEIF/AVIF image";
  return "not an image format vision knows";
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Decoding

namespace {

bool is_jpeg(std::span<const uint8_t> b) { return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF; }
bool is_png(std::span<const uint8_t> b) {
  return b.size() >= kPngSignature.size() && std::equal(kPngSignature.begin(), kPngSignature.end(), b.begin());
}

}  // namespace

Image decode_image(std::span<const uint8_t> bytes, const std::string& name, const DecodeOptions& options) {
  VISION_CHECK(options.max_pixels > 0, "decode_image: max_pixels must be positive, got {}", options.max_pixels);
  if (bytes.empty()) unreadable(name, "the file is empty");
  if (is_jpeg(bytes)) return decode_jpeg(bytes, name, options);
  if (is_png(bytes)) return decode_png(bytes, name, options);
  unreadable(name, "{}; only JPEG and PNG images are supported", describe_other_format(bytes));
}

ImageSize probe_image(std::span<const uint8_t> bytes, const std::string& name) {
  if (bytes.empty()) unreadable(name, "the file is empty");
  if (is_jpeg(bytes)) return jpeg_size(bytes, name);
  if (is_png(bytes)) {
    const PngLayout l = png_layout(bytes, nullptr);
    if (!l.has_ihdr) unreadable(name, "corrupt PNG (no image header)");
    return {l.width, l.height};
  }
  unreadable(name, "{}; only JPEG and PNG images are supported", describe_other_format(bytes));
}

uint64_t max_image_file_bytes(int64_t max_pixels) { return 8 * static_cast<uint64_t>(max_pixels) + (uint64_t{1} << 26); }

std::vector<uint8_t> read_file(const std::filesystem::path& path, uint64_t max_bytes) {
  const std::string name = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) unreadable(name, "it is a directory");
  std::unique_ptr<FILE, decltype(&std::fclose)> file(std::fopen(name.c_str(), "rb"), std::fclose);
  if (!file) unreadable(name, "{}", std::strerror(errno));
  std::vector<uint8_t> bytes;
  if (std::fseek(file.get(), 0, SEEK_END) == 0) {
    const long size = std::ftell(file.get());
    if (size > 0 && static_cast<uint64_t>(size) > max_bytes)
      unreadable(name, "the file has {} bytes, more than an image within the pixel limit can (--max-pixels)", size);
    if (size > 0) bytes.reserve(static_cast<size_t>(size));
    std::rewind(file.get());
  }
  std::array<uint8_t, 1 << 16> buffer;
  for (size_t got; (got = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0;) {
    bytes.insert(bytes.end(), buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(got));
    if (bytes.size() > max_bytes)  // a file that grows while it is read, or a pipe
      unreadable(name, "the file has more than {} bytes, more than an image within the pixel limit can", max_bytes);
  }
  if (std::ferror(file.get())) unreadable(name, "{}", std::strerror(errno));
  return bytes;
}

Image read_image(const std::filesystem::path& path, const DecodeOptions& options) {
  return decode_image(read_file(path, max_image_file_bytes(options.max_pixels)), path.string(), options);
}

Image apply_exif_orientation(const Image& image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const int64_t w = image.width, h = image.height, c = image.channels;
  const bool transposed = orientation >= 5;
  Image out(transposed ? h : w, transposed ? w : h, c);
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      // The stored pixel (sx, sy) shown at (x, y).
      int64_t sx = x, sy = y;
      switch (orientation) {
        case 2: sx = w - 1 - x; break;
        case 3: sx = w - 1 - x, sy = h - 1 - y; break;
        case 4: sy = h - 1 - y; break;
        case 5: sx = y, sy = x; break;
        case 6: sx = y, sy = h - 1 - x; break;
        case 7: sx = w - 1 - y, sy = h - 1 - x; break;
        case 8: sx = w - 1 - y, sy = x; break;
      }
      std::copy_n(image.at(sx, sy), c, out.at(x, y));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Encoding

namespace {

void check_encodable(const Image& image, std::string_view format) {
  VISION_CHECK(image.width > 0 && image.height > 0 && (image.channels == 1 || image.channels == 3) &&
                   image.pixels.size() == static_cast<size_t>(image.width * image.height * image.channels),
               "encode {}: a {}×{} image of {} channels ({} bytes) cannot be encoded; give a non-empty grey or RGB "
               "image",
               format, image.width, image.height, image.channels, image.pixels.size());
}

}  // namespace

std::vector<uint8_t> encode_jpeg(const Image& image, const JpegOptions& options) {
  check_encodable(image, "JPEG");
  VISION_CHECK(options.quality >= 1 && options.quality <= 100, "encode JPEG: quality {} is outside 1–100",
               options.quality);
  constexpr int64_t kMaxSide = 65500;  // libjpeg's JPEG_MAX_DIMENSION
  VISION_CHECK(image.width <= kMaxSide && image.height <= kMaxSide,
               "encode JPEG: {}×{} is larger than JPEG allows ({} per side); write a PNG", image.width, image.height,
               kMaxSide);
  constexpr auto kind = TurboJpeg::Kind::compress;
  tjhandle tj = TurboJpeg::get(kind);
  const bool grey = image.channels == 1;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int status = tjCompress2(tj, image.pixels.data(), static_cast<int>(image.width), 0,
                                 static_cast<int>(image.height), grey ? TJPF_GRAY : TJPF_RGB, &buffer, &size,
                                 grey                       ? TJSAMP_GRAY
                                 : options.subsample_chroma ? TJSAMP_420
                                                            : TJSAMP_444,
                                 options.quality, 0);
  std::unique_ptr<unsigned char, decltype(&tjFree)> owned(buffer, tjFree);
  if (status != 0) fail("encode JPEG: {}", TurboJpeg::take_error(kind));
  return {buffer, buffer + size};
}

std::vector<uint8_t> encode_png(const Image& image) {
  check_encodable(image, "PNG");
  SpngContext ctx(spng_ctx_new(SPNG_CTX_ENCODER), spng_ctx_free);
  VISION_CHECK(ctx, "encode PNG: libspng could not create an encoder (out of memory)");
  spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1);
  spng_set_option(ctx.get(), SPNG_IMG_COMPRESSION_LEVEL, 6);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(image.width);
  ihdr.height = static_cast<uint32_t>(image.height);
  ihdr.bit_depth = 8;
  ihdr.color_type = image.channels == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR;
  int status = spng_set_ihdr(ctx.get(), &ihdr);
  if (status == SPNG_OK)
    status = spng_encode_image(ctx.get(), image.pixels.data(), image.pixels.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  VISION_CHECK(status == SPNG_OK, "encode PNG: {}", spng_strerror(status));
  size_t size = 0;
  std::unique_ptr<void, decltype(&std::free)> buffer(spng_get_png_buffer(ctx.get(), &size, &status), std::free);
  VISION_CHECK(buffer && status == SPNG_OK, "encode PNG: {}", spng_strerror(status));
  const auto* bytes = static_cast<const uint8_t*>(buffer.get());
  return {bytes, bytes + size};
}

void write_file(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  std::unique_ptr<FILE, decltype(&std::fclose)> file(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!file) fail("cannot write '{}': {}", path.string(), std::strerror(errno));
  if (std::fwrite(bytes.data(), 1, bytes.size(), file.get()) != bytes.size() || std::fflush(file.get()) != 0)
    fail("cannot write '{}': {}", path.string(), std::strerror(errno));
}

void write_image(const Image& image, const std::filesystem::path& path, const JpegOptions& jpeg) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".jpg" || ext == ".jpeg") return write_file(path, encode_jpeg(image, jpeg));
  if (ext == ".png") return write_file(path, encode_png(image));
  fail("cannot write image '{}': the extension '{}' names no format vision writes; use .jpg, .jpeg or .png",
       path.string(), ext);
}

// ---------------------------------------------------------------------------------------------------------------
// Resizing

namespace {

// Fixed-point bilinear weights: 11 fractional bits per direction, 22 for the product.
constexpr int32_t kWeightBits = 11;
constexpr int32_t kWeightOne = 1 << kWeightBits;

// For each destination index, the two source indices and the weight of the second (0 … kWeightOne).
struct Taps {
  std::vector<int64_t> first, second;
  std::vector<int32_t> weight;
};

Taps bilinear_taps(int64_t src, int64_t dst) {
  Taps t;
  t.first.resize(static_cast<size_t>(dst));
  t.second.resize(static_cast<size_t>(dst));
  t.weight.resize(static_cast<size_t>(dst));
  const double scale = static_cast<double>(src) / static_cast<double>(dst);
  for (int64_t i = 0; i < dst; ++i) {
    const double pos = (static_cast<double>(i) + 0.5) * scale - 0.5;
    int64_t lo = static_cast<int64_t>(std::floor(pos));
    double frac = pos - static_cast<double>(lo);
    if (lo < 0) lo = 0, frac = 0;               // before the first centre: the edge pixel
    if (lo >= src - 1) lo = src - 1, frac = 0;  // past the last centre: the edge pixel
    const auto k = static_cast<size_t>(i);
    t.first[k] = lo;
    t.second[k] = std::min(lo + 1, src - 1);
    t.weight[k] = static_cast<int32_t>(std::lround(frac * kWeightOne));
  }
  return t;
}

// Bilinear resizing of `src_h` rows of `c` channels that row(y) returns; with `swap` the first and third channel of
// each pixel trade places in the output (BGR in, RGB out).
template <typename RowOf>
Image resize_rows(RowOf row, int64_t src_w, int64_t src_h, int64_t c, bool swap, int64_t width, int64_t height) {
  const Taps tx = bilinear_taps(src_w, width), ty = bilinear_taps(src_h, height);
  Image out(width, height, c);
  // Each output row: both source rows interpolated horizontally (×2^11), then vertically (×2^22), rounded.
  std::vector<int32_t> upper(static_cast<size_t>(width * c)), lower(upper.size());
  auto horizontal = [&](int64_t sy, std::vector<int32_t>& dst) {
    const uint8_t* src = row(sy);
    for (int64_t x = 0; x < width; ++x) {
      const auto k = static_cast<size_t>(x);
      const uint8_t* a = src + tx.first[k] * c;
      const uint8_t* b = src + tx.second[k] * c;
      const int32_t w = tx.weight[k];
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t to = swap && ch != 1 ? 2 - ch : ch;
        dst[static_cast<size_t>(x * c + to)] = a[ch] * (kWeightOne - w) + b[ch] * w;
      }
    }
  };
  for (int64_t y = 0; y < height; ++y) {
    const auto k = static_cast<size_t>(y);
    horizontal(ty.first[k], upper);
    horizontal(ty.second[k], lower);
    const int32_t w = ty.weight[k];
    uint8_t* dst = out.row(y);
    for (size_t i = 0; i < upper.size(); ++i)
      dst[i] = static_cast<uint8_t>((upper[i] * (kWeightOne - w) + lower[i] * w + (1 << (2 * kWeightBits - 1))) >>
                                    (2 * kWeightBits));
  }
  return out;
}

}  // namespace

Image resize_bilinear(const Image& image, int64_t width, int64_t height) {
  VISION_CHECK(width > 0 && height > 0 && !image.empty(), "resize: cannot resize a {}×{} image to {}×{}", image.width,
               image.height, width, height);
  if (width == image.width && height == image.height) return image;
  return resize_rows([&](int64_t y) { return image.row(y); }, image.width, image.height, image.channels, false, width,
                     height);
}

Image resize_bilinear(const ImageView& view, int64_t width, int64_t height) {
  check_image_view(view, "resize");
  VISION_CHECK(width > 0 && height > 0, "resize: cannot resize a {}×{} image to {}×{}", view.width, view.height, width,
               height);
  if (width == view.width && height == view.height) return to_image(view);
  return resize_rows([&](int64_t y) { return view.row(y); }, view.width, view.height, 3,
                     view.order == ChannelOrder::bgr, width, height);
}

void check_image_view(const ImageView& v, const std::string& what) {
  constexpr int64_t kMaxSide = int64_t{1} << 31;
  VISION_CHECK(v.pixels != nullptr && v.width > 0 && v.height > 0 && v.width <= kMaxSide && v.height <= kMaxSide,
               "{}: an image view needs pixels and a size of 1 to 2^31 pixels a side, got {}×{}{}", what, v.width,
               v.height, v.pixels ? "" : " and no pixels");
  VISION_CHECK(v.stride == 0 || v.stride >= v.width * 3,
               "{}: the row stride {} is less than a row's {} bytes ({} pixels × 3)", what, v.stride, v.width * 3,
               v.width);
}

Image to_image(const ImageView& v) {
  check_image_view(v, "to_image");
  Image out(v.width, v.height, 3);
  const auto row_bytes = static_cast<size_t>(v.width * 3);
  for (int64_t y = 0; y < v.height; ++y) {
    const uint8_t* src = v.row(y);
    uint8_t* dst = out.row(y);
    if (v.order == ChannelOrder::rgb) {
      std::copy_n(src, row_bytes, dst);
    } else {
      for (size_t i = 0; i < row_bytes; i += 3) dst[i] = src[i + 2], dst[i + 1] = src[i + 1], dst[i + 2] = src[i];
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Input tensors

namespace {

// dst = item `index` of an f32 host batch [N, 3, H, W] in its layout; src = H · W interleaved RGB pixels.
void write_normalized_pixels(const uint8_t* src, const core::Tensor& batch, int64_t index) {
  static const std::array<float, 256> kScaled = [] {
    std::array<float, 256> s{};
    for (int i = 0; i < 256; ++i) s[static_cast<size_t>(i)] = static_cast<float>(i) / 255.0f;
    return s;
  }();
  const int64_t plane = batch.dim(2) * batch.dim(3);
  float* dst = batch.data<float>() + index * 3 * plane;
  if (batch.layout() == core::Layout::nhwc) {
    for (int64_t i = 0; i < 3 * plane; ++i) dst[i] = kScaled[src[i]];
    return;
  }
  for (int64_t i = 0; i < plane; ++i)
    for (int64_t ch = 0; ch < 3; ++ch) dst[ch * plane + i] = kScaled[src[i * 3 + ch]];
}

}  // namespace

void write_normalized(const Image& image, const core::Tensor& batch, int64_t index) {
  VISION_CHECK(batch.defined() && batch.dtype() == core::DType::f32 && batch.device() == core::Device::cpu &&
                   batch.rank() == 4 && batch.dim(1) == 3,
               "write_normalized: the batch must be an f32 host tensor [N, 3, H, W], got {}",
               batch.defined() ? batch.str() : std::string("an undefined tensor"));
  const int64_t h = batch.dim(2), w = batch.dim(3);
  VISION_CHECK(index >= 0 && index < batch.dim(0), "write_normalized: index {} is outside the batch of {}", index,
               batch.dim(0));
  VISION_CHECK(image.channels == 3 && image.width == w && image.height == h,
               "write_normalized: a {}×{} image of {} channels does not fit a batch of {}×{} RGB images", image.width,
               image.height, image.channels, w, h);
  write_normalized_pixels(image.pixels.data(), batch, index);
}

core::Tensor normalize_u8_batch(const core::Tensor& pixels, core::Layout layout) {
  VISION_CHECK(pixels.defined() && pixels.dtype() == core::DType::u8 && pixels.device() == core::Device::cpu &&
                   pixels.rank() == 4 && pixels.dim(3) == 3,
               "normalize_u8_batch: the images must be a u8 host tensor [N, H, W, 3], got {}",
               pixels.defined() ? pixels.str() : std::string("an undefined tensor"));
  const int64_t n = pixels.dim(0), h = pixels.dim(1), w = pixels.dim(2);
  core::Tensor batch = core::Tensor::zeros(core::Shape{n, 3, h, w}, core::DType::f32, layout);
  for (int64_t i = 0; i < n; ++i) write_normalized_pixels(pixels.data<uint8_t>() + i * h * w * 3, batch, i);
  return batch;
}

core::Tensor images_to_tensor(std::span<const Image> images, core::Layout layout) {
  VISION_CHECK(!images.empty(), "images_to_tensor: no images");
  const int64_t n = static_cast<int64_t>(images.size());
  core::Tensor batch =
      core::Tensor::zeros(core::Shape{n, 3, images[0].height, images[0].width}, core::DType::f32, layout);
  for (int64_t i = 0; i < n; ++i) write_normalized(images[static_cast<size_t>(i)], batch, i);
  return batch;
}

}  // namespace vision::data
