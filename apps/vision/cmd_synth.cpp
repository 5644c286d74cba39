// vision synth — writes a synthetic detection dataset (shapes on textured backgrounds) in the YOLO format.
#include <fmt/format.h>

#include <chrono>

#include "commands.h"
#include "vision/data/synth/shapes.h"

namespace vision::cli {

void add_synth_command(CLI::App& app) {
  auto opts = std::make_shared<data::synth::DatasetOptions>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a synthetic detection dataset: 6 shape classes on textured backgrounds, YOLO-format labels");
  cmd->add_option("--out", opts->out, "output folder (gets images/, labels/ and data.yaml)")->required();
  cmd->add_option("--train", opts->train, "training images")->required()->check(CLI::NonNegativeNumber);
  cmd->add_option("--val", opts->val, "validation images")->required()->check(CLI::NonNegativeNumber);
  cmd->add_option("--imgsz", opts->imgsz, "image side in pixels (square images)")
      ->check(CLI::Range(32, 4096))
      ->capture_default_str();
  cmd->add_option("--seed", opts->seed, "random seed: the same seed gives byte-identical files")->capture_default_str();
  cmd->add_option("--format", opts->format, "image format")
      ->check(CLI::IsMember({"jpg", "png"}))
      ->capture_default_str();
  cmd->add_flag("--overwrite", opts->overwrite, "replace the dataset an earlier run wrote to --out");
  cmd->callback([opts] {
    const auto t0 = std::chrono::steady_clock::now();
    const data::synth::DatasetSummary s = data::synth::write_dataset(*opts);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("vision synth: {} images ({} train, {} val, {}×{} px) with {} objects written to {} in {:.1f} s\n",
               s.images, opts->train, opts->val, opts->imgsz, opts->imgsz, s.objects, opts->out.string(), seconds);
  });
}

}  // namespace vision::cli
