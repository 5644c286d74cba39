#include "vision/track/kalman.h"

#include <cmath>

#include "vision/core/error.h"

namespace vision::track {

namespace {

constexpr double kPositionWeight = 1.0 / 20, kVelocityWeight = 1.0 / 160;

}  // namespace

KalmanState KalmanXyah::initiate(const Vec4& m) {
  KalmanState s;
  for (int i = 0; i < 4; ++i) s.mean[i] = m[i];
  const double h = m[3];
  const Vec8 std = {2 * kPositionWeight * h,  2 * kPositionWeight * h,  1e-2, 2 * kPositionWeight * h,
                    10 * kVelocityWeight * h, 10 * kVelocityWeight * h, 1e-5, 10 * kVelocityWeight * h};
  for (int i = 0; i < 8; ++i) s.covariance[i * 8 + i] = std[i] * std[i];
  return s;
}

void KalmanXyah::predict(KalmanState& s) {
  const double h = s.mean[3];
  const Vec8 std = {kPositionWeight * h, kPositionWeight * h, 1e-2, kPositionWeight * h,
                    kVelocityWeight * h, kVelocityWeight * h, 1e-5, kVelocityWeight * h};
  // x' = F x with F = [[I, I], [0, I]].
  for (int i = 0; i < 4; ++i) s.mean[i] += s.mean[i + 4];
  // P' = F P Fᵀ + Q: rows then columns i += i + 4.
  Mat8& p = s.covariance;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) p[i * 8 + j] += p[(i + 4) * 8 + j];
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 8; ++i) p[i * 8 + j] += p[i * 8 + j + 4];
  for (int i = 0; i < 8; ++i) p[i * 8 + i] += std[i] * std[i];
}

std::pair<Vec4, Mat4> KalmanXyah::project(const KalmanState& s) {
  const double h = s.mean[3];
  const Vec4 std = {kPositionWeight * h, kPositionWeight * h, 1e-1, kPositionWeight * h};
  Vec4 mean;
  Mat4 cov;
  for (int i = 0; i < 4; ++i) {
    mean[i] = s.mean[i];
    for (int j = 0; j < 4; ++j) cov[i * 4 + j] = s.covariance[i * 8 + j];
    cov[i * 4 + i] += std[i] * std[i];
  }
  return {mean, cov};
}

void KalmanXyah::update(KalmanState& s, const Vec4& m) {
  const auto [projected, sc] = project(s);
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

}  // namespace vision::track
