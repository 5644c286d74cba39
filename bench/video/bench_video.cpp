// bench_video — where the time of video detection and tracking goes (issue #32), stage by stage, on a video it makes:
// `vision synth`'s moving, occluding shapes (make_sequence at the frame's height) centred on a --width × --height
// canvas (1920 × 1080 by default) and written as H.264 (libx264) at 30 frames/s. Stages, each timed alone in frames/s:
//   encode            the frames written (VideoWriter: RGB → yuv420p, H.264);
//   decode <hwaccel> RGB | YUV | YUV→GPU
//                     the video read back (VideoReader: demux, decode, then → RGB by swscale, or the decoder's YUV
//                     planes copied to the host, or put on the GPU: uploaded by the reader, NVDEC's copied out of its
//                     surface, as `vision predict` on CUDA reads), per --hwaccel value (none, cuda: NVDEC, reported as
//                     software when it falls back);
//   model             Detector::detect over --batch frames at a time (letterbox, inference, postprocess: the Detector's
//                     own split is printed too), on the first --keep frames, repeated for --seconds;
//   model (YUV)       the same from the kept frames' YUV planes in host memory (uploaded as they are, converted to RGB
//                     in the letterbox kernel);
//   tracker           ByteTracker::update on those frames' detections in order (a fresh tracker per pass);
//   annotate+encode   the tracks drawn on each frame and the frame encoded.
// One table; there is no peer in this run (ultralytics' pipeline needs PyTorch and OpenCV's Python): see NOTES.md.
// The whole pipeline through the CLI (`vision predict` / `vision track` on the same video) is run.sh's.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "vision/core/error.h"
#include "vision/data/annotate.h"
#include "vision/data/synth/shapes.h"
#include "vision/data/video.h"
#include "vision/detector.h"
#include "vision/track/byte_tracker.h"

using namespace vision;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Row {
  std::string stage, note;
  int64_t frames = 0;
  double seconds = 0;
};

