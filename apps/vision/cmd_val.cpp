// vision val — the detection metrics of a YOLO26 model on a split of a YOLO-format dataset: vision::run_validation
// (vision/validator.h) from the command line. An unreadable image or a bad label line is reported, counted and
// skipped; the command exits 0 unless none of the images could be read.
#include <fmt/format.h>

#include "commands.h"
#include "vision/data/image.h"
#include "vision/validator.h"

namespace vision::cli {

void add_val_command(CLI::App& app) {
  auto opts = std::make_shared<ValConfig>();
  CLI::App* cmd = app.add_subcommand("val", "Detection metrics (P, R, mAP50, mAP50-95) of a model on a dataset");
  cmd->add_option("--model", opts->model,
                  "weights file (safetensors: a checkpoint or an exported model; or an ultralytics .pt checkpoint)")
      ->required();
  cmd->add_option("--plots", opts->plots, "write PR_curve.png and val_pred.jpg (the first images' predictions) here");
  cmd->add_option("--data", opts->data, "the dataset's data file (.yaml or .json, ultralytics' keys)")->required();
  cmd->add_option("--split", opts->split, "the split to evaluate")
      ->check(CLI::IsMember({"train", "val", "test"}))
      ->capture_default_str();
  cmd->add_option("--imgsz", opts->imgsz, "input size, a multiple of 32 (default: the model's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", opts->batch, "images per model call")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("--conf", opts->conf, "confidence threshold")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--iou", opts->iou, "NMS IoU threshold (with --nms)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--max-det", opts->max_det, "most detections per image")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_flag("--nms", opts->nms, "the one-to-many head and NMS instead of the end-to-end head");
  cmd->add_option("--device", opts->device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--dtype", opts->dtype, "compute dtype: f16 (CUDA default), bf16 or f32 (the CPU's)")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}));
  cmd->add_option("--threads", opts->threads, "CPU threads for the model (OpenMP and oneDNN; default 0: every core)")->check(CLI::Range(0, 1024));
  cmd->add_option("--save-json", opts->save_json, "write the detections to this file in COCO's results format");
  cmd->add_option("--workers", opts->workers, "image decoding threads, a fixed pool (default: the cores, at most 8)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-pixels", opts->max_pixels,
                  "refuse images of more pixels (width x height) than this, before decoding them")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32))
      ->capture_default_str();
  auto quiet = std::make_shared<bool>(false);
  cmd->add_flag("--quiet", *quiet, "no progress bar or header on standard error");
  cmd->callback([opts, quiet] {
    ValConfig c = *opts;
    c.progress = !*quiet;
    const ValResult r = run_validation(c);
    if (r.evaluated == 0) {
      fmt::print(stderr, "vision val: error: none of the {} images could be read\n", r.images);
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace vision::cli
