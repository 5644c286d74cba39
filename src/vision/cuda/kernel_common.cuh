// Shared device helpers for vision's NVRTC kernels: fixed-width integers, f32 load/store conversions of the element
// types, grid-stride indexing and 16-byte vector accesses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifdef __CUDACC_RTC__
// NVRTC has no <cstdint>.
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <cstdint>
#endif

namespace vk {

// Element types are loaded as float, computed on in float, and stored rounded to nearest even.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float infinity() { return __int_as_float(0x7f800000); }

// This thread's index in a 1-D grid, and the grid's size: for grid-stride loops.
__device__ __forceinline__ int64_t thread_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t thread_count() { return int64_t(gridDim.x) * blockDim.x; }

// 16 bytes of T, the unit of vectorised loads and stores.
template <typename T>
struct alignas(16) Vec16 {
  enum { kSize = 16 / sizeof(T) };
  T v[kSize];
};

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uint64_t>(p) & 15) == 0; }

// out[j][i] = op(in[0][i], ..., in[NIn-1][i])[j] for i in [0, n), computed in float. A null out[j] is not written.
// Uses 16-byte accesses when every pointer is 16-byte aligned, element accesses otherwise and for the tail.
template <int NIn, int NOut, typename T, typename Op>
__device__ __forceinline__ void map(const T* const (&in)[NIn], T* const (&out)[NOut], int64_t n, Op op) {
  constexpr int K = Vec16<T>::kSize;
  bool vector = true;
  for (int j = 0; j < NIn; ++j) vector = vector && aligned16(in[j]);
  for (int j = 0; j < NOut; ++j) vector = vector && aligned16(out[j]);
  const int64_t first = thread_index(), stride = thread_count();
  int64_t done = 0;
  if (vector) {
    const int64_t n_vec = n / K;
    for (int64_t i = first; i < n_vec; i += stride) {
      Vec16<T> a[NIn], b[NOut];
      for (int j = 0; j < NIn; ++j) a[j] = reinterpret_cast<const Vec16<T>*>(in[j])[i];
      for (int k = 0; k < K; ++k) {
        float x[NIn], y[NOut];
        for (int j = 0; j < NIn; ++j) x[j] = to_float(a[j].v[k]);
        op(x, y);
        for (int j = 0; j < NOut; ++j) b[j].v[k] = from_float<T>(y[j]);
      }
      for (int j = 0; j < NOut; ++j)
        if (out[j]) reinterpret_cast<Vec16<T>*>(out[j])[i] = b[j];
    }
    done = n_vec * K;
  }
  for (int64_t i = done + first; i < n; i += stride) {
    float x[NIn], y[NOut];
    for (int j = 0; j < NIn; ++j) x[j] = to_float(in[j][i]);
    op(x, y);
    for (int j = 0; j < NOut; ++j)
      if (out[j]) out[j][i] = from_float<T>(y[j]);
  }
}

}  // namespace vk
