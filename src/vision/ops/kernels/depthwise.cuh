// Depthwise convolution for inference in NHWC: y[b, oy, ox, c] = act(bias[c] + Σ_{ky, kx} w[ky, kx, c] ·
// x[b, oy·STRIDE − pad + ky, ox·STRIDE − pad + kx, c]) (zero outside the image), act the identity or SiLU; the
// weights [K, K, C] (tap-major, so a thread's VEC channels of a tap are one load) and bias in f32 (BatchNorm folded
// into them), arithmetic in f32, one rounding to T. cuDNN's grouped convolution is slow in NHWC at YOLO26's
// depthwise shapes (the PSA's pe, the detect head's DWConv).
#pragma once

#include "vision/cuda/kernel_common.cuh"

namespace vk {
// VEC consecutive elements of T, loaded and stored as one access (VEC · sizeof(T) ∈ {2, 4, 8, 16} bytes).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};
}  // namespace vk

// One thread per VEC consecutive channels of one output pixel (channels % VEC == 0, x and y VEC-aligned).
template <typename T, int K, int STRIDE, int SILU, int VEC>
__global__ void depthwise_conv2d_nhwc(const T* __restrict__ x, const float* __restrict__ weight,
                                      const float* __restrict__ bias, T* __restrict__ y, int batch, int height,
                                      int width, int channels, int out_h, int out_w, int pad) {
  using P = vk::Pack<T, VEC>;
  const int groups = channels / VEC;
  const long long total = static_cast<long long>(batch) * out_h * out_w * groups;
  for (long long i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int c0 = static_cast<int>(i % groups) * VEC;
    const long long pixel = i / groups;
    const int ox = static_cast<int>(pixel % out_w), oy = static_cast<int>((pixel / out_w) % out_h);
    const long long b = pixel / (static_cast<long long>(out_w) * out_h);
    float acc[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[v] = bias != nullptr ? bias[c0 + v] : 0.0f;
#pragma unroll
    for (int ky = 0; ky < K; ++ky) {
      const int iy = oy * STRIDE - pad + ky;
      if (iy < 0 || iy >= height) continue;
#pragma unroll
      for (int kx = 0; kx < K; ++kx) {
        const int ix = ox * STRIDE - pad + kx;
        if (ix < 0 || ix >= width) continue;
        const P p = *reinterpret_cast<const P*>(x + ((b * height + iy) * width + ix) * channels + c0);
        constexpr int WV = VEC % 4 == 0 ? 4 : 1;  // weights in float4 where VEC allows (channels % 4 == 0 then)
        using W = vk::Pack<float, WV>;
        const float* tap = weight + (ky * K + kx) * channels + c0;
#pragma unroll
        for (int v0 = 0; v0 < VEC; v0 += WV) {
          const W w = *reinterpret_cast<const W*>(tap + v0);
#pragma unroll
          for (int v = 0; v < WV; ++v) acc[v0 + v] = fmaf(vk::to_float(p.v[v0 + v]), w.v[v], acc[v0 + v]);
        }
      }
    }
    P out;
#pragma unroll
    for (int v = 0; v < VEC; ++v) out.v[v] = vk::from_float<T>(SILU ? acc[v] / (1.0f + expf(-acc[v])) : acc[v]);
    *reinterpret_cast<P*>(y + pixel * channels + c0) = out;
  }
}
