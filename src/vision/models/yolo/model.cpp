#include "vision/models/yolo/model.h"

#include "vision/core/error.h"
#include "vision/models/yolo/int8.h"
#include "vision/models/yolo/ultralytics_checkpoint.h"

namespace vision::models::yolo {

graph::PlanOptions default_plan_options(graph::Backend backend) {
  if (backend == graph::Backend::cuda) return {.compute_dtype = core::DType::f16, .layout = core::Layout::nhwc};
  // The CPU: f32 NHWC, where oneDNN's convolutions read and write the activations as they are (no reorder between
  // steps: 1.4× faster than NCHW at YOLO26n 640, bench/model/NOTES.md).
  return {.compute_dtype = core::DType::f32, .layout = core::Layout::nhwc};
}

Yolo26Model::Yolo26Model(const core::SafetensorsFile& weights, std::shared_ptr<graph::BackendContext> backend,
                         const Options& options)
    : info_(read_model_info(weights)), options_(options) {
  VISION_CHECK(backend != nullptr, "Yolo26Model needs a backend");
  graph::PlanOptions plan = default_plan_options(backend->backend());
  plan.compute_dtype = options.compute_dtype.value_or(plan.compute_dtype);
  plan.layout = options.layout.value_or(plan.layout);
  std::shared_ptr<graph::Graph> g = yolo26_inference_graph(info_.spec, options.inference);
  // An int8 model (vision export --int8) runs its convolutions in int8 on the CPU; CUDA computes in f16/bf16/f32.
  if (!info_.int8_absmax.empty() && backend->backend() == graph::Backend::cpu) apply_int8(*g, info_.int8_absmax);
  executor_ = std::make_unique<graph::Executor>(std::move(g), std::move(backend), plan);
  executor_->set_max_plans(options.max_plans);
  // The state's shapes do not depend on the image size: any valid one creates it.
  graph::StateStore& state =
      executor_->state(graph::Mode::inference, {core::Shape{1, 3, kSizeMultiple, kSizeMultiple}});
  load_weights(state, info_.spec, weights);
}

Yolo26Model Yolo26Model::load(const std::filesystem::path& path, std::shared_ptr<graph::BackendContext> backend,
                              const Options& options) {
  return Yolo26Model(read_model_file(path), std::move(backend), options);
}

std::vector<core::Tensor> Yolo26Model::forward(const core::Tensor& images) {
  VISION_CHECK(images.defined() && images.rank() == 4 && images.dim(1) == 3,
               "YOLO26 takes RGB images [B, 3, H, W], got {}", images.defined() ? images.str() : "an undefined tensor");
  check_image_size(images.dim(2), images.dim(3));
  return executor_->forward({images});
}

}  // namespace vision::models::yolo
