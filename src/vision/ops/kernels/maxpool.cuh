// 2-D max pooling of (N, C, H, W) activations in NCHW or NHWC with a K × K window, stride S and zero-free padding P
// (padding never wins), forward (saving the argmax) and backward.
#pragma once

#include "vision/cuda/kernel_common.cuh"

namespace vk {

// The maximum of one channel of one image over the window at (oh · S − P, ow · S − P): `image` points at its element
// (0, 0), `step` elements apart from one column to the next (1 in NCHW, C in NHWC). index is the winner's ih · w + iw:
// the first maximum in row-major order, or the last NaN if the window holds any (as PyTorch does).
template <int K, int S, int P, typename T>
__device__ __forceinline__ void maxpool_window(const T* __restrict__ image, int64_t step, int64_t h, int64_t w,
                                               int64_t oh, int64_t ow, float& best, int32_t& index) {
  const int64_t h0 = oh * S - P, w0 = ow * S - P;
  best = -infinity();
  index = -1;
#pragma unroll
  for (int kh = 0; kh < K; ++kh) {
    const int64_t ih = h0 + kh;
    if (ih < 0 || ih >= h) continue;
#pragma unroll
    for (int kw = 0; kw < K; ++kw) {
      const int64_t iw = w0 + kw;
      if (iw < 0 || iw >= w) continue;
      const float v = to_float(image[(ih * w + iw) * step]);
      if (index < 0 || v > best || isnan(v)) {
        best = v;
        index = static_cast<int32_t>(ih * w + iw);
      }
    }
  }
}

// The gradient of input (ih, iw) of one channel of one image: the sum of dy over the outputs whose argmax it is, in
// f32 and a fixed order (deterministic, no atomics). dy and argmax point at output (0, 0) of that channel and image,
// `step` elements apart from one output column to the next.
template <int K, int S, int P, typename T>
__device__ __forceinline__ float maxpool_gather(const T* __restrict__ dy, const int32_t* __restrict__ argmax,
                                                int64_t step, int64_t w, int64_t ih, int64_t iw, int64_t ho,
                                                int64_t wo) {
  const int32_t self = static_cast<int32_t>(ih * w + iw);
  // Outputs whose window covers ih: oh · S − P <= ih <= oh · S − P + K − 1.
  const int64_t oh_lo = max(int64_t(0), (ih + P - K + S) / S), oh_hi = min(ho - 1, (ih + P) / S);
  const int64_t ow_lo = max(int64_t(0), (iw + P - K + S) / S), ow_hi = min(wo - 1, (iw + P) / S);
  float sum = 0.0f;
  for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
    for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
      const int64_t o = (oh * wo + ow) * step;
      if (argmax[o] == self) sum += to_float(dy[o]);
    }
  return sum;
}

}  // namespace vk

// NCHW. y[n, c, oh, ow] = max of x[n, c] over the window, batch · channels · ho · wo outputs; argmax[n, c, oh, ow] is
// the winner's ih · w + iw within its plane. One thread per output.
template <typename T, int K, int S, int P>
__global__ void maxpool2d_forward(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ argmax,
                                  int64_t batch, int64_t channels, int64_t h, int64_t w, int64_t ho, int64_t wo) {
  const int64_t total = batch * channels * ho * wo;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t ow = i % wo, oh = (i / wo) % ho, p = i / (ho * wo);
    float best;
    int32_t index;
    vk::maxpool_window<K, S, P>(x + p * h * w, 1, h, w, oh, ow, best, index);
    y[i] = vk::from_float<T>(best);
    argmax[i] = index;
  }
}

// NHWC. As maxpool2d_forward with x, y and argmax in NHWC order: consecutive threads take consecutive channels.
template <typename T, int K, int S, int P>
__global__ void maxpool2d_forward_nhwc(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ argmax,
                                       int64_t batch, int64_t channels, int64_t h, int64_t w, int64_t ho, int64_t wo) {
  const int64_t total = batch * ho * wo * channels;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t c = i % channels, ow = (i / channels) % wo, oh = (i / (channels * wo)) % ho,
                  n = i / (channels * wo * ho);
    float best;
    int32_t index;
    vk::maxpool_window<K, S, P>(x + n * h * w * channels + c, channels, h, w, oh, ow, best, index);
    y[i] = vk::from_float<T>(best);
    argmax[i] = index;
  }
}

// NCHW. dx[n, c, ih, iw] = sum of dy[n, c, oh, ow] over the outputs whose argmax is (ih, iw); every element written.
// One thread per input element.
template <typename T, int K, int S, int P>
__global__ void maxpool2d_backward(const T* __restrict__ dy, const int32_t* __restrict__ argmax, T* __restrict__ dx,
                                   int64_t batch, int64_t channels, int64_t h, int64_t w, int64_t ho, int64_t wo) {
  const int64_t total = batch * channels * h * w;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t iw = i % w, ih = (i / w) % h, p = i / (h * w);
    dx[i] = vk::from_float<T>(vk::maxpool_gather<K, S, P>(dy + p * ho * wo, argmax + p * ho * wo, 1, w, ih, iw, ho, wo));
  }
}

// NHWC. As maxpool2d_backward with dy, argmax and dx in NHWC order.
template <typename T, int K, int S, int P>
__global__ void maxpool2d_backward_nhwc(const T* __restrict__ dy, const int32_t* __restrict__ argmax,
                                        T* __restrict__ dx, int64_t batch, int64_t channels, int64_t h, int64_t w,
                                        int64_t ho, int64_t wo) {
  const int64_t total = batch * h * w * channels;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t c = i % channels, iw = (i / channels) % w, ih = (i / (channels * w)) % h,
                  n = i / (channels * w * h);
    const int64_t base = n * ho * wo * channels + c;
    dx[i] = vk::from_float<T>(vk::maxpool_gather<K, S, P>(dy + base, argmax + base, channels, w, ih, iw, ho, wo));
  }
}
