#include "vision/models/yolo/weights.h"

#include <fmt/format.h>

#include <cmath>

#include "vision/core/error.h"
#include "vision/graph/backend.h"

namespace vision::models::yolo {

namespace {

using core::Tensor;

// The values of a host tensor of any floating dtype, in float64.
std::vector<double> values_of(const Tensor& t) {
  const std::vector<float> v = t.to_vector();
  return {v.begin(), v.end()};
}

// A host tensor of dtype f32 or f16 holding values (rounded to nearest).
Tensor tensor_of(const core::Shape& shape, const std::vector<double>& values, core::DType dtype) {
  Tensor t = Tensor::zeros(shape, dtype);
  if (dtype == core::DType::f32) {
    float* p = t.data<float>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<float>(values[i]);
  } else {
    VISION_CHECK(dtype == core::DType::f16, "exported weights are f32 or f16, not {}", core::dtype_name(dtype));
    uint16_t* p = t.data<uint16_t>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = core::float_to_half(static_cast<float>(values[i]));
  }
  return t;
}

}  // namespace

void load_weights(graph::StateStore& state, const Yolo26Spec& spec, const core::SafetensorsFile& file) {
  const std::string where = file.path.string();
  const ModelInfo info = read_model_info(file);
  VISION_CHECK(info.spec.scale == spec.scale, "{} holds YOLO26{} weights, the model is YOLO26{}", where,
               scale_name(info.spec.scale), scale_name(spec.scale));
  VISION_CHECK(info.spec.nc == spec.nc, "{} holds weights for {} classes, the model has {}", where, info.spec.nc,
               spec.nc);
  VISION_CHECK(info.spec.norm == spec.norm,
               "{} is {}, the model was built {} (read_model_info gives the spec a file needs)", where,
               info.fused() ? "an exported model (BatchNorm folded into the convolutions)"
                            : "a full checkpoint (BatchNorm unfused)",
               spec.norm == ConvNorm::folded ? "for an exported one" : "with BatchNorm");
  const bool has_one2many = state.find(blocks::detect_head_bias_key(blocks::DetectHead::one_to_many, 0, 0)) != nullptr;
  const bool has_one2one = state.find(blocks::detect_head_bias_key(blocks::DetectHead::one_to_one, 0, 0)) != nullptr;
  VISION_CHECK(!(info.fused() && has_one2many),
               "{} is an exported model with the one-to-one head only; the one-to-many head (NMS, training) needs a "
               "full checkpoint",
               where);
  state.load(file, [&](const std::string& key) {
    // A training checkpoint's live model and optimizer state (train/checkpoint.h): not the model's weights.
    if (key.starts_with("train.") || key.starts_with("optimizer.")) return true;
    return (!has_one2many && blocks::is_detect_head_key(key, blocks::DetectHead::one_to_many)) ||
           (!has_one2one && blocks::is_detect_head_key(key, blocks::DetectHead::one_to_one));
  });
}

void check_checkpoint_model(const train::Checkpoint& checkpoint, const Yolo26Spec& spec) {
  const ModelInfo info = read_model_info(checkpoint.weights());
  VISION_CHECK(info.spec.scale == spec.scale && info.spec.nc == spec.nc,
               "{} is a checkpoint of YOLO26{} with {} classes; the model it is loaded into is YOLO26{} with {} "
               "classes",
               checkpoint.path.string(), scale_name(info.spec.scale), info.spec.nc, scale_name(spec.scale), spec.nc);
}

void load_checkpoint_model(graph::StateStore& state, const Yolo26Spec& spec, const train::Checkpoint& checkpoint,
                           bool use_ema) {
  check_checkpoint_model(checkpoint, spec);
  load_weights(state, spec, checkpoint.weights(use_ema));
}

ExportedWeights fold_batchnorm(const core::SafetensorsFile& full, core::DType dtype, bool both_heads) {
  ModelInfo info = read_model_info(full);
  VISION_CHECK(!info.fused(), "{} is an exported model already: BatchNorm is folded", full.path.string());
  const double eps = static_cast<double>(blocks::kBatchNormEps);
  ExportedWeights out;
  for (const auto& [name, t] : full.tensors) {
    // Only the model's own tensors: a training checkpoint also holds the live model ("train.…") and the optimizer
    // state ("optimizer.…") beside the EMA weights under the plain names (train/checkpoint.h).
    if (!name.starts_with("model.") || (!both_heads && blocks::is_detect_head_key(name, blocks::DetectHead::one_to_many))) continue;
    const size_t bn = name.rfind(".bn.");
    if (bn != std::string::npos) {
      if (!name.ends_with(".bn.weight")) continue;  // bias and statistics are read with the weight
      const std::string prefix = name.substr(0, bn + 1);  // "model.0."
      const Tensor& w = full.at(prefix + "conv.weight");
      const std::vector<double> gamma = values_of(t), beta = values_of(full.at(prefix + "bn.bias")),
                                mean = values_of(full.at(prefix + "bn.running_mean")),
                                var = values_of(full.at(prefix + "bn.running_var"));
      std::vector<double> weight = values_of(w), bias(gamma.size());
      VISION_CHECK(w.rank() == 4 && w.dim(0) == static_cast<int64_t>(gamma.size()),
                   "{}: {}conv.weight {} does not match {} of {} channels", full.path.string(), prefix,
                   w.shape().str(), name, gamma.size());
      const size_t per_channel = weight.size() / gamma.size();
      for (size_t c = 0; c < gamma.size(); ++c) {
        const double scale = gamma[c] / std::sqrt(var[c] + eps);
        for (size_t i = 0; i < per_channel; ++i) weight[c * per_channel + i] *= scale;
        bias[c] = beta[c] - mean[c] * scale;
      }
      out.tensors.emplace_back(prefix + "conv.weight", tensor_of(w.shape(), weight, dtype));
      out.tensors.emplace_back(prefix + "conv.bias", tensor_of(core::Shape{w.dim(0)}, bias, dtype));
    } else if (!(name.ends_with(".conv.weight") &&
                 full.find(name.substr(0, name.size() - std::string_view("conv.weight").size()) + "bn.weight"))) {
      out.tensors.emplace_back(name, tensor_of(t.shape(), values_of(t), dtype));  // the heads' plain convolutions
    }
  }
  info.spec.norm = ConvNorm::folded;
  out.metadata = weights_metadata(info);
  return out;
}

void init_detect_biases(graph::StateStore& state, const Yolo26Spec& spec) {
  for (blocks::DetectHead head : {blocks::DetectHead::one_to_many, blocks::DetectHead::one_to_one})
    for (size_t level = 0; level < kStrides.size(); ++level) {
      const std::string box = blocks::detect_head_bias_key(head, 0, level), cls = blocks::detect_head_bias_key(head, 1, level);
      if (!state.find(box)) continue;
      state.set_from_host(box, Tensor::from_vector(core::Shape{4}, std::vector<float>(4, blocks::detect_box_bias_init())));
      const float b = blocks::detect_class_bias_init(spec.nc, kStrides[level]);
      state.set_from_host(cls, Tensor::from_vector(core::Shape{spec.nc},
                                                   std::vector<float>(static_cast<size_t>(spec.nc), b)));
    }
}

core::SafetensorsFile initial_weights(const ModelInfo& info) {
  VISION_CHECK(!info.fused(), "initial weights are a full checkpoint (BatchNorm unfused, both heads)");
  graph::Graph g;
  record_yolo26_training(g.input("images", core::Shape{1, 3, kSizeMultiple, kSizeMultiple}), info.spec);
  graph::StateStore state(g, graph::cpu_backend(), {core::Shape{1, 3, kSizeMultiple, kSizeMultiple}});
  init_detect_biases(state, info.spec);
  core::SafetensorsFile file;
  file.path = fmt::format("(initial YOLO26{} weights, {} classes)", scale_name(info.spec.scale), info.spec.nc);
  file.tensors = state.to_host();
  file.metadata = weights_metadata(info);
  return file;
}

void write_initial_weights(const std::filesystem::path& path, const ModelInfo& info) {
  const core::SafetensorsFile file = initial_weights(info);
  core::write_safetensors(path, file.tensors, file.metadata);
}

}  // namespace vision::models::yolo
