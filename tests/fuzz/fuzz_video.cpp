// libFuzzer target: a video file's bytes through data::VideoReader (libavformat's probing and demuxing, libavcodec's
// decoding, our checks around them), at most 8 frames with a limit of 2^16 pixels a frame, read as RGB or as the
// decoder's YUV 4:2:0 planes (the last byte chooses). Every frame it returns is an RGB image within the limit, or
// packed host planes of its size that yuv420_to_rgb converts; anything else must be a vision::Error. The file is read as a
// file alone (no other protocol: a playlist in it cannot reach the network or other files' pipes).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "vision/core/error.h"
#include "vision/data/video.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/vision-fuzz-video-" + std::to_string(getpid()) + ".mp4";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  constexpr int64_t kMaxPixels = 1 << 16;
  // Read as RGB, and as the decoder's YUV 4:2:0 planes (the CUDA path's reading; frames of other formats still RGB),
  // a byte of the input choosing which.
  try {
    vision::data::VideoReaderOptions options;
    options.max_pixels = kMaxPixels;
    options.yuv = size > 0 && (data[size - 1] & 1);
    vision::data::VideoReader reader(path, options);
    const vision::data::VideoInfo& info = reader.info();
    if (info.width < 1 || info.height < 1 || info.width * info.height > kMaxPixels) __builtin_trap();
    vision::data::VideoFrame frame;
    for (int i = 0; i < 8 && reader.read(frame); ++i) {
      if (!frame.yuv.empty()) {
        const vision::data::Yuv420Image& y = frame.yuv;
        if (!options.yuv || !frame.image.empty() || y.on_device || y.width * y.height > kMaxPixels ||
            y.bytes.size() != vision::data::Yuv420Image::packed_bytes(y.width, y.height))
          __builtin_trap();
        const vision::data::Image rgb = vision::data::yuv420_to_rgb(y.view());
        if (rgb.width != y.width || rgb.height != y.height) __builtin_trap();
        continue;
      }
      const vision::data::Image& im = frame.image;
      if (im.channels != 3 || im.width < 1 || im.height < 1 || im.width * im.height > kMaxPixels ||
          im.pixels.size() != static_cast<size_t>(im.width * im.height * 3))
        __builtin_trap();
    }
  } catch (const vision::Error&) {
  }
  return 0;
}
