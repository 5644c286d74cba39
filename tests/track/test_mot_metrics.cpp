// MOT metrics (vision/track/mot_metrics.h) on hand-computed cases: perfect tracking; an identity switch (MOTA 0.9,
// IDF1 0.5, HOTA √0.5); misses and a false track; a partial overlap (MOTP, and HOTA counting only α ≤ IoU); the
// previous frame's pair kept over a better overlap; the MOT Challenge text format and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"
#include "vision/track/mot_metrics.h"

namespace vision::track {
namespace {

MotBox mot(int64_t frame, int64_t id, double x, double y, double w = 10, double h = 10) {
  return {.frame = frame, .id = id, .xyxy = {x, y, x + w, y + h}};
}

TEST(MotMetrics, PerfectTracking) {
  std::vector<MotBox> gt;
  for (int64_t f = 1; f <= 10; ++f) gt.push_back(mot(f, 1, 10.0 * f, 0)), gt.push_back(mot(f, 2, 0, 10.0 * f + 50));
  std::vector<MotBox> tracks = gt;
  for (MotBox& b : tracks) b.id += 100;
  const MotMetrics m = evaluate_mot(gt, tracks);
  EXPECT_EQ(m.tp, 20);
  EXPECT_EQ(m.fp + m.fn + m.idsw, 0);
  EXPECT_DOUBLE_EQ(m.mota, 1.0);
  EXPECT_DOUBLE_EQ(m.motp, 1.0);
  EXPECT_DOUBLE_EQ(m.idf1, 1.0);
  EXPECT_NEAR(m.hota, 1.0, 1e-12);
  EXPECT_EQ(m.gt_ids, 2);
  EXPECT_EQ(m.tracker_ids, 2);
}

TEST(MotMetrics, AnIdentitySwitch) {
  std::vector<MotBox> gt, tracks;
  for (int64_t f = 1; f <= 10; ++f) {
    gt.push_back(mot(f, 1, 5.0 * f, 0));
    tracks.push_back(mot(f, f <= 5 ? 7 : 8, 5.0 * f, 0));
  }
  const MotMetrics m = evaluate_mot(gt, tracks);
  EXPECT_EQ(m.tp, 10);
  EXPECT_EQ(m.idsw, 1);
  EXPECT_DOUBLE_EQ(m.mota, 0.9);
  EXPECT_EQ(m.idtp, 5);
  EXPECT_DOUBLE_EQ(m.idf1, 0.5);
  EXPECT_DOUBLE_EQ(m.idp, 0.5);
  EXPECT_DOUBLE_EQ(m.deta, 1.0);
  EXPECT_NEAR(m.assa, 0.5, 1e-12);  // each pair: 5 / (10 + 5 − 5)
  EXPECT_NEAR(m.hota, std::sqrt(0.5), 1e-12);
}

TEST(MotMetrics, MissesAndAFalseTrack) {
  std::vector<MotBox> gt, tracks;
  for (int64_t f = 1; f <= 4; ++f) gt.push_back(mot(f, 1, 0, 0));
  tracks = {mot(1, 3, 0, 0), mot(2, 3, 0, 0), mot(3, 4, 500, 500)};
  const MotMetrics m = evaluate_mot(gt, tracks);
  EXPECT_EQ(m.tp, 2);
  EXPECT_EQ(m.fn, 2);
  EXPECT_EQ(m.fp, 1);
  EXPECT_DOUBLE_EQ(m.mota, 0.25);
  EXPECT_NEAR(m.idf1, 2 / 3.5, 1e-12);
  EXPECT_NEAR(m.deta, 0.4, 1e-12);
  EXPECT_NEAR(m.assa, 0.5, 1e-12);
  EXPECT_NEAR(m.hota, std::sqrt(0.2), 1e-12);
}

TEST(MotMetrics, PartialOverlapCountsOnlyTheAlphasItReaches) {
  // IoU 0.62: a CLEAR match; HOTA counts it at α = 0.05 … 0.60 (12 of the 19).
  const MotMetrics m = evaluate_mot({mot(1, 1, 0, 0)}, {mot(1, 2, 0, 0, 10, 6.2)});
  EXPECT_EQ(m.tp, 1);
  EXPECT_NEAR(m.motp, 0.62, 1e-12);
  for (size_t a = 0; a < 19; ++a) EXPECT_NEAR(m.hota_alpha[a], a < 12 ? 1.0 : 0.0, 1e-12) << "alpha index " << a;
  EXPECT_NEAR(m.hota, 12.0 / 19, 1e-12);
  EXPECT_NEAR(m.loca, (12 * 0.62 + 7 * 1.0) / 19, 1e-12);  // TrackEval's LocA of an α without matches is 1
  // Below 0.5: no CLEAR match.
  const MotMetrics low = evaluate_mot({mot(1, 1, 0, 0)}, {mot(1, 2, 0, 0, 10, 4)});
  EXPECT_EQ(low.tp, 0);
  EXPECT_DOUBLE_EQ(low.mota, -1.0);
}

TEST(MotMetrics, ThePreviousFramesPairIsKept) {
  // Frame 1: gt 1 ↔ track 10. Frame 2: track 11 overlaps gt 1 more, but track 10 still qualifies: kept, no switch.
  const std::vector<MotBox> gt = {mot(1, 1, 0, 0), mot(2, 1, 0, 0)};
  const std::vector<MotBox> tracks = {mot(1, 10, 0, 0), mot(2, 10, 0, 0, 10, 6), mot(2, 11, 0, 0, 10, 9)};
  const MotMetrics m = evaluate_mot(gt, tracks);
  EXPECT_EQ(m.idsw, 0);
  EXPECT_EQ(m.tp, 2);
  EXPECT_EQ(m.fp, 1);
  EXPECT_NEAR(m.motp, (1.0 + 0.6) / 2, 1e-12);
}

TEST(MotMetrics, MotChallengeFilesAndErrors) {
  test::TempDir dir;
  const auto path = dir.path() / "gt.txt";
  test::write_file(path, "1,1,10,20,30,40,1,1,1\n1,2,50,50,10,10,0,1,1\n\n2, 1, 12, 20, 30, 40, 1, 1, 1\n");
  const std::vector<MotBox> gt = read_mot_file(path, true);
  ASSERT_EQ(gt.size(), 2u);  // the line with conf 0 is not considered
  EXPECT_EQ(gt[1].frame, 2);
  EXPECT_EQ(gt[1].xyxy, (std::array<double, 4>{12, 20, 42, 60}));
  EXPECT_EQ(read_mot_file(path, false).size(), 3u);
  test::write_file(path, "1,1,10,20,30\n");
  EXPECT_NE(test::error_of([&] { read_mot_file(path, true); }).find("gt.txt:1: expected frame"), std::string::npos);
  test::write_file(path, "0,1,10,20,30,40\n");
  EXPECT_NE(test::error_of([&] { read_mot_file(path, true); }).find("frames from 1"), std::string::npos);
  test::write_file(path, "1,1,10,20,-3,40\n");
  EXPECT_NE(test::error_of([&] { read_mot_file(path, true); }).find("positive width"), std::string::npos);
  EXPECT_NE(test::error_of([] { evaluate_mot({mot(1, 1, 0, 0), mot(1, 1, 5, 5)}, {}); }).find("appears twice"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { read_mot_file(dir.path() / "none.txt", true); }).find("cannot be opened"),
            std::string::npos);
}

}  // namespace
}  // namespace vision::track
