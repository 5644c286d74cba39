// libFuzzer target: a YOLO26 weights file's model (core::read_safetensors, then models::yolo::read_model_info: the
// metadata "format", "scale", "nc", "names", "imgsz", "stride", and the tensors they are checked against). An accepted
// file describes a model the engine could build: a scale, 1–kMaxClasses classes with as many names, an image size it
// takes, YOLO26's strides.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "vision/core/error.h"
#include "vision/core/safetensors.h"
#include "vision/models/yolo/model_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace yolo = vision::models::yolo;
  const std::string path = vision::fuzz::input_file(data, size, "-model.safetensors");
  if (path.empty()) return 0;
  try {
    const vision::core::SafetensorsFile file = vision::core::read_safetensors(path);
    const yolo::ModelInfo info = yolo::read_model_info(file);
    info.spec.validate();
    yolo::check_image_size(info.imgsz[0], info.imgsz[1]);
    if (static_cast<int64_t>(info.names.size()) != info.spec.nc) __builtin_trap();
    if (info.stride != std::vector<int64_t>(yolo::kStrides.begin(), yolo::kStrides.end())) __builtin_trap();
    (void)yolo::weights_metadata(info);
  } catch (const vision::Error&) {
  }
  return 0;
}
