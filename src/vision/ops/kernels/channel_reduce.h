// ChannelReduction — how the per-channel reduction kernels (BatchNorm statistics and gradients, convolution-bias
// gradients; channel_reduce.cuh) split an (N, C, H, W) activation over a grid, and the workspace their partial sums
// take. Pure host arithmetic: the plan sizes workspaces with it, the launch helpers use the same numbers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vision/core/shape.h"
#include "vision/core/tensor.h"

namespace vision::ops::kernels {

struct ChannelReduction {
  int64_t rows = 0;            // N·H·W positions per channel
  int64_t channels = 0;        // C
  int64_t inner = 0;           // H·W
  int64_t tile = 1;            // channels per block: 32 in NHWC (coalesced rows), 1 in NCHW
  int64_t tiles = 0;           // blocks along the channels (grid x)
  int64_t rows_per_split = 0;  // rows each block reduces (the last split may hold fewer, none holds zero)
  int64_t splits = 0;          // blocks along the rows (grid y)

  // Bytes of the f32 partial results: `values` floats per (split, channel).
  size_t workspace_bytes(int values) const {
    return static_cast<size_t>(splits) * static_cast<size_t>(channels) * static_cast<size_t>(values) * sizeof(float);
  }
  // Rows in split s: rows_per_split, less in the last split.
  int64_t rows_in_split(int64_t s) const;
};

// Threads per block of the reduction kernels (ChannelTiling in channel_reduce.cuh).
constexpr int kChannelReduceThreads = 256;

// The split of an activation of shape x (N, C, H, W, concrete, positive) in `layout`: enough blocks to fill a large GPU
// (about 1024) and at least 1024 rows per split, so that each thread reduces several rows. Throws vision::Error for a
// shape that is not rank 4 or is empty.
ChannelReduction channel_reduction(const core::Shape& x, core::Layout layout);

}  // namespace vision::ops::kernels
