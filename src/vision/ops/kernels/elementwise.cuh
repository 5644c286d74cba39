// Element-wise kernels — SiLU, sigmoid, add and mul, forward and backward, over n contiguous elements of one dtype
// (float, __half, __nv_bfloat16), computed in f32.
#pragma once

#include "vision/cuda/kernel_common.cuh"

// y = x · sigmoid(x)
template <typename T>
__global__ void silu_forward(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  const T* in[1] = {x};
  T* out[1] = {y};
  vk::map(in, out, n, [](const float* a, float* b) { b[0] = a[0] / (1.0f + expf(-a[0])); });
}

// dx = dy · s · (1 + x · (1 − s)), s = sigmoid(x)
template <typename T>
__global__ void silu_backward(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx, int64_t n) {
  const T* in[2] = {x, dy};
  T* out[1] = {dx};
  vk::map(in, out, n, [](const float* a, float* b) {
    const float s = 1.0f / (1.0f + expf(-a[0]));
    b[0] = a[1] * s * (1.0f + a[0] * (1.0f - s));
  });
}

// y = 1 / (1 + e^−x)
template <typename T>
__global__ void sigmoid_forward(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  const T* in[1] = {x};
  T* out[1] = {y};
  vk::map(in, out, n, [](const float* a, float* b) { b[0] = 1.0f / (1.0f + expf(-a[0])); });
}

// dx = dy · y · (1 − y), from the forward's output y
template <typename T>
__global__ void sigmoid_backward(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx, int64_t n) {
  const T* in[2] = {y, dy};
  T* out[1] = {dx};
  vk::map(in, out, n, [](const float* a, float* b) { b[0] = a[1] * a[0] * (1.0f - a[0]); });
}

// y = a + b
template <typename T>
__global__ void add_forward(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, int64_t n) {
  const T* in[2] = {a, b};
  T* out[1] = {y};
  vk::map(in, out, n, [](const float* x, float* r) { r[0] = x[0] + x[1]; });
}

// da = dy, db = dy (either may be null: that input needs no gradient)
template <typename T>
__global__ void add_backward(const T* __restrict__ dy, T* __restrict__ da, T* __restrict__ db, int64_t n) {
  const T* in[1] = {dy};
  T* out[2] = {da, db};
  vk::map(in, out, n, [](const float* x, float* r) { r[0] = r[1] = x[0]; });
}

// y = a · b
template <typename T>
__global__ void mul_forward(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, int64_t n) {
  const T* in[2] = {a, b};
  T* out[1] = {y};
  vk::map(in, out, n, [](const float* x, float* r) { r[0] = x[0] * x[1]; });
}

// da = dy · b, db = dy · a (either may be null)
template <typename T>
__global__ void mul_backward(const T* __restrict__ dy, const T* __restrict__ a, const T* __restrict__ b,
                             T* __restrict__ da, T* __restrict__ db, int64_t n) {
  const T* in[3] = {dy, a, b};
  T* out[2] = {da, db};
  vk::map(in, out, n, [](const float* x, float* r) {
    r[0] = x[0] * x[2];
    r[1] = x[0] * x[1];
  });
}
