// The task-aligned assigner's per-(gt, anchor) arithmetic, one source for the kernels (assigner.cuh) and the CPU twin
// (assigner.cpp): the CIoU of two boxes, the STAL candidate box, the candidate test, the predicted box in pixels and
// the align metric. Every operation is correctly rounded and never contracted (hd::*_rn), so the value an anchor was
// ranked by is the value recomputed for it later, on either side.
#pragma once

#include "vision/cuda/host_device.cuh"

namespace vision::models::yolo::kernels::loss::tal_math {

// CIoU of boxes b1 and b2 (x1, y1, x2, y2), eps 1e-7 as upstream's bbox_iou.
VISION_HD float ciou(const float* b1, const float* b2) {
  using namespace hd;
  const float e = 1e-7f;
  const float w1 = sub_rn(b1[2], b1[0]), h1 = add_rn(sub_rn(b1[3], b1[1]), e);
  const float w2 = sub_rn(b2[2], b2[0]), h2 = add_rn(sub_rn(b2[3], b2[1]), e);
  const float iw = fmaxf(sub_rn(fminf(b1[2], b2[2]), fmaxf(b1[0], b2[0])), 0.0f);
  const float ih = fmaxf(sub_rn(fminf(b1[3], b2[3]), fmaxf(b1[1], b2[1])), 0.0f);
  const float inter = mul_rn(iw, ih);
  const float uni = add_rn(sub_rn(add_rn(mul_rn(w1, h1), mul_rn(w2, h2)), inter), e);
  const float iou = div_rn(inter, uni);
  const float cw = sub_rn(fmaxf(b1[2], b2[2]), fminf(b1[0], b2[0]));
  const float ch = sub_rn(fmaxf(b1[3], b2[3]), fminf(b1[1], b2[1]));
  const float c2 = add_rn(add_rn(mul_rn(cw, cw), mul_rn(ch, ch)), e);
  const float dx = sub_rn(sub_rn(add_rn(b2[0], b2[2]), b1[0]), b1[2]);
  const float dy = sub_rn(sub_rn(add_rn(b2[1], b2[3]), b1[1]), b1[3]);
  const float rho2 = mul_rn(add_rn(mul_rn(dx, dx), mul_rn(dy, dy)), 0.25f);
  const float d = sub_rn(atanf(div_rn(w2, h2)), atanf(div_rn(w1, h1)));
  const float v = mul_rn(0.405284735f, mul_rn(d, d));  // 4 / π²
  const float a = div_rn(v, add_rn(sub_rn(v, iou), add_rn(1.0f, e)));
  return sub_rn(iou, add_rn(div_rn(rho2, c2), mul_rn(v, a)));
}

// The STAL candidate box of gt (x1, y1, x2, y2): each side shorter than small_side widened to widened_side about the
// centre, through (c, side) as upstream does.
VISION_HD void stal_box(const float* gt, float small_side, float widened_side, float* out) {
  using namespace hd;
  for (int d = 0; d < 2; ++d) {
    const float c = mul_rn(add_rn(gt[d], gt[d + 2]), 0.5f);
    float side = sub_rn(gt[d + 2], gt[d]);
    if (side < small_side) side = widened_side;
    out[d] = sub_rn(c, mul_rn(side, 0.5f));
    out[d + 2] = add_rn(c, mul_rn(side, 0.5f));
  }
}

// Whether the anchor centre (x, y) in pixels lies inside the candidate box by more than eps on every side.
VISION_HD bool is_candidate(float x, float y, const float* cand, float eps) {
  using namespace hd;
  return sub_rn(x, cand[0]) > eps && sub_rn(y, cand[1]) > eps && sub_rn(cand[2], x) > eps && sub_rn(cand[3], y) > eps;
}

// The overlap of a candidate: max(CIoU(gt, pred), 0), NaN → 0.
VISION_HD float overlap(const float* gt, const float* pred) { return fmaxf(ciou(gt, pred), 0.0f); }

// The align metric σ(logit)^alpha · overlap^beta, NaN → 0.
VISION_HD float align(float logit, float overlap, float alpha, float beta) {
  using namespace hd;
  const float score = rcp_rn(add_rn(1.0f, expf(-logit)));
  const float a = mul_rn(powf(score, alpha), powf(overlap, beta));
  return a > 0.0f ? a : 0.0f;
}

}  // namespace vision::models::yolo::kernels::loss::tal_math
