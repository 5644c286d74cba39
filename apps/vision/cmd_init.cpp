// vision init — writes initial YOLO26 weights (a full checkpoint with ultralytics names) to a safetensors file.
#include <fmt/format.h>

#include "commands.h"
#include "vision/core/safetensors.h"
#include "vision/models/yolo/weights.h"

namespace vision::cli {

namespace {

struct InitOptions {
  std::string scale = "n";
  int64_t nc = 80;
  int64_t imgsz = 640;
  std::string out;
};

void run_init(const InitOptions& o) {
  namespace yolo = models::yolo;
  VISION_CHECK(o.imgsz > 0 && o.imgsz % yolo::kSizeMultiple == 0, "init: --imgsz must be a positive multiple of {}, got {}",
               yolo::kSizeMultiple, o.imgsz);
  yolo::ModelInfo info = yolo::default_model_info({.scale = yolo::parse_scale(o.scale), .nc = o.nc});
  info.imgsz = {o.imgsz, o.imgsz};
  yolo::write_initial_weights(o.out, info);
  const core::SafetensorsFile written = core::read_safetensors(o.out);
  int64_t values = 0;
  for (const auto& [name, t] : written.tensors) values += t.numel();
  fmt::print("wrote {}: YOLO26{}, {} classes, {} tensors ({} values), initial weights (full checkpoint)\n", o.out,
             yolo::scale_name(info.spec.scale), info.spec.nc, written.tensors.size(), values);
}

}  // namespace

void add_init_command(CLI::App& app) {
  auto opts = std::make_shared<InitOptions>();
  CLI::App* cmd = app.add_subcommand(
      "init", "Write initial YOLO26 weights (both heads, BatchNorm unfused, ultralytics names) to a safetensors file");
  cmd->add_option("--scale", opts->scale, "model scale: n, s, m, l or x")->check(CLI::IsMember({"n", "s", "m", "l", "x"}));
  cmd->add_option("--nc", opts->nc, "number of classes")->check(CLI::PositiveNumber);
  cmd->add_option("--imgsz", opts->imgsz, "training image size recorded in the metadata")->check(CLI::PositiveNumber);
  cmd->add_option("--out", opts->out, "the safetensors file to write")->required();
  cmd->callback([opts] { run_init(*opts); });
}

}  // namespace vision::cli
