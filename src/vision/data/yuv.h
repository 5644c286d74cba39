// YUV 4:2:0 frames — what video decoders give (yuv420p from software H.264/HEVC/VP9, NV12 from NVDEC) — and their
// conversion to RGB. A video pipeline that hands these planes to the detector as they are (data::Yuv420View) skips
// the CPU colour conversion and sends half the bytes of RGB to the GPU, where the conversion is fused into the
// letterbox (letterbox_cuda.h: launch_letterbox_yuv_normalize). yuv420_to_rgb is that kernel's CPU twin: the GPU's
// letterbox of a frame equals letterbox(yuv420_to_rgb(frame)) byte for byte.
//
// The conversion is the integer one of ITU-R BT.601 or BT.709, in limited (16–235) or full range, as the stream says
// (FFmpeg's colorspace and color_range; BT.601 limited when it says nothing, as swscale assumes): 8 fractional bits,
// chroma taken from the 2 × 2 block's sample (no chroma interpolation), each channel rounded and clamped to 0–255.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vision/data/image.h"

namespace vision::data {

enum class YuvMatrix { bt601, bt709 };

// R = (s·(Y − o) + rv·(V − 128) + 128) >> 8, G = (s·(Y − o) − gu·(U − 128) − gv·(V − 128) + 128) >> 8,
// B = (s·(Y − o) + bu·(U − 128) + 128) >> 8, each clamped to [0, 255] (an arithmetic shift: floor).
struct YuvCoefficients {
  int32_t y_offset, y_scale, r_v, g_u, g_v, b_u;
};
YuvCoefficients yuv_coefficients(YuvMatrix matrix, bool full_range);

// A view of caller-owned 4:2:0 planes: Y (width × height, rows y_pitch bytes apart) and chroma (⌈width/2⌉ ×
// ⌈height/2⌉ samples, rows uv_pitch bytes apart; a U sample and its V sample are uv_step bytes from the previous
// pixel's: 1 for planar I420, 2 for NV12, whose interleaved plane gives u and v = u + 1). `device`: the planes are in
// CUDA device memory (an NVDEC frame kept on the GPU). It owns nothing.
struct Yuv420View {
  const uint8_t* y = nullptr;
  const uint8_t* u = nullptr;
  const uint8_t* v = nullptr;
  int64_t width = 0, height = 0;
  int64_t y_pitch = 0, uv_pitch = 0;
  int32_t uv_step = 1;
  YuvMatrix matrix = YuvMatrix::bt601;
  bool full_range = false;
  bool device = false;

  int64_t chroma_width() const { return (width + 1) / 2; }
  int64_t chroma_height() const { return (height + 1) / 2; }
  bool nv12() const { return uv_step == 2 && v == u + 1; }
};

// Throws vision::Error (naming `what`) unless the view has planes, a positive even-or-odd size of at most 2^31 a side,
// pitches that hold a row (y_pitch ≥ width, uv_pitch ≥ uv_step·(⌈width/2⌉ − 1) + 1) and a uv_step of 1 or 2.
void check_yuv_view(const Yuv420View& view, const std::string& what);

// A 4:2:0 frame that owns its planes, packed back to back — Y rows of `width`, then chroma rows of ⌈width/2⌉
// samples: U then V (I420) or interleaved UV (NV12) — in host memory (`bytes`) or, for a frame decoded on the GPU,
// in device memory (`device_memory`, device_capacity bytes; a reader reuses it for a later frame when it has room).
struct Yuv420Image {
  int64_t width = 0, height = 0;
  YuvMatrix matrix = YuvMatrix::bt601;
  bool full_range = false;
  bool nv12 = false;
  std::vector<uint8_t> bytes;
  std::shared_ptr<void> device_memory;
  size_t device_capacity = 0;
  bool on_device = false;  // the planes are in device_memory, not bytes

  bool empty() const { return width == 0 || height == 0; }
  // The packed size of a width × height frame's planes.
  static size_t packed_bytes(int64_t width, int64_t height);
  Yuv420View view() const;
};

// The frame as an RGB image (the CPU twin of the GPU letterbox's conversion). Device planes are copied to the host
// first (CUDA builds; elsewhere an error).
Image yuv420_to_rgb(const Yuv420View& view);

}  // namespace vision::data
