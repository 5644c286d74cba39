#include "vision/exporter.h"

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/core/safetensors.h"
#include "vision/models/yolo/ultralytics_checkpoint.h"
#include "vision/models/yolo/weights.h"

namespace vision {

ExportSummary export_model(const std::filesystem::path& model, const std::filesystem::path& out,
                           const std::string& dtype) {
  namespace yolo = models::yolo;
  VISION_CHECK(dtype == "f16" || dtype == "f32", "export: dtype '{}' is not one of f16, f32", dtype);
  VISION_CHECK(std::filesystem::weakly_canonical(model) != std::filesystem::weakly_canonical(out),
               "export: the output {} is the input model itself: write the exported model to another file",
               out.string());
  const core::SafetensorsFile full = yolo::read_model_file(model);
  const yolo::ModelInfo info = yolo::read_model_info(full);
  VISION_CHECK(!info.fused(),
               "export: {} is already an exported model (format \"fused\"): export takes a full checkpoint",
               model.string());
  const yolo::ExportedWeights exported = yolo::fold_batchnorm(full, core::parse_dtype(dtype));
  core::write_safetensors(out, exported.tensors, exported.metadata);
  ExportSummary s;
  s.out = out, s.scale = yolo::scale_name(info.spec.scale), s.dtype = dtype, s.nc = info.spec.nc;
  s.tensors = static_cast<int64_t>(exported.tensors.size());
  for (const auto& [name, t] : exported.tensors) s.values += t.numel();
  s.bytes = static_cast<int64_t>(std::filesystem::file_size(out));
  return s;
}

}  // namespace vision
