// SparseFlowGmc — camera-motion compensation for BoT-SORT, as ultralytics' GMC "sparseOptFlow" computes it
// (trackers/utils/gmc.py), through OpenCV (Debian libopencv-video-dev and libopencv-calib3d-dev): each frame in grey
// (OpenCV's RGB → grey weights), shrunk by `downscale` (bilinear), its corners found by goodFeaturesToTrack (at most
// 1,000, quality 0.01, distance 1, block 3, no Harris), the previous frame's corners followed into it by pyramidal
// Lucas–Kanade (calcOpticalFlowPyrLK, OpenCV's defaults), and a partial affine transform (rotation, uniform scale,
// translation) fitted to the pairs found by RANSAC (estimateAffinePartial2D), its translation scaled back by
// `downscale`. The first frame, a frame of another size than the last, fewer than 5 pairs, or a fit that fails give
// the identity.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "vision/data/image.h"

namespace vision::track {

// Whether this build has OpenCV (CMake option VISION_OPENCV): without it SparseFlowGmc's constructor throws.
bool camera_motion_available();

class SparseFlowGmc {
 public:
  explicit SparseFlowGmc(int downscale = 2);
  ~SparseFlowGmc();
  SparseFlowGmc(SparseFlowGmc&&) noexcept;
  SparseFlowGmc& operator=(SparseFlowGmc&&) noexcept;

  // The 2×3 warp [a b tx; c d ty] (row-major) from the previous frame's pixel coordinates to this frame's, and this
  // frame kept for the next call. RGB (3 channels) or grey (1) 8-bit frames.
  std::array<double, 6> apply(const data::Image& frame);
  // Forgets the previous frame.
  void reset();
  // Pairs followed into the last frame (0 on a first frame), and how many of them the fit kept as inliers.
  int last_pairs() const;
  int last_inliers() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vision::track
