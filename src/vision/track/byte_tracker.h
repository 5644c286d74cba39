// ByteTracker — multi-object tracking by detection, ByteTrack as ultralytics runs it (trackers/byte_tracker.py with
// bytetrack.yaml): each frame's detections split by score into high (≥ track_high_thresh) and low (between
// track_low_thresh and it); tracks predicted by their Kalman filter (KalmanXyah); first the tracked and lost tracks
// matched to the high detections (IoU distance fused with the detection score, limit match_thresh), then the tracks
// still tracked matched to the low detections (IoU distance, limit 0.5), the unmatched ones marked lost; tracks born in
// the previous frame (unconfirmed) matched to the high detections left (limit 0.7) or removed; a high detection left
// over with score ≥ new_track_thresh starts a track (confirmed at once in the first frame, else when it is matched in
// the next); a track lost for more than track_buffer · frame_rate / 30 frames is removed; a tracked and a lost track
// overlapping at IoU > 0.85 keep the older. Ids count from 1 per tracker.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vision/data/detection.h"
#include "vision/track/kalman.h"

namespace vision::track {

// bytetrack.yaml's parameters (ultralytics' defaults).
struct ByteTrackConfig {
  double track_high_thresh = 0.25;  // first association
  double track_low_thresh = 0.1;    // second association
  double new_track_thresh = 0.25;   // start a track
  int64_t track_buffer = 30;        // frames a lost track is kept (at 30 frames/s)
  double match_thresh = 0.8;        // first association's cost limit
  bool fuse_score = true;           // first association: IoU similarity × detection score
  // Throws vision::Error naming a threshold outside [0, 1] or a negative buffer.
  void validate() const;
};

// A tracker YAML file in ultralytics' format (tracker_type: bytetrack, and the keys above; unknown keys are errors
// naming them, missing ones keep the defaults). tracker_type botsort is refused (not implemented yet).
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
  // non-positive width or height, or a non-finite coordinate or score, are errors naming the detection.
  std::vector<TrackedObject> update(std::span<const data::Detection> detections);
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
};

}  // namespace vision::track
