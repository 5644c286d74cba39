// Letterbox on the GPU — an 8-bit RGB image (HWC) resized bilinearly, padded with grey 114 and normalised to [0, 1]
// straight into one item of the model's input batch, in its dtype and layout. The resize is resize_bilinear's
// integer arithmetic (image.cpp: OpenCV's INTER_LINEAR geometry, weights in 1/2048 steps), so the bytes equal the
// CPU letterbox's and the values equal write_normalized's: the CPU and CUDA paths give the model the same input.
#pragma once

#include "vision/cuda/kernel_common.cuh"

namespace vision::data {

// Source taps of destination coordinate i for a src → dst resize: the first and second source index and the weight of
// the second in 1/2048 steps. Double arithmetic without contraction, as the CPU computes it.
__device__ __forceinline__ void letterbox_tap(int64_t src, int64_t dst, int64_t i, int64_t& lo, int64_t& hi, int& w) {
  const double scale = __ddiv_rn(static_cast<double>(src), static_cast<double>(dst));
  const double pos = __dsub_rn(__dmul_rn(__dadd_rn(static_cast<double>(i), 0.5), scale), 0.5);
  lo = static_cast<int64_t>(floor(pos));
  double frac = __dsub_rn(pos, static_cast<double>(lo));
  if (lo < 0) lo = 0, frac = 0.0;
  if (lo >= src - 1) lo = src - 1, frac = 0.0;
  hi = lo + 1 < src ? lo + 1 : src - 1;
  w = static_cast<int>(llround(__dmul_rn(frac, 2048.0)));
}

// One channel's four taps blended in 1/2048 steps and rounded (resize_bilinear's integer arithmetic).
__device__ __forceinline__ int letterbox_blend(int p00, int p01, int p10, int p11, int wx, int wy) {
  const int upper = p00 * (2048 - wx) + p01 * wx;
  const int lower = p10 * (2048 - wx) + p11 * wx;
  return (upper * (2048 - wy) + lower * wy + (1 << 21)) >> 22;
}

// Canvas pixel i's three samples / 255 (rounded to nearest) in T, into the batch item: [3, H, W] planes (nhwc = 0)
// or [H, W, 3] interleaved (nhwc = 1).
template <typename T>
__device__ __forceinline__ void letterbox_store(T* __restrict__ dst, int64_t i, int64_t plane, int32_t nhwc,
                                                const int v[3]) {
  for (int c = 0; c < 3; ++c) {
    const T value = vk::from_float<T>(__fdiv_rn(static_cast<float>(v[c]), 255.0f));
    if (nhwc)
      dst[i * 3 + c] = value;
    else
      dst[c * plane + i] = value;
  }
}

// One thread per pixel of the input_w × input_h canvas: three channels of `image` (src_w × src_h, RGB interleaved)
// resized to resized_w × resized_h at (pad_x, pad_y), grey 114 elsewhere, each sample / 255 (rounded to nearest) in
// T; dst is the batch item, [3, H, W] planes (nhwc = 0) or [H, W, 3] interleaved (nhwc = 1).
template <typename T>
__global__ void letterbox_normalize(const uint8_t* __restrict__ image, int64_t src_w, int64_t src_h,
                                    T* __restrict__ dst, int64_t input_w, int64_t input_h, int64_t resized_w,
                                    int64_t resized_h, int64_t pad_x, int64_t pad_y, int32_t nhwc) {
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
      const uint8_t* r0 = image + y0 * src_w * 3;
      const uint8_t* r1 = image + y1 * src_w * 3;
      for (int c = 0; c < 3; ++c)
        v[c] = letterbox_blend(r0[x0 * 3 + c], r0[x1 * 3 + c], r1[x0 * 3 + c], r1[x1 * 3 + c], wx, wy);
    }
    letterbox_store(dst, i, plane, nhwc, v);
  }
}

}  // namespace vision::data
