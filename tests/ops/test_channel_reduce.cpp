// channel_reduction: how the per-channel reduction kernels split an activation (pure host arithmetic, no GPU).
#include <gtest/gtest.h>

#include "test_util.h"
#include "vision/ops/kernels/channel_reduce.h"

using namespace vision;
using core::Layout;
using core::Shape;
using ops::kernels::channel_reduction;
using ops::kernels::ChannelReduction;

namespace {

// Every row lies in exactly one split, no split is empty, and the grid is within CUDA's limits.
void expect_covers(const ChannelReduction& r, const Shape& x) {
  SCOPED_TRACE(x.str());
  EXPECT_EQ(r.rows, x[0] * x[2] * x[3]);
  EXPECT_EQ(r.channels, x[1]);
  EXPECT_EQ(r.inner, x[2] * x[3]);
  EXPECT_GE(r.splits, 1);
  EXPECT_LE(r.splits, 65535);
  EXPECT_EQ(r.tiles * r.tile >= r.channels && (r.tiles - 1) * r.tile < r.channels, true);
  int64_t covered = 0;
  for (int64_t s = 0; s < r.splits; ++s) {
    EXPECT_GT(r.rows_in_split(s), 0) << "split " << s;
    EXPECT_LE(r.rows_in_split(s), r.rows_per_split);
    covered += r.rows_in_split(s);
  }
  EXPECT_EQ(covered, r.rows);
  EXPECT_EQ(r.rows_in_split(r.splits), 0);
  EXPECT_EQ(r.workspace_bytes(2), static_cast<size_t>(r.splits * r.channels * 2) * sizeof(float));
}

}  // namespace

TEST(ChannelReduction, TilesChannelsByLayout) {
  const ChannelReduction nchw = channel_reduction(Shape{2, 70, 5, 7}, Layout::nchw);
  EXPECT_EQ(nchw.tile, 1);
  EXPECT_EQ(nchw.tiles, 70);
  const ChannelReduction nhwc = channel_reduction(Shape{2, 70, 5, 7}, Layout::nhwc);
  EXPECT_EQ(nhwc.tile, 32);
  EXPECT_EQ(nhwc.tiles, 3);
  // Few rows: one split each.
  EXPECT_EQ(nchw.splits, 1);
  EXPECT_EQ(nhwc.splits, 1);
  EXPECT_EQ(nchw.rows_per_split, 70);
}

TEST(ChannelReduction, SplitsLargeActivationsWithoutEmptySplits) {
  for (const Shape& x : {Shape{1, 1, 1, 1}, Shape{2, 3, 5, 7}, Shape{16, 64, 160, 160}, Shape{64, 16, 320, 320},
                         Shape{1, 1024, 20, 20}, Shape{3, 5, 1031, 977}, Shape{9, 1, 1, 1025}})
    for (const Layout layout : {Layout::nchw, Layout::nhwc}) {
      const ChannelReduction r = channel_reduction(x, layout);
      expect_covers(r, x);
      // At least 1024 rows per split once there are that many, and no more blocks than needed to fill a GPU.
      if (r.rows >= 1024) EXPECT_GE(r.rows_per_split, 1024) << x.str();
      EXPECT_LE(r.splits, std::max<int64_t>(1, (1024 + r.tiles - 1) / r.tiles)) << x.str();
    }
  // A large NCHW activation is split along its rows to fill the GPU.
  const ChannelReduction big = channel_reduction(Shape{16, 64, 160, 160}, Layout::nchw);
  EXPECT_EQ(big.splits, 16);
  EXPECT_EQ(big.rows_per_split, 16 * 160 * 160 / 16);
}

TEST(ChannelReduction, RejectsShapesThatAreNotActivations) {
  EXPECT_THROW(channel_reduction(Shape{2, 3, 4}, Layout::nchw), Error);
  EXPECT_THROW(channel_reduction(Shape{0, 3, 4, 4}, Layout::nchw), Error);
  EXPECT_THROW(channel_reduction(Shape{Shape::kAny, 3, 4, 4}, Layout::nhwc), Error);
}
