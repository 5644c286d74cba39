// vision export — vision::export_model (vision/exporter.h) from the command line: a full YOLO26 checkpoint → the fused
// inference model: BatchNorm folded into each convolution, the
// one-to-one head only, f16 or f32, with its metadata (format "fused"); written atomically.
#include <fmt/format.h>

#include <filesystem>

#include "commands.h"
#include "vision/exporter.h"

namespace vision::cli {
namespace {

struct ExportOptions {
  std::string model;
  std::string out;
  std::string dtype = "f16";
};

void run_export(const ExportOptions& o) {
  const ExportSummary s = export_model(o.model, o.out, o.dtype);
  fmt::print("wrote {}: YOLO26{}, {} classes, BatchNorm folded, one-to-one head, {} ({} tensors, {} values, {:.1f} MB)\n",
             o.out, s.scale, s.nc, o.dtype, s.tensors, s.values, static_cast<double>(s.bytes) / 1e6);
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
