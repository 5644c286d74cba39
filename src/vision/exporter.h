// vision::export_model — a full YOLO26 checkpoint → the fused inference model (BatchNorm folded into each convolution,
// the one-to-one head only, f16 or f32, with its metadata: format "fused"), written atomically; `vision export` and the
// Python `YOLO.export` call it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace vision {

struct ExportSummary {
  std::filesystem::path out;
  std::string scale, dtype;
  int64_t nc = 0, tensors = 0, values = 0, bytes = 0;
};

// `dtype`: "f16" or "f32". Throws vision::Error for a missing or invalid model, an already exported one, another
// dtype, or `out` naming the input itself.
ExportSummary export_model(const std::filesystem::path& model, const std::filesystem::path& out,
                           const std::string& dtype = "f16");

}  // namespace vision
