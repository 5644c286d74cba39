// YOLO26 loss terms of the classification and distance heads — BCE-with-logits classification and the L1 distance
// term of the reg_max = 1 head: the CPU twins of the GPU kernels (cls.cuh) and the graph ops "yolo.bce_cls_loss" and
// "yolo.l1_distance_loss". Formulas in shared/YOLO26.md (Loss).
//
// Layouts (the head's own, no transpose): class logits and target scores [B, nc, A] (channel-major, as the detect
// head produces them and the postprocess ops take them); LTRB distances [B, 4, A], planes l, t, r, b, in grid units
// (the raw head output, and the targets as bbox2dist of the stride-divided boxes); weights [B, A]; the anchor grid
// [3, A] f32, rows anchor_x, anchor_y, stride (detect_decode.h).
//
// BCE:  loss = Σ_{b,c,a} bce(x, t) / N,  N = max(Σ t, 1) (target_scores_sum),
//       bce(x, t) = max(x, 0) − x·t + log1p(exp(−|x|))  (finite and exact to rounding for any finite x);
//       d_x = (σ(x) − t) · d_loss / N.
// L1:   loss = Σ_{b,a} w · ¼·(s/W·(|Δl| + |Δr|) + s/H·(|Δt| + |Δb|)) / N,  Δ = pred − target, s = the anchor's
//       stride, W×H the input size, N = max(Σ w, 1) (Σ w = Σ target scores: w = target_scores.sum over classes, zero
//       off the positives); d_pred = d_loss / N · w · ¼ · s/W (or s/H) · sign(Δ), sign(0) = 0 (as torch).
// Both ops compute their normaliser N themselves, on the device, so a loss needs no host round trip (and runs inside a
// captured CUDA graph). The two normalisers are the same sum taken over different tensors: equal up to f32 rounding.
// Everything is computed in f32 (sums in float64 on the CPU) whatever the prediction's dtype.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vision/graph/graph.h"

namespace vision::models::yolo::kernels::loss {

using core::Tensor;

// A loss's sum and the sum its normaliser comes from (Σ targets for BCE, Σ w for L1), both in float64.
struct LossSums {
  double loss = 0;
  double norm = 0;
};
// N = max(norm_sum, 1): target_scores_sum.
inline double loss_normalizer(double norm_sum) { return norm_sum > 1.0 ? norm_sum : 1.0; }

// Throws vision::Error unless t is an f32 host tensor of the given shape, naming the op and the tensor (the CPU twins'
// checks of their arguments).
void check_host_f32(const Tensor& t, const char* op, const char* what, const core::Shape& shape);

// What the CPU RuntimeOps of the normalised losses share (BCE, L1, and loss_sum.h's normalized_sum): a training plan
// keeps N (saved [1] f32) for backward; forward writes loss / N (and N); backward scales by d_loss / N.
std::vector<graph::TensorSpec> normalizer_saved_specs(graph::Mode mode);
void write_normalized_loss(graph::ForwardCtx& ctx, const LossSums& sums);
// d_loss / N from the saved N; throws naming `op` when the plan was not built for training.
double normalized_loss_scale(const graph::BackwardCtx& ctx, const char* op);

// CPU twins, f32 host tensors. Sums are taken in float64 in a fixed order (the result does not depend on the thread
// count). bce_cls_forward_cpu: logits and targets [B, nc, A] → (Σ bce, Σ t).
LossSums bce_cls_forward_cpu(const Tensor& logits, const Tensor& targets);
// grad_logits [B, nc, A] (overwritten) = (σ(x) − t) · scale, scale = d_loss / N.
void bce_cls_backward_cpu(const Tensor& logits, const Tensor& targets, double scale, const Tensor& grad_logits);

// pred, target [B, 4, A], weight [B, A], anchors [3, A] (only the stride row is read), input size image_h × image_w
// → (Σ w·¼·Σ_c scale_c·|Δ_c|, Σ w).
LossSums l1_distance_forward_cpu(const Tensor& pred, const Tensor& target, const Tensor& weight, const Tensor& anchors,
                                 int64_t image_h, int64_t image_w);
// grad_pred [B, 4, A] (overwritten) = scale · w · ¼ · scale_c · sign(Δ_c), scale = d_loss / N.
void l1_distance_backward_cpu(const Tensor& pred, const Tensor& target, const Tensor& weight, const Tensor& anchors,
                              int64_t image_h, int64_t image_w, double scale, const Tensor& grad_pred);

// ---------------------------------------------------------------------------------------------------------------
// Graph ops. Both output a rank-0 f32 loss (already divided by its N) whatever the prediction's dtype. Only the
// prediction (input 0) gets a gradient; the targets, weights and level maps are constants to them (zeros are written
// where a plan asks for their gradient anyway). In a training plan each op keeps N (saved [1] f32) for backward.
// CPU backend: f32 through the twins. CUDA backend (CUDA builds, cls_cuda.h): the prediction in f32, f16 or bf16 (the
// plan's compute dtype), targets and weights always f32 (RuntimeOp::input_dtype); two launches forward (per-block
// partial sums, then one block adding them in a fixed order: no atomics, bit-identical from run to run whatever
// PlanContext::deterministic says) and one backward, no host synchronisation.

// "yolo.bce_cls_loss": inputs logits [B, nc, A], target scores [B, nc, A] (f32).
class BceClsLossOp : public graph::Op {
 public:
  std::string name() const override { return "yolo.bce_cls_loss"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  core::DType infer_output_dtype(const std::vector<core::DType>&) const override { return core::DType::f32; }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

// "yolo.l1_distance_loss": inputs pred [B, 4, A], target [B, 4, A] (f32), weight [B, A] (f32) and the level maps P3,
// P4, P5 [B, C_i, h_i, w_i] (read for their shapes only: they give the input size W×H, and each plan its anchor grid
// as the per-plan constant "anchors" [3, A], as in detect_decode).
class L1DistanceLossOp : public graph::Op {
 public:
  std::string name() const override { return "yolo.l1_distance_loss"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  core::DType infer_output_dtype(const std::vector<core::DType>&) const override { return core::DType::f32; }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

// Record the losses as nodes named `name`.
graph::SymTensor bce_cls_loss(graph::SymTensor logits, graph::SymTensor targets,
                              const std::string& name = "cls_loss");
graph::SymTensor l1_distance_loss(graph::SymTensor pred, graph::SymTensor target, graph::SymTensor weight,
                                  graph::SymTensor p3, graph::SymTensor p4, graph::SymTensor p5,
                                  const std::string& name = "l1_loss");

}  // namespace vision::models::yolo::kernels::loss
