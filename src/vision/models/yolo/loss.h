// YOLO26's training loss as a graph: E2ELoss = o2m·Yolo26Loss(one-to-many head) + o2o·Yolo26Loss(one-to-one head),
// recorded from the loss's ops (kernels/loss/, detect_decode). Facts: shared/YOLO26.md (Loss, Detect head).
//
// Per head (yolo26_loss), from its raw outputs — LTRB distances ltrb [B, 4, A] and class logits [B, nc, A], A the
// anchors of P3, P4, P5 — and the targets [B, M, 5] f32 (class, x1, y1, x2, y2 in input pixels; rows from count[b] on
// ignored) with their count [B] i32:
//   boxes  = detect_decode(ltrb, grid mode)                      xyxy in grid units
//   assign = task_aligned_assigner(logits, boxes, targets, …)    no gradient (stops it: its inputs count as detached)
//   w      = target_score_sum(target_scores)                     [B, A], 0 off the positives
//   box    = normalized_sum(ciou_loss(boxes, target_boxes, w), w)         Σ (1 − CIoU)·w / N
//   cls    = bce_cls_loss(logits, target_scores)                          Σ BCE / N
//   l1     = l1_distance_loss(boxes, target_boxes, w)                     Σ w·¼·Σ_c scale_c·|Δ_c| / N
//   loss   = B·(7.5·box + 0.5·cls + 1.5·l1), items = (7.5·box, 0.5·cls, 1.5·l1)      (detection_loss)
// with N = max(Σ target scores, 1) (each op takes it itself, on the device). The L1 term is taken between the decoded
// boxes and the target boxes, which is the L1 between the predicted and target LTRB distances (bbox2dist of the
// target) that YOLO26.md names: per coordinate the two differences are equal up to sign (l − (ax − tx1) = tx1 − x1, …),
// and the decode's backward gives the LTRB gradient; so the loss needs no box encoder.
//
// E2ELoss (e2e_loss): total = o2m·loss(one-to-many, topk 10) + o2o·loss(one-to-one, topk 7, topk2 1), where weights
// [2] = (o2m, o2o) is a graph input set each epoch (the ProgLoss schedule), not configuration. Outputs: total (the
// training loss: backward starts from it) and components [3], the one-to-one head's items (what ultralytics logs).
// Gradients reach both heads' ltrb and logits; nothing flows through the assigner.
//
// Precision: everything is f32 whatever the plan's compute dtype. The decode, the assigner, the CIoU and the L1 terms
// run in f32 (ops::in_f32: an f16/bf16 plan converts ltrb and the logits to f32 for them), the BCE term reads the
// logits in the plan's dtype and computes in f32, and the sums are f32 ops.
// Backends: the CPU twins on the CPU, the GPU kernels on CUDA: the whole loss runs on the device without a host round
// trip and can be captured in a CUDA graph.
#pragma once

#include <array>
#include <string>

#include "vision/graph/graph.h"
#include "vision/models/yolo/blocks/detect.h"
#include "vision/models/yolo/kernels/loss/assigner.h"
#include "vision/models/yolo/kernels/loss/ciou.h"
#include "vision/models/yolo/kernels/loss/loss_sum.h"

namespace vision::models::yolo {

// The raw outputs of one detect head, the anchors of P3, P4, P5 concatenated (detect_decode.h's layout): ltrb
// [B, 4, A] LTRB distances in grid units, logits [B, nc, A] class logits. The Detect head's own type, so that the
// training graph hands record_yolo26_training's heads straight to the loss.
using blocks::HeadOutputs;

// What both heads' losses share: the targets and the level maps that give the input size (and so the anchor grid).
struct LossTargets {
  graph::SymTensor targets;                // [B, M, 5] f32: class, x1, y1, x2, y2 in input pixels
  graph::SymTensor count;                  // [B] i32: boxes per image (rows past it are ignored)
  std::array<graph::SymTensor, 3> levels;  // P3, P4, P5 [B, C_i, H/s, W/s]: read for their shapes only
};

// One head's loss and its parts.
struct Yolo26LossTensors {
  graph::SymTensor loss;   // [] B·(g_box·box + g_cls·cls + g_l1·l1)
  graph::SymTensor items;  // [3] g_box·box, g_cls·cls, g_l1·l1
  graph::SymTensor box, cls, l1;  // [] each divided by N, without gains
  graph::SymTensor boxes;         // [B, 4, A] the decoded predictions (grid units)
  kernels::loss::AssignerTensors assignment;
};

struct E2ELossTensors {
  graph::SymTensor total;       // [] o2m·loss_o2m + o2o·loss_o2o: the training loss
  graph::SymTensor components;  // [3] the one-to-one head's items (logged)
  Yolo26LossTensors one_to_many, one_to_one;
};

// The number of target rows M for a batch whose largest image has max_boxes boxes: the smallest bucket 16, 32, 64, …,
// 1024 that holds them, so that a plan (and its CUDA graph) is rebuilt only when a batch needs a larger bucket.
// Throws vision::Error for a negative count or more than 1024 boxes.
int64_t loss_target_rows(int64_t max_boxes);
inline constexpr int64_t kMaxLossTargetRows = 1024;

// The predicted boxes of a head: ltrb decoded in grid mode (xyxy, grid units), in f32.
graph::SymTensor decode_boxes(graph::SymTensor ltrb, const LossTargets& targets, const std::string& name = "decode");
// The task-aligned assignment of a head's predictions (no gradient), in f32.
kernels::loss::AssignerTensors assign_targets(graph::SymTensor logits, graph::SymTensor boxes,
                                              const LossTargets& targets,
                                              const kernels::loss::AssignerOptions& options,
                                              const std::string& name = "assigner");
// A head's loss terms for a given assignment (boxes: the head's decoded ltrb). yolo26_loss is decode + assign + this;
// tests use it to hold an assignment fixed, and to differentiate CIoU's alpha too (ciou.full_alpha_derivative: the
// derivative finite differences see; the loss treats alpha as a constant, as YOLO26.md says).
Yolo26LossTensors yolo26_loss_terms(const HeadOutputs& head, graph::SymTensor boxes,
                                    const kernels::loss::AssignerTensors& assignment, const LossTargets& targets,
                                    const kernels::loss::LossGains& gains = {},
                                    const kernels::loss::CiouOptions& ciou = {});
// One head's loss (Yolo26Loss), its nodes under the scope `name`.
Yolo26LossTensors yolo26_loss(const HeadOutputs& head, const LossTargets& targets,
                              const kernels::loss::AssignerOptions& options, const kernels::loss::LossGains& gains = {},
                              const std::string& name = "head");

// E2ELoss, its nodes under the scope `name` ("loss.o2m.assigner", "loss.o2o.ciou", "loss.total", …). weights: [2] f32
// (o2m, o2o). Marks total as the graph's training loss (OutputUse kTrainingLoss) and components as logged
// (kTrainingLogged) unless mark_outputs is false. Throws vision::Error naming the input when shapes or dtypes do not
// fit (heads of different sizes, targets not [B, M, 5] f32, count not [B] i32, weights not [2] f32).
E2ELossTensors e2e_loss(const HeadOutputs& one_to_many, const HeadOutputs& one_to_one, const LossTargets& targets,
                        graph::SymTensor weights, const std::string& name = "loss", bool mark_outputs = true);

}  // namespace vision::models::yolo
