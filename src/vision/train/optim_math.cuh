// The optimizers' and the EMA's per-element arithmetic, one source for the fused kernels (optim.cuh) and their CPU
// twins (optim_kernels.cpp), which agree bit for bit: every operation correctly rounded and never contracted into an
// FMA (hd::*_rn; the twins' source is also compiled with -ffp-contract=off).
#pragma once

#include "vision/cuda/host_device.cuh"
#include "vision/train/optim_layout.cuh"

namespace vision::train::optim_math {

// The gradient as the step uses it: times coef (the clipping factor, or the f16 loss scale's inverse).
VISION_HD float scaled_grad(float g, float coef) { return hd::mul_rn(g, coef); }

// A step's decision from its gradient's sum of squares: the norm, whether it is finite (n − n is 0 for a finite n
// alone), and the clipping factor min(1, max_grad_norm / (norm + 1e-6)) of torch.nn.utils.clip_grad_norm_ (1 when
// max_grad_norm ≤ 0 turns clipping off, or when the step is skipped).
VISION_HD OptimStatus decide_step(float sumsq, float max_grad_norm) {
  OptimStatus s;
  s.sumsq = sumsq;
  s.norm = hd::sqrt_rn(sumsq);
  s.applied = hd::sub_rn(s.norm, s.norm) == 0.0f ? 1 : 0;
  s.coef = 1.0f;
  if (s.applied && max_grad_norm > 0.0f) {
    const float q = hd::div_rn(max_grad_norm, hd::add_rn(s.norm, 1e-6f));
    s.coef = q < 1.0f ? q : 1.0f;
  }
  return s;
}

// MuSGD: a Muon tensor's parameter after the Newton–Schulz update ns (then SGD's step follows).
VISION_HD float muon_update(float p, float muon_lr, float ns) { return hd::sub_rn(p, hd::mul_rn(muon_lr, ns)); }

// SGD (Nesterov, L2 decay, no dampening) of one element: p and its momentum buffer buf updated from the gradient g.
VISION_HD void sgd(float g, float& p, float& buf, float lr, float momentum, float weight_decay) {
  using namespace hd;
  const float gp = add_rn(g, mul_rn(weight_decay, p));
  const float b = add_rn(mul_rn(momentum, buf), gp);
  const float update = add_rn(gp, mul_rn(momentum, b));
  buf = b;
  p = sub_rn(p, mul_rn(lr, update));
}

// AdamW (decoupled decay, bias-corrected moments) of one element: p and its moments m, v updated from g.
VISION_HD void adamw(float g, float& p, float& m, float& v, const OptimGroup& G) {
  using namespace hd;
  const float pd = mul_rn(p, G.decay_factor);
  m = add_rn(mul_rn(m, G.momentum), mul_rn(G.one_minus_momentum, g));
  v = add_rn(mul_rn(v, G.beta2), mul_rn(mul_rn(G.one_minus_beta2, g), g));
  const float denom = add_rn(div_rn(sqrt_rn(v), G.bc2_sqrt), G.eps);
  p = sub_rn(pd, div_rn(mul_rn(G.step_size, m), denom));
}

// MuSGD, a Muon tensor's element: buf ← buf + (1 − β)(g − buf); returns (1 − β)·g + β·buf, the Newton–Schulz input
// (before its bf16 rounding).
VISION_HD float muon_momentum(float g, float& buf, float momentum, float one_minus_momentum) {
  using namespace hd;
  buf = add_rn(buf, mul_rn(one_minus_momentum, sub_rn(g, buf)));
  return add_rn(mul_rn(one_minus_momentum, g), mul_rn(momentum, buf));
}

// The divisor of a Muon matrix's normalisation from its sum of squares: ‖X‖_F + 1e-7.
VISION_HD float muon_norm_divisor(float sumsq) { return hd::add_rn(hd::sqrt_rn(sumsq), 1e-7f); }

// EMA of one element: d·ema + omd·source.
VISION_HD float ema(float d, float e, float omd, float source) {
  return hd::add_rn(hd::mul_rn(d, e), hd::mul_rn(omd, source));
}

}  // namespace vision::train::optim_math
