// A training batch's u8 images on a CUDA backend (trainer.cpp): the loader's u8 NHWC batch (data/loader.h,
// BatchPixels::u8_nhwc) copied to the device — straight from the batch's memory when it is pinned (the DMA reads it
// where it is; the batch is held until that copy has finished), through pinned staging otherwise — and normalised by
// the GPU letterbox kernel (data/letterbox_cuda.h, an identity transform: sample / 255 rounded to the plan's dtype)
// into the plan's input, in its dtype and layout; the loader's deferred HSV jitter (LoaderOptions::hsv_on_device) is
// applied on the device first. The copy and the jitter run on a stream of their own, so a batch staged ahead (stage)
// crosses PCIe while the previous step computes. 4× fewer bytes cross PCIe than an f32 batch, and no host thread
// converts pixels. Internal.
#pragma once

#include <memory>
#include <span>

#include "vision/core/tensor.h"
#include "vision/data/augment.h"
#include "vision/graph/backend.h"

namespace vision::models::yolo {

// The share of the device memory free at the first batch of plans that their lasting sources may take on the device
// (U8BatchUpload::run); vision train renders plans on the device only when the ram cache fits in it.
inline constexpr double kPlanSourceShare = 0.25;

class U8BatchUpload {
 public:
  U8BatchUpload();
  ~U8BatchUpload();
  U8BatchUpload(const U8BatchUpload&) = delete;
  U8BatchUpload& operator=(const U8BatchUpload&) = delete;

  // dst (a device tensor [B, 3, H, W] of f32, f16 or bf16 in its layout) = images (a host u8 tensor [B, H, W, 3],
  // RGB) / 255, queued on the backend's stream. With `hsv` (one set of gains per image, data::TrainBatch::hsv), each
  // image is first HSV-jittered on the device (data/hsv_cuda.h; the bytes apply_hsv gives). Throws vision::Error for
  // other shapes or counts, or a backend that is not CUDA (and in a build without CUDA).
  //
  // With `plans` (one per image, data::TrainBatch::plans: LoaderOptions::warp_on_device), the pixels are not copied:
  // the plans are rendered on the device (data/warp_cuda.h; the bytes warp_plan_cpu gives) from device copies of
  // their sources — kept for the upload's life for a ram cache's images (SamplePlan::lasting) while they fit in
  // kPlanSourceShare of the device memory free at the first batch, copied for the batch otherwise — and `images` (left
  // unwritten by the loader) only gives the batch's shape and identity.
  void run(graph::BackendContext& backend, const core::Tensor& images, const core::Tensor& dst,
           std::span<const data::HsvGains> hsv = {}, std::span<const data::SamplePlan> plans = {});
  // Queues the copy (and the jitter) of a batch that run() will be given next, on a copy stream of its own, so that
  // it overlaps the work already queued (the step before): run() with the same images and gains then only waits for
  // it and normalises. Two batches can be staged at a time; the images must not change in between.
  void stage(graph::BackendContext& backend, const core::Tensor& images, std::span<const data::HsvGains> hsv = {},
             std::span<const data::SamplePlan> plans = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vision::models::yolo
