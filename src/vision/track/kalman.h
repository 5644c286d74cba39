// KalmanXyah — the constant-velocity Kalman filter of SORT/ByteTrack over a box's (cx, cy, aspect w/h, h), in float64,
// as ultralytics' KalmanFilterXYAH defines it: state (cx, cy, a, h, and their velocities), unit time step, process and
// measurement noise proportional to the box height (position 1/20, velocity 1/160 of h; aspect 1e-2 / 1e-5, and 1e-1
// when measured).
#pragma once

#include <array>

namespace vision::track {

using Vec4 = std::array<double, 4>;
using Vec8 = std::array<double, 8>;
using Mat8 = std::array<double, 64>;  // row-major 8×8
using Mat4 = std::array<double, 16>;  // row-major 4×4

struct KalmanState {
  Vec8 mean = {};
  Mat8 covariance = {};
};

class KalmanXyah {
 public:
  // A track's first state from a measurement (cx, cy, a, h): zero velocity, covariance from the height.
  static KalmanState initiate(const Vec4& measurement);
  // One step ahead.
  static void predict(KalmanState& s);
  // The state projected to measurement space: mean (cx, cy, a, h) and its covariance with the measurement noise.
  static std::pair<Vec4, Mat4> project(const KalmanState& s);
  // The correction by a measurement (cx, cy, a, h). Throws vision::Error when the projected covariance is not
  // positive definite (a degenerate state, e.g. a zero height).
  static void update(KalmanState& s, const Vec4& measurement);
};

// KalmanXywh — BoT-SORT's filter, as ultralytics' KalmanFilterXYWH defines it: state (cx, cy, w, h, and their
// velocities), the same constant-velocity model, every noise term proportional to the box width (x, w and their
// velocities) or height (y, h and theirs): position 1/20, velocity 1/160.
class KalmanXywh {
 public:
  static KalmanState initiate(const Vec4& measurement);  // (cx, cy, w, h)
  static void predict(KalmanState& s);
  static std::pair<Vec4, Mat4> project(const KalmanState& s);
  static void update(KalmanState& s, const Vec4& measurement);
};

// Camera motion applied to a state, as ultralytics' STrack.multi_gmc: the 2×3 warp [R | t] (row-major, previous frame
// to this one) rotates each (x, y)-like pair of the state — position, size, and both velocities — by R, moves the
// position by t, and the covariance to R₈ P R₈ᵀ (R₈ = I₄ ⊗ R).
void apply_camera_motion(KalmanState& s, const std::array<double, 6>& warp);

}  // namespace vision::track
