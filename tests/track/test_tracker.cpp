// Multi-object tracking (vision/track): the Kalman filter against the textbook matrix formulas evaluated with a
// general matrix inverse; the limited linear assignment against brute force over every assignment of small random
// matrices; ByteTracker on scripted scenes: ids kept through crossing paths and gaps, a low-score detection keeping a
// track alive, tracks started only from confident detections and confirmed in their second frame, a track lost for
// longer than its buffer replaced by a new id; the tracker YAML of ultralytics' format; bad input as clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "test_util.h"
#include "vision/track/assignment.h"
#include "vision/track/byte_tracker.h"
#include "vision/track/gmc.h"
#include "vision/track/kalman.h"

namespace vision::track {
namespace {

// Dense matrices for the reference formulas.
using M = std::vector<std::vector<double>>;
M zeros(size_t r, size_t c) { return M(r, std::vector<double>(c, 0.0)); }
M mul(const M& a, const M& b) {
  M c = zeros(a.size(), b[0].size());
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t k = 0; k < b.size(); ++k)
      for (size_t j = 0; j < b[0].size(); ++j) c[i][j] += a[i][k] * b[k][j];
  return c;
}
M transpose(const M& a) {
  M t = zeros(a[0].size(), a.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[0].size(); ++j) t[j][i] = a[i][j];
  return t;
}
M inverse(M a) {  // Gauss–Jordan with partial pivoting
  const size_t n = a.size();
  M inv = zeros(n, n);
  for (size_t i = 0; i < n; ++i) inv[i][i] = 1;
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[p][c])) p = r;
    std::swap(a[c], a[p]), std::swap(inv[c], inv[p]);
    const double d = a[c][c];
    for (size_t j = 0; j < n; ++j) a[c][j] /= d, inv[c][j] /= d;
    for (size_t r = 0; r < n; ++r)
      if (r != c) {
        const double f = a[r][c];
        for (size_t j = 0; j < n; ++j) a[r][j] -= f * a[c][j], inv[r][j] -= f * inv[c][j];
      }
  }
  return inv;
}
M of_state(const Mat8& p) {
  M m = zeros(8, 8);
  for (size_t i = 0; i < 8; ++i)
    for (size_t j = 0; j < 8; ++j) m[i][j] = p[i * 8 + j];
  return m;
}

data::Detection box_at(double cx, double cy, double w, double h, float score, int64_t cls = 0) {
  return {.box = {static_cast<float>(cx - w / 2), static_cast<float>(cy - h / 2), static_cast<float>(cx + w / 2),
                  static_cast<float>(cy + h / 2)},
          .score = score,
          .cls = cls};
}

// Steps a filter through predict and update five times against the textbook formulas: F x and F P Fᵀ + Q with the
// process noise q(x) (standard deviations); K = P Hᵀ (H P Hᵀ + R)⁻¹, x + K (z − H x) and P − K S Kᵀ with the
// measurement noise r(x), for measurements z near the state (spread: the largest move of each coordinate).
template <typename Filter, typename Noise>
void check_textbook_kalman(KalmanState s, Noise q_of, Noise r_of, const Vec4& spread) {
  std::mt19937_64& rng = test::rng();
  std::uniform_real_distribution<double> u(-1, 1);
  for (int step = 0; step < 5; ++step) {
    M f = zeros(8, 8);
    for (size_t i = 0; i < 8; ++i) f[i][i] = 1;
    for (size_t i = 0; i < 4; ++i) f[i][i + 4] = 1;
    const std::vector<double> q = q_of(s.mean);
    M p = mul(mul(f, of_state(s.covariance)), transpose(f));
    for (size_t i = 0; i < 8; ++i) p[i][i] += q[i] * q[i];
    M x = zeros(8, 1);
    for (size_t i = 0; i < 8; ++i) x[i][0] = s.mean[i];
    x = mul(f, x);
    Filter::predict(s);
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_NEAR(s.mean[i], x[i][0], 1e-9 * (1 + std::abs(x[i][0])));
      for (size_t j = 0; j < 8; ++j) EXPECT_NEAR(s.covariance[i * 8 + j], p[i][j], 1e-9 * (1 + std::abs(p[i][j])));
    }
    Vec4 z;
    for (size_t i = 0; i < 4; ++i) z[i] = s.mean[i] + spread[i] * u(rng);
    M hm = zeros(4, 8);
    for (size_t i = 0; i < 4; ++i) hm[i][i] = 1;
    const std::vector<double> r = r_of(s.mean);
    M sm = mul(mul(hm, p), transpose(hm));
    for (size_t i = 0; i < 4; ++i) sm[i][i] += r[i] * r[i];
    const M k = mul(mul(p, transpose(hm)), inverse(sm));
    M innovation = zeros(4, 1);
    for (size_t i = 0; i < 4; ++i) innovation[i][0] = z[i] - s.mean[i];
    const M dx = mul(k, innovation);
    const M dp = mul(mul(k, sm), transpose(k));
    Filter::update(s, z);
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_NEAR(s.mean[i], x[i][0] + dx[i][0], 1e-9 * (1 + std::abs(x[i][0])));
      for (size_t j = 0; j < 8; ++j)
        EXPECT_NEAR(s.covariance[i * 8 + j], p[i][j] - dp[i][j], 1e-9 * (1 + std::abs(p[i][j])));
    }
  }
}

