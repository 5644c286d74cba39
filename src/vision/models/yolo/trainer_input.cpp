// The u8 batch upload in a build without CUDA: nothing to upload to (trainer_input_cuda.cpp has the real one).
#include "vision/models/yolo/trainer_input.h"

#include "vision/core/error.h"

namespace vision::models::yolo {

#ifndef VISION_HAS_CUDA
struct U8BatchUpload::Impl {};
U8BatchUpload::U8BatchUpload() = default;
U8BatchUpload::~U8BatchUpload() = default;
void U8BatchUpload::run(graph::BackendContext&, const core::Tensor&, const core::Tensor&,
                        std::span<const data::HsvGains>, std::span<const data::SamplePlan>) {
  fail("train: the u8 batch upload needs the CUDA backend, and this build has no CUDA");
}
void U8BatchUpload::stage(graph::BackendContext&, const core::Tensor&, std::span<const data::HsvGains>,
                          std::span<const data::SamplePlan>) {
  fail("train: the u8 batch upload needs the CUDA backend, and this build has no CUDA");
}
#endif

}  // namespace vision::models::yolo
