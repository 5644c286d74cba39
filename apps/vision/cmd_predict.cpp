// vision predict — detects objects in images (or a video's frames, data/video.h) with a YOLO26 model: one line per detection (or JSON), annotated images
// and YOLO-format label files. A thin client of vision::Detector; images are decoded on worker threads ahead of the
// model, and a bad image is reported and skipped while the others are processed.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "commands.h"
#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/core/progress.h"
#include "vision/data/prefetch.h"
#include "vision/data/annotate.h"
#include "vision/data/dataset.h"
#include "vision/data/image.h"
#include "vision/data/video.h"
#include "vision/data/video_streams.h"
#include "vision/detector.h"

namespace vision::cli {
namespace {

using data::Loaded;
using data::Prefetcher;
using Progress = core::ProgressBar;

namespace fs = std::filesystem;

struct PredictOptions {
  std::string model;
  std::string source;
  std::vector<int64_t> imgsz;
  float conf = 0.25f;
  int64_t max_det = 300;
  std::vector<int64_t> classes;
  bool nms = false;
  float iou = 0.7f;
  int64_t batch = 1;
  std::string device = "auto";
  std::string dtype;
  int threads = 0;
  std::string save;
  bool save_txt = false;
  bool save_conf = false;
  bool json = false;
  int64_t workers = 0;
  int64_t max_pixels = data::kDefaultMaxPixels;
  int64_t vid_stride = 1;
  int decode_threads = 0;
  std::string hwaccel = "none";
  bool quiet = false;
};

DetectorOptions detector_options(const PredictOptions& o) {
  DetectorOptions d;
  d.device = o.device;
  if (!o.dtype.empty()) d.dtype = core::parse_dtype(o.dtype);
  if (!o.imgsz.empty()) {
    VISION_CHECK(o.imgsz.size() <= 2, "--imgsz takes one size or height,width, got {} values", o.imgsz.size());
    d.imgsz = std::array<int64_t, 2>{o.imgsz[0], o.imgsz.back()};
  }
  d.conf = o.conf;
  d.max_det = o.max_det;
  d.classes = o.classes;
  d.nms = o.nms;
  d.iou = o.iou;
  d.threads = o.threads;
  return d;
}

// Video sources — one file, stream or camera, or the sources a .streams file lists — decoded on a thread each ahead
// of the model (data/video_streams.h); their frames in batches through the detector; lines (or JSON) per frame with
// its source, index and time; --save an annotated mp4 per source (SAVE/<stem>.mp4 at the kept frames' rate; a stem
// taken twice gets _<n>), --save-txt SAVE/labels/<stem>_<frame>.txt.
int run_predict_video(const PredictOptions& o) {
  const std::vector<std::string> sources =
      data::is_stream_list(o.source) ? data::read_stream_list(o.source) : std::vector<std::string>{o.source};
  Detector detector(o.model, detector_options(o));
  const std::vector<std::string>& names = detector.names();
  // On the GPU, and with no annotated copy to draw: frames as decoded (YUV planes), put on the GPU by the decoding
  // thread (NVDEC's never leave it) and converted to RGB inside the letterbox kernel — no colour conversion on the
  // CPU, half the bytes of RGB uploaded, and the upload off the thread that runs the model.
  const bool yuv = detector.device() == "cuda" && o.save.empty();
  data::VideoStreams streams(
      sources,
      {.max_pixels = o.max_pixels,
       .stride = o.vid_stride,
       .threads = o.decode_threads,
       .hwaccel = o.hwaccel,
       .yuv = yuv,
       .yuv_on_gpu = yuv},
      std::max<size_t>(4, static_cast<size_t>(o.batch)));
  if (yuv) streams.set_ahead(kFirstBatchAhead);  // until the first batch has made the model's plan
  const std::vector<std::string> stems = source_stems(sources);
  if (!o.save.empty()) {
    std::error_code ec;
    fs::create_directories(o.save_txt ? fs::path(o.save) / "labels" : fs::path(o.save), ec);
    VISION_CHECK(!ec, "--save {}: cannot create the folder: {}", o.save, ec.message());
  }
  int64_t total_frames = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const data::VideoInfo& info = streams.info(i);
    if (!o.quiet)
      fmt::print(stderr, "vision predict: YOLO26{} on {} in {}, {} ({}×{}, {:.2f} frames/s, {}{})\n", detector.scale(),
                 detector.device(), core::dtype_name(detector.dtype()), sources[i], info.width, info.height, info.fps,
                 info.codec, info.frames > 0 ? fmt::format(", {} frames", info.frames) : "");
    total_frames = info.frames > 0 && total_frames >= 0 ? total_frames + (info.frames + o.vid_stride - 1) / o.vid_stride
                                                        : -1;
  }
  std::vector<std::unique_ptr<data::VideoWriter>> writers(sources.size());
  Progress progress("predict", total_frames > 0 ? static_cast<size_t>(total_frames) : 0, !o.quiet && !o.json);
  nlohmann::json json = nlohmann::json::array();
  size_t frames = 0, detections = 0;
  const auto start = std::chrono::steady_clock::now();
  std::vector<data::StreamFrame> batch;
  StageTimes times;
  auto flush = [&] {
    if (batch.empty()) return;
    std::vector<data::Image> pixels;
    std::vector<data::Yuv420View> planes;
    for (data::StreamFrame& f : batch) {
      if (!f.frame.yuv.empty()) planes.push_back(f.frame.yuv.view());
      pixels.push_back(std::move(f.frame.image));
    }
    times.next(StageTimes::frames);
    // YUV frames (all of the batch, as a stream keeps its format) straight to the detector; else RGB images (a YUV
    // frame among RGB ones converted on the CPU).
    if (!planes.empty() && planes.size() < batch.size())
      for (size_t i = 0; i < batch.size(); ++i)
        if (!batch[i].frame.yuv.empty()) pixels[i] = data::yuv420_to_rgb(batch[i].frame.yuv.view());
    const std::vector<std::vector<data::Detection>> found =
        planes.size() == batch.size() ? detect_frames(detector, planes, o.batch) : detect_frames(detector, pixels, o.batch);
    times.detected(detector.last_timing());
    streams.set_ahead(0);
    for (size_t i = 0; i < batch.size(); ++i) {
      const size_t src = batch[i].source;
      const std::string& source = sources[src];
      const int64_t frame = batch[i].frame.index;
      const std::vector<data::Detection>& dets = found[i];
      data::Image& image = pixels[i];
      const data::VideoFrame& decoded = batch[i].frame;
      const int64_t width = decoded.yuv.empty() ? image.width : decoded.yuv.width;
      const int64_t height = decoded.yuv.empty() ? image.height : decoded.yuv.height;
      ++frames, detections += dets.size();
      if (o.json) {
        json.push_back({{"source", source}, {"frame", frame}, {"timestamp", batch[i].frame.timestamp},
                        {"width", width}, {"height", height},
                        {"detections", data::detections_json(dets, names)}});
      } else {
        if (dets.empty()) fmt::print("{} frame {}: no detections\n", source, frame);
        for (const data::Detection& d : dets)
          fmt::print("{} frame {}: {} {:.3f} {:.1f} {:.1f} {:.1f} {:.1f}\n", source, frame, names.at(d.cls), d.score,
                     d.box[0], d.box[1], d.box[2], d.box[3]);
      }
      if (!o.save.empty()) {
        if (o.save_txt) {
          const std::string text = data::yolo_label_lines(dets, width, height, o.save_conf);
          data::write_file(fs::path(o.save) / "labels" / fmt::format("{}_{}.txt", stems[src], frame),
                           std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
        }
        data::draw_detections(image, dets, names);
        image = data::even_sized(std::move(image));
        if (!writers[src]) {
          const double rate = streams.info(src).fps > 0 ? streams.info(src).fps : 30;
          writers[src] = std::make_unique<data::VideoWriter>(fs::path(o.save) / (stems[src] + ".mp4"), image.width,
                                                             image.height, rate / static_cast<double>(o.vid_stride));
        }
        writers[src]->write(image);
      }
    }
    progress.update(frames);
    for (data::Image& image : pixels) streams.recycle(std::move(image));
    for (data::StreamFrame& f : batch) streams.recycle(std::move(f.frame.yuv));
    batch.clear();
    times.next(StageTimes::output);
  };
  std::vector<data::StreamFrame> got;
  while (streams.read(got)) {
    for (data::StreamFrame& f : got) batch.push_back(std::move(f));
    if (batch.size() >= static_cast<size_t>(o.batch)) flush();
  }
  flush();
  for (auto& w : writers)
    if (w) w->close();
  times.next(StageTimes::output);
  for (const std::string& w : streams.warnings()) progress.message(fmt::format("vision predict: warning: {}", w));
  if (o.json) fmt::print("{}\n", json.dump(2));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!o.quiet)
    fmt::print(stderr, "vision predict: {} frames, {} detections, {:.1f} frames/s end to end{}\n", frames, detections,
               static_cast<double>(frames) / std::max(seconds, 1e-9),
               o.save.empty() ? "" : fmt::format("; saved to {}", sources.size() == 1
                                                                     ? (fs::path(o.save) / (stems[0] + ".mp4")).string()
                                                                     : o.save));
  if (!o.quiet) fmt::print(stderr, "vision predict: time: {}\n", times.summary());
  return 0;
}

int run_predict(const PredictOptions& o) {
  VISION_CHECK(!o.save_txt || !o.save.empty(), "--save-txt writes DIR/labels: give the folder with --save DIR");
  VISION_CHECK(!o.save_conf || o.save_txt, "--save-conf adds the score to the --save-txt label files");
  if (data::is_video_source(o.source) || data::is_stream_list(o.source)) return run_predict_video(o);
  VISION_CHECK(o.vid_stride == 1, "--vid-stride applies to a video source");
  VISION_CHECK(o.hwaccel == "none", "--hwaccel applies to a video source");
  const std::vector<fs::path> paths = data::expand_image_source(o.source);
  Detector detector(o.model, detector_options(o));
  const std::vector<std::string>& names = detector.names();
  if (!o.save.empty()) {
    // Never write over what the user gave: an input image (--save is the source folder) or, with --save-txt, the
    // label file a dataset keeps for an input (--save is the dataset's root).
    std::error_code ec;
    for (const fs::path& p : paths) {
      const fs::path image = fs::path(o.save) / p.filename();
      VISION_CHECK(!fs::equivalent(image, p, ec),
                   "--save {}: the annotated copy of {} would overwrite the image itself; choose another folder",
                   o.save, p.string());
      const fs::path label = fs::path(o.save) / "labels" / fs::path(p.filename()).replace_extension(".txt");
      VISION_CHECK(!o.save_txt || !fs::equivalent(label, data::label_path(p), ec),
                   "--save {} --save-txt: {} would overwrite the label file of {}; choose another folder", o.save,
                   label.string(), p.string());
    }
    fs::create_directories(o.save_txt ? fs::path(o.save) / "labels" : fs::path(o.save), ec);
    VISION_CHECK(!ec, "--save {}: cannot create the folder: {}", o.save, ec.message());
  }
  if (!o.quiet)
    fmt::print(stderr, "vision predict: YOLO26{} ({} classes) on {} in {}, {} image{}\n",
               detector.scale(), detector.nc(), detector.device(),
               core::dtype_name(detector.dtype()), paths.size(), paths.size() == 1 ? "" : "s");

  const size_t workers =
      o.workers > 0 ? static_cast<size_t>(o.workers) : data::default_decode_workers();
  data::DecodeOptions decode;
  decode.max_pixels = o.max_pixels;
  Prefetcher prefetch(paths, workers, std::max<size_t>(2 * static_cast<size_t>(o.batch), workers), decode);
  Progress progress("predict", paths.size(), !o.quiet && !o.json);
  nlohmann::json json = nlohmann::json::array();
  size_t done = 0, failed = 0, images = 0, detections = 0;
  DetectTiming total;

  std::vector<Loaded> batch;
  auto flush = [&] {
    if (batch.empty()) return;
    std::vector<data::Image> pixels;
    for (Loaded& l : batch) pixels.push_back(std::move(l.image));
    const std::vector<std::vector<data::Detection>> found = detector.detect(pixels);
    const DetectTiming& t = detector.last_timing();
    total.preprocess += t.preprocess, total.inference += t.inference, total.postprocess += t.postprocess;
    for (size_t i = 0; i < batch.size(); ++i) {
      const fs::path& path = batch[i].path;
      const std::vector<data::Detection>& dets = found[i];
      data::Image& image = pixels[i];
      ++images;
      detections += dets.size();
      if (o.json) {
        json.push_back({{"image", path.string()},
                        {"width", image.width},
                        {"height", image.height},
                        {"detections", data::detections_json(dets, names)}});
      } else {
        if (dets.empty()) fmt::print("{}: no detections\n", path.string());
        for (const data::Detection& d : dets)
          fmt::print("{}: {} {:.3f} {:.1f} {:.1f} {:.1f} {:.1f}\n", path.string(), names.at(d.cls), d.score, d.box[0],
                     d.box[1], d.box[2], d.box[3]);
      }
      if (!o.save.empty()) {
        data::draw_detections(image, dets, names);
        data::write_image(image, fs::path(o.save) / path.filename());
        if (o.save_txt) {
          const fs::path label = fs::path(o.save) / "labels" / path.filename().replace_extension(".txt");
          const std::string text = data::yolo_label_lines(dets, image.width, image.height, o.save_conf);
          data::write_file(label, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
        }
      }
    }
    done += batch.size();
    progress.update(done + failed);
    batch.clear();
  };

  while (!prefetch.done()) {
    Loaded l = prefetch.next();
    for (const std::string& w : l.warnings) progress.message(fmt::format("vision predict: warning: {}", w));
    if (!l.error.empty()) {
      ++failed;
      progress.message(fmt::format("vision predict: skipped {}", l.error));
      progress.update(done + failed);
      continue;
    }
    batch.push_back(std::move(l));
    if (batch.size() == static_cast<size_t>(o.batch)) flush();
  }
  flush();

  if (o.json) fmt::print("{}\n", json.dump(2));
  if (!o.quiet && images > 0)
    fmt::print(stderr,
               "vision predict: {} image{}, {} detection{}; per image {:.1f} ms preprocess, {:.1f} ms inference, "
               "{:.1f} ms postprocess{}\n",
               images, images == 1 ? "" : "s", detections, detections == 1 ? "" : "s",
               total.preprocess / static_cast<double>(images), total.inference / static_cast<double>(images),
               total.postprocess / static_cast<double>(images),
               o.save.empty() ? "" : fmt::format("; results saved to {}", o.save));
  if (failed > 0) {
    fmt::print(stderr, "vision predict: error: {} of {} image{} could not be read (see above)\n", failed, paths.size(),
               paths.size() == 1 ? "" : "s");
    return 1;
  }
  return 0;
}

}  // namespace

void add_hwaccel_option(CLI::App* cmd, std::string& hwaccel) {
  cmd->add_option("--hwaccel", hwaccel,
                  "a video: decode with NVDEC (cuda) where the driver and FFmpeg have it, else in software (a warning)")
      ->check(CLI::IsMember({"none", "cuda"}))
      ->capture_default_str();
}

namespace {

template <typename View>
std::vector<std::vector<data::Detection>> detect_padded(Detector& detector, std::span<const View> frames,
                                                        int64_t batch) {
  if (frames.empty() || detector.device() != "cuda" || static_cast<int64_t>(frames.size()) >= batch)
    return detector.detect(frames);
  std::vector<View> padded(frames.begin(), frames.end());
  padded.resize(static_cast<size_t>(batch), frames.back());
  std::vector<std::vector<data::Detection>> found = detector.detect(std::span<const View>(padded));
  found.resize(frames.size());
  return found;
}

}  // namespace

std::vector<std::vector<data::Detection>> detect_frames(Detector& detector, std::span<const data::Yuv420View> frames,
                                                       int64_t batch) {
  return detect_padded(detector, frames, batch);
}

std::vector<std::vector<data::Detection>> detect_frames(Detector& detector, std::span<const data::Image> frames,
                                                       int64_t batch) {
  std::vector<data::ImageView> views(frames.begin(), frames.end());
  return detect_padded(detector, std::span<const data::ImageView>(views), batch);
}

void StageTimes::detected(const DetectTiming& timing) {
  const Clock::time_point now = Clock::now();
  const double total = std::chrono::duration<double>(now - last_).count();
  const double model_s = timing.inference / 1000, post_s = timing.postprocess / 1000;
  seconds_[model] += model_s;
  seconds_[postprocess] += post_s;
  seconds_[preprocess] += std::max(total - model_s - post_s, 0.0);
  model_ms_.push_back(timing.inference);
  last_ = now;
}

double StageTimes::total() const {
  double sum = 0;
  for (double s : seconds_) sum += s;
  return sum;
}

std::string StageTimes::summary() const {
  static constexpr std::array<const char*, count> kNames = {"waiting for frames", "preprocess", "model", "postprocess",
                                                           "tracker", "output"};
  const double all = total();
  std::string text;
  for (size_t i = 0; i < count; ++i) {
    if (seconds_[i] <= 0) continue;
    text += fmt::format("{}{} {:.2f} s ({:.0f}%)", text.empty() ? "" : ", ", kNames[i], seconds_[i],
                        100 * seconds_[i] / std::max(all, 1e-12));
  }
  if (!model_ms_.empty()) {
    std::vector<double> ms = model_ms_;
    std::sort(ms.begin(), ms.end());
    text += fmt::format("; the model per call: min {:.1f}, median {:.1f}, max {:.1f} ms over {} calls", ms.front(),
                        ms[ms.size() / 2], ms.back(), ms.size());
  }
  return text;
}

void add_decode_threads_option(CLI::App* cmd, int& threads) {
  cmd->add_option("--decode-threads", threads, "a video: the decoder's threads (0: FFmpeg's choice, cores + 1 up to 16)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
}

std::vector<std::string> source_stems(const std::vector<std::string>& sources) {
  std::vector<std::string> stems;
  for (const std::string& source : sources) {
    std::string stem = data::is_camera_source(source) ? "camera_" + fs::path(source).filename().string()
                                                      : fs::path(source).stem().string();
    if (stem.empty()) stem = "stream";
    std::string unique = stem;
    for (int n = 2; std::find(stems.begin(), stems.end(), unique) != stems.end(); ++n)
      unique = fmt::format("{}_{}", stem, n);
    stems.push_back(unique);
  }
  return stems;
}

void add_predict_command(CLI::App& app) {
  auto opts = std::make_shared<PredictOptions>();
  CLI::App* cmd = app.add_subcommand("predict", "Detect objects in images or videos with a YOLO26 model");
  cmd->add_option("--model", opts->model,
                  "weights file (safetensors: a checkpoint or an exported model; or an ultralytics .pt checkpoint)")
      ->required();
  cmd->add_option("--source", opts->source,
                  "an image, a folder of images or a glob pattern (quote it); or a video file or stream URL (mp4, mkv, "
                  "avi, mov, webm, …; rtsp://, http://)")
      ->required();
  cmd->add_option("--vid-stride", opts->vid_stride, "a video: detect in every N-th frame")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}))
      ->capture_default_str();
  add_hwaccel_option(cmd, opts->hwaccel);
  add_decode_threads_option(cmd, opts->decode_threads);
  cmd->add_option("--imgsz", opts->imgsz, "input size: one side or height,width (multiples of 32; default: the model's)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--conf", opts->conf, "confidence threshold")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--max-det", opts->max_det, "most detections per image")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_option("--classes", opts->classes, "keep only these class indices: 0,2")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--nms", opts->nms, "the one-to-many head and NMS instead of the end-to-end head");
  cmd->add_option("--iou", opts->iou, "NMS IoU threshold")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--batch", opts->batch, "images per model call")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("--device", opts->device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--dtype", opts->dtype, "compute dtype: f16 (CUDA default), bf16 or f32 (the CPU's)")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}));
  cmd->add_option("--threads", opts->threads, "CPU threads for the model (OpenMP and oneDNN; default 0: every core)")->check(CLI::Range(0, 1024));
  cmd->add_option("--save", opts->save, "write annotated images to this folder");
  cmd->add_flag("--save-txt", opts->save_txt, "also write YOLO-format labels (class cx cy w h) to SAVE/labels");
  cmd->add_flag("--save-conf", opts->save_conf, "add the score to each --save-txt line");
  cmd->add_flag("--json", opts->json, "print the detections as JSON instead of lines");
  cmd->add_option("--workers", opts->workers, "image decoding threads, a fixed pool (default: the cores, at most 8)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-pixels", opts->max_pixels,
                  "refuse images of more pixels (width x height) than this, before decoding them")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32))
      ->capture_default_str();
  cmd->add_flag("--quiet", opts->quiet, "no progress bar or summary on standard error");
  cmd->callback([opts] {
    if (const int rc = run_predict(*opts); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace vision::cli
