#include "vision/track/kalman.h"

#include <cmath>

#include "vision/core/error.h"

namespace vision::track {

namespace {

constexpr double kPositionWeight = 1.0 / 20, kVelocityWeight = 1.0 / 160;

// x' = F x, P' = F P Fᵀ + diag(std²) with F = [[I, I], [0, I]].
void predict_with(KalmanState& s, const Vec8& std) {
  for (int i = 0; i < 4; ++i) s.mean[i] += s.mean[i + 4];
  Mat8& p = s.covariance;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) p[i * 8 + j] += p[(i + 4) * 8 + j];
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 8; ++i) p[i * 8 + j] += p[i * 8 + j + 4];
  for (int i = 0; i < 8; ++i) p[i * 8 + i] += std[i] * std[i];
}

std::pair<Vec4, Mat4> project_with(const KalmanState& s, const Vec4& std) {
  Vec4 mean;
  Mat4 cov;
  for (int i = 0; i < 4; ++i) {
    mean[i] = s.mean[i];
    for (int j = 0; j < 4; ++j) cov[i * 4 + j] = s.covariance[i * 8 + j];
    cov[i * 4 + i] += std[i] * std[i];
  }
  return {mean, cov};
}

KalmanState initiate_with(const Vec4& m, const Vec8& std) {
  KalmanState s;
  for (int i = 0; i < 4; ++i) s.mean[i] = m[i];
  for (int i = 0; i < 8; ++i) s.covariance[i * 8 + i] = std[i] * std[i];
  return s;
}

// The correction by a measurement against the state's projection (Cholesky of S; K = P Hᵀ S⁻¹).
void update_with(KalmanState& s, const Vec4& m, const std::pair<Vec4, Mat4>& projection) {
  const auto& [projected, sc] = projection;
  // Cholesky S = L Lᵀ.
  Mat4 l = {};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j) {
      double sum = sc[i * 4 + j];
      for (int k = 0; k < j; ++k) sum -= l[i * 4 + k] * l[j * 4 + k];
      if (i == j) {
        VISION_CHECK(sum > 0 && std::isfinite(sum),
                     "Kalman update: the projected covariance is not positive definite (a box of height {})", s.mean[3]);
        l[i * 4 + i] = std::sqrt(sum);
      } else {
        l[i * 4 + j] = sum / l[j * 4 + j];
      }
    }
  // Kalman gain K = P Hᵀ S⁻¹ (8×4): solve S Kᵀ = H P (rows of P Hᵀ are P's first four columns).
  std::array<double, 32> k;  // K row-major 8×4
  for (int r = 0; r < 8; ++r) {
    Vec4 b;
    for (int c = 0; c < 4; ++c) b[c] = s.covariance[r * 8 + c];
    Vec4 y;  // L y = b
    for (int i = 0; i < 4; ++i) {
      double sum = b[i];
      for (int j = 0; j < i; ++j) sum -= l[i * 4 + j] * y[j];
      y[i] = sum / l[i * 4 + i];
    }
    for (int i = 3; i >= 0; --i) {  // Lᵀ x = y
      double sum = y[i];
      for (int j = i + 1; j < 4; ++j) sum -= l[j * 4 + i] * k[r * 4 + j];
      k[r * 4 + i] = sum / l[i * 4 + i];
    }
  }
  Vec4 innovation;
  for (int i = 0; i < 4; ++i) innovation[i] = m[i] - projected[i];
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 4; ++c) s.mean[r] += k[r * 4 + c] * innovation[c];
  // P' = P − K S Kᵀ.
  std::array<double, 32> ks;  // K S, 8×4
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 4; ++c) {
      double sum = 0;
      for (int t = 0; t < 4; ++t) sum += k[r * 4 + t] * sc[t * 4 + c];
      ks[r * 4 + c] = sum;
    }
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c) {
      double sum = 0;
      for (int t = 0; t < 4; ++t) sum += ks[r * 4 + t] * k[c * 4 + t];
      s.covariance[r * 8 + c] -= sum;
    }
}

}  // namespace

KalmanState KalmanXyah::initiate(const Vec4& m) {
  const double h = m[3];
  return initiate_with(m, {2 * kPositionWeight * h, 2 * kPositionWeight * h, 1e-2, 2 * kPositionWeight * h,
                           10 * kVelocityWeight * h, 10 * kVelocityWeight * h, 1e-5, 10 * kVelocityWeight * h});
}

void KalmanXyah::predict(KalmanState& s) {
  const double h = s.mean[3];
  predict_with(s, {kPositionWeight * h, kPositionWeight * h, 1e-2, kPositionWeight * h, kVelocityWeight * h,
                   kVelocityWeight * h, 1e-5, kVelocityWeight * h});
}

std::pair<Vec4, Mat4> KalmanXyah::project(const KalmanState& s) {
  const double h = s.mean[3];
  return project_with(s, {kPositionWeight * h, kPositionWeight * h, 1e-1, kPositionWeight * h});
}

void KalmanXyah::update(KalmanState& s, const Vec4& m) { update_with(s, m, project(s)); }

KalmanState KalmanXywh::initiate(const Vec4& m) {
  const double w = m[2], h = m[3];
  return initiate_with(m, {2 * kPositionWeight * w, 2 * kPositionWeight * h, 2 * kPositionWeight * w,
                           2 * kPositionWeight * h, 10 * kVelocityWeight * w, 10 * kVelocityWeight * h,
                           10 * kVelocityWeight * w, 10 * kVelocityWeight * h});
}

void KalmanXywh::predict(KalmanState& s) {
  const double w = s.mean[2], h = s.mean[3];
  predict_with(s, {kPositionWeight * w, kPositionWeight * h, kPositionWeight * w, kPositionWeight * h,
                   kVelocityWeight * w, kVelocityWeight * h, kVelocityWeight * w, kVelocityWeight * h});
}

std::pair<Vec4, Mat4> KalmanXywh::project(const KalmanState& s) {
  const double w = s.mean[2], h = s.mean[3];
  return project_with(s, {kPositionWeight * w, kPositionWeight * h, kPositionWeight * w, kPositionWeight * h});
}

void KalmanXywh::update(KalmanState& s, const Vec4& m) { update_with(s, m, project(s)); }

void apply_camera_motion(KalmanState& s, const std::array<double, 6>& warp) {
  const double r00 = warp[0], r01 = warp[1], r10 = warp[3], r11 = warp[4];
  // R₈ = I₄ ⊗ R acts on the pairs (0, 1), (2, 3), (4, 5), (6, 7).
  auto rotate_rows = [&](auto&& at) {
    for (int pair = 0; pair < 4; ++pair)
      for (int c = 0; c < 8; ++c) {
        const double a = at(2 * pair, c), b = at(2 * pair + 1, c);
        at(2 * pair, c) = r00 * a + r01 * b;
        at(2 * pair + 1, c) = r10 * a + r11 * b;
      }
  };
  for (int pair = 0; pair < 4; ++pair) {
    const double a = s.mean[2 * pair], b = s.mean[2 * pair + 1];
    s.mean[2 * pair] = r00 * a + r01 * b;
    s.mean[2 * pair + 1] = r10 * a + r11 * b;
  }
  s.mean[0] += warp[2];
  s.mean[1] += warp[5];
  Mat8& p = s.covariance;
  rotate_rows([&](int r, int c) -> double& { return p[r * 8 + c]; });  // R₈ P
  rotate_rows([&](int r, int c) -> double& { return p[c * 8 + r]; });  // (R₈ P) R₈ᵀ: the same on the columns
}

}  // namespace vision::track
