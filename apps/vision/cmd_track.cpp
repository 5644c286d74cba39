// vision track — multi-object tracking over a sequence of frames (a folder or a glob of images, in name order, as
// MOT Challenge sequences are stored; or a video file or stream, data/video.h): vision::Detector finds the objects in each frame (at --conf 0.1 by default, so
// that ByteTrack's second association sees the low-score boxes, as ultralytics' track does) and track::ByteTracker
// follows them. Prints one line per tracked box, writes the tracks in the MOT Challenge format (--save-txt) and the
// frames annotated with track ids and trails (--save: the images, or for a video an annotated mp4), and with --eval scores the tracks against MOT ground truth (MOTA, IDF1,
// HOTA: track/mot_metrics.h).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "vision/core/error.h"
#include "vision/core/progress.h"
#include "vision/data/annotate.h"
#include "vision/data/dataset.h"
#include "vision/data/image.h"
#include "vision/data/prefetch.h"
#include "vision/data/video.h"
#include "vision/data/video_streams.h"
#include "vision/detector.h"
#include "vision/track/byte_tracker.h"
#include "vision/track/mot_metrics.h"

namespace vision::cli {
namespace {

namespace fs = std::filesystem;

struct TrackOptions {
  std::string model;
  std::string source;
  std::string tracker = "bytetrack";
  std::vector<int64_t> imgsz;
  float conf = 0.1f;
  std::string device = "auto";
  int threads = 0;  // the CPU: threads for the model; 0: every core
  double fps = 0;  // 0: the video's rate, else 30
  int64_t vid_stride = 1;
  int decode_threads = 0;
  int64_t batch = 1;  // frames through the model together (consecutive frames of each source)
  std::string hwaccel = "none";
  std::string save;
  std::string save_txt;
  std::string eval;
  int64_t workers = 0;
  bool json = false;
  bool quiet = false;
};

// The frames in order: an image sequence decoded ahead on worker threads (one source), or one or more videos (a file,
// a stream, a camera, or the sources a .streams file lists), each decoded on a thread of its own.
class FrameSource {
 public:
  // One frame of one source; `error` set (and the image empty) for a frame file that cannot be read.
  struct Item {
    size_t source = 0;
    data::Image image;
    data::Yuv420Image yuv;  // instead of image: a video frame's planes (FrameSource's yuv)
    int64_t number = 0;
    double timestamp = -1;  // a video frame's, in seconds (-1: an image of a sequence)
    std::string name, error;
  };

  // yuv: a video's frames as decoded (YUV planes, for the GPU detector), where nothing needs them as RGB.
  FrameSource(const TrackOptions& o, bool yuv) : stride_(o.vid_stride) {
    if (data::is_video_source(o.source) || data::is_stream_list(o.source)) {  // decoded ahead of the model
      sources_ = data::is_stream_list(o.source) ? data::read_stream_list(o.source) : std::vector<std::string>{o.source};
      video_ = std::make_unique<data::VideoStreams>(
          sources_,
          data::VideoReaderOptions{
              .stride = o.vid_stride, .threads = o.decode_threads, .hwaccel = o.hwaccel, .yuv = yuv, .yuv_on_gpu = yuv},
          std::max<size_t>(4, static_cast<size_t>(o.batch)));
      if (yuv) video_->set_ahead(kFirstBatchAhead);  // until the first batch has made the model's plan
      return;
    }
    VISION_CHECK(o.vid_stride == 1, "--vid-stride applies to a video source");
    VISION_CHECK(o.hwaccel == "none", "--hwaccel applies to a video source");
    sources_ = {o.source};
    frames_ = data::expand_image_source(o.source);
    const size_t workers = o.workers > 0 ? static_cast<size_t>(o.workers) : data::default_decode_workers();
    prefetch_ = std::make_unique<data::Prefetcher>(frames_, workers, std::max<size_t>(4, workers), data::DecodeOptions{});
  }
  bool video() const { return video_ != nullptr; }
  // The model has made its plan: the decoders go back to their queue (VideoStreams::set_ahead).
  void planned() {
    if (video_) video_->set_ahead(0);
  }
  // A frame's image, done with: a video's decoder reuses its buffer (VideoStreams::recycle).
  void recycle(data::Image&& image) {
    if (video_) video_->recycle(std::move(image));
  }
  void recycle(data::Yuv420Image&& frame) {
    if (video_) video_->recycle(std::move(frame));
  }
  const std::vector<std::string>& sources() const { return sources_; }
  const data::VideoInfo& info(size_t i) const { return video_->info(i); }
  // The videos' warnings (packets that did not decode, reconnections, dropped frames), once they have ended.
  std::vector<std::string> warnings() const { return video_ ? video_->warnings() : std::vector<std::string>{}; }
  const std::vector<fs::path>& files() const { return frames_; }
  // Frames to come over every source (0 when a video's count is unknown).
  size_t count() const {
    if (!video_) return frames_.size();
    size_t n = 0;
    for (size_t i = 0; i < sources_.size(); ++i) {
      if (video_->info(i).frames <= 0) return 0;
      n += static_cast<size_t>((video_->info(i).frames + stride_ - 1) / stride_);
    }
    return n;
  }
  // The next frame of each source still going (one for an image sequence); false at the end.
  bool next(std::vector<Item>& items) {
    items.clear();
    if (video_) {
      std::vector<data::StreamFrame> got;
      if (!video_->read(got)) return false;
      for (data::StreamFrame& f : got)
        items.push_back({.source = f.source, .image = std::move(f.frame.image), .yuv = std::move(f.frame.yuv),
                         .number = f.frame.index + 1, .timestamp = f.frame.timestamp,
                         .name = fmt::format("frame {}", f.frame.index + 1)});
      return true;
    }
    if (prefetch_->done()) return false;
    data::Loaded l = prefetch_->next();
    items.push_back({.source = 0, .image = std::move(l.image), .number = ++files_read_,
                     .name = l.path.filename().string(), .error = l.error});
    return true;
  }

