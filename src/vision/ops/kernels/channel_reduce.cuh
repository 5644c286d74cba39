// Per-channel reductions of (N, C, H, W) activations in either memory order — device helpers shared by the BatchNorm
// and convolution-bias kernels: the rows × channels view, the block tiling, and fixed-order sums over a block.
#pragma once

#include "vision/cuda/kernel_common.cuh"

namespace vk {

// An activation seen as rows × channels: row r is one (n, h, w) position (r = n·inner + h·W + w, inner = H·W), and
// element (r, c) lies at r·C + c in NHWC, at (n·C + c)·inner + (h·W + w) in NCHW.
template <int NHWC>
__device__ __forceinline__ int64_t channel_offset(int64_t r, int64_t c, int64_t channels, int64_t inner) {
  if (NHWC) return r * channels + c;
  const int64_t n = r / inner;
  return (n * channels + c) * inner + (r - n * inner);
}

// The channel of the element at memory index i.
template <int NHWC>
__device__ __forceinline__ int64_t channel_at(int64_t i, int64_t channels, int64_t inner) {
  return NHWC ? i % channels : (i / inner) % channels;
}

// Blocks of 256 threads reduce a tile of kTile channels over one split of the rows: thread t handles channel
// t % kTile of the tile and rows lane, lane + kLanes, ... (lane = t / kTile). In NHWC a warp reads 32 consecutive
// channels of a row (coalesced); in NCHW the whole block walks one channel's contiguous rows.
template <int NHWC>
struct ChannelTiling {
  static constexpr int kThreads = 256;
  static constexpr int kTile = NHWC ? 32 : 1;
  static constexpr int kLanes = kThreads / kTile;
};

// Sums each of v[0..N) over the lanes of a ChannelTiling<NHWC> block, in a fixed order (deterministic): afterwards
// threads t < kTile hold their channel's totals. Every thread of the block must call it, once per kernel.
template <int NHWC, int N>
__device__ __forceinline__ void sum_over_lanes(float (&v)[N]) {
  constexpr int kThreads = ChannelTiling<NHWC>::kThreads, kTile = ChannelTiling<NHWC>::kTile;
  __shared__ float s[N][kThreads];
  const int t = static_cast<int>(threadIdx.x);
  for (int j = 0; j < N; ++j) s[j][t] = v[j];
  __syncthreads();
  // t = lane·kTile + channel: strides that are multiples of kTile add up lanes of one channel.
  for (int stride = kThreads / 2; stride >= kTile; stride /= 2) {
    if (t < stride)
      for (int j = 0; j < N; ++j) s[j][t] += s[j][t + stride];
    __syncthreads();
  }
  for (int j = 0; j < N; ++j) v[j] = s[j][t];
}

}  // namespace vk
