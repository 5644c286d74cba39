// CIoU box loss — per-box (1 − CIoU)·weight over [B, 4, A] predicted and target boxes, its backward with respect to
// the predicted boxes; the CPU twin of the GPU kernels (ciou.cuh) and the graph op "yolo.ciou_loss".
//
// CIoU exactly as YOLO26.md (Loss) writes it, eps = 1e-7, with b1 the predicted and b2 the target box (xyxy):
//   w = x2 − x1, h = y2 − y1 + eps (eps on the height only);
//   inter = clamp(min x2 − max x1, 0)·clamp(min y2 − max y1, 0); union = w1h1 + w2h2 − inter + eps; iou = inter/union;
//   c² = cw² + ch² + eps (cw, ch: the enclosing box); ρ² = ((b2x1 + b2x2 − b1x1 − b1x2)² + (b2y1 + b2y2 − b1y1 − b1y2)²)/4;
//   v = (4/π²)(atan(w2/h2) − atan(w1/h1))²; α = v / (v − iou + 1 + eps); CIoU = iou − (ρ²/c² + v·α).
// atan(w/h) of a box with h exactly 0 is ±π/2 (0 when w is 0 too), so no input of finite coordinates gives NaN.
//
// Layout: channel-major, planes of A boxes each: x1, y1, x2, y2 (BoxFormat::xyxy, what the loss uses) or cx, cy, w, h
// (BoxFormat::xywh). The format applies to both pred and target; xywh boxes are converted to corners
// (x1 = cx − w/2, x2 = cx + w/2, …) and then go through the xyxy formula above, so xywh equals xyxy after conversion.
//
// Weight [B, A] f32: the per-box factor of the loss; 0 marks an anchor that is not a positive. The loss uses
// w = target_scores.sum(−1) on positives. Where the weight is 0 nothing is computed: loss, iou, v, alpha and the
// gradient are written as 0 whatever the boxes hold there (NaN included). The sum over boxes and the division by
// target_scores_sum are the caller's (a reduction after this op).
//
// Outputs: loss [B, A] f32 = (1 − CIoU)·weight; saved for the backward: iou, v, alpha [B, A] f32 (the backward reads
// them and does not recompute the arctangents). Computation in f32 whatever pred's dtype (f32; f16 and bf16 on the GPU).
//
// Backward: d_pred [B, 4, A] from d_loss [B, A]: d_loss·weight·∂(1 − CIoU)/∂pred, zero where the weight is 0.
// By default alpha is a constant (ultralytics computes it under no_grad); full_alpha_derivative differentiates
// through it too. At ties of min/max the gradient is split evenly between the two arguments, and clamp(·, 0) passes
// the gradient where its argument is ≥ 0 (PyTorch's conventions, so gradients match a PyTorch reference there too).
// Targets and weights get no gradient.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "vision/graph/graph.h"

namespace vision::models::yolo::kernels::loss {

using core::Tensor;

enum class BoxFormat : int32_t { xyxy = 0, xywh = 1 };
std::string_view box_format_name(BoxFormat format);  // "xyxy", "xywh"

inline constexpr float kCiouEps = 1e-7f;

struct CiouOptions {
  BoxFormat format = BoxFormat::xyxy;
  bool full_alpha_derivative = false;  // false: alpha treated as a constant in the backward (ultralytics)
};

// CPU twin, f32 host tensors. pred, target [B, 4, A]; weight [B, A]; loss [B, A] (overwritten); iou, v, alpha [B, A]
// (overwritten; each may be undefined when not wanted).
void ciou_forward_cpu(const Tensor& pred, const Tensor& target, const Tensor& weight, BoxFormat format,
                      const Tensor& loss, const Tensor& iou, const Tensor& v, const Tensor& alpha);
// d_pred [B, 4, A] (overwritten) from d_loss [B, A] and the forward's saved iou, v, alpha.
void ciou_backward_cpu(const Tensor& pred, const Tensor& target, const Tensor& weight, const Tensor& iou,
                       const Tensor& v, const Tensor& alpha, const Tensor& d_loss, const CiouOptions& options,
                       const Tensor& d_pred);

// ---------------------------------------------------------------------------------------------------------------
// Graph op "yolo.ciou_loss". Inputs: pred [B, 4, A], target [B, 4, A] f32, weight [B, A] f32; output: the per-box loss
// [B, A] f32 (whatever pred's dtype). Saved (training): iou, v, alpha. Backward: pred's gradient only (in pred's
// dtype); target and weight are not differentiated (zeros if a plan asks for their gradient). target and weight are
// taken in f32 whatever the plan's dtype (RuntimeOp::input_dtype).
// CPU backend: f32 through the twin. CUDA backend (CUDA builds): pred in f32, f16 or bf16 (ciou_cuda.h).
class CiouLossOp : public graph::Op {
 public:
  explicit CiouLossOp(CiouOptions options = {}) : options_(options) {}
  std::string name() const override { return "yolo.ciou_loss"; }
  core::Shape infer_output_shape(const std::vector<core::Shape>& inputs) const override;
  core::DType infer_output_dtype(const std::vector<core::DType>&) const override { return core::DType::f32; }
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  const CiouOptions& options() const { return options_; }

 private:
  CiouOptions options_;
};

// Records the per-box CIoU loss of pred against target, weighted, as a node named `name`.
graph::SymTensor ciou_loss(graph::SymTensor pred, graph::SymTensor target, graph::SymTensor weight,
                           CiouOptions options = {}, const std::string& name = "ciou");

}  // namespace vision::models::yolo::kernels::loss
