// Conversions between element types and memory orders (the plan's cast and layout steps, low-precision copies of
// parameters and the accumulation of their gradients), and the unscaling of gradients under loss scaling.
#pragma once

#include "vision/cuda/kernel_common.cuh"

namespace vk {
// The element type of dtype code C: 0 float, 1 __half, 2 __nv_bfloat16.
template <int C>
struct CodeType;
template <>
struct CodeType<0> {
  using type = float;
};
template <>
struct CodeType<1> {
  using type = __half;
};
template <>
struct CodeType<2> {
  using type = __nv_bfloat16;
};
}  // namespace vk

// dst[i] = src[source(i)] (or dst[i] += it when accumulate), converted from T to the type of code OUT, rounded to
// nearest even. relayout 0: the same order (any rank); 1: dst is NHWC, src NCHW of logical shape (n, c, h, w);
// 2: dst is NCHW, src NHWC. One element per thread.
template <typename T, int OUT>
__global__ void convert_copy(const T* __restrict__ src, void* __restrict__ dst_raw, int64_t total, int64_t c,
                             int64_t h, int64_t w, int32_t relayout, int32_t accumulate) {
  using U = typename vk::CodeType<OUT>::type;
  U* dst = static_cast<U*>(dst_raw);
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    int64_t j = i;
    if (relayout == 1) {  // i walks (n, h, w, c)
      const int64_t ci = i % c, wi = (i / c) % w, hi = (i / (c * w)) % h, ni = i / (c * w * h);
      j = ((ni * c + ci) * h + hi) * w + wi;
    } else if (relayout == 2) {  // i walks (n, c, h, w)
      const int64_t wi = i % w, hi = (i / w) % h, ci = (i / (w * h)) % c, ni = i / (w * h * c);
      j = ((ni * h + hi) * w + wi) * c + ci;
    }
    float v = vk::to_float(src[j]);
    if (accumulate) v += vk::to_float(dst[i]);
    dst[i] = vk::from_float<U>(v);
  }
}

// p[i] *= factor for i < n; *nonfinite is set to 1 when any result is inf or NaN (it is never cleared here).
template <typename T>
__global__ void scale_check_finite(T* __restrict__ p, int64_t n, float factor, int32_t* __restrict__ nonfinite) {
  bool bad = false;
  for (int64_t i = vk::thread_index(); i < n; i += vk::thread_count()) {
    const float v = vk::to_float(p[i]) * factor;
    p[i] = vk::from_float<T>(v);
    bad = bad || !isfinite(v);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *nonfinite = 1;
}

namespace vk {
// An unsigned type of B bytes (B = 1, 2, 4, 8, 16) for moving bytes in B-byte units.
template <int B>
struct Bytes;
template <>
struct Bytes<1> {
  using type = unsigned char;
};
template <>
struct Bytes<2> {
  using type = unsigned short;
};
template <>
struct Bytes<4> {
  using type = unsigned int;
};
template <>
struct Bytes<8> {
  using type = uint2;
};
template <>
struct Bytes<16> {
  using type = uint4;
};
}  // namespace vk

// `rows` runs of `width` units of VEC bytes each, from src (runs src_pitch units apart) to dst (dst_pitch apart):
// the slice of an axis that concat and split move (a channel slice in NHWC, where a run is a few dozen bytes and
// cudaMemcpy2D is slow). One unit per thread; the caller picks the widest VEC that divides the pointers, the width
// and the pitches.
template <typename T, int VEC>
__global__ void copy_rows(const T* __restrict__ src_raw, T* __restrict__ dst_raw, int64_t width, int64_t rows,
                          int64_t src_pitch, int64_t dst_pitch) {
  using U = typename vk::Bytes<VEC>::type;
  const U* src = reinterpret_cast<const U*>(src_raw);
  U* dst = reinterpret_cast<U*>(dst_raw);
  const int64_t total = width * rows;
  if (total <= 0x7fffffff) {  // 32-bit index arithmetic: a division per unit is most of the instruction count
    const uint32_t w = static_cast<uint32_t>(width), t = static_cast<uint32_t>(total);
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < t; i += gridDim.x * blockDim.x) {
      const uint32_t r = i / w, c = i - r * w;
      dst[r * dst_pitch + c] = src[r * src_pitch + c];
    }
    return;
  }
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t r = i / width, c = i - r * width;
    dst[r * dst_pitch + c] = src[r * src_pitch + c];
  }
}
