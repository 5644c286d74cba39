// YOLO26 loss sums on CUDA — the kernel descriptors of loss_sum.cuh, their launch helpers, and the CUDA RuntimeOps of
// "yolo.target_score_sum", "yolo.normalized_sum", "yolo.detection_loss" and "yolo.e2e_loss_sum". CUDA builds only.
// Ids (f32 only): target_score_sum__f32, normalized_sum_partial__f32, normalized_sum_backward__f32,
// detection_loss_forward__f32, detection_loss_backward__f32, e2e_loss_sum_forward__f32, e2e_loss_sum_backward__f32;
// normalized_sum's second pass is cls.cuh's loss_sum_finalize__f32. All pointers are f32 device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "vision/cuda/kernel.h"
#include "vision/graph/op.h"
#include "vision/models/yolo/kernels/loss/loss_sum.h"

namespace vision::models::yolo::kernels::loss {

struct TargetScoreSum : cuda::KernelDescriptor<const void* /*scores*/, void* /*weight*/, int64_t /*batch*/,
                                               int64_t /*classes*/, int64_t /*n_anchors*/> {
  TargetScoreSum();
};
struct NormalizedSumPartial
    : cuda::KernelDescriptor<const void* /*x*/, const void* /*w*/, void* /*partials*/, int64_t /*n*/> {
  NormalizedSumPartial();
};
struct NormalizedSumBackward
    : cuda::KernelDescriptor<const void* /*grad_loss*/, const void* /*norm*/, void* /*grad_x*/, int64_t /*n*/> {
  NormalizedSumBackward();
};
struct DetectionLossForward
    : cuda::KernelDescriptor<const void* /*box*/, const void* /*cls*/, const void* /*l1*/, void* /*loss*/,
                             void* /*items*/, int64_t /*batch*/, float /*g_box*/, float /*g_cls*/, float /*g_l1*/> {
  DetectionLossForward();
};
struct DetectionLossBackward
    : cuda::KernelDescriptor<const void* /*d_loss*/, const void* /*d_items*/, void* /*d_box*/, void* /*d_cls*/,
                             void* /*d_l1*/, int64_t /*batch*/, float /*g_box*/, float /*g_cls*/, float /*g_l1*/> {
  DetectionLossBackward();
};
struct E2ELossSumForward
    : cuda::KernelDescriptor<const void* /*a*/, const void* /*b*/, const void* /*w*/, void* /*total*/> {
  E2ELossSumForward();
};
struct E2ELossSumBackward
    : cuda::KernelDescriptor<const void* /*a*/, const void* /*b*/, const void* /*w*/, const void* /*dy*/,
                             void* /*d_a*/, void* /*d_b*/, void* /*d_w*/> {
  E2ELossSumBackward();
};

// weight [B, A] = Σ_c scores [B, nc, A].
void launch_target_score_sum(cudaStream_t stream, const float* scores, float* weight, int64_t batch, int64_t classes,
                             int64_t n_anchors);
// loss[0] = Σ x / N, N = max(Σ w, 1), and norm[0] = N unless norm is null; x, w of n elements; workspace of
// loss_workspace_bytes(n) bytes (cls_cuda.h). Two launches, no host synchronisation.
void launch_normalized_sum_forward(cudaStream_t stream, const float* x, const float* w, float* loss, float* norm,
                                   void* workspace, int64_t n);
// grad_x[i] = grad_loss[0] / norm[0].
void launch_normalized_sum_backward(cudaStream_t stream, const float* grad_loss, const float* norm, float* grad_x,
                                    int64_t n);
// One thread each (formulas in loss_sum.h). Null gradient pointers are skipped; null d_loss / d_items count as 0.
void launch_detection_loss_forward(cudaStream_t stream, const float* box, const float* cls, const float* l1,
                                   float* loss, float* items, int64_t batch, const LossGains& gains);
void launch_detection_loss_backward(cudaStream_t stream, const float* d_loss, const float* d_items, float* d_box,
                                    float* d_cls, float* d_l1, int64_t batch, const LossGains& gains);
void launch_e2e_loss_sum_forward(cudaStream_t stream, const float* a, const float* b, const float* w, float* total);
void launch_e2e_loss_sum_backward(cudaStream_t stream, const float* a, const float* b, const float* w,
                                  const float* dy, float* d_a, float* d_b, float* d_w);

// The CUDA RuntimeOps; saved specs come from the CPU RuntimeOp `twin`.
std::unique_ptr<graph::RuntimeOp> make_target_score_sum_cuda(std::unique_ptr<graph::RuntimeOp> twin);
std::unique_ptr<graph::RuntimeOp> make_normalized_sum_cuda(std::unique_ptr<graph::RuntimeOp> twin);
std::unique_ptr<graph::RuntimeOp> make_detection_loss_cuda(std::unique_ptr<graph::RuntimeOp> twin,
                                                           const LossGains& gains);
std::unique_ptr<graph::RuntimeOp> make_e2e_loss_sum_cuda(std::unique_ptr<graph::RuntimeOp> twin);

}  // namespace vision::models::yolo::kernels::loss
