// Task-aligned assigner — YOLO26's TaskAlignedAssigner (STAL, topk2) for a whole batch: which anchors are positives of
// which ground-truth box, with their box and soft class targets; the CPU twin of the GPU kernels (assigner.cuh) and
// the graph op "yolo.task_aligned_assigner". Facts: ../shared/YOLO26.md, Loss.
//
// Inputs (fixed shapes, so a plan and its CUDA graph are reused):
//   logits  [B, nc, A]  raw class logits of the head (channel-major); the assigner applies the sigmoid itself.
//   boxes   [B, 4, A]   predicted xyxy in grid units (the detect decode's `grid` mode).
//   anchors [3, A] f32  rows anchor_x, anchor_y, stride, grid units (detect_anchor_grid).
//   targets [B, M, 5] f32 rows (class, x1, y1, x2, y2) in input pixels; count [B] i32: rows from count[b] on are
//            ignored (whatever they hold).
// Units. Everything is compared in input pixels, as ultralytics' assigner does: predicted boxes and anchor centres are
// multiplied by their anchor's stride, targets are used as given. The target boxes it outputs are divided by the
// anchor's stride again (grid units), which is what the loss terms consume (YOLO26.md: "targets divided by stride").
//
// Definition (per image; g a valid gt, a an anchor):
//   candidate(g, a): the anchor centre (x, y)·stride lies strictly inside gt g (by more than eps) after STAL: each side
//     (w or h) shorter than small_side (stride[0] = 8 px) is widened to widened_side (stride[1] = 16 px) about the
//     box centre; the box goes through (cx, cy, w, h) and back as upstream does, for this test only.
//   overlap(g, a) = max(CIoU(gt g, pred a), 0) (CIoU as YOLO26.md, eps 1e-7, in pixels) for candidates, 0 otherwise;
//   align(g, a) = σ(logit[cls_g, a])^alpha · overlap^beta for candidates, 0 otherwise (NaN counts as 0).
//   Top-k: gt g's top-k anchors over ALL A anchors by (align desc, anchor index asc) — non-candidates take part with
//     align 0, exactly as a top-k over ultralytics' [M, A] metric — of which the candidates are g's claims. So a gt
//     with fewer than topk positive-align candidates claims a zero-align candidate only when its index is low enough
//     (in practice: the first topk anchors of the image). Ties toward the lower anchor index are the one place where
//     we are deterministic and PyTorch is not (torch.topk leaves the order of equal values unspecified; YOLO26.md).
//   Shared anchors, exactly as ultralytics' select_highest_overlaps: an anchor claimed by one gt stays with it; an
//     anchor claimed by two or more gts goes to the argmax over ALL valid gts of overlap(g, a) (0 where g does not
//     hold the anchor), first maximum = lowest gt index — also to a gt that did not claim it (a gt whose candidate it
//     is, of higher overlap, but outside that gt's top k), and to gt 0 when every overlap is 0, as upstream's argmax
//     over [M, A] does. So a gt's positives are no longer a subset of its claims (nor at most topk).
//   topk2 (one-to-one, when 0 < topk2 ≠ topk): each gt keeps, of its positives after that step, those ranked < topk2
//     by (align desc, anchor index asc) among all A anchors (its other anchors counting as 0), as upstream's topk of
//     align · mask_pos; an anchor its gt drops becomes background.
//   Normalisation: for gt g with final positives P_g: t(g, a) = align(g, a) · max_{P_g} overlap / (max_{P_g} align +
//     eps) for a ∈ P_g.
// Outputs (every element written):
//   target_boxes  [B, 4, A] f32: the assigned gt's (x1, y1, x2, y2) / stride of the anchor (grid units); 0 elsewhere.
//   target_scores [B, nc, A] f32: t(g, a) at the assigned gt's class of a positive anchor, 0 elsewhere.
//   fg_mask       [B, A] u8: 1 for a positive anchor, else 0.
//   gt_index      [B, A] i32: the assigned gt's row in targets, −1 for a background anchor.
// Bad input: the CPU twin throws on a count outside [0, M] or a valid row whose class is not an integer in [0, nc);
// the GPU kernels cannot throw: they clamp count to [0, M] and ignore such a row (it claims and holds nothing).
//
// Memory: no [B, M, A] tensor anywhere. The CPU twin keeps B·M·topk claimed anchors (i32) and per image A claim
// counts and owners; the GPU launch uses a workspace of assigner_workspace_bytes() = B·A·8 bytes (claim counts and
// owners, i32; each rounded to 256 B): 1.1 MB for B = 16, A = 8400, where one [B, M, A] f32 tensor would take 538 MB
// at M = 1000. Resolving a shared anchor scans the image's gts (count · shared anchors candidate tests).
#pragma once

