// vision synth — writes a synthetic detection dataset (shapes on textured backgrounds) in the YOLO format, or with
// --sequences tracking sequences of moving shapes in the MOT Challenge layout (frames and gt.txt), or with --video
// (--videos N) the same sequences as H.264 videos.
#include <fmt/format.h>

#include <chrono>
#include <string>

#include "commands.h"
#include "vision/core/error.h"
#include "vision/data/synth/shapes.h"

namespace vision::cli {

namespace {
constexpr int kDefaultVideos = 4;  // `vision synth --video --out DIR` alone
}  // namespace

void add_synth_command(CLI::App& app) {
  auto opts = std::make_shared<data::synth::DatasetOptions>();
  auto seq = std::make_shared<data::synth::SequenceOptions>();
  seq->sequences = 0;
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a synthetic detection dataset: 6 shape classes on textured backgrounds, YOLO-format labels (or "
               "with --sequences, tracking sequences in the MOT Challenge layout)");
  cmd->add_option("--out", opts->out, "output folder (gets images/, labels/ and data.yaml; or seq-NN/)")->required();
  CLI::Option* train = cmd->add_option("--train", opts->train, "training images")->check(CLI::NonNegativeNumber);
  CLI::Option* val = cmd->add_option("--val", opts->val, "validation images")->check(CLI::NonNegativeNumber);
  cmd->add_option("--imgsz", opts->imgsz, "image side in pixels (square images)")
      ->check(CLI::Range(32, 4096))
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "random seed: the same seed gives byte-identical files")->capture_default_str();
  cmd->add_option("--format", opts->format, "image format")
      ->check(CLI::IsMember({"jpg", "png"}))
      ->capture_default_str();
  cmd->add_flag("--overwrite", opts->overwrite, "replace the dataset an earlier run wrote to --out");
  CLI::Option* sequences =
      cmd->add_option("--sequences", seq->sequences,
                      "write this many tracking sequences of moving, occluding shapes instead: seq-NN/img1/*.jpg, "
                      "seq-NN/gt/gt.txt (MOT Challenge), seq-NN/seqinfo.ini")
          ->check(CLI::Range(1, 1000));
  cmd->add_option("--frames", seq->frames, "frames per sequence")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_flag("--video", seq->video,
                "each sequence as an H.264 mp4 (seq-NN/seq-NN.mp4) with its gt.txt; alone, " +
                    std::to_string(kDefaultVideos) + " of them");
  CLI::Option* videos = cmd->add_option("--videos", seq->sequences, "as --video --sequences N: this many videos")
                            ->check(CLI::Range(1, 1000))
                            ->excludes(sequences);
  cmd->add_option("--objects", seq->max_objects, "the most objects in a sequence (2 or more)")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  cmd->callback([opts, seq, train, val, sequences, videos] {
    const auto t0 = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    if (videos->count() > 0) seq->video = true;
    if (seq->video && sequences->count() == 0 && videos->count() == 0) seq->sequences = kDefaultVideos;
    if (sequences->count() > 0 || seq->video) {
      VISION_CHECK(train->count() == 0 && val->count() == 0,
                   "synth: --sequences and --video write tracking sequences; --train and --val are for a detection "
                   "dataset");
      seq->out = opts->out, seq->imgsz = opts->imgsz, seq->seed = opts->seed, seq->format = opts->format;
      seq->overwrite = opts->overwrite;
      const data::synth::DatasetSummary s = data::synth::write_sequences(*seq);
      fmt::print("vision synth: {} {}{} of {} frames ({}×{} px, {} boxes) written to {} in {:.1f} s\n",
                 seq->sequences, seq->video ? "video" : "sequence", seq->sequences == 1 ? "" : "s", seq->frames,
                 seq->imgsz, seq->imgsz, s.objects, seq->out.string(), seconds());
      return;
    }
    VISION_CHECK(train->count() > 0 && val->count() > 0,
                 "synth: give --train N and --val N (images per split), or --sequences N for tracking sequences");
    const data::synth::DatasetSummary s = data::synth::write_dataset(*opts);
    fmt::print("vision synth: {} images ({} train, {} val, {}×{} px) with {} objects written to {} in {:.1f} s\n",
               s.images, opts->train, opts->val, opts->imgsz, opts->imgsz, s.objects, opts->out.string(), seconds());
  });
}

}  // namespace vision::cli
