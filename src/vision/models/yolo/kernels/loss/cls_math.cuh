// The per-element arithmetic of YOLO26's BCE classification and L1 distance terms (cls.h), one source for the kernels
// (cls.cuh, in f32) and the CPU twin (cls.cpp, in f64): templates over the float type F.
#pragma once

#include "vision/cuda/host_device.cuh"

namespace vision::models::yolo::kernels::loss::cls_math {

// max(x, 0) − x·t + log1p(exp(−|x|)): no overflow for any finite x (exp of a non-positive argument).
template <typename F>
VISION_HD F bce_with_logits(F x, F t) {
  return hd::max(x, F(0)) - x * t + hd::log1p(hd::exp(-hd::abs(x)));
}

// σ(x) = 1 / (1 + exp(−x)) for x ≥ 0, exp(x) / (1 + exp(x)) below: exp of a non-positive argument only.
template <typename F>
VISION_HD F stable_sigmoid(F x) {
  const F e = hd::exp(-hd::abs(x));
  return x >= F(0) ? F(1) / (F(1) + e) : e / (F(1) + e);
}

// One anchor's L1 term w·¼·(s·inv_w·dx + s·inv_h·dy), dx = |Δl| + |Δr|, dy = |Δt| + |Δb| (s: the anchor's stride).
template <typename F>
VISION_HD F l1_term(F w, F s, F inv_w, F inv_h, F dx, F dy) {
  return w * F(0.25) * (s * inv_w * dx + s * inv_h * dy);
}

// The gradient of one distance: scale·w·¼·s_c·sign(pred − target), s_c = stride·(inv_w for l and r, inv_h for t, b).
template <typename F>
VISION_HD F l1_gradient(F scale, F w, F s_c, F diff) {
  const F sg = diff > F(0) ? F(1) : diff < F(0) ? F(-1) : F(0);
  return scale * w * F(0.25) * s_c * sg;
}

}  // namespace vision::models::yolo::kernels::loss::cls_math
