// Image — 8-bit pixels in HWC order, and image IO: JPEG (TurboJPEG) and PNG (libspng) decoding to upright 8-bit RGB,
// JPEG and PNG encoding, bilinear resizing, and the normalised float input tensor of a batch.
//
// Decoding follows YOLO26.md ("Preprocessing for predict"), as OpenCV's imread in colour mode reads for ultralytics:
// grey → three equal channels, alpha dropped (not blended), palette expanded, 16-bit samples → their top 8 bits,
// 1/2/4-bit grey scaled to 0–255; the image turned upright by its EXIF orientation (JPEG APP1 "Exif", PNG eXIf).
// The format is taken from the bytes, not the file name. Anything unreadable — a missing file, an empty, truncated or
// corrupt one (a libjpeg warning such as a premature end of data counts as corrupt), an unsupported format (BMP, GIF,
// WebP, TIFF, a CMYK JPEG), more than DecodeOptions::max_pixels pixels, a header that claims more pixels than the
// file can hold — is a vision::Error naming the file and the problem.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>


namespace vision::data {

// The largest image (width × height) decoding accepts by default: 160 megapixels, above the largest camera frames
// (151 megapixels); `--max-pixels` (DecodeOptions::max_pixels) sets another limit. Larger images are refused before
// any pixel memory is allocated.
inline constexpr int64_t kDefaultMaxPixels = 160'000'000;

// How decoding treats outside files. Besides max_pixels, a file whose size cannot hold the image its header claims is
// refused at once, before any allocation (a "decompression bomb": a PNG's image data expand at most 1032 times, a
// Huffman-coded JPEG needs at least one bit per MCU); a PNG's ancillary chunks other than eXIf (text, ICC profiles,
// …) are skipped unread, so their number and size cost nothing.
struct DecodeOptions {
  int64_t max_pixels = kDefaultMaxPixels;
  // When given, problems that do not stop decoding are added here, each naming the file (an EXIF block that cannot
  // be parsed: the image is used as stored, without rotation).
  std::vector<std::string>* warnings = nullptr;
};

// The width and height an image file's header gives, read without decoding the pixels.
struct ImageSize {
  int64_t width = 0, height = 0;
};

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

// The order of a 3-channel pixel's samples in a caller's buffer.
enum class ChannelOrder { rgb, bgr };

// A view of caller-owned 8-bit 3-channel pixels: `height` rows `stride` bytes apart, each `width` interleaved RGB or
// BGR pixels (a numpy array's rows, an OpenCV Mat's, a video frame's). It owns nothing: the pixels must outlive every
// call it is given to. An Image converts to a view of itself.
struct ImageView {
  const uint8_t* pixels = nullptr;
  int64_t width = 0, height = 0;
  int64_t stride = 0;  // bytes from the start of one row to the next; 0: width × 3 (rows back to back)
  ChannelOrder order = ChannelOrder::rgb;

  ImageView() = default;
  ImageView(const uint8_t* pixels, int64_t width, int64_t height, int64_t stride = 0,
            ChannelOrder order = ChannelOrder::rgb)
      : pixels(pixels), width(width), height(height), stride(stride), order(order) {}
  ImageView(const Image& image)  // NOLINT(google-explicit-constructor): an RGB Image is a view of itself
      : pixels(image.pixels.data()), width(image.width), height(image.height) {}

  int64_t row_bytes() const { return stride > 0 ? stride : width * 3; }
  const uint8_t* row(int64_t y) const { return pixels + y * row_bytes(); }
  // RGB rows back to back: usable as is where contiguous RGB is needed (a GPU upload), without a copy.
  bool contiguous_rgb() const { return order == ChannelOrder::rgb && row_bytes() == width * 3; }
};

// Throws vision::Error (naming `what`) unless the view has pixels, a positive size of at most 2^31 pixels a side, and
// a stride of at least width × 3.
void check_image_view(const ImageView& view, const std::string& what);
// The view's pixels as an RGB Image (a copy; the rows packed, BGR swapped).
Image to_image(const ImageView& view);

// ---------------------------------------------------------------------------------------------------------------
// Decoding

// The file's image as upright 8-bit RGB. A file larger than any image of options.max_pixels could be is refused
// before it is read.
Image read_image(const std::filesystem::path& path, const DecodeOptions& options = {});
// The image held in `bytes` (a JPEG or PNG file's contents); `name` (a path) is what errors call it.
Image decode_image(std::span<const uint8_t> bytes, const std::string& name, const DecodeOptions& options = {});
// The size in the header of a JPEG or PNG file's contents, stored (before any EXIF rotation); throws as
// decode_image does for a file whose header cannot be read.
ImageSize probe_image(std::span<const uint8_t> bytes, const std::string& name);
// The bytes of a file, or vision::Error naming it; a file over max_bytes is refused before it is read.
std::vector<uint8_t> read_file(const std::filesystem::path& path, uint64_t max_bytes);
// The most bytes an image file of at most max_pixels pixels can have (16-bit RGBA stored uncompressed, plus 64 MiB
// of metadata).
uint64_t max_image_file_bytes(int64_t max_pixels);

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
// Resizing

// `image` resized to width × height by bilinear interpolation with OpenCV's INTER_LINEAR geometry: destination
// pixel centres map to source coordinates (x + 0.5) · src_w / width − 0.5, clamped to the edge pixels (edges
// replicated); weights in 1/2048 steps, rounded to the nearest integer. The same size returns a copy.
Image resize_bilinear(const Image& image, int64_t width, int64_t height);
// The same for a view's pixels (RGB out, BGR swapped), without copying them first: equal to resizing to_image(view).
Image resize_bilinear(const ImageView& view, int64_t width, int64_t height);

// The normalised input tensors of images are in data/image_tensor.h.

}  // namespace vision::data
