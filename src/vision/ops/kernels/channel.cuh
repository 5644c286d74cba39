// Channel-range kernels on NCHW tensors — concat (each input copied into its channel range of the output), channel
// slice (split) and their backward passes.
#pragma once

#include "vision/cuda/kernel_common.cuh"

// y[b, y_offset + c, s] = x[b, x_offset + c, s] for b < batch, c < channels, s < hw, where x has x_channels channels
// and y has y_channels. Concat forward (one launch per input), concat backward (the input's range of the output
// gradient) and slice forward are all this copy. For each b the range is one contiguous run of channels · hw
// elements on both sides; runs are copied 16 bytes at a time when every run starts 16-byte aligned.
template <typename T>
__global__ void channel_copy(const T* __restrict__ x, T* __restrict__ y, int64_t batch, int64_t channels, int64_t hw,
                             int64_t x_channels, int64_t x_offset, int64_t y_channels, int64_t y_offset) {
  const int64_t run = channels * hw;
  const int64_t first = vk::thread_index(), stride = vk::thread_count();
  constexpr int K = vk::Vec16<T>::kSize;
  const bool vector = vk::aligned16(x) && vk::aligned16(y) && run % K == 0 && (x_channels * hw) % K == 0 &&
                      (x_offset * hw) % K == 0 && (y_channels * hw) % K == 0 && (y_offset * hw) % K == 0;
  if (vector) {
    typedef vk::Vec16<T> V;
    const int64_t run_v = run / K;
    for (int64_t i = first; i < batch * run_v; i += stride) {
      const int64_t b = i / run_v, r = i - b * run_v;
      reinterpret_cast<V*>(y + (b * y_channels + y_offset) * hw)[r] =
          reinterpret_cast<const V*>(x + (b * x_channels + x_offset) * hw)[r];
    }
  } else {
    for (int64_t i = first; i < batch * run; i += stride) {
      const int64_t b = i / run, r = i - b * run;
      y[(b * y_channels + y_offset) * hw + r] = x[(b * x_channels + x_offset) * hw + r];
    }
  }
}

// Backward of a channel slice y = x[:, offset : offset + channels]: writes all of dx, dy in the slice's range and
// zero elsewhere. dx has x_channels channels, dy has channels.
template <typename T>
__global__ void channel_slice_backward(const T* __restrict__ dy, T* __restrict__ dx, int64_t batch, int64_t channels,
                                       int64_t hw, int64_t x_channels, int64_t offset) {
  const int64_t total = batch * x_channels * hw;
  for (int64_t i = vk::thread_index(); i < total; i += vk::thread_count()) {
    const int64_t s = i % hw, c = (i / hw) % x_channels, b = i / (hw * x_channels);
    const int64_t k = c - offset;
    dx[i] = (k >= 0 && k < channels) ? dy[(b * channels + k) * hw + s] : vk::from_float<T>(0.0f);
  }
}