using Noise = std::function<std::vector<double>(const Vec8&)>;

TEST(KalmanXyah, PredictAndUpdateAreTheTextbookFormulas) {
  const KalmanState s = KalmanXyah::initiate({320, 240, 0.5, 80});
  EXPECT_DOUBLE_EQ(s.covariance[0], std::pow(2.0 / 20 * 80, 2));
  EXPECT_DOUBLE_EQ(s.covariance[2 * 8 + 2], 1e-4);
  EXPECT_DOUBLE_EQ(s.covariance[4 * 8 + 4], std::pow(10.0 / 160 * 80, 2));
  // Noise from the height (aspect fixed).
  check_textbook_kalman<KalmanXyah>(
      s,
      Noise([](const Vec8& m) {
        const double h = m[3];
        return std::vector<double>{h / 20, h / 20, 1e-2, h / 20, h / 160, h / 160, 1e-5, h / 160};
      }),
      Noise([](const Vec8& m) { return std::vector<double>{m[3] / 20, m[3] / 20, 1e-1, m[3] / 20}; }),
      {5, 5, 0.05, 4});
  KalmanState flat = KalmanXyah::initiate({0, 0, 1, 0});
  EXPECT_NE(test::error_of([&] { KalmanXyah::update(flat, {0, 0, 1, 0}); }).find("not positive definite"),
            std::string::npos);
}

TEST(KalmanXywh, PredictAndUpdateAreTheTextbookFormulasWithWidthAndHeightNoise) {
  const KalmanState s = KalmanXywh::initiate({320, 240, 40, 80});
  const std::vector<double> first = {2 * 40 / 20.0, 2 * 80 / 20.0, 2 * 40 / 20.0, 2 * 80 / 20.0,
                                     10 * 40 / 160.0, 10 * 80 / 160.0, 10 * 40 / 160.0, 10 * 80 / 160.0};
  for (size_t i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(s.covariance[i * 8 + i], first[i] * first[i]);
  // Noise from the width (x, w) and the height (y, h).
  check_textbook_kalman<KalmanXywh>(
      s,
      Noise([](const Vec8& m) {
        const double w = m[2], h = m[3];
        return std::vector<double>{w / 20, h / 20, w / 20, h / 20, w / 160, h / 160, w / 160, h / 160};
      }),
      Noise([](const Vec8& m) { return std::vector<double>{m[2] / 20, m[3] / 20, m[2] / 20, m[3] / 20}; }),
      {5, 5, 3, 4});
}

// multi_gmc: mean R₈ x + (t, 0, …), covariance R₈ P R₈ᵀ, R₈ = I₄ ⊗ R.
TEST(CameraMotion, RotatesEveryPairAndMovesThePosition) {
  std::mt19937_64& rng = test::rng();
  std::uniform_real_distribution<double> u(-1, 1);
  KalmanState s = KalmanXywh::initiate({100, 50, 30, 60});
  for (double& v : s.mean) v += u(rng);
  M a = zeros(8, 8);  // a random symmetric positive covariance: A Aᵀ
  for (auto& row : a)
    for (double& v : row) v = u(rng);
  const M p0 = mul(a, transpose(a));
  for (size_t i = 0; i < 8; ++i)
    for (size_t j = 0; j < 8; ++j) s.covariance[i * 8 + j] = p0[i][j];
  const double angle = 0.1, scale = 1.05;
  const std::array<double, 6> warp = {scale * std::cos(angle), -scale * std::sin(angle), 7.5,
                                      scale * std::sin(angle), scale * std::cos(angle), -3.25};
  M r8 = zeros(8, 8);
  for (size_t b = 0; b < 4; ++b) {
    r8[2 * b][2 * b] = warp[0], r8[2 * b][2 * b + 1] = warp[1];
    r8[2 * b + 1][2 * b] = warp[3], r8[2 * b + 1][2 * b + 1] = warp[4];
  }
  M x = zeros(8, 1);
  for (size_t i = 0; i < 8; ++i) x[i][0] = s.mean[i];
  x = mul(r8, x);
  x[0][0] += warp[2], x[1][0] += warp[5];
  const M p = mul(mul(r8, p0), transpose(r8));
  apply_camera_motion(s, warp);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(s.mean[i], x[i][0], 1e-12 * (1 + std::abs(x[i][0])));
    for (size_t j = 0; j < 8; ++j) EXPECT_NEAR(s.covariance[i * 8 + j], p[i][j], 1e-12 * (1 + std::abs(p[i][j])));
  }
}

