#include "vision/track/gmc.h"

#include "vision/core/error.h"

#ifdef VISION_HAS_OPENCV
#include <opencv2/calib3d.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/video/tracking.hpp>
#endif

namespace vision::track {

namespace {

constexpr std::array<double, 6> kIdentityWarp = {1, 0, 0, 0, 1, 0};

}  // namespace

#ifdef VISION_HAS_OPENCV

bool camera_motion_available() { return true; }

struct SparseFlowGmc::Impl {
  int downscale = 2;
  cv::Mat previous;                      // grey, downscaled
  std::vector<cv::Point2f> corners;      // the previous frame's
  int pairs = 0, inliers = 0;
};

SparseFlowGmc::SparseFlowGmc(int downscale) : impl_(std::make_unique<Impl>()) {
  VISION_CHECK(downscale >= 1 && downscale <= 16, "camera motion: downscale must be 1 to 16, got {}", downscale);
  impl_->downscale = downscale;
}

std::array<double, 6> SparseFlowGmc::apply(const data::Image& frame) {
  Impl& m = *impl_;
  VISION_CHECK(frame.channels == 3 || frame.channels == 1,
               "camera motion: frames need 3 (RGB) or 1 (grey) channels, got {}", frame.channels);
  VISION_CHECK(frame.width > 0 && frame.height > 0 &&
                   frame.pixels.size() == static_cast<size_t>(frame.width * frame.height * frame.channels),
               "camera motion: a {}x{} frame of {} channels needs {} bytes, it has {}", frame.width, frame.height,
               frame.channels, frame.width * frame.height * frame.channels, frame.pixels.size());
  std::array<double, 6> warp = kIdentityWarp;
  m.pairs = m.inliers = 0;
  try {
    const cv::Mat input(static_cast<int>(frame.height), static_cast<int>(frame.width),
                        frame.channels == 3 ? CV_8UC3 : CV_8UC1, const_cast<uint8_t*>(frame.pixels.data()));
    cv::Mat grey;
    if (frame.channels == 3)
      cv::cvtColor(input, grey, cv::COLOR_RGB2GRAY);
    else
      grey = input.clone();
    if (m.downscale > 1) {
      cv::Mat small;
      cv::resize(grey, small, cv::Size(grey.cols / m.downscale, grey.rows / m.downscale), 0, 0, cv::INTER_LINEAR);
      grey = small;
    }
    std::vector<cv::Point2f> corners;
    if (grey.cols >= 3 && grey.rows >= 3)
      cv::goodFeaturesToTrack(grey, corners, 1000, 0.01, 1, cv::noArray(), 3, false, 0.04);
    if (!m.previous.empty() && m.previous.size() == grey.size() && !m.corners.empty()) {
      std::vector<cv::Point2f> moved;
      std::vector<uchar> status;
      std::vector<float> error;
      cv::calcOpticalFlowPyrLK(m.previous, grey, m.corners, moved, status, error);
      std::vector<cv::Point2f> from, to;
      for (size_t i = 0; i < status.size(); ++i)
        if (status[i]) from.push_back(m.corners[i]), to.push_back(moved[i]);
      m.pairs = static_cast<int>(from.size());
      if (from.size() > 4) {
        std::vector<uchar> inlier_mask;
        const cv::Mat h = cv::estimateAffinePartial2D(from, to, inlier_mask, cv::RANSAC);
        if (!h.empty()) {
          for (int r = 0; r < 2; ++r)
            for (int c = 0; c < 3; ++c) warp[static_cast<size_t>(r * 3 + c)] = h.at<double>(r, c);
          warp[2] *= m.downscale;
          warp[5] *= m.downscale;
          for (uchar k : inlier_mask) m.inliers += k != 0;
        }
      }
    }
    m.previous = grey;
    m.corners = std::move(corners);
  } catch (const cv::Exception& e) {
    fail("camera motion: OpenCV failed on a {}x{} frame: {}", frame.width, frame.height, e.what());
  }
  return warp;
}

void SparseFlowGmc::reset() {
  impl_->previous.release();
  impl_->corners.clear();
  impl_->pairs = impl_->inliers = 0;
}

#else  // no OpenCV

bool camera_motion_available() { return false; }

struct SparseFlowGmc::Impl {
  int pairs = 0, inliers = 0;
};

SparseFlowGmc::SparseFlowGmc(int) {
  fail("BoT-SORT's camera-motion compensation needs OpenCV: this build has none (CMake option VISION_OPENCV, Debian "
       "libopencv-video-dev and libopencv-calib3d-dev); use gmc_method: none or the bytetrack tracker");
}

std::array<double, 6> SparseFlowGmc::apply(const data::Image&) { return kIdentityWarp; }
void SparseFlowGmc::reset() {}

#endif

SparseFlowGmc::~SparseFlowGmc() = default;
SparseFlowGmc::SparseFlowGmc(SparseFlowGmc&&) noexcept = default;
SparseFlowGmc& SparseFlowGmc::operator=(SparseFlowGmc&&) noexcept = default;
int SparseFlowGmc::last_pairs() const { return impl_->pairs; }
int SparseFlowGmc::last_inliers() const { return impl_->inliers; }

}  // namespace vision::track