// The synth sequence's frames (side = height) centred on a width × height canvas of grey 114.
void make_video(const fs::path& path, int64_t width, int64_t height, int64_t frames, std::vector<Row>& rows) {
  const std::vector<data::synth::SequenceFrame> seq = data::synth::make_sequence(7, height, frames, 8);
  data::VideoWriter w(path, width, height, 30);
  double encode = 0;
  for (const data::synth::SequenceFrame& f : seq) {
    data::Image canvas(width, height, 3, 114);
    const int64_t left = (width - f.image.width) / 2;
    for (int64_t y = 0; y < f.image.height; ++y)
      std::copy_n(f.image.row(y), f.image.width * 3, canvas.at(std::max<int64_t>(left, 0), y));
    const auto t0 = Clock::now();
    w.write(canvas);
    encode += seconds_since(t0);
  }
  const auto t0 = Clock::now();
  w.close();
  encode += seconds_since(t0);
  rows.push_back({"encode", fmt::format("{} ({}×{})", w.codec(), width, height), frames, encode});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_video: frames/s of each stage of video detection and tracking on a synthetic 1080p video"};
  std::string model = "assets/yolo26n_synth.safetensors", device = "auto", dtype, out;
  std::vector<std::string> hwaccels = {"none"};
  int64_t width = 1920, height = 1080, frames = 300, batch = 32, keep = 64;
  int64_t imgsz = 640;
  double min_seconds = 3;
  int threads = 0;
  app.add_option("--model", model, "weights")->capture_default_str();
  app.add_option("--device", device, "auto, cpu or cuda")->capture_default_str();
  app.add_option("--dtype", dtype, "CUDA: f16 (default), bf16 or f32");
  app.add_option("--threads", threads, "the CPU: threads for the model (0: every core)");
  app.add_option("--width", width, "frame width")->check(CLI::Range(int64_t{64}, int64_t{4096}))->capture_default_str();
  app.add_option("--height", height, "frame height (the synth shapes' square)")
      ->check(CLI::Range(int64_t{64}, int64_t{4096}))
      ->capture_default_str();
  app.add_option("--frames", frames, "frames in the video")->check(CLI::Range(int64_t{8}, int64_t{100000}))->capture_default_str();
  app.add_option("--batch", batch, "frames per detect call")->check(CLI::Range(int64_t{1}, int64_t{256}))->capture_default_str();
  app.add_option("--keep", keep, "frames kept in memory for the model, tracker and encode stages")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  app.add_option("--imgsz", imgsz, "model input size")->capture_default_str();
  app.add_option("--seconds", min_seconds, "the model stage runs at least this long")->capture_default_str();
  app.add_option("--hwaccel", hwaccels, "decode rows: none, cuda (comma-separated)")->delimiter(',');
  app.add_option("--out", out, "folder for the video (kept); default a temporary one, removed");
  CLI11_PARSE(app, argc, argv);
  try {
    VISION_CHECK(height <= width && width % 2 == 0 && height % 2 == 0,
                 "--width {} and --height {}: even, the height at most the width", width, height);
    const fs::path dir = out.empty() ? fs::temp_directory_path() / fmt::format("bench_video.{}", ::getpid()) : fs::path(out);
    fs::create_directories(dir);
    const fs::path video = dir / "bench.mp4";
    std::vector<Row> rows;
    make_video(video, width, height, frames, rows);

    // Decode, per hardware setting (the file read once before, so that every row reads it from the page cache);
    // then the first `keep` frames kept for the stages below.
    std::vector<data::Image> kept;
    {
      data::VideoReader r(video.string());
      data::VideoFrame f;
      while (r.read(f))
        if (static_cast<int64_t>(kept.size()) < keep) kept.push_back(std::move(f.image));
    }
    // Each decoding three ways: to RGB (swscale), to YUV planes on the host (the decoder's, copied), and — on CUDA —
    // to YUV planes on the GPU (uploaded by the reader; NVDEC's copied out of its surface), as `vision predict` reads.
    std::vector<data::Yuv420Image> kept_yuv;
    for (const std::string& h : hwaccels) {
      struct Mode {
        const char* name;
        bool yuv, gpu;
      };
      for (const Mode m : {Mode{"RGB", false, false}, Mode{"YUV", true, false}, Mode{"YUV→GPU", true, true}}) {
        if (m.gpu && device != "cuda") continue;
        if (h == "cuda" && m.yuv && !m.gpu) continue;  // NVDEC YUV frames are on the GPU either way
        data::VideoReader r(video.string(), {.hwaccel = h, .yuv = m.yuv, .yuv_on_gpu = m.gpu});
        data::VideoFrame f;
        int64_t n = 0;
        const auto t0 = Clock::now();
        while (r.read(f)) {
          ++n;
          if (h == "none" && m.yuv && !m.gpu && static_cast<int64_t>(kept_yuv.size()) < keep) {
            kept_yuv.push_back(std::move(f.yuv));
            f.yuv = {};
          }
        }
        const double s = seconds_since(t0);
        rows.push_back({fmt::format("decode {} {}", h, m.name), r.hwaccel() == "cuda" ? "NVDEC" : "software", n, s});
        for (const std::string& w : r.warnings()) fmt::print(stderr, "bench_video: {}\n", w);
      }
    }

    // The model, --batch frames a call, over the kept frames again and again.
    DetectorOptions o;
    o.device = device;
    if (!dtype.empty()) o.dtype = core::parse_dtype(dtype);
    o.imgsz = std::array<int64_t, 2>{imgsz, imgsz};
    o.conf = 0.1f;
    o.threads = threads;
    Detector detector(model, o);
    std::vector<std::vector<data::Detection>> found(kept.size());
    const auto detect_all = [&](double* pre, double* inf, double* post) {
      for (size_t i = 0; i < kept.size(); i += static_cast<size_t>(batch)) {
        const size_t n = std::min(kept.size() - i, static_cast<size_t>(batch));
        auto got = detector.detect(std::span<const data::Image>(kept.data() + i, n));
        for (size_t k = 0; k < n; ++k) found[i + k] = std::move(got[k]);
        if (pre) *pre += detector.last_timing().preprocess, *inf += detector.last_timing().inference,
                 *post += detector.last_timing().postprocess;
      }
    };
    detect_all(nullptr, nullptr, nullptr);  // warm-up: plans, kernels
    double pre = 0, inf = 0, post = 0;
    int64_t detected = 0;
    const auto t0 = Clock::now();
    while (detected == 0 || seconds_since(t0) < min_seconds) {
      detect_all(&pre, &inf, &post);
      detected += static_cast<int64_t>(kept.size());
    }
    const double model_s = seconds_since(t0);
    const double per = 1.0 / static_cast<double>(detected);
    rows.push_back({"model", fmt::format("{} {} batch {} at {}: letterbox {:.2f}, inference {:.2f}, postprocess {:.2f} "
                                         "ms/frame", detector.device(), core::dtype_name(detector.dtype()), batch, imgsz,
                                         pre * per, inf * per, post * per),
                    detected, model_s});

    // The same from the kept frames' YUV planes (host memory: uploaded as they are, converted in the letterbox kernel).
    if (!kept_yuv.empty()) {
      std::vector<data::Yuv420View> views;
      for (const data::Yuv420Image& y : kept_yuv) views.push_back(y.view());
      const auto detect_yuv = [&](double* pre_ms) {
        for (size_t i = 0; i < views.size(); i += static_cast<size_t>(batch)) {
          const size_t n = std::min(views.size() - i, static_cast<size_t>(batch));
          detector.detect(std::span<const data::Yuv420View>(views.data() + i, n));
          if (pre_ms) *pre_ms += detector.last_timing().preprocess;
        }
      };
      detect_yuv(nullptr);
      double yuv_pre = 0;
      int64_t yuv_detected = 0;
      const auto t3 = Clock::now();
      while (yuv_detected == 0 || seconds_since(t3) < min_seconds) {
        detect_yuv(&yuv_pre);
        yuv_detected += static_cast<int64_t>(views.size());
      }
      rows.push_back({"model (YUV)", fmt::format("from host YUV planes: letterbox {:.2f} ms/frame",
                                                 yuv_pre / static_cast<double>(yuv_detected)),
                      yuv_detected, seconds_since(t3)});
    }

    // The tracker over the kept frames' detections in order.
    int64_t tracked = 0, boxes = 0;
    std::vector<std::vector<track::TrackedObject>> tracks(kept.size());
    const auto t1 = Clock::now();
    while (tracked == 0 || seconds_since(t1) < 0.5) {
      track::ByteTracker tracker;
      for (size_t i = 0; i < kept.size(); ++i) {
        tracks[i] = tracker.update(found[i], &kept[i]);
        boxes += static_cast<int64_t>(tracks[i].size());
      }
      tracked += static_cast<int64_t>(kept.size());
    }
    rows.push_back({"tracker", fmt::format("ByteTrack, {:.1f} tracks/frame", static_cast<double>(boxes) / tracked), tracked,
                    seconds_since(t1)});

    // Annotate and encode.
    {
      const std::vector<std::string> names(64, "obj");
      data::VideoWriter w(dir / "annotated.mp4", width, height, 30);
      const auto t2 = Clock::now();
      for (size_t i = 0; i < kept.size(); ++i) {
        data::Image frame = kept[i];
        std::vector<data::Detection> drawn;
        for (const track::TrackedObject& t : tracks[i]) drawn.push_back({.box = t.box, .score = t.score, .cls = t.id % 64});
        data::draw_detections(frame, drawn, names);
        w.write(frame);
      }
      w.close();
      rows.push_back({"annotate+encode", "tracks drawn, H.264", static_cast<int64_t>(kept.size()), seconds_since(t2)});
    }
    if (out.empty()) fs::remove_all(dir);

    fmt::print("bench_video: {} frames of {}×{}, {} hardware threads\n", frames, width, height,
               std::thread::hardware_concurrency());
    fmt::print("{:<18} {:>8} {:>10} {:>10}  {}\n", "stage", "frames", "frames/s", "ms/frame", "");
    for (const Row& r : rows)
      fmt::print("{:<18} {:>8} {:>10.1f} {:>10.3f}  {}\n", r.stage, r.frames, r.frames / r.seconds,
                 1000 * r.seconds / r.frames, r.note);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_video: {}\n", e.what());
    return 1;
  }
  return 0;
}
