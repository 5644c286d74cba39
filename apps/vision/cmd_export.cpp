// vision export — a full YOLO26 checkpoint → the fused inference model: BatchNorm folded into each convolution, the
// one-to-one head only, f16 or f32, with its metadata (format "fused"); written atomically.
#include <fmt/format.h>

#include <filesystem>

#include "commands.h"
#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/core/safetensors.h"
#include "vision/models/yolo/ultralytics_checkpoint.h"
#include "vision/models/yolo/weights.h"

namespace vision::cli {
namespace {

struct ExportOptions {
  std::string model;
  std::string out;
  std::string dtype = "f16";
};

void run_export(const ExportOptions& o) {
  namespace yolo = models::yolo;
  VISION_CHECK(std::filesystem::weakly_canonical(o.model) != std::filesystem::weakly_canonical(o.out),
               "export: --out {} is the input model itself: write the exported model to another file", o.out);
  const core::SafetensorsFile full = yolo::read_model_file(o.model);
  const yolo::ModelInfo info = yolo::read_model_info(full);
  VISION_CHECK(!info.fused(), "export: {} is already an exported model (format \"fused\"): export takes a full checkpoint",
               o.model);
  const yolo::ExportedWeights exported = yolo::fold_batchnorm(full, core::parse_dtype(o.dtype));
  core::write_safetensors(o.out, exported.tensors, exported.metadata);
  int64_t values = 0;
  for (const auto& [name, t] : exported.tensors) values += t.numel();
  fmt::print("wrote {}: YOLO26{}, {} classes, BatchNorm folded, one-to-one head, {} ({} tensors, {} values, {:.1f} MB)\n",
             o.out, yolo::scale_name(info.spec.scale), info.spec.nc, o.dtype, exported.tensors.size(), values,
             static_cast<double>(std::filesystem::file_size(o.out)) / 1e6);
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto opts = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Export a YOLO26 checkpoint for inference: BatchNorm folded, one-to-one head, f16 or f32 safetensors");
  cmd->add_option("--model", opts->model, "a full checkpoint (vision train / vision init, or an ultralytics .pt)")
      ->required();
  cmd->add_option("--out", opts->out, "the exported model's safetensors file")->required();
  cmd->add_option("--dtype", opts->dtype, "the weights' dtype")->check(CLI::IsMember({"f16", "f32"}))->capture_default_str();
  cmd->callback([opts] { run_export(*opts); });
}

}  // namespace vision::cli
