#include "vision/data/yuv.h"

#include <algorithm>

#include "vision/core/error.h"

#ifdef VISION_HAS_CUDA
#include <cuda_runtime_api.h>

#include "vision/cuda/check.h"
#endif

namespace vision::data {

YuvCoefficients yuv_coefficients(YuvMatrix matrix, bool full_range) {
  // The matrices' coefficients × 256, rounded: limited range scales Y by 255/219 and chroma by 255/224.
  if (full_range)
    return matrix == YuvMatrix::bt709 ? YuvCoefficients{0, 256, 403, 48, 120, 475}
                                      : YuvCoefficients{0, 256, 359, 88, 183, 454};
  return matrix == YuvMatrix::bt709 ? YuvCoefficients{16, 298, 459, 55, 136, 541}
                                    : YuvCoefficients{16, 298, 409, 100, 208, 516};
}

void check_yuv_view(const Yuv420View& v, const std::string& what) {
  constexpr int64_t kMaxSide = int64_t{1} << 31;
  VISION_CHECK(v.y && v.u && v.v && v.width > 0 && v.height > 0 && v.width <= kMaxSide && v.height <= kMaxSide,
               "{}: a YUV 4:2:0 view needs its three plane pointers and a size of 1 to 2^31 pixels a side, got {}×{}",
               what, v.width, v.height);
  VISION_CHECK(v.uv_step == 1 || v.uv_step == 2, "{}: the chroma step must be 1 (I420) or 2 (NV12), got {}", what,
               v.uv_step);
  VISION_CHECK(v.y_pitch >= v.width, "{}: the Y pitch {} is less than the width {}", what, v.y_pitch, v.width);
  VISION_CHECK(v.uv_pitch >= v.uv_step * (v.chroma_width() - 1) + 1,
               "{}: the chroma pitch {} is less than a chroma row ({} samples, step {})", what, v.uv_pitch,
               v.chroma_width(), v.uv_step);
}

size_t Yuv420Image::packed_bytes(int64_t width, int64_t height) {
  return static_cast<size_t>(width * height + 2 * ((width + 1) / 2) * ((height + 1) / 2));
}

Yuv420View Yuv420Image::view() const {
  const size_t need = packed_bytes(width, height);
  VISION_CHECK(!empty() && (on_device ? device_memory != nullptr && device_capacity >= need : bytes.size() >= need),
               "Yuv420Image: {} bytes cannot hold a {}×{} frame's planes", on_device ? device_capacity : bytes.size(),
               width, height);
  const auto* base = on_device ? static_cast<const uint8_t*>(device_memory.get()) : bytes.data();
  Yuv420View v;
  v.width = width, v.height = height, v.matrix = matrix, v.full_range = full_range, v.device = on_device;
  v.y = base;
  v.y_pitch = width;
  const int64_t cw = (width + 1) / 2, ch = (height + 1) / 2;
  v.u = base + width * height;
  if (nv12) {
    v.uv_step = 2, v.uv_pitch = 2 * cw, v.v = v.u + 1;
  } else {
    v.uv_step = 1, v.uv_pitch = cw, v.v = v.u + cw * ch;
  }
  return v;
}

namespace {

// The planes of a device view copied to a packed host frame (the same layout as Yuv420Image's bytes).
Yuv420Image yuv_to_host(const Yuv420View& v) {
#ifdef VISION_HAS_CUDA
  Yuv420Image host;
  host.width = v.width, host.height = v.height, host.matrix = v.matrix, host.full_range = v.full_range;
  host.nv12 = v.nv12();
  host.bytes.resize(Yuv420Image::packed_bytes(v.width, v.height));
  const Yuv420View h = host.view();
  const auto cw = static_cast<size_t>(v.chroma_width()), ch = static_cast<size_t>(v.chroma_height());
  VISION_CUDA_CHECK(cudaMemcpy2D(const_cast<uint8_t*>(h.y), static_cast<size_t>(h.y_pitch), v.y,
                                 static_cast<size_t>(v.y_pitch), static_cast<size_t>(v.width),
                                 static_cast<size_t>(v.height), cudaMemcpyDeviceToHost));
  if (host.nv12) {
    VISION_CUDA_CHECK(cudaMemcpy2D(const_cast<uint8_t*>(h.u), static_cast<size_t>(h.uv_pitch), v.u,
                                   static_cast<size_t>(v.uv_pitch), 2 * cw, ch, cudaMemcpyDeviceToHost));
  } else {
    VISION_CHECK(v.uv_step == 1, "yuv420_to_rgb: a device frame's chroma is NV12 or planar (step 1), got step {}",
                 v.uv_step);
    VISION_CUDA_CHECK(cudaMemcpy2D(const_cast<uint8_t*>(h.u), cw, v.u, static_cast<size_t>(v.uv_pitch), cw, ch,
                                   cudaMemcpyDeviceToHost));
    VISION_CUDA_CHECK(cudaMemcpy2D(const_cast<uint8_t*>(h.v), cw, v.v, static_cast<size_t>(v.uv_pitch), cw, ch,
                                   cudaMemcpyDeviceToHost));
  }
  return host;
#else
  fail("yuv420_to_rgb: the frame is in GPU memory, and this build has no CUDA");
#endif
}

}  // namespace

Image yuv420_to_rgb(const Yuv420View& view) {
  check_yuv_view(view, "yuv420_to_rgb");
  if (view.device) {
    const Yuv420Image host = yuv_to_host(view);
    return yuv420_to_rgb(host.view());
  }
  const YuvCoefficients k = yuv_coefficients(view.matrix, view.full_range);
  Image out(view.width, view.height, 3);
  const auto clamp = [](int32_t x) { return static_cast<uint8_t>(std::clamp(x >> 8, 0, 255)); };
  for (int64_t y = 0; y < view.height; ++y) {
    const uint8_t* yr = view.y + y * view.y_pitch;
    const uint8_t* ur = view.u + (y / 2) * view.uv_pitch;
    const uint8_t* vr = view.v + (y / 2) * view.uv_pitch;
    uint8_t* o = out.row(y);
    for (int64_t x = 0; x < view.width; ++x) {
      const int32_t c = k.y_scale * (yr[x] - k.y_offset) + 128;
      const int32_t d = ur[(x / 2) * view.uv_step] - 128, e = vr[(x / 2) * view.uv_step] - 128;
      o[3 * x] = clamp(c + k.r_v * e);
      o[3 * x + 1] = clamp(c - k.g_u * d - k.g_v * e);
      o[3 * x + 2] = clamp(c + k.b_u * d);
    }
  }
  return out;
}

}  // namespace vision::data
