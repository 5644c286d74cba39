// What a YOLO26 weights file holds, from its metadata and the shapes of a few tensors (weights.h: the metadata keys).
// Parsing only: it links without the graph, and tests/fuzz/fuzz_model_info.cpp runs it on hostile files.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "vision/core/safetensors.h"
#include "vision/models/yolo/yolo26_spec.h"

namespace vision::models::yolo {

// What a weights file holds.
struct ModelInfo {
  Yolo26Spec spec;                          // scale, nc; norm folded for an exported model
  std::vector<std::string> names;           // nc class names
  std::array<int64_t, 2> imgsz = {640, 640};  // height, width it was trained at
  std::vector<int64_t> stride = {8, 16, 32};
  // An int8 model (vision export --int8, metadata "int8_absmax"): per convolution node ("model.0.conv"), the largest
  // |input| seen in calibration. Empty for a floating-point model.
  std::map<std::string, float> int8_absmax;

  bool fused() const { return spec.norm == ConvNorm::folded; }
};

// ModelInfo for a spec: names "class0", "class1", …, imgsz 640.
ModelInfo default_model_info(const Yolo26Spec& spec);
std::map<std::string, std::string> weights_metadata(const ModelInfo& info);

// The model a file holds, from its metadata. Without "scale" or "nc", they are read from its tensors (the width of
// model.0, the depth of model.2, the one-to-one head's class convolution); without "names", default names. Throws
// vision::Error naming the file and the field for anything malformed or inconsistent.
ModelInfo read_model_info(const core::SafetensorsFile& file);

}  // namespace vision::models::yolo
