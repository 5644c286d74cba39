#include "vision/models/yolo/loss.h"

#include <memory>
#include <vector>

#include "vision/core/error.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/kernels/loss/cls.h"
#include "vision/ops/f32_op.h"

namespace vision::models::yolo {

using core::DType;
using core::Shape;
using graph::SymTensor;
namespace kl = kernels::loss;

namespace {

std::string value_str(SymTensor t) {
  return t.valid() ? fmt::format("{} {}", core::dtype_name(t.dtype()), t.shape().str()) : "an unrecorded tensor";
}

void check_targets(const LossTargets& t) {
  VISION_CHECK(t.targets.valid() && t.targets.dtype() == DType::f32 && t.targets.shape().rank() == 3 &&
                   t.targets.dim(2) == 5,
               "yolo loss: the targets must be an f32 [B, M, 5] tensor (class, x1, y1, x2, y2 in input pixels), got {}",
               value_str(t.targets));
  VISION_CHECK(t.count.valid() && t.count.dtype() == DType::i32 && t.count.shape().rank() == 1,
               "yolo loss: the box count must be an i32 [B] tensor (boxes per image), got {}", value_str(t.count));
  for (size_t i = 0; i < 3; ++i)
    VISION_CHECK(t.levels[i].valid() && t.levels[i].shape().rank() == 4,
                 "yolo loss: level P{} must be a [B, C, H/{}, W/{}] feature map (read for its shape), got {}", i + 3,
                 kernels::kDetectStrides[i], kernels::kDetectStrides[i], value_str(t.levels[i]));
}

void check_head(const HeadOutputs& h, const char* which) {
  VISION_CHECK(h.ltrb.valid() && h.ltrb.shape().rank() == 3 && h.ltrb.dim(1) == 4 && core::is_floating(h.ltrb.dtype()),
               "yolo loss: the {} head's ltrb must be a floating [B, 4, A] tensor (raw LTRB distances), got {}", which,
               value_str(h.ltrb));
  VISION_CHECK(h.logits.valid() && h.logits.shape().rank() == 3 && core::is_floating(h.logits.dtype()),
               "yolo loss: the {} head's logits must be a floating [B, nc, A] tensor, got {}", which,
               value_str(h.logits));
}

}  // namespace

int64_t loss_target_rows(int64_t max_boxes) {
  VISION_CHECK(max_boxes >= 0 && max_boxes <= kMaxLossTargetRows,
               "yolo loss: an image has {} boxes; the loss takes 0 to {} per image (drop or split the rest)", max_boxes,
               kMaxLossTargetRows);
  int64_t rows = 16;
  while (rows < max_boxes) rows *= 2;
  return rows;
}

SymTensor decode_boxes(SymTensor ltrb, const LossTargets& t, const std::string& name) {
  const auto& [p3, p4, p5] = t.levels;
  return ltrb.graph()->apply(ops::in_f32(std::make_shared<kernels::DetectDecodeOp>(kernels::DecodeMode::grid)),
                             {ltrb, p3, p4, p5}, name);
}

kl::AssignerTensors assign_targets(SymTensor logits, SymTensor boxes, const LossTargets& t,
                                   const kl::AssignerOptions& options, const std::string& name) {
  const auto& [p3, p4, p5] = t.levels;
  const auto out = logits.graph()->apply_multi(ops::in_f32(std::make_shared<kl::TaskAlignedAssignerOp>(options)),
                                               {logits, boxes, t.targets, t.count, p3, p4, p5}, name);
  return {out.at(0), out.at(1), out.at(2), out.at(3)};
}

Yolo26LossTensors yolo26_loss_terms(const HeadOutputs& head, SymTensor boxes, const kl::AssignerTensors& a,
                                    const LossTargets& t, const kl::LossGains& gains, const kl::CiouOptions& ciou) {
  graph::Graph& g = *boxes.graph();
  const auto& [p3, p4, p5] = t.levels;
  Yolo26LossTensors r;
  r.boxes = boxes;
  r.assignment = a;
  const SymTensor w = kl::target_score_sum(a.target_scores, "weight");
  const SymTensor per_box = g.apply(ops::in_f32(std::make_shared<kl::CiouLossOp>(ciou)), {boxes, a.target_boxes, w}, "ciou");
  r.box = kl::normalized_sum(per_box, w, "box");
  r.cls = kl::bce_cls_loss(head.logits, a.target_scores, "cls");
  r.l1 = g.apply(ops::in_f32(std::make_shared<kl::L1DistanceLossOp>()), {boxes, a.target_boxes, w, p3, p4, p5}, "l1");
  const kl::DetectionLossTensors sum = kl::detection_loss(r.box, r.cls, r.l1, t.count, gains, "loss");
  r.loss = sum.loss;
  r.items = sum.items;
  return r;
}

Yolo26LossTensors yolo26_loss(const HeadOutputs& head, const LossTargets& t, const kl::AssignerOptions& options,
                              const kl::LossGains& gains, const std::string& name) {
  check_head(head, name.c_str());
  check_targets(t);
  graph::Graph& g = *head.ltrb.graph();
  auto scope = g.scope(name);
  const SymTensor boxes = decode_boxes(head.ltrb, t);
  return yolo26_loss_terms(head, boxes, assign_targets(head.logits, boxes, t, options), t, gains);
}

E2ELossTensors e2e_loss(const HeadOutputs& o2m, const HeadOutputs& o2o, const LossTargets& t, SymTensor weights,
                        const std::string& name, bool mark_outputs) {
  check_head(o2m, "one-to-many");
  check_head(o2o, "one-to-one");
  check_targets(t);
  VISION_CHECK(o2m.ltrb.shape().compatible(o2o.ltrb.shape()) && o2m.logits.shape().compatible(o2o.logits.shape()),
               "yolo loss: the two heads' outputs must have one shape: one-to-many ltrb {} and logits {}, one-to-one "
               "ltrb {} and logits {}",
               o2m.ltrb.shape().str(), o2m.logits.shape().str(), o2o.ltrb.shape().str(), o2o.logits.shape().str());
  VISION_CHECK(weights.valid() && weights.dtype() == DType::f32 && weights.shape().rank() == 1 &&
                   (weights.dim(0) == 2 || weights.dim(0) == Shape::kAny),
               "yolo loss: the loss weights must be an f32 [2] input (o2m, o2o), got {}", value_str(weights));
  graph::Graph& g = *o2m.ltrb.graph();
  auto scope = g.scope(name);
  E2ELossTensors r;
  r.one_to_many = yolo26_loss(o2m, t, kl::AssignerOptions::one_to_many(), {}, "o2m");
  r.one_to_one = yolo26_loss(o2o, t, kl::AssignerOptions::one_to_one(), {}, "o2o");
  r.total = kl::e2e_loss_sum(r.one_to_many.loss, r.one_to_one.loss, weights, "total");
  r.components = r.one_to_one.items;
  if (mark_outputs) {
    g.mark_output(r.total, graph::kTrainingLoss);
    g.mark_output(r.components, graph::kTrainingLogged);
  }
  return r;
}

}  // namespace vision::models::yolo