#include <cstdint>
#include <string>

#include "vision/graph/graph.h"

namespace vision::models::yolo::kernels::loss {

using core::Tensor;

// The largest topk the kernels keep per gt (per-thread candidate lists on the GPU).
inline constexpr int64_t kAssignerMaxTopk = 32;

struct AssignerOptions {
  int64_t topk = 10;           // 1 ≤ topk ≤ kAssignerMaxTopk
  int64_t topk2 = 0;           // 0: none; else 1 ≤ topk2 ≤ topk (topk2 = topk is the same as none)
  float alpha = 0.5f;          // score exponent
  float beta = 6.0f;           // overlap exponent
  float eps = 1e-9f;           // candidate margin and normalisation epsilon
  float small_side = 8.0f;     // STAL: a gt side shorter than this (stride[0]) ...
  float widened_side = 16.0f;  // ... is widened to this (stride[1]) for the candidate test

  static AssignerOptions one_to_many() { return {}; }
  static AssignerOptions one_to_one() {
    AssignerOptions o;
    o.topk = 7;
    o.topk2 = 1;
    return o;
  }
};

// Throws vision::Error naming the option out of range.
void check_assigner_options(const AssignerOptions& options);

// CIoU of two xyxy boxes (YOLO26.md's formula, eps 1e-7 on the height and in the union and the enclosing diagonal), in
// f32 in the order the GPU kernel computes it.
float assigner_ciou(const float* gt, const float* pred);

// CPU twin, host tensors: logits [B, nc, A] f32, boxes [B, 4, A] f32 (grid units), anchors [3, A] f32, targets
// [B, M, 5] f32, count [B] i32 → target_boxes [B, 4, A] f32, target_scores [B, nc, A] f32, fg_mask [B, A] u8,
// gt_index [B, A] i32 (all overwritten). Threaded over (image, gt) pairs and images.
void task_aligned_assign_cpu(const Tensor& logits, const Tensor& boxes, const Tensor& anchors, const Tensor& targets,
                             const Tensor& count, const AssignerOptions& options, const Tensor& target_boxes,
                             const Tensor& target_scores, const Tensor& fg_mask, const Tensor& gt_index);

// ---------------------------------------------------------------------------------------------------------------
// Graph op "yolo.task_aligned_assigner". Inputs: logits [B, nc, A], boxes [B, 4, A] (grid units), targets [B, M, 5]
// f32, count [B] i32, and the three level maps P3, P4, P5 [B, C_i, h_i, w_i] (read for their shapes only: they give
// the input size and so the anchor grid, a per-plan constant "anchors" [3, A], as in the detect decode). Outputs:
// target_boxes [B, 4, A] f32, target_scores [B, nc, A] f32, fg_mask [B, A] u8, gt_index [B, A] i32, whatever the
// inputs' dtype. No backward: the outputs are not differentiable (the loss detaches the assigner's inputs). CPU
// backend: f32 through the twin; CUDA backend: logits and boxes in f32, f16 or bf16 (targets always f32), the whole
// batch in a fixed number of launches without host synchronisation (assigner_cuda.h), capturable in a CUDA graph.
class TaskAlignedAssignerOp : public graph::Op {
 public:
  explicit TaskAlignedAssignerOp(AssignerOptions options);
  std::string name() const override { return "yolo.task_aligned_assigner"; }
  size_t n_outputs() const override { return 4; }
  std::vector<core::Shape> infer_output_shapes(const std::vector<core::Shape>& inputs) const override;
  std::vector<core::DType> infer_output_dtypes(const std::vector<core::DType>& inputs) const override;
  std::unique_ptr<graph::RuntimeOp> lower(graph::Backend backend, graph::Mode mode) const override;
  // Its outputs carry no gradient, and none flows back to the predictions through it.
  bool stops_gradient() const override { return true; }
  const AssignerOptions& options() const { return options_; }

 private:
  AssignerOptions options_;
};

struct AssignerTensors {
  graph::SymTensor target_boxes;   // [B, 4, A] f32, grid units
  graph::SymTensor target_scores;  // [B, nc, A] f32
  graph::SymTensor fg_mask;        // [B, A] u8
  graph::SymTensor gt_index;       // [B, A] i32
};
// Records the assigner as a node named `name`.
AssignerTensors task_aligned_assigner(graph::SymTensor logits, graph::SymTensor boxes, graph::SymTensor targets,
                                      graph::SymTensor count, graph::SymTensor p3, graph::SymTensor p4,
                                      graph::SymTensor p5, const AssignerOptions& options,
                                      const std::string& name = "assigner");

}  // namespace vision::models::yolo::kernels::loss
