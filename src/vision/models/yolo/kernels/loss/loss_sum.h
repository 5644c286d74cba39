// YOLO26 loss sums — the small ops that turn the per-anchor loss terms into E2ELoss's scalars: the per-anchor weight
// w = Σ_c target_scores, the box term's normalised sum, one head's gained sum (Yolo26Loss) and the o2m/o2o-weighted
// sum of the two heads (E2ELoss); the CPU twins of the GPU kernels (loss_sum.cuh) and their graph ops. Formulas in
// shared/YOLO26.md (Loss); how they fit together: models/yolo/loss.h.
//
//   "yolo.target_score_sum"  w[b, a] = Σ_c scores[b, c, a]   scores [B, nc, A] → w [B, A]   (the CIoU and L1 weight)
//   "yolo.normalized_sum"    y = Σ x / max(Σ w, 1)            x, w [B, A] → y []            (box = Σ(1 − CIoU)·w / N)
//   "yolo.detection_loss"    loss = B·(g_box·box + g_cls·cls + g_l1·l1), items = (g_box·box, g_cls·cls, g_l1·l1)
//   "yolo.e2e_loss_sum"      total = o2m·loss_o2m + o2o·loss_o2o, weights [2] = (o2m, o2o) an input set each epoch
//
// Every op computes in f32 whatever the plan's dtype (its values are f32: the assigner's outputs and the loss terms),
// sums in float64 (the CPU twins) or in a fixed order without atomics (the GPU kernels), so results are bit-identical
// from run to run. The scalar ops (detection_loss, e2e_loss_sum) compute in float64 and round once. Backward:
// normalized_sum's x gets d_y / N (w is a constant to it); detection_loss's terms get g·(B·d_loss + d_items);
// e2e_loss_sum's losses get the weights times d_total and the weights the losses times d_total. target_score_sum has
// no backward: its input, the assigner's target scores, carries no gradient.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "vision/graph/graph.h"
#include "vision/models/yolo/kernels/loss/cls.h"

namespace vision::models::yolo::kernels::loss {

using core::Tensor;

// The loss gains of YOLO26.md (hyperparameters box, cls, dfl): the l1 term takes the dfl slot's gain.
struct LossGains {
  float box = 7.5f;
  float cls = 0.5f;
  float l1 = 1.5f;
};

// CPU twins, f32 host tensors. scores [B, nc, A] → weight [B, A] (overwritten), summed over the classes in order.
void target_score_sum_cpu(const Tensor& scores, const Tensor& weight);
// x, w of one shape → (Σ x, Σ w) in float64, in a fixed order.
LossSums normalized_sum_cpu(const Tensor& x, const Tensor& w);

// One head's sum: loss = B·(g·terms) and the gained terms (for logging), in float64 rounded to f32.
struct DetectionLossValues {
  float loss = 0;
  std::array<float, 3> items{};  // box, cls, l1 with their gains, without the batch factor
};
DetectionLossValues detection_loss_sum(float box, float cls, float l1, int64_t batch, const LossGains& gains);

// ---------------------------------------------------------------------------------------------------------------
// Graph ops. CPU backend: the twins; CUDA backend (CUDA builds): the kernels of loss_sum.cuh (loss_sum_cuda.h), without
// host synchronisation, capturable in a CUDA graph.

// "yolo.target_score_sum": input target scores [B, nc, A] f32; output w [B, A] f32. No backward.
class TargetScoreSumOp : public graph::Op {
 public:
  std::string name() const override { return "yolo.target_score_sum"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  core::DType infer_output_dtype(const std::vector<core::DType>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

// "yolo.normalized_sum": inputs x and w of one shape (f32); output Σ x / max(Σ w, 1) [] f32. A training plan keeps N.
class NormalizedSumOp : public graph::Op {
 public:
  std::string name() const override { return "yolo.normalized_sum"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  core::DType infer_output_dtype(const std::vector<core::DType>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

// "yolo.detection_loss": inputs box, cls, l1 [] f32 and a tensor whose first dimension is the batch size B (read for
// its shape only: the targets' count [B]); outputs loss [] and items [3] f32.
class DetectionLossOp : public graph::Op {
 public:
  explicit DetectionLossOp(LossGains gains = {}) : gains_(gains) {}
  std::string name() const override { return "yolo.detection_loss"; }
  size_t n_outputs() const override { return 2; }
  std::vector<core::Shape> infer_output_shapes(const std::vector<core::Shape>& inputs) const override;
  std::vector<core::DType> infer_output_dtypes(const std::vector<core::DType>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  const LossGains& gains() const { return gains_; }

 private:
  LossGains gains_;
};

// "yolo.e2e_loss_sum": inputs loss_o2m [], loss_o2o [] and weights [2] = (o2m, o2o), f32; output the total [] f32.
class E2ELossSumOp : public graph::Op {
 public:
  std::string name() const override { return "yolo.e2e_loss_sum"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  core::DType infer_output_dtype(const std::vector<core::DType>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
};

// Record the ops as nodes named `name`.
graph::SymTensor target_score_sum(graph::SymTensor scores, const std::string& name = "weight");
graph::SymTensor normalized_sum(graph::SymTensor x, graph::SymTensor w, const std::string& name = "box_loss");
struct DetectionLossTensors {
  graph::SymTensor loss;   // []
  graph::SymTensor items;  // [3]
};
DetectionLossTensors detection_loss(graph::SymTensor box, graph::SymTensor cls, graph::SymTensor l1,
                                    graph::SymTensor batch_ref, const LossGains& gains = {},
                                    const std::string& name = "loss");
graph::SymTensor e2e_loss_sum(graph::SymTensor loss_o2m, graph::SymTensor loss_o2o, graph::SymTensor weights,
                              const std::string& name = "total");

}  // namespace vision::models::yolo::kernels::loss
