// Letterbox of a YUV 4:2:0 frame on the GPU — a decoded video frame's planes (I420 or NV12, on the device or uploaded
// as they are), converted to RGB and letterboxed into one item of the model's input batch in one pass. Each output
// pixel converts the four source pixels its bilinear taps read, with yuv.h's integer conversion, then resizes as
// letterbox_normalize does: the result equals letterbox_normalize of yuv420_to_rgb(frame), which equals the CPU's
// letterbox of it.
#pragma once

#include "vision/data/letterbox.cuh"

namespace vision::data {

struct YuvConvert {
  int y_offset, y_scale, r_v, g_u, g_v, b_u;
};

// Pixel (x, y) of the frame as RGB (yuv.h: yuv420_to_rgb's arithmetic).
__device__ __forceinline__ void yuv_pixel(const uint8_t* __restrict__ y_plane, int64_t y_pitch,
                                          const uint8_t* __restrict__ u_plane, const uint8_t* __restrict__ v_plane,
                                          int64_t uv_pitch, int32_t uv_step, int64_t x, int64_t y,
                                          const YuvConvert& k, int rgb[3]) {
  const int c = k.y_scale * (static_cast<int>(y_plane[y * y_pitch + x]) - k.y_offset) + 128;
  const int64_t chroma = (y >> 1) * uv_pitch + (x >> 1) * uv_step;
  const int d = static_cast<int>(u_plane[chroma]) - 128, e = static_cast<int>(v_plane[chroma]) - 128;
  rgb[0] = min(max((c + k.r_v * e) >> 8, 0), 255);
  rgb[1] = min(max((c - k.g_u * d - k.g_v * e) >> 8, 0), 255);
  rgb[2] = min(max((c + k.b_u * d) >> 8, 0), 255);
}

// One thread per pixel of the input_w × input_h canvas, as letterbox_normalize; the source is the src_w × src_h frame
// of planes y (pitch y_pitch) and u, v (pitch uv_pitch, step uv_step), converted with the coefficients given
// (yuv.h: YuvCoefficients).
template <typename T>
__global__ void letterbox_yuv_normalize(const uint8_t* __restrict__ y_plane, int64_t y_pitch,
                                        const uint8_t* __restrict__ u_plane, const uint8_t* __restrict__ v_plane,
                                        int64_t uv_pitch, int32_t uv_step, int64_t src_w, int64_t src_h,
                                        T* __restrict__ dst, int64_t input_w, int64_t input_h, int64_t resized_w,
                                        int64_t resized_h, int64_t pad_x, int64_t pad_y, int32_t nhwc,
                                        int32_t y_offset, int32_t y_scale, int32_t r_v, int32_t g_u, int32_t g_v,
                                        int32_t b_u) {
  const YuvConvert k{y_offset, y_scale, r_v, g_u, g_v, b_u};
  const int64_t plane = input_w * input_h;
  for (int64_t i = vk::thread_index(); i < plane; i += vk::thread_count()) {
    const int64_t x = i % input_w, y = i / input_w;
    const int64_t rx = x - pad_x, ry = y - pad_y;
    int v[3] = {114, 114, 114};
    if (rx >= 0 && rx < resized_w && ry >= 0 && ry < resized_h) {
      int64_t x0, x1, y0, y1;
      int wx, wy;
      letterbox_tap(src_w, resized_w, rx, x0, x1, wx);
      letterbox_tap(src_h, resized_h, ry, y0, y1, wy);
      int p00[3], p01[3], p10[3], p11[3];
      yuv_pixel(y_plane, y_pitch, u_plane, v_plane, uv_pitch, uv_step, x0, y0, k, p00);
      yuv_pixel(y_plane, y_pitch, u_plane, v_plane, uv_pitch, uv_step, x1, y0, k, p01);
      yuv_pixel(y_plane, y_pitch, u_plane, v_plane, uv_pitch, uv_step, x0, y1, k, p10);
      yuv_pixel(y_plane, y_pitch, u_plane, v_plane, uv_pitch, uv_step, x1, y1, k, p11);
      for (int c = 0; c < 3; ++c) v[c] = letterbox_blend(p00[c], p01[c], p10[c], p11[c], wx, wy);
    }
    letterbox_store(dst, i, plane, nhwc, v);
  }
}

}  // namespace vision::data
