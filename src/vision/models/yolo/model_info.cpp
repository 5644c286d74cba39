#include "vision/models/yolo/model_info.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vision/core/error.h"
#include "vision/core/json.h"

namespace vision::models::yolo {

namespace {

using core::Tensor;
using nlohmann::json;

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
  std::map<std::string, std::string> md{{"format", info.fused() ? "fused" : "full"},
                                        {"scale", std::string(scale_name(info.spec.scale))},
                                        {"nc", std::to_string(info.spec.nc)},
                                        {"names", json(info.names).dump()},
                                        {"imgsz", h == w ? std::to_string(h) : json({h, w}).dump()},
                                        {"stride", json(info.stride).dump()}};
  if (!info.int8_absmax.empty()) md["int8_absmax"] = json(info.int8_absmax).dump();
  return md;
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
  const Tensor* bias = file.find(blocks::detect_head_bias_key(blocks::DetectHead::one_to_one, 1, 0));
  if (md.count("nc")) {
    spec.nc = metadata_int(file, "nc");
    VISION_CHECK(spec.nc >= 1 && spec.nc <= kMaxClasses, "{}: metadata 'nc' must be in 1–{}, got {}", where,
                 kMaxClasses, spec.nc);
    VISION_CHECK(bias == nullptr || bias->numel() == spec.nc,
                 "{}: metadata 'nc' is {}, but the class convolution {} has {} outputs", where, spec.nc,
                 blocks::detect_head_bias_key(blocks::DetectHead::one_to_one, 1, 0), bias->numel());
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
  if (md.count("int8_absmax")) {
    VISION_CHECK(format == "fused", "{}: metadata 'int8_absmax' belongs to an exported model (format \"fused\")",
                 where);
    const json j = metadata_json(file, "int8_absmax");
    VISION_CHECK(j.is_object() && !j.empty() && j.size() <= 4096,
                 "{}: metadata 'int8_absmax' must map convolution names to positive numbers, got {}", where,
                 core::json_excerpt(j));
    for (const auto& [name, v] : j.items()) {
      VISION_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0 &&
                       v.get<double>() < 1e30 && file.find(name + ".weight") != nullptr,
                   "{}: metadata 'int8_absmax' has {}: {}, not a positive number for a convolution of the file", where,
                   name, core::json_excerpt(v));
      info.int8_absmax[name] = v.get<float>();
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

}  // namespace vision::models::yolo
