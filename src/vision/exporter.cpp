#include "vision/exporter.h"

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/core/safetensors.h"
#include "vision/data/dataset.h"
#include "vision/data/image.h"
#include "vision/data/image_tensor.h"
#include "vision/data/letterbox.h"
#include "vision/models/yolo/int8.h"
#include "vision/models/yolo/model_info.h"
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

ExportSummary export_int8(const std::filesystem::path& model, const std::filesystem::path& out,
                          const Int8Options& o) {
  namespace yolo = models::yolo;
  VISION_CHECK(!o.data.empty(), "export --int8: calibration needs a dataset (--data FILE)");
  VISION_CHECK(o.images >= 1 && o.images <= 100000, "export --int8: calibration images must be 1–100000, got {}",
               o.images);
  VISION_CHECK(o.percentile > 0.5 && o.percentile <= 1.0, "export --int8: the calibration percentile must be in (0.5, 1], got {}",
               o.percentile);
  check_not_the_input(model, out);
  core::SafetensorsFile weights = yolo::read_model_file(model);
  yolo::ModelInfo info = yolo::read_model_info(weights);
  if (!info.fused()) {
    yolo::ExportedWeights exported = yolo::fold_batchnorm(weights, core::DType::f32);
    weights.tensors = std::move(exported.tensors);
    weights.metadata = std::move(exported.metadata);
    info = yolo::read_model_info(weights);
  }
  // An f16 export (the bundled model): its values in f32, exactly.
  for (auto& [name, t] : weights.tensors)
    if (t.dtype() == core::DType::f16) t = core::Tensor::from_vector(t.shape(), t.to_vector());
  const int64_t side = o.imgsz > 0 ? o.imgsz : info.imgsz[0];
  yolo::check_image_size(side, side);
  const data::Dataset dataset = data::load_dataset(o.data, o.split);
  std::vector<core::Tensor> batches;
  std::vector<std::string> unreadable;
  for (const data::Sample& sample : dataset.samples) {
    if (static_cast<int64_t>(batches.size()) == o.images) break;
    data::Image image;
    try {
      image = data::read_image(sample.image);
    } catch (const Error& e) {
      unreadable.push_back(e.what());
      continue;
    }
    const data::LetterboxTransform t = data::letterbox_transform(image.height, image.width, side, side);
    core::Tensor batch = core::Tensor::zeros(core::Shape{1, 3, side, side}, core::DType::f32, core::Layout::nhwc);
    data::write_normalized(data::letterbox(image, t), batch, 0);
    batches.push_back(batch);
  }
  VISION_CHECK(!batches.empty(), "export --int8: no readable image in the {} split of {}{}", o.split, o.data,
               unreadable.empty() ? std::string() : " (" + unreadable.front() + ")");
  info.int8_absmax = yolo::calibrate_int8(weights, batches, o.percentile);
  std::map<std::string, std::string> metadata = yolo::weights_metadata(info);
  for (const auto& [key, value] : weights.metadata)
    if (!metadata.count(key)) metadata[key] = value;
  core::write_safetensors(out, weights.tensors, metadata);
  ExportSummary s;
  s.out = out, s.format = "safetensors", s.scale = yolo::scale_name(info.spec.scale), s.dtype = "int8";
  s.nc = info.spec.nc;
  s.tensors = static_cast<int64_t>(weights.tensors.size());
  for (const auto& [name, t] : weights.tensors) s.values += t.numel();
  s.bytes = static_cast<int64_t>(std::filesystem::file_size(out));
  s.calibration_images = static_cast<int64_t>(batches.size());
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
