// The HSV jitter on the GPU — augment.h's apply_hsv on u8 RGB images in device memory, in place: OpenCV's 8-bit
// RGB → HSV (integer, 12 fractional bits), each channel through the image's lookup table, HSV → RGB in float, rounded
// half to even. The arithmetic is the CPU's operation for operation (float and double without contraction, the
// tables computed the same way), so the bytes equal apply_hsv's.
#pragma once

#include "vision/cuda/kernel_common.cuh"

namespace vision::data {

// One block per (image, stretch of pixels): images[i] holds `pixels` RGB pixels (3 bytes each, back to back, images
// one after another); records + i · 1024 is image i's hsv_record (hue, saturation and value tables, then 1 when the
// jitter applies). 256 threads a block: each first builds one entry of the shared tables.
template <typename T>
__global__ void hsv_jitter(T* __restrict__ images, int64_t pixels, const uint8_t* __restrict__ records) {
  __shared__ int sdiv[256], hdiv[256];
  __shared__ int sector[256];
  __shared__ float frac[256];
  __shared__ uint8_t lut[768];
  const uint8_t* record = records + int64_t(blockIdx.y) * 1024;
  if (record[768] == 0) return;  // the whole block: gains of exactly 1 leave the image as it is
  const int t = threadIdx.x;
  if (t < 256) {
    // augment.cpp's HsvTables: round((255 · 2^12) / t) and round((180 · 2^12) / (6 t)), halves away from zero.
    sdiv[t] = t == 0 ? 0 : static_cast<int>(llround(__ddiv_rn(255.0 * 4096.0, static_cast<double>(t))));
    hdiv[t] = t == 0 ? 0 : static_cast<int>(llround(__ddiv_rn(180.0 * 4096.0, __dmul_rn(6.0, static_cast<double>(t)))));
    // Its HueTable: the sector and the position in it of hue t (degrees / 2).
    float h = __fmul_rn(static_cast<float>(t), 6.0f / 180.0f);
    while (h >= 6) h = __fsub_rn(h, 6.0f);
    int s = static_cast<int>(floorf(h));
    h = __fsub_rn(h, static_cast<float>(s));
    if (s < 0 || s >= 6) s = 0, h = 0;
    sector[t] = s;
    frac[t] = h;
  }
  for (int i = t; i < 768; i += blockDim.x) lut[i] = record[i];
  __syncthreads();
  T* image = images + int64_t(blockIdx.y) * pixels * 3;
  const float kMagic = 12582912.0f;  // 1.5 · 2^23: adding it leaves no fraction bits (round half to even)
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + t; i < pixels; i += int64_t(gridDim.x) * blockDim.x) {
    T* p = image + i * 3;
    const int r = p[0], g = p[1], b = p[2];
    const int v = max(r, max(g, b)), vmin = min(r, min(g, b)), diff = v - vmin;
    const int s8 = (diff * sdiv[v] + (1 << 11)) >> 12;
    int h8 = v == r ? g - b : v == g ? b - r + 2 * diff : r - g + 4 * diff;
    h8 = (h8 * hdiv[diff] + (1 << 11)) >> 12;
    h8 += h8 < 0 ? 180 : 0;
    const int hj = lut[h8], sj = lut[256 + s8], vj = lut[512 + v];
    const float sf = __fmul_rn(static_cast<float>(sj), 1.0f / 255.0f), vf = __fmul_rn(static_cast<float>(vj), 1.0f / 255.0f);
    const float f = frac[hj];
    const float vpqt[4] = {vf, __fmul_rn(vf, __fsub_rn(1.0f, sf)), __fmul_rn(vf, __fsub_rn(1.0f, __fmul_rn(sf, f))),
                           __fmul_rn(vf, __fsub_rn(1.0f, __fmul_rn(sf, __fsub_rn(1.0f, f))))};
    // Per sector, which of v, p, q, t red, green and blue take (augment.cpp's kPick), 2 bits each, 6 a sector.
    const unsigned long long kPicks = 0x90727149cull;
    const int sec = sector[hj];
    for (int c = 0; c < 3; ++c) {
      const int pick = static_cast<int>((kPicks >> (sec * 6 + c * 2)) & 3);
      const float x = fminf(fmaxf(__fmul_rn(vpqt[pick], 255.0f), 0.0f), 255.0f);
      p[c] = static_cast<T>(static_cast<int>(__fsub_rn(__fadd_rn(x, kMagic), kMagic)));
    }
  }
}

}  // namespace vision::data
