// Detect decode's per-anchor arithmetic in f32, one source for the kernels (detect_decode.cuh) and the CPU twin
// (detect_decode.cpp).
#pragma once

#include "vision/cuda/host_device.cuh"

namespace vision::models::yolo::kernels::decode_math {

// The box of one anchor (ax, ay) from its distances (l, t, r, b), times the scale s (the stride in pixel and cxcywh
// modes, 1 in grid mode): x1, y1, x2, y2, or cx, cy, w, h with cxcywh.
VISION_HD void decode_box(float ax, float ay, float s, float l, float t, float r, float b, bool cxcywh, float out[4]) {
  const float x1 = ax - l, y1 = ay - t, x2 = ax + r, y2 = ay + b;
  float o0 = x1, o1 = y1, o2 = x2, o3 = y2;
  if (cxcywh) o0 = (x1 + x2) * 0.5f, o1 = (y1 + y2) * 0.5f, o2 = x2 - x1, o3 = y2 - y1;
  out[0] = o0 * s, out[1] = o1 * s, out[2] = o2 * s, out[3] = o3 * s;
}

// The grid mode's backward for element i of [B, 4, A] (n anchors): d_ltrb = (−dx1, −dy1, dx2, dy2).
VISION_HD float backward_ltrb(float grad_box, int64_t i, int64_t n) { return (i / n) % 4 < 2 ? -grad_box : grad_box; }

}  // namespace vision::models::yolo::kernels::decode_math
