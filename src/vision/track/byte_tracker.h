// ByteTracker — multi-object tracking by detection, ByteTrack as ultralytics runs it (trackers/byte_tracker.py with
// bytetrack.yaml): each frame's detections split by score into high (≥ track_high_thresh) and low (between
// track_low_thresh and it); tracks predicted by their Kalman filter (KalmanXyah); first the tracked and lost tracks
// matched to the high detections (IoU distance fused with the detection score, limit match_thresh), then the tracks
// still tracked matched to the low detections (IoU distance, limit 0.5), the unmatched ones marked lost; tracks born in
// the previous frame (unconfirmed) matched to the high detections left (limit 0.7) or removed; a high detection left
// over with score ≥ new_track_thresh starts a track (confirmed at once in the first frame, else when it is matched in
// the next); a track lost for more than track_buffer · frame_rate / 30 frames is removed; a tracked and a lost track
// overlapping at IoU > 0.85 keep the older. Ids count from 1 per tracker.
//
// BoT-SORT (tracker_type botsort, as ultralytics' trackers/bot_sort.py without ReID): the same associations, with the
// Kalman filter over (cx, cy, w, h) (KalmanXywh; both size velocities zeroed for tracks not tracked before their
// prediction), and the camera's motion between frames (SparseFlowGmc, gmc_method sparseOptFlow) applied to every
// predicted track — tracked, lost and unconfirmed — before the first association, when update() is given the frame.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vision/data/detection.h"
#include "vision/data/image.h"
#include "vision/track/gmc.h"
#include "vision/track/kalman.h"

namespace vision::track {

enum class TrackerType : uint8_t { bytetrack, botsort };

// bytetrack.yaml's parameters (ultralytics' defaults), and botsort.yaml's (botsort_config()).
struct ByteTrackConfig {
  TrackerType tracker_type = TrackerType::bytetrack;
  double track_high_thresh = 0.25;  // first association
  double track_low_thresh = 0.1;    // second association
  double new_track_thresh = 0.25;   // start a track
  int64_t track_buffer = 30;        // frames a lost track is kept (at 30 frames/s)
  double match_thresh = 0.8;        // first association's cost limit
  bool fuse_score = true;           // first association: IoU similarity × detection score
  // BoT-SORT only: camera-motion compensation, "sparseOptFlow" (SparseFlowGmc) or "none"; the ReID thresholds are
  // read and checked, and unused (no ReID: with_reid must be false).
  std::string gmc_method = "sparseOptFlow";
  double proximity_thresh = 0.5, appearance_thresh = 0.8;
  // Throws vision::Error naming a threshold outside [0, 1], a negative buffer or an unknown gmc_method.
  void validate() const;
};

// botsort.yaml's defaults: tracker_type botsort, gmc_method sparseOptFlow, the rest as bytetrack.yaml.
ByteTrackConfig botsort_config();

// A tracker YAML file in ultralytics' format (tracker_type bytetrack or botsort, and the keys above, with_reid (false
// only: ReID is not supported) and model (read, unused without ReID); unknown keys are errors naming them, missing ones
// keep the tracker type's defaults).
ByteTrackConfig read_tracker_config(const std::filesystem::path& path);

struct TrackedObject {
  std::array<float, 4> box = {};  // x1, y1, x2, y2: the track's Kalman estimate after this frame's update
  int64_t id = 0;                 // 1, 2, … per tracker
  float score = 0;                // the matched detection's
  int64_t cls = 0;                // the matched detection's
  int64_t detection = -1;         // index of the matched detection in this frame's input
};

class ByteTracker {
 public:
  explicit ByteTracker(const ByteTrackConfig& config = {}, double frame_rate = 30);

  // One frame's detections → the confirmed tracks matched in this frame, in the tracker's order. Boxes with a
  // non-positive width or height, or a non-finite coordinate or score, are errors naming the detection. `frame` (the
  // image the detections are of) feeds BoT-SORT's camera-motion compensation; without it, or for ByteTrack, none is
  // applied.
  std::vector<TrackedObject> update(std::span<const data::Detection> detections, const data::Image* frame = nullptr);
  // Whether update() uses the frame (BoT-SORT with camera-motion compensation): callers may skip preparing it.
  bool uses_frames() const { return gmc_ != nullptr; }
  // The last camera-motion warp applied (2×3 row-major; the identity before any or without compensation).
  const std::array<double, 6>& last_warp() const { return warp_; }
  // Forgets every track; ids count from 1 again.
  void reset();

  int64_t frame() const { return frame_; }
  // Tracks in the tracked state (confirmed or not) and in the lost state.
  size_t tracked_count() const { return tracked_.size(); }
  size_t lost_count() const { return lost_.size(); }

  enum class State : uint8_t { tracked, lost, removed };
  struct Track {
    KalmanState kalman;
    bool has_state = false;  // false: a detection not yet started (its box is `box`)
    bool xywh = false;       // the state is KalmanXywh's (BoT-SORT), else KalmanXyah's
    std::array<double, 4> box = {};
    int64_t id = 0;
    State state = State::tracked;
    bool activated = false;
    float score = 0;
    int64_t cls = 0;
    int64_t detection = -1;
    int64_t tracklet_len = 0;
    int64_t frame = 0, start_frame = 0;  // last frame updated, first frame
    std::array<double, 4> xyxy() const;  // the Kalman estimate (or the detection's box)
  };
  using TrackPtr = std::shared_ptr<Track>;

 private:
  ByteTrackConfig config_;
  int64_t max_time_lost_;
  int64_t frame_ = 0;
  int64_t next_id_ = 1;
  std::vector<TrackPtr> tracked_, lost_;
  std::unique_ptr<SparseFlowGmc> gmc_;
  std::array<double, 6> warp_ = {1, 0, 0, 0, 1, 0};
};

}  // namespace vision::track
