// The CLI's subcommands: each lives in its own cmd_<name>.cpp and registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "vision/data/detection.h"
#include "vision/data/image.h"
#include "vision/data/yuv.h"

namespace vision::cli {

void add_demo_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_init_command(CLI::App& app);
void add_predict_command(CLI::App& app);
void add_val_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_track_command(CLI::App& app);
void add_bench_command(CLI::App& app);
#ifdef VISION_HAS_CUDA
void add_kernels_command(CLI::App& app);
#endif

// The process's command line as main() received it (`vision train --devices` restarts it under mpirun).
void set_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();

// A name per video source for its outputs (<stem>.mp4, labels): a file's stem, "camera_<device>" for a camera,
// "stream" when a URL has none; a stem taken twice gets _2, _3, ….
std::vector<std::string> source_stems(const std::vector<std::string>& sources);

// `--hwaccel none|cuda` (data::VideoReaderOptions::hwaccel) on a command that reads video.
void add_hwaccel_option(CLI::App* cmd, std::string& hwaccel);
// `--decode-threads N` (data::VideoReaderOptions::threads) on a command that reads video.
void add_decode_threads_option(CLI::App* cmd, int& threads);

}  // namespace vision::cli
namespace vision {
class Detector;
struct DetectTiming;
}
namespace vision::cli {

// How far ahead (bytes of decoded frames) the video decoders may run while the model's first batch makes its plan
// (VideoStreams::set_ahead): on CUDA that takes 0.3–0.6 s, in which the H100/H200 hosts' 16 cores decode 400–800
// frames of 1080p. 1 GiB holds 340 of them (YUV 4:2:0) — on the GPU, as the decoders put them there.
inline constexpr size_t kFirstBatchAhead = size_t(1) << 30;

// Detections of a batch of video frames. On CUDA a batch short of `batch` frames — a video's last, or one of sources
// that ended — is padded with repeats of its last frame (their detections dropped): it then runs in the plan the full
// batches made, where a batch size of its own would build a plan (seconds) for a few milliseconds of frames.
std::vector<std::vector<data::Detection>> detect_frames(Detector& detector, std::span<const data::Yuv420View> frames,
                                                       int64_t batch);
std::vector<std::vector<data::Detection>> detect_frames(Detector& detector, std::span<const data::Image> frames,
                                                       int64_t batch);

// Where a video pipeline's wall clock went (predict and track print it at the end unless --quiet): time waiting for
// decoded frames, the detector's three parts (its DetectTiming), the tracker, and the output (printing, drawing,
// encoding). next() charges the time since the last call to a stage; the detector's parts are added from its timing.
class StageTimes {
 public:
  enum Stage : size_t { frames, preprocess, model, postprocess, tracker, output, count };
  StageTimes() : last_(Clock::now()) {}
  void next(Stage stage) {
    const Clock::time_point now = Clock::now();
    seconds_[stage] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  // detect()'s time, split as its DetectTiming says: its model and postprocess parts; the rest of the call (the
  // letterbox, and the call's own work) goes to preprocess.
  void detected(const DetectTiming& timing);
  // "waiting for frames 1.20 s (40%), preprocess 0.40 s (13%), …" over the stages that took any time, then the model's
  // time per call (min, median, max over the calls: a first call builds the plan).
  std::string summary() const;
  double total() const;  // seconds, all stages

 private:
  using Clock = std::chrono::steady_clock;
  std::array<double, count> seconds_{};
  std::vector<double> model_ms_;  // each detect() call's model time
  Clock::time_point last_;
};

}  // namespace vision::cli
