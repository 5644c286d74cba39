#include "vision/models/yolo/weights.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "vision/core/error.h"
#include "vision/core/json.h"
#include "vision/graph/backend.h"

namespace vision::models::yolo {

namespace {

using core::Tensor;
using nlohmann::json;

constexpr std::string_view kDetectLayer = "model.23.";

// Whether key belongs to a Detect head's branches ("model.23.cv3.1.0.0.conv.weight" to the one-to-many head).
bool is_head_key(const std::string& key, blocks::DetectHead head) {
  if (!key.starts_with(kDetectLayer)) return false;
  const std::string_view rest = std::string_view(key).substr(kDetectLayer.size());
  for (const std::string& prefix : blocks::detect_head_prefixes(head))
    if (rest.starts_with(prefix)) return true;
  return false;
}

// The key of the bias of the last convolution of a head's box (0) or class (1) branch at a level.
std::string head_bias_key(blocks::DetectHead head, int branch, size_t level) {
  return fmt::format("{}{}{}.2.bias", kDetectLayer, blocks::detect_head_prefixes(head)[static_cast<size_t>(branch)],
                     level);
}

// Metadata values nest at most two levels (a list of names, [height, width]); deeper ones are refused unbuilt.
json metadata_json(const core::SafetensorsFile& file, const std::string& key) {
  return core::parse_json(file.metadata.at(key), fmt::format("{}: metadata '{}'", file.path.string(), key), 4);
}

int64_t metadata_int(const core::SafetensorsFile& file, const std::string& key) {
  const json j = metadata_json(file, key);
  VISION_CHECK(j.is_number_integer(), "{}: metadata '{}' must be an integer, got '{}'", file.path.string(), key,
               file.metadata.at(key));
  return j.get<int64_t>();
}

Scale scale_from_tensors(const core::SafetensorsFile& file) {
  const std::string where = file.path.string();
  const Tensor* first = file.find("model.0.conv.weight");
  VISION_CHECK(first != nullptr && first->rank() == 4,
               "{}: no 'scale' in the metadata and no model.0.conv.weight to tell it from: is this a YOLO26 weights "
               "file?",
               where);
  switch (first->dim(0)) {
    case 16: return Scale::n;
    case 32: return Scale::s;
    case 64: return file.find("model.2.m.1.cv1.conv.weight") ? Scale::l : Scale::m;  // l repeats the C3k2 blocks
    case 96: return Scale::x;
  }
  fail("{}: no 'scale' in the metadata, and model.0 has {} channels, which is no YOLO26 scale (16 n, 32 s, 64 m/l, 96 x)",
       where, first->dim(0));
}

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

ModelInfo default_model_info(const Yolo26Spec& spec) {
  spec.validate();
  ModelInfo info;
  info.spec = spec;
  for (int64_t i = 0; i < spec.nc; ++i) info.names.push_back(fmt::format("class{}", i));
  return info;
}

std::map<std::string, std::string> weights_metadata(const ModelInfo& info) {
  const auto [h, w] = info.imgsz;
  return {{"format", info.fused() ? "fused" : "full"},
          {"scale", std::string(scale_name(info.spec.scale))},
          {"nc", std::to_string(info.spec.nc)},
          {"names", json(info.names).dump()},
          {"imgsz", h == w ? std::to_string(h) : json({h, w}).dump()},
          {"stride", json(info.stride).dump()}};
}

ModelInfo read_model_info(const core::SafetensorsFile& file) {
  const std::string where = file.path.string();
  const auto& md = file.metadata;
  const std::string format = md.count("format") ? md.at("format") : "full";
  VISION_CHECK(format == "full" || format == "fused",
               "{}: metadata 'format' is '{}'; YOLO26 weights are 'full' (a checkpoint) or 'fused' (an exported model)",
               where, format);

  Yolo26Spec spec;
  spec.norm = format == "fused" ? ConvNorm::folded : ConvNorm::batchnorm;
  if (md.count("scale")) {
    try {
      spec.scale = parse_scale(md.at("scale"));
    } catch (const Error& e) {
      fail("{}: metadata 'scale': {}", where, e.what());
    }
  } else {
    spec.scale = scale_from_tensors(file);
  }
  // The one-to-one head's class convolution has nc outputs: a metadata 'nc' must agree with it (checked before anything
  // of nc's size is made, so a tiny file with a huge 'nc' is refused at once).
  const Tensor* bias = file.find(head_bias_key(blocks::DetectHead::one_to_one, 1, 0));
  if (md.count("nc")) {
    spec.nc = metadata_int(file, "nc");
    VISION_CHECK(spec.nc >= 1 && spec.nc <= kMaxClasses, "{}: metadata 'nc' must be in 1–{}, got {}", where,
                 kMaxClasses, spec.nc);
    VISION_CHECK(bias == nullptr || bias->numel() == spec.nc,
                 "{}: metadata 'nc' is {}, but the class convolution {} has {} outputs", where, spec.nc,
                 head_bias_key(blocks::DetectHead::one_to_one, 1, 0), bias->numel());
  } else {
    VISION_CHECK(bias != nullptr, "{}: no 'nc' in the metadata and no one-to-one class convolution to tell it from",
                 where);
    spec.nc = bias->numel();
    VISION_CHECK(spec.nc >= 1 && spec.nc <= kMaxClasses, "{}: the class convolution has {} outputs; YOLO26 takes 1–{}",
                 where, spec.nc, kMaxClasses);
  }

  ModelInfo info = default_model_info(spec);
  if (md.count("names")) {
    const json names = metadata_json(file, "names");
    std::vector<std::string> list;
    if (names.is_array()) {
      for (const json& n : names) {
        VISION_CHECK(n.is_string(), "{}: metadata 'names' must list strings, got {}", where, core::json_excerpt(n));
        list.push_back(n.get<std::string>());
      }
    } else {
      VISION_CHECK(names.is_object(), "{}: metadata 'names' must be a JSON list or an object {{\"0\": name, …}}", where);
      list.resize(names.size());
      for (const auto& [key, n] : names.items()) {
        size_t index = list.size();
        try {
          index = std::stoul(key);
        } catch (const std::exception&) {
        }
        VISION_CHECK(index < list.size() && n.is_string(), "{}: metadata 'names' has an entry {}: {}", where, key,
                     core::json_excerpt(n));
        list[index] = n.get<std::string>();
      }
    }
    VISION_CHECK(static_cast<int64_t>(list.size()) == spec.nc, "{}: metadata 'names' has {} names for {} classes",
                 where, list.size(), spec.nc);
    info.names = std::move(list);
  }
  if (md.count("imgsz")) {
    const json j = metadata_json(file, "imgsz");
    if (j.is_number_integer()) {
      info.imgsz = {j.get<int64_t>(), j.get<int64_t>()};
    } else {
      VISION_CHECK(j.is_array() && j.size() == 2 && j[0].is_number_integer() && j[1].is_number_integer(),
                   "{}: metadata 'imgsz' must be a side or [height, width], got '{}'", where, md.at("imgsz"));
      info.imgsz = {j[0].get<int64_t>(), j[1].get<int64_t>()};
    }
    try {
      check_image_size(info.imgsz[0], info.imgsz[1]);
    } catch (const Error& e) {
      fail("{}: metadata 'imgsz': {}", where, e.what());
    }
  }
  if (md.count("stride")) {
    const json j = metadata_json(file, "stride");
    VISION_CHECK(j.is_array() && j == json(kStrides),
                 "{}: metadata 'stride' is '{}'; YOLO26's Detect levels have strides [8, 16, 32]", where,
                 md.at("stride"));
  }
  return info;
}

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
  const bool has_one2many = state.find(head_bias_key(blocks::DetectHead::one_to_many, 0, 0)) != nullptr;
  const bool has_one2one = state.find(head_bias_key(blocks::DetectHead::one_to_one, 0, 0)) != nullptr;
  VISION_CHECK(!(info.fused() && has_one2many),
               "{} is an exported model with the one-to-one head only; the one-to-many head (NMS, training) needs a "
               "full checkpoint",
               where);
  state.load(file, [&](const std::string& key) {
    // A training checkpoint's live model and optimizer state (train/checkpoint.h): not the model's weights.
    if (key.starts_with("train.") || key.starts_with("optimizer.")) return true;
    return (!has_one2many && is_head_key(key, blocks::DetectHead::one_to_many)) ||
           (!has_one2one && is_head_key(key, blocks::DetectHead::one_to_one));
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
    if (!name.starts_with("model.") || (!both_heads && is_head_key(name, blocks::DetectHead::one_to_many))) continue;
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
      const std::string box = head_bias_key(head, 0, level), cls = head_bias_key(head, 1, level);
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
