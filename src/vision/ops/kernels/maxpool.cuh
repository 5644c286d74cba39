// 2-D max pooling of NCHW planes with a K × K window, stride S and zero-free padding P (padding never wins), forward
// (saving the argmax) and backward.
#pragma once

#include "vision/cuda/kernel_common.cuh"

// y[p, oh, ow] = max of x[p] over the window at (oh · S − P, ow · S − P), ho × wo outputs per plane. argmax[p, oh, ow]
// is the winner's index ih · w + iw within its plane: the first maximum in row-major order, or the last NaN if the
// window holds any (as PyTorch does).
template <typename T, int K, int S, int P>
__global__ void maxpool2d_forward(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ argmax,
                                  int64_t planes, int64_t h, int64_t w, int64_t ho, int64_t wo) {
  const int64_t total = planes * ho * wo;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t ow = i % wo, oh = (i / wo) % ho, p = i / (ho * wo);
    const T* plane = x + p * h * w;
    const int64_t h0 = oh * S - P, w0 = ow * S - P;
    float best = -vk::infinity();
    int32_t best_index = -1;
#pragma unroll
    for (int kh = 0; kh < K; ++kh) {
      const int64_t ih = h0 + kh;
      if (ih < 0 || ih >= h) continue;
#pragma unroll
      for (int kw = 0; kw < K; ++kw) {
        const int64_t iw = w0 + kw;
        if (iw < 0 || iw >= w) continue;
        const float v = vk::to_float(plane[ih * w + iw]);
        if (best_index < 0 || v > best || isnan(v)) {
          best = v;
          best_index = static_cast<int32_t>(ih * w + iw);
        }
      }
    }
    y[i] = vk::from_float<T>(best);
    argmax[i] = best_index;
  }
}

// dx[p, ih, iw] = sum of dy[p, oh, ow] over the outputs whose argmax is (ih, iw). Gathered per input element, in f32,
// in a fixed order: deterministic, no atomics.
template <typename T, int K, int S, int P>
__global__ void maxpool2d_backward(const T* __restrict__ dy, const int32_t* __restrict__ argmax, T* __restrict__ dx,
                                   int64_t planes, int64_t h, int64_t w, int64_t ho, int64_t wo) {
  const int64_t total = planes * h * w;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t iw = i % w, ih = (i / w) % h, p = i / (h * w);
    const int32_t self = static_cast<int32_t>(ih * w + iw);
    // Outputs whose window covers ih: oh · S − P <= ih <= oh · S − P + K − 1.
    const int64_t oh_lo = max(int64_t(0), (ih + P - K + S) / S), oh_hi = min(ho - 1, (ih + P) / S);
    const int64_t ow_lo = max(int64_t(0), (iw + P - K + S) / S), ow_hi = min(wo - 1, (iw + P) / S);
    const int64_t base = p * ho * wo;
    float sum = 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        const int64_t o = base + oh * wo + ow;
        if (argmax[o] == self) sum += vk::to_float(dy[o]);
      }
    dx[i] = vk::from_float<T>(sum);
  }
}