// A textured scene: grey rectangles of random levels on a mid-grey field (corners for the tracker to find); the view
// is the scene seen through a camera whose top-left corner sits at (ox, oy) in it, and objects are drawn on top.
data::Image camera_view(int64_t w, int64_t h, double ox, double oy, const std::vector<std::array<double, 4>>& objects) {
  static const std::vector<std::array<double, 5>> scene = [] {
    std::mt19937_64 g(12345);
    std::uniform_real_distribution<double> pos(-200, 1400), size(6, 40), level(20, 235);
    std::vector<std::array<double, 5>> rects;
    for (int i = 0; i < 900; ++i) rects.push_back({pos(g), pos(g) * 0.6, size(g), size(g), level(g)});
    return rects;
  }();
  data::Image im(w, h, 3, 128);
  auto fill = [&](double x1, double y1, double x2, double y2, uint8_t v) {
    for (int64_t y = std::max<int64_t>(0, std::lround(y1)); y < std::min<int64_t>(h, std::lround(y2)); ++y)
      for (int64_t x = std::max<int64_t>(0, std::lround(x1)); x < std::min<int64_t>(w, std::lround(x2)); ++x)
        for (int c = 0; c < 3; ++c) im.pixels[static_cast<size_t>((y * w + x) * 3 + c)] = v;
  };
  for (const auto& r : scene) fill(r[0] - ox, r[1] - oy, r[0] + r[2] - ox, r[1] + r[3] - oy, static_cast<uint8_t>(r[4]));
  for (const auto& o : objects) fill(o[0], o[1], o[2], o[3], 250);
  return im;
}

