// Image — 8-bit pixels in HWC order, and image IO: JPEG (TurboJPEG) and PNG (libspng) decoding to upright 8-bit RGB,
// JPEG and PNG encoding, bilinear resizing, and the normalised float input tensor of a batch.
//
// Decoding follows YOLO26.md ("Preprocessing for predict"), as OpenCV's imread in colour mode reads for ultralytics:
// grey → three equal channels, alpha dropped (not blended), palette expanded, 16-bit samples → their top 8 bits,
// 1/2/4-bit grey scaled to 0–255; the image turned upright by its EXIF orientation (JPEG APP1 "Exif", PNG eXIf).
// The format is taken from the bytes, not the file name. Anything unreadable — a missing file, an empty, truncated or
// corrupt one (a libjpeg warning such as a premature end of data counts as corrupt), an unsupported format (BMP, GIF,
// WebP, TIFF, a CMYK JPEG), more than kMaxImagePixels pixels — is a vision::Error naming the file and the problem.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "vision/core/tensor.h"

namespace vision::data {

// The largest image (width × height) decoding accepts; larger ones are refused before any pixel is decoded.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

// An 8-bit image, rows top to bottom, each row `width` pixels of `channels` interleaved samples (RGB when 3).
struct Image {
  int64_t width = 0, height = 0, channels = 3;
  std::vector<uint8_t> pixels;

  Image() = default;
  // A width × height image of `channels` samples per pixel, every sample `fill`.
  Image(int64_t width, int64_t height, int64_t channels = 3, uint8_t fill = 0);

  bool empty() const { return pixels.empty(); }
  uint8_t* row(int64_t y) { return pixels.data() + y * width * channels; }
  const uint8_t* row(int64_t y) const { return pixels.data() + y * width * channels; }
  uint8_t* at(int64_t x, int64_t y) { return row(y) + x * channels; }
  const uint8_t* at(int64_t x, int64_t y) const { return row(y) + x * channels; }
  bool operator==(const Image&) const = default;
};

// ---------------------------------------------------------------------------------------------------------------
// Decoding

// The file's image as upright 8-bit RGB.
Image read_image(const std::filesystem::path& path);
// The image held in `bytes` (a JPEG or PNG file's contents); `name` (a path) is what errors call it.
Image decode_image(std::span<const uint8_t> bytes, const std::string& name);

// The image as a viewer shows a stored image with EXIF orientation 1–8 (1 as stored, 2 mirrored, 3 turned half
// round, 4 flipped, 5 transposed, 6 turned a quarter clockwise, 7 transversed, 8 turned a quarter counter-clockwise);
// 5–8 swap width and height. Any other value leaves the image as it is (as viewers ignore a bad tag).
Image apply_exif_orientation(const Image& image, int orientation);

// ---------------------------------------------------------------------------------------------------------------
// Encoding (1- or 3-channel images)

struct JpegOptions {
  int quality = 95;              // 1–100
  bool subsample_chroma = true;  // 4:2:0 (what cameras and OpenCV write); false: 4:4:4
};
std::vector<uint8_t> encode_jpeg(const Image& image, const JpegOptions& options = {});
// Lossless: grey (1 channel) or RGB (3), 8-bit, deflate level 6.
std::vector<uint8_t> encode_png(const Image& image);
// Writes the image as the file name's extension says (.jpg / .jpeg, .png; any case); errors name the path.
void write_image(const Image& image, const std::filesystem::path& path, const JpegOptions& jpeg = {});
// Writes bytes to a file, or throws naming the path.
void write_file(const std::filesystem::path& path, std::span<const uint8_t> bytes);

// ---------------------------------------------------------------------------------------------------------------
// Resizing and input tensors

// `image` resized to width × height by bilinear interpolation with OpenCV's INTER_LINEAR geometry: destination
// pixel centres map to source coordinates (x + 0.5) · src_w / width − 0.5, clamped to the edge pixels (edges
// replicated); weights in 1/2048 steps, rounded to the nearest integer. The same size returns a copy.
Image resize_bilinear(const Image& image, int64_t width, int64_t height);

// Writes the 3-channel image into batch item `index` of `batch` — a host f32 tensor of shape [N, 3, H, W] in its own
// layout (NCHW: planes, NHWC: interleaved) — as sample / 255. The image must be W × H.
void write_normalized(const Image& image, const core::Tensor& batch, int64_t index);
// A new f32 [N, 3, H, W] host tensor in `layout` holding the images (all of one size) / 255.
core::Tensor images_to_tensor(std::span<const Image> images, core::Layout layout = core::Layout::nchw);

}  // namespace vision::data
