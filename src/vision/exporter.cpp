#include "vision/exporter.h"

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/core/safetensors.h"
#include "vision/models/yolo/ultralytics_checkpoint.h"
#include "vision/models/yolo/weights.h"
#include "vision/version.h"
#ifdef VISION_HAS_ONNX
#include "vision/models/yolo/onnx_export.h"
#endif

namespace vision {

namespace {

void check_not_the_input(const std::filesystem::path& model, const std::filesystem::path& out) {
  VISION_CHECK(std::filesystem::weakly_canonical(model) != std::filesystem::weakly_canonical(out),
               "export: the output {} is the input model itself: write the exported model to another file",
               out.string());
}

}  // namespace

ExportSummary export_model(const std::filesystem::path& model, const std::filesystem::path& out,
                           const std::string& dtype) {
  namespace yolo = models::yolo;
  VISION_CHECK(dtype == "f16" || dtype == "f32", "export: dtype '{}' is not one of f16, f32", dtype);
  check_not_the_input(model, out);
  const core::SafetensorsFile full = yolo::read_model_file(model);
  const yolo::ModelInfo info = yolo::read_model_info(full);
  VISION_CHECK(!info.fused(),
               "export: {} is already an exported model (format \"fused\"): export takes a full checkpoint",
               model.string());
  const yolo::ExportedWeights exported = yolo::fold_batchnorm(full, core::parse_dtype(dtype));
  core::write_safetensors(out, exported.tensors, exported.metadata);
  ExportSummary s;
  s.out = out, s.format = "safetensors", s.scale = yolo::scale_name(info.spec.scale), s.dtype = dtype;
  s.nc = info.spec.nc;
  s.tensors = static_cast<int64_t>(exported.tensors.size());
  for (const auto& [name, t] : exported.tensors) s.values += t.numel();
  s.bytes = static_cast<int64_t>(std::filesystem::file_size(out));
  return s;
}

#ifdef VISION_HAS_ONNX

int64_t onnx_max_opset() { return models::yolo::onnx_max_opset(); }

ExportSummary export_onnx(const std::filesystem::path& model, const std::filesystem::path& out,
                          const OnnxOptions& options) {
  namespace yolo = models::yolo;
  check_not_the_input(model, out);
  const yolo::OnnxExportOptions o{.half = options.half,
                                  .dynamic = options.dynamic,
                                  .end2end = options.end2end,
                                  .opset = options.opset,
                                  .imgsz = options.imgsz,
                                  .batch = options.batch,
                                  .max_det = options.max_det,
                                  .producer_version = kVersion};
  const yolo::OnnxExportSummary r = yolo::export_onnx(yolo::read_model_file(model), out, o);
  ExportSummary s;
  s.out = out, s.format = "onnx", s.scale = r.scale, s.dtype = options.half ? "f16" : "f32", s.nc = r.nc;
  s.tensors = r.initializers, s.values = r.parameters, s.bytes = r.bytes, s.opset = r.opset, s.nodes = r.nodes;
  s.input = r.input, s.output = r.output;
  return s;
}

#else

int64_t onnx_max_opset() { return 0; }

ExportSummary export_onnx(const std::filesystem::path&, const std::filesystem::path&, const OnnxOptions&) {
  fail("export: this build of vision-cpp has no ONNX export (configured with -DVISION_ONNX=OFF): install libonnx-dev "
       "and rebuild");
}

#endif

}  // namespace vision
