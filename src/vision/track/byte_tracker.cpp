#include "vision/track/byte_tracker.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "vision/core/error.h"
#include "vision/track/assignment.h"

namespace vision::track {

namespace {

using Track = ByteTracker::Track;
using TrackPtr = ByteTracker::TrackPtr;
using State = ByteTracker::State;

Vec4 xyah_of(const std::array<double, 4>& b) {
  const double w = b[2] - b[0], h = b[3] - b[1];
  return {b[0] + w / 2, b[1] + h / 2, w / h, h};
}

Vec4 xywh_of(const std::array<double, 4>& b) {
  const double w = b[2] - b[0], h = b[3] - b[1];
  return {b[0] + w / 2, b[1] + h / 2, w, h};
}

// 1 − IoU of every (track, detection) pair: rows × cols, row-major (IoU = inter / (union + 1e-7), as ultralytics'
// bbox_ioa).
std::vector<double> iou_distance(const std::vector<TrackPtr>& a, const std::vector<TrackPtr>& b) {
  std::vector<double> d(a.size() * b.size());
  std::vector<std::array<double, 4>> boxes(b.size());  // each box once, not once per pair
  for (size_t j = 0; j < b.size(); ++j) boxes[j] = b[j]->xyxy();
  for (size_t i = 0; i < a.size(); ++i) {
    const auto p = a[i]->xyxy();
    for (size_t j = 0; j < b.size(); ++j) {
      const auto& q = boxes[j];
      const double iw = std::max(0.0, std::min(p[2], q[2]) - std::max(p[0], q[0]));
      const double ih = std::max(0.0, std::min(p[3], q[3]) - std::max(p[1], q[1]));
      const double inter = iw * ih;
      const double uni = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter;
      d[i * b.size() + j] = 1.0 - inter / (uni + 1e-7);
    }
  }
  return d;
}

// The IoU distance, fused with the detections' scores: 1 − (1 − d) · score.
std::vector<double> fused_distance(const std::vector<TrackPtr>& a, const std::vector<TrackPtr>& b, bool fuse) {
  std::vector<double> d = iou_distance(a, b);
  if (fuse)
    for (size_t i = 0; i < a.size(); ++i)
      for (size_t j = 0; j < b.size(); ++j) d[i * b.size() + j] = 1.0 - (1.0 - d[i * b.size() + j]) * b[j]->score;
  return d;
}

Assignment associate(const std::vector<double>& cost, size_t rows, size_t cols, double limit) {
  return linear_assignment(cost, static_cast<int64_t>(rows), static_cast<int64_t>(cols), limit);
}

// A matched track takes the detection: Kalman update, tracked and confirmed, the detection's score, class and index.
void take(Track& t, const Track& det, int64_t frame, bool reactivated) {
  if (t.xywh)
    KalmanXywh::update(t.kalman, xywh_of(det.box));
  else
    KalmanXyah::update(t.kalman, xyah_of(det.box));
  t.frame = frame;
  t.tracklet_len = reactivated ? 0 : t.tracklet_len + 1;
  t.state = State::tracked;
  t.activated = true;
  t.score = det.score, t.cls = det.cls, t.detection = det.detection;
}

// a, then b's tracks whose ids a does not have.
std::vector<TrackPtr> joined(std::vector<TrackPtr> a, const std::vector<TrackPtr>& b) {
  std::set<int64_t> ids;
  for (const TrackPtr& t : a) ids.insert(t->id);
  for (const TrackPtr& t : b)
    if (ids.insert(t->id).second) a.push_back(t);
  return a;
}

// a without the tracks whose ids are in `ids`.
std::vector<TrackPtr> without(const std::vector<TrackPtr>& a, const std::set<int64_t>& ids) {
  std::vector<TrackPtr> out;
  for (const TrackPtr& t : a)
    if (!ids.count(t->id)) out.push_back(t);
  return out;
}

std::set<int64_t> ids_of(const std::vector<TrackPtr>& a) {
  std::set<int64_t> ids;
  for (const TrackPtr& t : a) ids.insert(t->id);
  return ids;
}

}  // namespace

void ByteTrackConfig::validate() const {
  for (const auto& [name, v] : {std::pair{"track_high_thresh", track_high_thresh}, {"track_low_thresh", track_low_thresh},
                                {"new_track_thresh", new_track_thresh}, {"match_thresh", match_thresh}})
    VISION_CHECK(std::isfinite(v) && v >= 0 && v <= 1, "tracker: {} must be in [0, 1], got {}", name, v);
  for (const auto& [name, v] : {std::pair{"proximity_thresh", proximity_thresh}, {"appearance_thresh", appearance_thresh}})
    VISION_CHECK(std::isfinite(v) && v >= 0 && v <= 1, "tracker: {} must be in [0, 1], got {}", name, v);
  VISION_CHECK(gmc_method == "sparseOptFlow" || gmc_method == "none",
               "tracker: gmc_method '{}' is not supported (sparseOptFlow or none)", gmc_method);
  VISION_CHECK(track_buffer >= 0 && track_buffer <= 1'000'000, "tracker: track_buffer must be 0 to 1000000, got {}",
               track_buffer);
}

ByteTrackConfig botsort_config() {
  ByteTrackConfig c;
  c.tracker_type = TrackerType::botsort;
  return c;
}

ByteTrackConfig read_tracker_config(const std::filesystem::path& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path.string());
  } catch (const YAML::Exception& e) {
    fail_input("tracker config {}: {}", path.string(), e.what());
  }
  VISION_CHECK_INPUT(root.IsMap(), "tracker config {}: expected a mapping of keys to values", path.string());
  ByteTrackConfig c;
  // The type first: its defaults are the starting point whatever the order of the keys.
  if (root["tracker_type"]) {
    std::string type;
    try {
      type = root["tracker_type"].as<std::string>();
    } catch (const YAML::Exception&) {
      fail_input("tracker config {}: 'tracker_type' has a value of the wrong type", path.string());
    }
    VISION_CHECK_INPUT(type == "bytetrack" || type == "botsort",
                       "tracker config {}: tracker_type '{}' is not supported (bytetrack or botsort)", path.string(),
                       type);
    if (type == "botsort") c = botsort_config();
  }
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    try {
      if (key == "tracker_type") {
        // read above
      } else if (key == "gmc_method") {
        c.gmc_method = v.as<std::string>();
      } else if (key == "proximity_thresh") {
        c.proximity_thresh = v.as<double>();
      } else if (key == "appearance_thresh") {
        c.appearance_thresh = v.as<double>();
      } else if (key == "with_reid") {
        VISION_CHECK_INPUT(!v.as<bool>(), "tracker config {}: with_reid: true is not supported (BoT-SORT runs without "
                           "ReID here)", path.string());
      } else if (key == "model") {
        (void)v.as<std::string>();  // the ReID model: unused without ReID
      } else if (key == "track_high_thresh") {
        c.track_high_thresh = v.as<double>();
      } else if (key == "track_low_thresh") {
        c.track_low_thresh = v.as<double>();
      } else if (key == "new_track_thresh") {
        c.new_track_thresh = v.as<double>();
      } else if (key == "track_buffer") {
        c.track_buffer = v.as<int64_t>();
      } else if (key == "match_thresh") {
        c.match_thresh = v.as<double>();
      } else if (key == "fuse_score") {
        c.fuse_score = v.as<bool>();
      } else {
        fail_input("tracker config {}: unknown key '{}' (the keys are tracker_type, track_high_thresh, "
                   "track_low_thresh, new_track_thresh, track_buffer, match_thresh, fuse_score and, for botsort, "
                   "gmc_method, proximity_thresh, appearance_thresh, with_reid, model)", path.string(), key);
      }
    } catch (const YAML::Exception&) {
      fail_input("tracker config {}: '{}' has a value of the wrong type", path.string(), key);
    }
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail_input("tracker config {}: {}", path.string(), e.what());
  }
  return c;
}

