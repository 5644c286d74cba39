// vision export — from the command line: vision::export_model (vision/exporter.h), a full YOLO26 checkpoint → the
// fused inference model (BatchNorm folded into each convolution, the one-to-one head only, f16 or f32 safetensors with
// its metadata, format "fused"); or with --format onnx vision::export_onnx, a model → an ONNX model (end-to-end
// [B, K, 6] detections by default, --raw the one-to-many head's [B, 4 + nc, anchors]). Both written atomically.
#include <fmt/format.h>

#include <filesystem>

#include "commands.h"
#include "vision/core/error.h"
#include "vision/exporter.h"

namespace vision::cli {
namespace {

struct ExportOptions {
  std::string model;
  std::string out;
  std::string format = "safetensors";
  std::string dtype;  // "": f16 safetensors, f32 ONNX
  bool half = false;
  bool dynamic = false;
  bool raw = false;
  int64_t opset = 17;
  std::vector<int64_t> imgsz;
  int64_t batch = 1;
  int64_t max_det = 300;
  bool int8 = false;
  std::string data;
  std::string split = "train";
  int64_t calib_images = 64;
  double calib_percentile = 1.0;
};

void run_int8(const ExportOptions& o, const CLI::App& cmd) {
  VISION_CHECK(o.format == "safetensors", "export: --int8 writes safetensors for the CPU, not --format {}", o.format);
  for (const char* flag : {"--dtype", "--half", "--dynamic", "--raw", "--opset", "--batch", "--max-det"})
    VISION_CHECK(cmd.count(flag) == 0, "export: {} does not apply to --int8", flag);
  VISION_CHECK(o.imgsz.size() <= 1, "export --int8: --imgsz takes one side (the calibration images' square)");
  const std::filesystem::path model = o.model;
  const std::filesystem::path out =
      o.out.empty() ? model.parent_path() / (model.stem().string() + "_int8.safetensors") : std::filesystem::path(o.out);
  const ExportSummary s = export_int8(
      model, out,
      {.data = o.data, .split = o.split, .images = o.calib_images, .imgsz = o.imgsz.empty() ? 0 : o.imgsz[0],
       .percentile = o.calib_percentile});
  fmt::print("wrote {}: YOLO26{}, {} classes, BatchNorm folded, one-to-one head, f32 weights with the int8 calibration of "
             "{} images of {} ({} split): its convolutions run in int8 on the CPU ({} tensors, {:.1f} MB)\n",
             out.string(), s.scale, s.nc, s.calibration_images, o.data, o.split, s.tensors,
             static_cast<double>(s.bytes) / 1e6);
}

void run_export(const ExportOptions& o, const CLI::App& cmd) {
  if (o.int8) return run_int8(o, cmd);
  for (const char* flag : {"--data", "--split", "--calib-images", "--calib-percentile"})
    VISION_CHECK(cmd.count(flag) == 0, "export: {} applies to --int8 only", flag);
  const bool onnx = o.format == "onnx";
  VISION_CHECK(!(o.half && o.dtype == "f32"), "export: --half and --dtype f32 contradict each other");
  const std::string dtype = o.half ? "f16" : !o.dtype.empty() ? o.dtype : onnx ? "f32" : "f16";
  if (!onnx)
    for (const char* flag : {"--dynamic", "--raw", "--opset", "--imgsz", "--batch", "--max-det"})
      VISION_CHECK(cmd.count(flag) == 0, "export: {} applies to --format onnx only", flag);
  const std::filesystem::path model = o.model;
  std::filesystem::path out = o.out;
  if (out.empty())
    out = model.parent_path() / (model.stem().string() + (onnx ? ".onnx" : "_" + dtype + ".safetensors"));
  if (!onnx) {
    const ExportSummary s = export_model(model, out, dtype);
    fmt::print("wrote {}: YOLO26{}, {} classes, BatchNorm folded, one-to-one head, {} ({} tensors, {} values, {:.1f} "
               "MB)\n",
               out.string(), s.scale, s.nc, dtype, s.tensors, s.values, static_cast<double>(s.bytes) / 1e6);
    return;
  }
  VISION_CHECK(o.imgsz.size() <= 2, "--imgsz takes one size or height,width, got {} values", o.imgsz.size());
  OnnxOptions options{.half = dtype == "f16", .dynamic = o.dynamic, .end2end = !o.raw, .opset = o.opset,
                      .batch = o.batch, .max_det = o.max_det};
  if (!o.imgsz.empty()) options.imgsz = {o.imgsz.front(), o.imgsz.back()};
  const ExportSummary s = export_onnx(model, out, options);
  fmt::print("wrote {}: YOLO26{}, {} classes, ONNX opset {}, {} nodes, {} parameters ({}), {:.1f} MB\n  input  {}\n"
             "  output {}{}\n",
             out.string(), s.scale, s.nc, s.opset, s.nodes, s.values, s.dtype, static_cast<double>(s.bytes) / 1e6,
             s.input, s.output,
             o.raw ? "  (boxes cx, cy, w, h in input pixels, then the class scores: run NMS on it)"
                   : "  (x1, y1, x2, y2 in input pixels, score, class; keep the rows whose score passes your threshold)");
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto opts = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Export a YOLO26 model for inference: fused f16/f32 safetensors (BatchNorm folded, one-to-one head), "
                "or ONNX (--format onnx)");
  cmd->add_option("--model", opts->model,
                  "the model: a full checkpoint (vision train / vision init, or an ultralytics .pt); ONNX also takes an "
                  "exported model")
      ->required();
  cmd->add_option("--out", opts->out,
                  "the file to write (default: beside the model, <stem>_<dtype>.safetensors or <stem>.onnx)");
  cmd->add_option("--format", opts->format, "safetensors or onnx")
      ->check(CLI::IsMember({"safetensors", "onnx"}))
      ->capture_default_str();
  cmd->add_option("--dtype", opts->dtype, "the weights' dtype (default f16 for safetensors, f32 for ONNX)")
      ->check(CLI::IsMember({"f16", "f32"}));
  cmd->add_flag("--half", opts->half, "f16 (as --dtype f16); for ONNX the input and output are f16 too");
  cmd->add_flag("--dynamic", opts->dynamic, "ONNX: batch, height and width symbolic");
  cmd->add_flag("--raw", opts->raw,
                "ONNX: the one-to-many head's raw output [B, 4 + nc, anchors] for your own NMS (needs a full "
                "checkpoint), instead of the end-to-end detections [B, K, 6]");
  cmd->add_option("--opset", opts->opset, fmt::format("ONNX opset (17 to {})", onnx_max_opset()))
      ->capture_default_str();
  cmd->add_option("--imgsz", opts->imgsz, "ONNX input size: one side or height,width (multiples of 32; default: the model's)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", opts->batch, "ONNX batch of a static model")->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("--max-det", opts->max_det, "ONNX end-to-end rows per image")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  cmd->add_flag("--int8", opts->int8,
                "post-training int8 quantisation for the CPU: the f32 exported model with the calibration of --data's "
                "images (convolutions in oneDNN's int8 kernels on the CPU)");
  cmd->add_option("--data", opts->data, "--int8: the dataset whose images calibrate (a .yaml or .json data file)");
  cmd->add_option("--split", opts->split, "--int8: the split the calibration images come from")
      ->check(CLI::IsMember({"train", "val", "test"}))
      ->capture_default_str();
  cmd->add_option("--calib-images", opts->calib_images, "--int8: how many images calibrate (the split's first)")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))
      ->capture_default_str();
  cmd->add_option("--calib-percentile", opts->calib_percentile,
                  "--int8: each convolution's range ends where this share of its |inputs| lies (1: the largest)")
      ->check(CLI::Range(0.5, 1.0))
      ->capture_default_str();
  cmd->callback([opts, cmd] { run_export(*opts, *cmd); });
}

}  // namespace vision::cli