TEST(SparseFlowGmc, FindsTheCameraShiftAndRotation) {
  if (!camera_motion_available()) {
    EXPECT_NE(test::error_of([] { SparseFlowGmc g; }).find("needs OpenCV"), std::string::npos);
    GTEST_SKIP() << "built without OpenCV (VISION_OPENCV=OFF)";
  }
  SparseFlowGmc gmc;
  const std::array<double, 6> first = gmc.apply(camera_view(480, 320, 100, 80, {}));
  EXPECT_EQ(first, (std::array<double, 6>{1, 0, 0, 0, 1, 0}));  // the first frame: the identity
  EXPECT_EQ(gmc.last_pairs(), 0);
  // The camera moves right by 14 and up by 6 px: the scene moves left by 14 and down by 6 in the image.
  const std::array<double, 6> w = gmc.apply(camera_view(480, 320, 114, 74, {}));
  EXPECT_GT(gmc.last_pairs(), 50);
  EXPECT_GT(gmc.last_inliers(), 50);
  EXPECT_NEAR(w[0], 1, 0.01);
  EXPECT_NEAR(w[1], 0, 0.01);
  EXPECT_NEAR(w[3], 0, 0.01);
  EXPECT_NEAR(w[4], 1, 0.01);
  EXPECT_NEAR(w[2], -14, 0.75);
  EXPECT_NEAR(w[5], 6, 0.75);
  // A frame of another size starts again: the identity.
  EXPECT_EQ(gmc.apply(camera_view(240, 160, 0, 0, {})), (std::array<double, 6>{1, 0, 0, 0, 1, 0}));
  // A flat grey frame has no corners: the identity, and so does the next frame after it.
  gmc.reset();
  const data::Image flat(200, 100, 3, 90);
  EXPECT_EQ(gmc.apply(flat), (std::array<double, 6>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(gmc.apply(flat), (std::array<double, 6>{1, 0, 0, 0, 1, 0}));
  data::Image bad(10, 10, 3, 0);
  bad.pixels.resize(7);
  EXPECT_NE(test::error_of([&] { gmc.apply(bad); }).find("needs 300 bytes"), std::string::npos);
}

// A camera panning 36 px a frame past three still objects of 28 px: between frames a box does not overlap where it
// was, so ByteTrack (no motion model for the camera) loses every track each frame, while BoT-SORT, which moves its
// predictions by the camera's motion measured on the frames, keeps all three ids for the whole pan.
TEST(BotSort, CameraMotionKeepsTheIdsThroughAPan) {
  if (!camera_motion_available()) GTEST_SKIP() << "built without OpenCV (VISION_OPENCV=OFF)";
  const std::vector<std::array<double, 2>> world = {{300, 150}, {420, 230}, {560, 170}};  // object centres, scene
  auto run = [&](const ByteTrackConfig& config) {
    ByteTracker tracker(config);
    std::map<size_t, std::set<int64_t>> ids;  // object → the ids it was given
    int64_t reported = 0;
    for (int f = 0; f < 10; ++f) {
      const double ox = 36.0 * f, oy = 4.0 * f;
      std::vector<std::array<double, 4>> boxes;
      std::vector<data::Detection> dets;
      for (const auto& c : world) {
        const double x = c[0] - ox, y = c[1] - oy;
        boxes.push_back({x - 14, y - 14, x + 14, y + 14});
        dets.push_back(box_at(x, y, 28, 28, 0.9f));
      }
      const data::Image frame = camera_view(640, 360, 200 + ox, 60 + oy, boxes);
      for (const TrackedObject& t : tracker.update(dets, &frame)) {
        ids[static_cast<size_t>(t.detection)].insert(t.id);
        ++reported;
      }
    }
    return std::pair{ids, reported};
  };
  const auto [bot_ids, bot_reported] = run(botsort_config());
  EXPECT_EQ(bot_reported, 30);  // every object in every frame (tracks confirmed in the first frame)
  for (const auto& [object, set] : bot_ids) EXPECT_EQ(set.size(), 1u) << "object " << object;
  const auto [byte_ids, byte_reported] = run(ByteTrackConfig{});
  size_t byte_distinct = 0;
  for (const auto& [object, set] : byte_ids) byte_distinct += set.size();
  EXPECT_GT(byte_distinct, 3u) << "ByteTrack kept its ids without camera motion: the pan does not test anything";
  // Without the frames BoT-SORT has no camera motion either.
  ByteTrackConfig no_gmc = botsort_config();
  no_gmc.gmc_method = "none";
  const auto [plain_ids, plain_reported] = run(no_gmc);
  size_t plain_distinct = 0;
  for (const auto& [object, set] : plain_ids) plain_distinct += set.size();
  EXPECT_GT(plain_distinct, 3u);
}

TEST(BotSort, ConfigFileAsUltralyticsWritesIt) {
  test::TempDir dir;
  const auto path = dir.path() / "botsort.yaml";
  test::write_file(path, "tracker_type: botsort\ntrack_high_thresh: 0.25\ntrack_low_thresh: 0.1\nnew_track_thresh: "
                         "0.25\ntrack_buffer: 30\nmatch_thresh: 0.8\nfuse_score: True\ngmc_method: sparseOptFlow\n"
                         "proximity_thresh: 0.5\nappearance_thresh: 0.8\nwith_reid: False\nmodel: auto\n");
  const ByteTrackConfig c = read_tracker_config(path);
  EXPECT_EQ(c.tracker_type, TrackerType::botsort);
  EXPECT_EQ(c.gmc_method, "sparseOptFlow");
  EXPECT_EQ(c.appearance_thresh, 0.8);
  // The type's defaults whatever the order of the keys.
  test::write_file(path, "match_thresh: 0.7\ntracker_type: botsort\n");
  EXPECT_EQ(read_tracker_config(path).tracker_type, TrackerType::botsort);
  EXPECT_EQ(read_tracker_config(path).match_thresh, 0.7);
  test::write_file(path, "tracker_type: botsort\nwith_reid: True\n");
  EXPECT_NE(test::error_of([&] { read_tracker_config(path); }).find("with_reid: true is not supported"),
            std::string::npos);
  test::write_file(path, "tracker_type: botsort\ngmc_method: orb\n");
  EXPECT_NE(test::error_of([&] { read_tracker_config(path); }).find("gmc_method 'orb' is not supported"),
            std::string::npos);
  test::write_file(path, "tracker_type: deepsort\n");
  EXPECT_NE(test::error_of([&] { read_tracker_config(path); }).find("'deepsort' is not supported"), std::string::npos);
}

// The least total cost over every partial assignment: matched pairs at their cost, each row or column left alone at
// limit / 2, pairs above the limit never made.
double brute_force(const std::vector<double>& c, int64_t rows, int64_t cols, double limit) {
  double best = INFINITY;
  std::vector<int64_t> col_of(static_cast<size_t>(rows), -1);
  std::vector<char> used(static_cast<size_t>(cols), 0);
  std::function<void(int64_t, double)> go = [&](int64_t i, double total) {
    if (i == rows) {
      const int64_t free_cols = std::count(used.begin(), used.end(), 0);
      best = std::min(best, total + static_cast<double>(free_cols) * limit / 2);
      return;
    }
    go(i + 1, total + limit / 2);
    for (int64_t j = 0; j < cols; ++j)
      if (!used[static_cast<size_t>(j)] && c[static_cast<size_t>(i * cols + j)] <= limit) {
        used[static_cast<size_t>(j)] = 1;
        go(i + 1, total + c[static_cast<size_t>(i * cols + j)]);
        used[static_cast<size_t>(j)] = 0;
      }
  };
  go(0, 0.0);
  return best;
}

TEST(LinearAssignment, OptimalAgainstBruteForceWithTheLimit) {
  std::mt19937_64& rng = test::rng();
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t rows = static_cast<int64_t>(rng() % 6), cols = static_cast<int64_t>(rng() % 6);
    const double limit = trial % 3 == 0 ? 1.0 : 0.3 + 0.6 * u(rng);
    std::vector<double> c(static_cast<size_t>(rows * cols));
    for (double& x : c) x = trial % 5 == 0 ? std::round(u(rng) * 4) / 4 : u(rng);  // ties in some
    const Assignment a = linear_assignment(c, rows, cols, limit);
    double total = 0;
    std::vector<char> row_seen(static_cast<size_t>(rows), 0), col_seen(static_cast<size_t>(cols), 0);
    for (const auto& [i, j] : a.matches) {
      ASSERT_LE(c[static_cast<size_t>(i * cols + j)], limit + 1e-12);
      ASSERT_FALSE(row_seen[static_cast<size_t>(i)] || col_seen[static_cast<size_t>(j)]);
      row_seen[static_cast<size_t>(i)] = col_seen[static_cast<size_t>(j)] = 1;
      total += c[static_cast<size_t>(i * cols + j)];
    }
    ASSERT_EQ(a.matches.size() + a.unmatched_rows.size(), static_cast<size_t>(rows));
    ASSERT_EQ(a.matches.size() + a.unmatched_cols.size(), static_cast<size_t>(cols));
    total += static_cast<double>(a.unmatched_rows.size() + a.unmatched_cols.size()) * limit / 2;
    EXPECT_NEAR(total, brute_force(c, rows, cols, limit), 1e-9) << "trial " << trial << ": " << rows << "×" << cols;
  }
  EXPECT_NE(test::error_of([] { linear_assignment(std::vector<double>{NAN}, 1, 1, 0.5); }).find("a cost is nan"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { linear_assignment(std::vector<double>{0.1, 0.2}, 1, 1, 0.5); }).find("2 costs"),
            std::string::npos);
}


// id of the track matched to detection `index` in this frame's output, or 0.
int64_t id_of(const std::vector<TrackedObject>& out, int64_t index) {
  for (const TrackedObject& t : out)
    if (t.detection == index) return t.id;
  return 0;
}

TEST(ByteTracker, CrossingPathsKeepTheirIds) {
  ByteTracker tracker;
  // Two objects on crossing diagonals (they overlap in the middle frames), 40 frames.
  for (int f = 0; f < 40; ++f) {
    const double t = f * 10.0;
    const std::vector<data::Detection> dets = {box_at(100 + t, 100 + 0.5 * t, 60, 120, 0.9f),
                                               box_at(500 - t, 110 + 0.5 * t, 60, 120, 0.85f, 1)};
    const auto out = tracker.update(dets);
    ASSERT_EQ(out.size(), 2u) << "frame " << f;
    EXPECT_EQ(id_of(out, 0), 1) << "frame " << f;
    EXPECT_EQ(id_of(out, 1), 2) << "frame " << f;
    for (const TrackedObject& o : out) {
      const auto& d = dets[static_cast<size_t>(o.detection)];
      EXPECT_EQ(o.cls, d.cls);
      EXPECT_EQ(o.score, d.score);
      for (int k = 0; k < 4; ++k) EXPECT_NEAR(o.box[k], d.box[k], 6.0) << "frame " << f;  // the Kalman estimate
    }
  }
}

TEST(ByteTracker, GapsLowScoresNewTracksAndTheBuffer) {
  ByteTrackConfig c;
  c.track_buffer = 10;
  ByteTracker tracker(c);
  auto at = [](int f) { return box_at(100 + 8.0 * f, 200, 50, 100, 0.9f); };
  for (int f = 0; f < 5; ++f) EXPECT_EQ(id_of(tracker.update(std::vector{at(f)}), 0), 1);
  // A low-score detection (between the thresholds) keeps the track through the second association.
  auto weak = at(5);
  weak.score = 0.15f;
  EXPECT_EQ(id_of(tracker.update(std::vector{weak}), 0), 1);
  // Four frames without it: lost, then found again where its motion leads.
  for (int f = 6; f < 10; ++f) {
    EXPECT_TRUE(tracker.update({}).empty());
    EXPECT_EQ(tracker.lost_count(), 1u);
  }
  EXPECT_EQ(id_of(tracker.update(std::vector{at(10)}), 0), 1);
  EXPECT_EQ(tracker.lost_count(), 0u);
  // A detection below new_track_thresh starts nothing; a confident one starts an unconfirmed track, shown from its
  // second frame under the id it took when it started.
  auto faint = box_at(600, 600, 40, 40, 0.2f);
  auto out = tracker.update(std::vector{at(11), faint});
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(tracker.tracked_count(), 1u);
  auto fresh = box_at(600, 600, 40, 40, 0.7f);
  out = tracker.update(std::vector{at(12), fresh});
  EXPECT_EQ(out.size(), 1u) << "a track is confirmed in its second frame";
  EXPECT_EQ(tracker.tracked_count(), 2u);
  out = tracker.update(std::vector{at(13), fresh});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(id_of(out, 0), 1);
  EXPECT_EQ(id_of(out, 1), 2);
  // Gone for longer than the buffer (10 frames): removed; it comes back under a new id.
  for (int f = 14; f < 26; ++f) tracker.update(std::vector{fresh});
  EXPECT_EQ(tracker.lost_count(), 0u);
  out = tracker.update(std::vector{at(26), fresh});
  EXPECT_EQ(id_of(out, 1), 2);
  EXPECT_EQ(id_of(out, 0), 0) << "a new track is unconfirmed in its first frame";
  out = tracker.update(std::vector{at(27), fresh});
  EXPECT_EQ(id_of(out, 0), 3);
  tracker.reset();
  EXPECT_EQ(id_of(tracker.update(std::vector{at(0)}), 0), 1);
}

TEST(ByteTracker, ConfigFileAndBadInput) {
  test::TempDir dir;
  const auto path = dir.path() / "bytetrack.yaml";
  test::write_file(path, "tracker_type: bytetrack\ntrack_high_thresh: 0.5\ntrack_low_thresh: 0.1\nnew_track_thresh: "
                         "0.6\ntrack_buffer: 60\nmatch_thresh: 0.8\nfuse_score: False\n");
  const ByteTrackConfig c = read_tracker_config(path);
  EXPECT_EQ(c.track_high_thresh, 0.5);
  EXPECT_EQ(c.new_track_thresh, 0.6);
  EXPECT_EQ(c.track_buffer, 60);
  EXPECT_FALSE(c.fuse_score);
  test::write_file(path, "track_buffr: 30\n");
  EXPECT_NE(test::error_of([&] { read_tracker_config(path); }).find("unknown key 'track_buffr'"), std::string::npos);
  test::write_file(path, "match_thresh: 1.5\n");
  EXPECT_NE(test::error_of([&] { read_tracker_config(path); }).find("match_thresh must be in [0, 1]"),
            std::string::npos);
  test::write_file(path, "match_thresh: [1]\n");
  EXPECT_NE(test::error_of([&] { read_tracker_config(path); }).find("wrong type"), std::string::npos);
  ByteTracker tracker;
  const std::vector<data::Detection> bad = {box_at(10, 10, 4, 4, 0.9f), {.box = {5, 5, 5, 9}, .score = 0.9f}};
  EXPECT_NE(test::error_of([&] { tracker.update(bad); }).find("detection 1"), std::string::npos);
  EXPECT_NE(test::error_of([] { ByteTracker(ByteTrackConfig{}, 0.0); }).find("frame rate"), std::string::npos);
}

}  // namespace
}  // namespace vision::track