std::array<double, 4> ByteTracker::Track::xyxy() const {
  if (!has_state) return box;
  const double h = kalman.mean[3], w = xywh ? kalman.mean[2] : kalman.mean[2] * h;
  const double x1 = kalman.mean[0] - w / 2, y1 = kalman.mean[1] - h / 2;
  return {x1, y1, x1 + w, y1 + h};
}

ByteTracker::ByteTracker(const ByteTrackConfig& config, double frame_rate) : config_(config) {
  config_.validate();
  VISION_CHECK(std::isfinite(frame_rate) && frame_rate > 0 && frame_rate <= 1000,
               "tracker: the frame rate must be in (0, 1000], got {}", frame_rate);
  max_time_lost_ = static_cast<int64_t>(frame_rate / 30.0 * static_cast<double>(config_.track_buffer));
  if (config_.tracker_type == TrackerType::botsort && config_.gmc_method == "sparseOptFlow")
    gmc_ = std::make_unique<SparseFlowGmc>(2);
}

void ByteTracker::reset() {
  tracked_.clear(), lost_.clear();
  frame_ = 0, next_id_ = 1;
  if (gmc_) gmc_->reset();
  warp_ = {1, 0, 0, 0, 1, 0};
}

std::vector<TrackedObject> ByteTracker::update(std::span<const data::Detection> detections, const data::Image* frame) {
  const bool xywh = config_.tracker_type == TrackerType::botsort;
  for (size_t i = 0; i < detections.size(); ++i) {
    const data::Detection& d = detections[i];
    const auto& b = d.box;
    VISION_CHECK(std::isfinite(b[0]) && std::isfinite(b[1]) && std::isfinite(b[2]) && std::isfinite(b[3]) &&
                     std::isfinite(d.score) && b[2] > b[0] && b[3] > b[1],
                 "tracker: detection {} has the box ({}, {}, {}, {}) and score {}: boxes need a positive width and "
                 "height and finite values", i, b[0], b[1], b[2], b[3], d.score);
  }
  ++frame_;
  // The frame's detections as candidate tracks: high scores first association, low ones the second.
  std::vector<TrackPtr> high, low;
  for (size_t i = 0; i < detections.size(); ++i) {
    const data::Detection& d = detections[i];
    auto t = std::make_shared<Track>();
    t->box = {d.box[0], d.box[1], d.box[2], d.box[3]};
    t->score = d.score, t->cls = d.cls, t->detection = static_cast<int64_t>(i);
    if (d.score >= config_.track_high_thresh)
      high.push_back(std::move(t));
    else if (d.score > config_.track_low_thresh)
      low.push_back(std::move(t));
  }
  std::vector<TrackPtr> unconfirmed, confirmed, activated, refound, lost_now, removed_now;
  for (const TrackPtr& t : tracked_) (t->activated ? confirmed : unconfirmed).push_back(t);

  // First association: tracked and lost tracks, predicted, with the high detections.
  const std::vector<TrackPtr> pool = joined(confirmed, lost_);
  for (const TrackPtr& t : pool) {
    if (t->state != State::tracked) {
      t->kalman.mean[7] = 0;
      if (t->xywh) t->kalman.mean[6] = 0;
    }
    if (t->xywh)
      KalmanXywh::predict(t->kalman);
    else
      KalmanXyah::predict(t->kalman);
  }
  if (gmc_ && frame) {  // BoT-SORT: the camera's motion since the last frame, on every predicted and unconfirmed track
    warp_ = gmc_->apply(*frame);
    for (const TrackPtr& t : pool) apply_camera_motion(t->kalman, warp_);
    for (const TrackPtr& t : unconfirmed) apply_camera_motion(t->kalman, warp_);
  }
  const Assignment first =
      associate(fused_distance(pool, high, config_.fuse_score), pool.size(), high.size(), config_.match_thresh);
  for (const auto& [i, j] : first.matches) {
    Track& t = *pool[static_cast<size_t>(i)];
    const bool was_tracked = t.state == State::tracked;
    take(t, *high[static_cast<size_t>(j)], frame_, !was_tracked);
    (was_tracked ? activated : refound).push_back(pool[static_cast<size_t>(i)]);
  }
  // Second association: the tracks still tracked, with the low detections.
  std::vector<TrackPtr> remaining;
  for (int64_t i : first.unmatched_rows)
    if (pool[static_cast<size_t>(i)]->state == State::tracked) remaining.push_back(pool[static_cast<size_t>(i)]);
  const Assignment second = associate(iou_distance(remaining, low), remaining.size(), low.size(), 0.5);
  for (const auto& [i, j] : second.matches) {
    take(*remaining[static_cast<size_t>(i)], *low[static_cast<size_t>(j)], frame_, false);
    activated.push_back(remaining[static_cast<size_t>(i)]);
  }
  for (int64_t i : second.unmatched_rows) {
    const TrackPtr& t = remaining[static_cast<size_t>(i)];
    if (t->state != State::lost) {
      t->state = State::lost;
      lost_now.push_back(t);
    }
  }
  // Tracks started last frame, with the high detections left.
  std::vector<TrackPtr> left;
  for (int64_t j : first.unmatched_cols) left.push_back(high[static_cast<size_t>(j)]);
  const Assignment third =
      associate(fused_distance(unconfirmed, left, config_.fuse_score), unconfirmed.size(), left.size(), 0.7);
  for (const auto& [i, j] : third.matches) {
    take(*unconfirmed[static_cast<size_t>(i)], *left[static_cast<size_t>(j)], frame_, false);
    activated.push_back(unconfirmed[static_cast<size_t>(i)]);
  }
  for (int64_t i : third.unmatched_rows) {
    unconfirmed[static_cast<size_t>(i)]->state = State::removed;
    removed_now.push_back(unconfirmed[static_cast<size_t>(i)]);
  }
  // New tracks from the high detections nobody took.
  for (int64_t j : third.unmatched_cols) {
    const TrackPtr& t = left[static_cast<size_t>(j)];
    if (t->score < config_.new_track_thresh) continue;
    t->xywh = xywh;
    t->kalman = xywh ? KalmanXywh::initiate(xywh_of(t->box)) : KalmanXyah::initiate(xyah_of(t->box));
    t->has_state = true;
    t->id = next_id_++;
    t->tracklet_len = 0;
    t->state = State::tracked;
    t->activated = frame_ == 1;
    t->frame = t->start_frame = frame_;
    activated.push_back(t);
  }
  // Lost for too long: removed.
  for (const TrackPtr& t : lost_)
    if (frame_ - t->frame > max_time_lost_) {
      t->state = State::removed;
      removed_now.push_back(t);
    }

  std::vector<TrackPtr> tracked;
  for (const TrackPtr& t : tracked_)
    if (t->state == State::tracked) tracked.push_back(t);
  tracked = joined(joined(tracked, activated), refound);
  std::vector<TrackPtr> lost = without(lost_, ids_of(tracked));
  lost.insert(lost.end(), lost_now.begin(), lost_now.end());
  lost = without(lost, ids_of(removed_now));
  // A tracked and a lost track over each other (IoU distance < 0.15): the younger goes.
  const std::vector<double> d = iou_distance(tracked, lost);
  std::set<int64_t> drop_tracked, drop_lost;
  for (size_t i = 0; i < tracked.size(); ++i)
    for (size_t j = 0; j < lost.size(); ++j)
      if (d[i * lost.size() + j] < 0.15) {
        const int64_t age_t = tracked[i]->frame - tracked[i]->start_frame, age_l = lost[j]->frame - lost[j]->start_frame;
        if (age_t > age_l)
          drop_lost.insert(lost[j]->id);
        else
          drop_tracked.insert(tracked[i]->id);
      }
  tracked_ = without(tracked, drop_tracked);
  lost_ = without(lost, drop_lost);

  std::vector<TrackedObject> out;
  for (const TrackPtr& t : tracked_)
    if (t->activated) {
      const auto b = t->xyxy();
      out.push_back({.box = {static_cast<float>(b[0]), static_cast<float>(b[1]), static_cast<float>(b[2]),
                             static_cast<float>(b[3])},
                     .id = t->id, .score = t->score, .cls = t->cls, .detection = t->detection});
    }
  return out;
}

}  // namespace vision::track
