#include "vision/ops/kernels/channel_reduce.h"

#include <algorithm>

#include "vision/core/error.h"

namespace vision::ops::kernels {

namespace {
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kMinRowsPerSplit = 1024;
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int64_t ChannelReduction::rows_in_split(int64_t s) const {
  return std::clamp<int64_t>(rows - s * rows_per_split, 0, rows_per_split);
}

ChannelReduction channel_reduction(const core::Shape& x, core::Layout layout) {
  VISION_CHECK(x.rank() == 4 && x.is_concrete() && x.numel() > 0,
               "a per-channel reduction needs a non-empty concrete (N, C, H, W) shape, got {}", x.str());
  ChannelReduction r;
  r.channels = x[1];
  r.inner = x[2] * x[3];
  r.rows = x[0] * r.inner;
  r.tile = layout == core::Layout::nhwc ? 32 : 1;
  r.tiles = ceil_div(r.channels, r.tile);
  const int64_t wanted = std::max<int64_t>(1, ceil_div(kTargetBlocks, r.tiles));
  const int64_t most = std::max<int64_t>(1, r.rows / kMinRowsPerSplit);
  r.rows_per_split = ceil_div(r.rows, std::min(wanted, most));
  r.splits = ceil_div(r.rows, r.rows_per_split);  // no empty split
  return r;
}

}  // namespace vision::ops::kernels