 private:
  std::vector<std::string> sources_;
  std::unique_ptr<data::VideoStreams> video_;
  std::vector<fs::path> frames_;
  std::unique_ptr<data::Prefetcher> prefetch_;
  int64_t stride_ = 1;
  int64_t files_read_ = 0;
};

// The frames of a track's trail in --save's annotated frames (one second at 30 frames/s).
constexpr size_t kTrailFrames = 30;

// What is kept per source: its tracker, its tracks for --save-txt and --eval, its annotated video, its id labels.
struct SourceTracks {
  std::unique_ptr<track::ByteTracker> tracker;
  std::vector<track::MotBox> results;
  std::unique_ptr<data::VideoWriter> writer;
  std::vector<std::string> id_names;  // "id:N name", indexed by track id (the colour follows the id)
  // --save: each live track's last kTrailFrames box centres (its trail), by track id.
  std::map<int64_t, std::vector<std::array<float, 2>>> trails;
  std::string stem;
  double fps = 30;
};

// The MOT Challenge lines of a source's tracks.
void write_mot_tracks(const fs::path& path, const std::vector<track::MotBox>& results) {
  std::string text;
  for (const track::MotBox& b : results)
    text += fmt::format("{},{},{:.2f},{:.2f},{:.2f},{:.2f},1,-1,-1,-1\n", b.frame, b.id, b.xyxy[0], b.xyxy[1],
                        b.xyxy[2] - b.xyxy[0], b.xyxy[3] - b.xyxy[1]);
  data::write_file(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

int run_track(const TrackOptions& o) {
  const track::ByteTrackConfig config = o.tracker == "bytetrack" ? track::ByteTrackConfig{}
                                        : o.tracker == "botsort" ? track::botsort_config()
                                                                 : track::read_tracker_config(o.tracker);
  const bool botsort = config.tracker_type == track::TrackerType::botsort;
  DetectorOptions d;
  d.device = o.device, d.conf = o.conf, d.threads = o.threads;
  if (!o.imgsz.empty()) {
    VISION_CHECK(o.imgsz.size() <= 2, "--imgsz takes one size or height,width, got {} values", o.imgsz.size());
    d.imgsz = std::array<int64_t, 2>{o.imgsz[0], o.imgsz.back()};
  }
  Detector detector(o.model, d);
  const std::vector<std::string>& names = detector.names();
  // On the GPU, with ByteTrack (BoT-SORT's camera-motion compensation reads the frames) and nothing to draw: frames
  // as decoded, converted inside the letterbox kernel (see predict).
  FrameSource source(o, detector.device() == "cuda" && !botsort && o.save.empty());
  const size_t n_sources = source.sources().size();
  VISION_CHECK(o.eval.empty() || n_sources == 1, "--eval scores one source's tracks; {} lists {}", o.source,
               n_sources);
  if (!o.save.empty()) {
    std::error_code ec;
    for (const fs::path& p : source.files())
      VISION_CHECK(!fs::equivalent(fs::path(o.save) / p.filename(), p, ec),
                   "--save {}: the annotated copy of {} would overwrite the frame itself; choose another folder",
                   o.save, p.string());
    fs::create_directories(o.save, ec);
    VISION_CHECK(!ec, "--save {}: cannot create the folder: {}", o.save, ec.message());
  }
  const std::vector<std::string> stems = source_stems(source.sources());
  std::vector<SourceTracks> per(n_sources);
  for (size_t i = 0; i < n_sources; ++i) {
    SourceTracks& s = per[i];
    s.stem = stems[i];
    s.fps = o.fps > 0 ? o.fps : source.video() && source.info(i).fps > 0 ? source.info(i).fps : 30;
    s.tracker = std::make_unique<track::ByteTracker>(config, s.fps);
    if (o.quiet) continue;
    const std::string tracker_name =
        botsort ? fmt::format("BoT-SORT (camera motion: {})", config.gmc_method) : std::string("ByteTrack");
    if (source.video()) {
      const data::VideoInfo& v = source.info(i);
      fmt::print(stderr, "vision track: YOLO26{} on {}, {}, {} ({}×{}, {:.2f} frames/s, {})\n", detector.scale(),
                 detector.device(), tracker_name, source.sources()[i], v.width, v.height, v.fps, v.codec);
    } else {
      fmt::print(stderr, "vision track: YOLO26{} on {}, {}, {} frames\n", detector.scale(), detector.device(),
                 tracker_name, source.count());
    }
  }

  core::ProgressBar progress("track", source.count(), !o.quiet);
  int64_t frames = 0, boxes = 0;
  nlohmann::json json = nlohmann::json::array();  // --json: an entry per frame
  std::vector<FrameSource::Item> items, round;
  StageTimes times;
  for (bool more = true; more;) {
    // Rounds of frames (one per source still going) until --batch frames, through the detector together; then each
    // frame's detections to its source's tracker, in order. A frame that cannot be read is an empty frame: its tracks
    // age by one, as a dropped frame would.
    items.clear();
    while (static_cast<int64_t>(items.size()) < o.batch && (more = source.next(round)))
      for (FrameSource::Item& it : round) items.push_back(std::move(it));
    if (items.empty()) break;
    std::vector<data::Image> readable;
    std::vector<data::Yuv420View> planes;
    for (FrameSource::Item& it : items) {
      ++frames;
      if (!it.error.empty()) {
        progress.message(fmt::format("vision track: frame {} skipped: {}", it.number, it.error));
        continue;
      }
      if (!it.yuv.empty()) planes.push_back(it.yuv.view());
      readable.push_back(std::move(it.image));
    }
    // YUV frames straight to the detector when the whole batch came so; else RGB (any YUV one converted here).
    if (!planes.empty() && planes.size() < readable.size()) {
      size_t r = 0;
      for (FrameSource::Item& it : items) {
        if (!it.error.empty()) continue;
        if (!it.yuv.empty()) readable[r] = data::yuv420_to_rgb(it.yuv.view());
        ++r;
      }
    }
    times.next(StageTimes::frames);
    const std::vector<std::vector<data::Detection>> found =
        readable.empty()                   ? std::vector<std::vector<data::Detection>>{}
        : planes.size() == readable.size() ? detect_frames(detector, planes, o.batch)
                                           : detect_frames(detector, readable, o.batch);
    if (!readable.empty()) {
      times.detected(detector.last_timing());
      source.planned();
    }
    size_t k = 0;
    for (FrameSource::Item& it : items) {
      SourceTracks& s = per[it.source];
      data::Image* image = it.error.empty() ? &readable[k] : nullptr;
      const std::vector<data::Detection> none;
      const std::vector<data::Detection>& dets = image ? found[k++] : none;
      const std::vector<track::TrackedObject> tracks =
          s.tracker->update(dets, image && !image->empty() ? image : nullptr);  // empty: the frame came as YUV
      times.next(StageTimes::tracker);
      const std::string where = n_sources > 1 ? s.stem + " " : std::string();
      std::vector<data::Detection> drawn;
      nlohmann::json frame_tracks = nlohmann::json::array();
      for (const track::TrackedObject& t : tracks) {
        ++boxes;
        s.results.push_back({.frame = it.number, .id = t.id, .xyxy = {t.box[0], t.box[1], t.box[2], t.box[3]}});
        if (o.json) {
          const data::Detection as_detection{.box = t.box, .score = t.score, .cls = t.cls};
          nlohmann::json entry = data::detections_json(std::span(&as_detection, 1), names)[0];
          entry["id"] = t.id;
          frame_tracks.push_back(std::move(entry));
        }
        if (o.save.empty() && (o.quiet || o.json)) continue;
        const std::string cls = t.cls < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(t.cls)]
                                                                            : std::to_string(t.cls);
        if (!o.quiet && !o.json)
          fmt::print("{}{} {}: id {} {} {:.3f} {:.1f} {:.1f} {:.1f} {:.1f}\n", where, it.number, it.name, t.id, cls,
                     t.score, t.box[0], t.box[1], t.box[2], t.box[3]);
        if (s.id_names.size() <= static_cast<size_t>(t.id)) s.id_names.resize(static_cast<size_t>(t.id) + 1);
        s.id_names[static_cast<size_t>(t.id)] = fmt::format("id:{} {}", t.id, cls);
        drawn.push_back({.box = t.box, .score = t.score, .cls = t.id});
      }
      if (o.json) {
        nlohmann::json entry = {{"source", source.sources()[it.source]}, {"frame", it.number}, {"name", it.name}};
        if (it.timestamp >= 0) entry["timestamp"] = it.timestamp;
        if (image) {
          entry["width"] = image->empty() ? it.yuv.width : image->width;
          entry["height"] = image->empty() ? it.yuv.height : image->height;
        }
        if (!it.error.empty()) entry["error"] = it.error;
        entry["tracks"] = std::move(frame_tracks);
        json.push_back(std::move(entry));
      }
      if (!o.save.empty() && image) {
        // Trails: the centres of each track in this frame over its last frames (tracks not in the frame dropped),
        // drawn under the boxes in the track's colour.
        std::map<int64_t, std::vector<std::array<float, 2>>> live;
        for (const data::Detection& t : drawn) {
          std::vector<std::array<float, 2>>& trail = live[t.cls] = std::move(s.trails[t.cls]);
          if (trail.size() == kTrailFrames) trail.erase(trail.begin());
          trail.push_back({(t.box[0] + t.box[2]) / 2, (t.box[1] + t.box[3]) / 2});
          data::draw_polyline(*image, trail, data::class_colour(t.cls),
                              std::max<int64_t>(data::default_line_width(image->width, image->height) / 2, 1));
        }
        s.trails = std::move(live);
        data::draw_detections(*image, drawn, s.id_names);
        if (source.video()) {
          // An annotated video per source (even-sized for yuv420p: an odd last row or column is left out).
          *image = data::even_sized(std::move(*image));
          if (!s.writer)
            s.writer = std::make_unique<data::VideoWriter>(fs::path(o.save) / (s.stem + ".mp4"), image->width,
                                                           image->height, s.fps / static_cast<double>(o.vid_stride));
          s.writer->write(*image);
        } else {
          data::write_image(*image, fs::path(o.save) / it.name);
        }
      }
      times.next(StageTimes::output);
    }
    progress.update(static_cast<size_t>(frames));
    for (data::Image& image : readable) source.recycle(std::move(image));
    for (FrameSource::Item& it : items) source.recycle(std::move(it.yuv));
    times.next(StageTimes::output);
  }
  for (SourceTracks& s : per)
    if (s.writer) s.writer->close();
  times.next(StageTimes::output);
  for (const std::string& w : source.warnings()) fmt::print(stderr, "vision track: warning: {}\n", w);
  if (!o.save_txt.empty()) {
    // One source: the file named; several: <stem of the file>_<source stem><extension> beside it, one per source.
    const fs::path file(o.save_txt);
    for (const SourceTracks& s : per)
      write_mot_tracks(n_sources == 1 ? file
                                      : file.parent_path() / (file.stem().string() + "_" + s.stem +
                                                              file.extension().string()),
                       s.results);
  }
  if (!o.quiet)
    fmt::print(stderr, "vision track: {} frames{}, {} tracked boxes, {:.1f} frames/s end to end{}\n", frames,
               n_sources > 1 ? fmt::format(" of {} sources", n_sources) : "", boxes,
               static_cast<double>(frames) / std::max(times.total(), 1e-9),
               o.save.empty() ? "" : fmt::format("; frames saved to {}", o.save));
  if (!o.quiet) fmt::print(stderr, "vision track: time: {}\n", times.summary());
  if (o.json) fmt::print("{}\n", json.dump(2));
  if (!o.eval.empty()) {
    const track::MotMetrics m = track::evaluate_mot(track::read_mot_file(o.eval, true), per[0].results);
    fmt::print(o.json ? stderr : stdout,  // --json: stdout holds the JSON alone
               "MOTA {:.4f}  MOTP {:.4f}  IDF1 {:.4f}  HOTA {:.4f} (DetA {:.4f}, AssA {:.4f}, LocA {:.4f})\n"
               "TP {}  FN {}  FP {}  IDSW {}  IDTP {}  gt {} boxes of {} ids, tracks {} boxes of {} ids\n",
               m.mota, m.motp, m.idf1, m.hota, m.deta, m.assa, m.loca, m.tp, m.fn, m.fp, m.idsw, m.idtp, m.gt_dets,
               m.gt_ids, m.tracker_dets, m.tracker_ids);
  }
  return 0;
}

}  // namespace

void add_track_command(CLI::App& app) {
  auto opts = std::make_shared<TrackOptions>();
  CLI::App* cmd = app.add_subcommand("track", "Track objects through a sequence of frames with a YOLO26 model and "
                                              "ByteTrack");
  cmd->add_option("--model", opts->model, "weights file (safetensors or an ultralytics .pt)")->required();
  cmd->add_option("--source", opts->source,
                  "the frames: a folder or a glob of images (in name order), a video file, stream URL or camera, or "
                  "a .streams file listing several (each tracked on its own)")
      ->required();
  cmd->add_option("--tracker", opts->tracker,
                  "bytetrack, botsort (camera-motion compensation by sparse optical flow), or a tracker YAML file "
                  "in ultralytics' format")
      ->capture_default_str();
  cmd->add_option("--imgsz", opts->imgsz, "input size: one side or height,width (multiples of 32; default: the model's)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--conf", opts->conf, "detection confidence threshold (low, for the second association)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--device", opts->device, "auto, cpu or cuda")->capture_default_str();
  cmd->add_option("--threads", opts->threads, "CPU threads for the model (OpenMP and oneDNN; default 0: every core)")->check(CLI::Range(0, 1024));
  cmd->add_option("--fps", opts->fps,
                  "the frame rate (a lost track is kept for track_buffer · fps / 30 frames; default: the video's, or 30)")
      ->check(CLI::Range(0.1, 1000.0));
  cmd->add_option("--vid-stride", opts->vid_stride, "a video: track every N-th frame")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}))
      ->capture_default_str();
  cmd->add_option("--batch", opts->batch,
                  "frames through the model together: consecutive frames of each source (more throughput on a GPU; "
                  "1: each frame tracked as soon as it is read)")
      ->check(CLI::Range(int64_t{1}, int64_t{256}))
      ->capture_default_str();
  add_hwaccel_option(cmd, opts->hwaccel);
  add_decode_threads_option(cmd, opts->decode_threads);
  cmd->add_option("--save", opts->save,
                  "write the frames annotated with track ids into this folder (for a video: <stem>.mp4 there)");
  cmd->add_option("--save-txt", opts->save_txt,
                  "write the tracks to this file in the MOT Challenge format (several sources: FILE_<source>.txt "
                  "each)");
  cmd->add_option("--eval", opts->eval, "score the tracks against this MOT ground truth (gt.txt): MOTA, IDF1, HOTA");
  cmd->add_option("--workers", opts->workers, "frame decoding threads (default: the cores, at most 8)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", opts->json,
                "print the tracks as JSON (an entry per frame: source, 1-based frame number, name, timestamp of a "
                "video frame, size, tracks with id, class, name, confidence and box) instead of a line per box");
  cmd->add_flag("--quiet", opts->quiet, "no per-box lines, progress or summary");
  cmd->callback([opts] {
    const int status = run_track(*opts);
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace vision::cli
