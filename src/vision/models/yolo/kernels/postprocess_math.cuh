// The postprocess's per-element arithmetic, one source for the kernels (postprocess.cuh) and the CPU twins
// (postprocess.cpp), which select the same rows bit for bit: the ranking keys, the score and the IoU of two boxes.
#pragma once

#include "vision/cuda/host_device.cuh"

namespace vision::models::yolo::kernels::pp_math {

// Ranking keys (u64): the high 32 bits order the logit (NaN as −∞, −0 as +0), the low 32 bits are ~index, so that a
// larger key ranks first and among equal logits the lower index does.
VISION_HD float sanitize(float x) {
  if (x != x) return -hd::infinity();
  return x == 0.0f ? 0.0f : x;
}
VISION_HD uint64_t rank_key(float logit, uint32_t index) {
  const uint32_t u = hd::float_bits(sanitize(logit));
  const uint32_t o = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (uint64_t(o) << 32) | uint32_t(~index);
}
VISION_HD float key_logit(uint64_t key) {
  const uint32_t o = uint32_t(key >> 32);
  return hd::bits_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}
VISION_HD uint32_t key_index(uint64_t key) { return ~uint32_t(key); }

// A detection's score from its logit.
VISION_HD float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// IoU of two xyxy boxes: torchvision's formula, each operation correctly rounded and never contracted into an FMA, so
// both devices decide every suppression alike.
VISION_HD float box_iou(const float* a, const float* b) {
  using namespace hd;
  const float left = fmaxf(a[0], b[0]), right = fminf(a[2], b[2]);
  const float top = fmaxf(a[1], b[1]), bottom = fminf(a[3], b[3]);
  const float w = fmaxf(sub_rn(right, left), 0.0f), h = fmaxf(sub_rn(bottom, top), 0.0f);
  const float inter = mul_rn(w, h);
  const float area_a = mul_rn(sub_rn(a[2], a[0]), sub_rn(a[3], a[1]));
  const float area_b = mul_rn(sub_rn(b[2], b[0]), sub_rn(b[3], b[1]));
  return div_rn(inter, sub_rn(add_rn(area_a, area_b), inter));
}

}  // namespace vision::models::yolo::kernels::pp_math
