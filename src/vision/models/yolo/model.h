// Yolo26Model — a YOLO26 ready for inference: the graph its weights file asks for (scale, nc, BatchNorm folded or not),
// an executor on a backend with the model's plan options, the weights loaded. The engine's entry point for detection
// (the Detector API and `vision predict` sit on it).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "vision/core/safetensors.h"
#include "vision/graph/executor.h"
#include "vision/models/yolo/weights.h"
#include "vision/models/yolo/yolo26.h"

namespace vision::models::yolo {

// The model's inference plans: f16 NHWC on CUDA, f32 NCHW on the CPU (whose ops compute in f32); BatchNorm is folded
// and conv + bias + SiLU fused by the plan either way.
graph::PlanOptions default_plan_options(graph::Backend backend);

class Yolo26Model {
 public:
  struct Options {
    InferenceOptions inference = {};                 // NMS or end-to-end, postprocess options, input format
    std::optional<core::DType> compute_dtype = {};   // default_plan_options when unset
    std::optional<core::Layout> layout = {};
    size_t max_plans = graph::Executor::kDefaultMaxPlans;  // plans cached per input shape (batch included), LRU
  };

  Yolo26Model(const core::SafetensorsFile& weights, std::shared_ptr<graph::BackendContext> backend,
              const Options& options);
  // path: a safetensors file or an ultralytics .pt checkpoint (read_model_file).
  static Yolo26Model load(const std::filesystem::path& path, std::shared_ptr<graph::BackendContext> backend,
                          const Options& options);

  const ModelInfo& info() const { return info_; }
  const Options& options() const { return options_; }
  graph::Executor& executor() { return *executor_; }

  // images [B, 3, H, W] in options().inference.input_format (f32 NCHW by default, RGB in [0, 1]), on the host or the
  // model's backend, H and W multiples of 32 → detections [B, max_det, 6] (x1, y1, x2, y2 in input pixels, score,
  // class) and count [B] (then the raw outputs when asked for), views on the backend valid until the next forward of
  // the same shape.
  std::vector<core::Tensor> forward(const core::Tensor& images);

 private:
  ModelInfo info_;
  Options options_;
  std::unique_ptr<graph::Executor> executor_;
};

}  // namespace vision::models::yolo
