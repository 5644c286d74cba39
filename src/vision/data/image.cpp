#include "vision/data/image.h"

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
  fail("cannot read image '{}': {}", name, fmt::format(f, std::forward<Args>(args)...));
}

void check_pixel_count(const std::string& name, int64_t width, int64_t height) {
  if (width <= 0 || height <= 0) unreadable(name, "the header gives a size of {}×{} pixels", width, height);
  if (width * height > kMaxImagePixels)
    unreadable(name, "{}×{} pixels is more than the {} this reader accepts; downscale the image", width, height,
               kMaxImagePixels);
}

// ---------------------------------------------------------------------------------------------------------------
// EXIF orientation

// The orientation tag (0x0112) of IFD 0 of an EXIF block in TIFF structure ("II*\0" or "MM\0*", then offsets from
// its start); 1 when there is none or the block is malformed (as viewers do, a bad tag is ignored, not an error).
int tiff_orientation(std::span<const uint8_t> tiff) {
  if (tiff.size() < 8) return 1;
  const bool little = tiff[0] == 'I' && tiff[1] == 'I';
  if (!little && !(tiff[0] == 'M' && tiff[1] == 'M')) return 1;
  auto u16 = [&](size_t at) -> uint32_t {
    return little ? tiff[at] | tiff[at + 1] << 8 : tiff[at] << 8 | tiff[at + 1];
  };
  auto u32 = [&](size_t at) -> uint64_t {
    return little ? u16(at) | uint64_t{u16(at + 2)} << 16 : uint64_t{u16(at)} << 16 | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  const uint64_t ifd = u32(4);
  if (ifd + 2 > tiff.size()) return 1;
  const uint32_t entries = u16(ifd);
  for (uint32_t i = 0; i < entries; ++i) {
    const uint64_t entry = ifd + 2 + 12 * uint64_t{i};
    if (entry + 12 > tiff.size()) return 1;
    if (u16(entry) != 0x0112) continue;
    const uint32_t type = u16(entry + 2);  // 3: SHORT, the value in the entry's first two value bytes
    const uint32_t value = u16(entry + 8);
    return type == 3 && u32(entry + 4) >= 1 && value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

// The EXIF orientation of a JPEG: its first APP1 segment holding "Exif\0\0" before the image data, or 1.
int jpeg_orientation(std::span<const uint8_t> jpeg) {
  size_t at = 2;  // after SOI
  while (at + 4 <= jpeg.size()) {
    if (jpeg[at] != 0xFF) return 1;
    const uint8_t marker = jpeg[at + 1];
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {  // markers without a length
      at += 2;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return 1;  // start of scan, end of image
    const size_t length = size_t{jpeg[at + 2]} << 8 | jpeg[at + 3];
    if (length < 2 || at + 2 + length > jpeg.size()) return 1;
    static constexpr std::array<uint8_t, 6> kExif = {'E', 'x', 'i', 'f', 0, 0};
    if (marker == 0xE1 && length >= 2 + kExif.size() && std::equal(kExif.begin(), kExif.end(), &jpeg[at + 4]))
      return tiff_orientation(jpeg.subspan(at + 4 + kExif.size(), length - 2 - kExif.size()));
    at += 2 + length;
  }
  return 1;
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

Image decode_jpeg(std::span<const uint8_t> bytes, const std::string& name) {
  constexpr auto kind = TurboJpeg::Kind::decompress;
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(TurboJpeg::get(kind), bytes.data(), bytes.size(), &width, &height, &subsampling,
                          &colorspace) != 0)
    unreadable(name, "truncated or corrupt JPEG header ({})", TurboJpeg::take_error(kind));
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK)
    unreadable(name, "a CMYK JPEG, which is not supported; convert it to RGB");
  check_pixel_count(name, width, height);
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
  return apply_exif_orientation(image, jpeg_orientation(bytes));
}

// ---------------------------------------------------------------------------------------------------------------
// PNG (libspng)

using SpngContext = std::unique_ptr<spng_ctx, decltype(&spng_ctx_free)>;

Image decode_png(std::span<const uint8_t> bytes, const std::string& name) {
  SpngContext ctx(spng_ctx_new(0), spng_ctx_free);
  VISION_CHECK(ctx, "image: libspng could not create a decoder (out of memory)");
  // A bad checksum in a critical chunk is an error; an ancillary chunk with one is dropped (as libpng does).
  spng_set_crc_action(ctx.get(), SPNG_CRC_ERROR, SPNG_CRC_DISCARD);
  spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size());
  auto check = [&](int status, std::string_view stage) {
    if (status == SPNG_OK) return;
    if (status == SPNG_IO_EOF) unreadable(name, "truncated PNG (the data ends in the {})", stage);
    unreadable(name, "corrupt PNG ({} in the {})", spng_strerror(status), stage);
  };
  spng_ihdr ihdr{};
  check(spng_get_ihdr(ctx.get(), &ihdr), "header");
  check_pixel_count(name, ihdr.width, ihdr.height);
  size_t size = 0;
  check(spng_decoded_image_size(ctx.get(), SPNG_FMT_RGB8, &size), "header");
  Image image(ihdr.width, ihdr.height, 3);
  VISION_CHECK(size == image.pixels.size(), "image: libspng gives {} bytes for a {}×{} RGB image", size, ihdr.width,
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
    image = apply_exif_orientation(image, tiff_orientation({reinterpret_cast<const uint8_t*>(exif.data), exif.length}));
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

Image decode_image(std::span<const uint8_t> bytes, const std::string& name) {
  static constexpr std::array<uint8_t, 8> kPng = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (bytes.empty()) unreadable(name, "the file is empty");
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return decode_jpeg(bytes, name);
  if (bytes.size() >= kPng.size() && std::equal(kPng.begin(), kPng.end(), bytes.begin()))
    return decode_png(bytes, name);
  unreadable(name, "{}; only JPEG and PNG images are supported", describe_other_format(bytes));
}

Image read_image(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) unreadable(name, "it is a directory");
  std::unique_ptr<FILE, decltype(&std::fclose)> file(std::fopen(name.c_str(), "rb"), std::fclose);
  if (!file) unreadable(name, "{}", std::strerror(errno));
  std::vector<uint8_t> bytes;
  std::array<uint8_t, 1 << 16> buffer;
  for (size_t got; (got = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0;)
    bytes.insert(bytes.end(), buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(got));
  if (std::ferror(file.get())) unreadable(name, "{}", std::strerror(errno));
  return decode_image(bytes, name);
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

}  // namespace

Image resize_bilinear(const Image& image, int64_t width, int64_t height) {
  VISION_CHECK(width > 0 && height > 0 && !image.empty(), "resize: cannot resize a {}×{} image to {}×{}", image.width,
               image.height, width, height);
  if (width == image.width && height == image.height) return image;
  const int64_t c = image.channels;
  const Taps tx = bilinear_taps(image.width, width), ty = bilinear_taps(image.height, height);
  Image out(width, height, c);
  // Each output row: both source rows interpolated horizontally (×2^11), then vertically (×2^22), rounded.
  std::vector<int32_t> upper(static_cast<size_t>(width * c)), lower(upper.size());
  auto horizontal = [&](int64_t sy, std::vector<int32_t>& dst) {
    const uint8_t* src = image.row(sy);
    for (int64_t x = 0; x < width; ++x) {
      const auto k = static_cast<size_t>(x);
      const uint8_t* a = src + tx.first[k] * c;
      const uint8_t* b = src + tx.second[k] * c;
      const int32_t w = tx.weight[k];
      for (int64_t ch = 0; ch < c; ++ch) dst[static_cast<size_t>(x * c + ch)] = a[ch] * (kWeightOne - w) + b[ch] * w;
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

// ---------------------------------------------------------------------------------------------------------------
// Input tensors

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
  static const std::array<float, 256> kScaled = [] {
    std::array<float, 256> s{};
    for (int i = 0; i < 256; ++i) s[static_cast<size_t>(i)] = static_cast<float>(i) / 255.0f;
    return s;
  }();
  const int64_t plane = h * w;
  float* dst = batch.data<float>() + index * 3 * plane;
  const uint8_t* src = image.pixels.data();
  if (batch.layout() == core::Layout::nhwc) {
    for (int64_t i = 0; i < 3 * plane; ++i) dst[i] = kScaled[src[i]];
    return;
  }
  for (int64_t i = 0; i < plane; ++i)
    for (int64_t ch = 0; ch < 3; ++ch) dst[ch * plane + i] = kScaled[src[i * 3 + ch]];
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
