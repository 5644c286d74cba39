#!/usr/bin/env python3
"""Fixture for the optimizers (src/vision/train/optimizer.h), written from ../shared/YOLO26.md ("Optimizers"):

* SGD (Nesterov, L2 weight decay added to the gradient, no dampening) and AdamW (decoupled decay, betas (0.9, 0.999),
  eps 1e-8): torch.optim.SGD(nesterov=True) and torch.optim.AdamW in float32, with per-group, per-step lr and momentum
  (set on the param groups before each step, as the warmup does).
* MuSGD: a float64 implementation of the formula, with the bf16 rounding of vision-cpp's Newton–Schulz emulated
  (values rounded to bf16 where the engine rounds: the input u, the normalised X, and each of A = X·Xᵀ,
  B = c·(A·A) + b·A, X = B·X + a·X), and the same without any rounding (to size the bf16 effect). For a Muon tensor p
  (rank ≥ 2) with gradient g, group lr, momentum β and weight decay wd:
      buf1 <- buf1 + (1 - β)(g - buf1);  u = (1 - β) g + β buf1
      X = NS5(u viewed (shape[0], rest)): X /= (‖X‖_F + 1e-7); transpose if rows > cols; 5 x {A = X Xᵀ;
          B = b A + c A A; X = a X + B X}, (a, b, c) = (3.4445, -4.7750, 2.0315); transpose back
      p <- p - lr · 0.2 · sqrt(max(1, shape[-2] / shape[-1])) · X
      g' = g + wd p;  buf2 <- β buf2 + g';  p <- p - lr (g' + β buf2)
  and plain Nesterov SGD for the other groups.
* Newton–Schulz alone on a few matrices (rows ≤ cols), bf16-emulated and exact.

Tensors (F32): init.KEY, grad.S.KEY (step S), {sgd,adamw,musgd}.S.KEY (the parameters after step S),
{sgd,adamw,musgd}.state.KEY.NAME (the optimizer state after the last step), musgd_exact.S.KEY (no bf16 rounding),
hyper.{sgd,adamw,musgd}.{lr,momentum} [steps, groups], hyper.{...}.weight_decay [groups], ns.input.I, ns.bf16.I,
ns.exact.I. Metadata: the group names of each optimizer in order (groups.sgd, ...), steps.

    /usr/bin/python3 tools/reference/make_optimizer_fixture.py tests/fixtures/optimizers.safetensors
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_io  # noqa: E402

STEPS = 4
NS_A, NS_B, NS_C = 3.4445, -4.7750, 2.0315

# Parameters (ultralytics-style keys) and their shapes. BatchNorm layers are recognised by their running_mean buffers,
# which the C++ test declares for model.0.bn and model.1.bn.
SHAPES = {
    "model.0.conv.weight": (6, 3, 3, 3),
    "model.0.bn.weight": (6,),
    "model.0.bn.bias": (6,),
    "model.1.conv.weight": (20, 4, 1, 1),  # rows > cols: transposed in Newton–Schulz
    "model.1.bn.weight": (20,),
    "model.1.bn.bias": (20,),
    "model.2.fc.weight": (12, 3),  # 2-D, rows > cols: transposed, Muon scale sqrt(12/3) = 2
    "model.2.fc.bias": (12,),
    "model.3.conv.weight": (6, 3, 3, 3),  # the same shape as model.0's: one Newton–Schulz batch
    "model.4.conv.weight": (6, 4, 1, 1),  # transposed to 4 x 6: batched with the two below
    "model.23.cv3.0.2.weight": (4, 6, 1, 1),
    "model.23.cv3.0.2.bias": (4,),
    "model.23.one2one_cv3.0.2.weight": (4, 6, 1, 1),
    "model.23.one2one_cv3.0.2.bias": (4,),
}
KEYS = list(SHAPES)
BN = {"model.0.bn.weight", "model.1.bn.weight"}


def group_of(key, musgd):
    """The group rules of src/vision/train/param_groups.h (boost pattern model.23.*cv3*, factor 3)."""
    if musgd and len(SHAPES[key]) >= 2:
        kind = "muon"
    elif "bias" in key:
        kind = "bias"
    elif key in BN:
        kind = "bn"
    else:
        kind = "weight"
    if musgd and key.startswith("model.23.") and "cv3" in key[len("model.23."):]:
        kind += ".x3"
    return kind


def group_names(musgd):
    order = []
    for kind in ("weight", "bn", "bias", "muon"):
        for boosted in (False, True):
            name = kind + (".x3" if boosted else "")
            if any(group_of(k, musgd) == name for k in KEYS):
                order.append(name)
    return order


def hyper(groups, base_lr, momentum, decay_groups, wd):
    """Per step and group lr and momentum (a warmup-like ramp with per-group factors), per-group weight decay."""
    g = len(groups)
    lr = torch.empty(STEPS, g, dtype=torch.float32)
    mom = torch.empty(STEPS, g, dtype=torch.float32)
    for s in range(STEPS):
        for j, name in enumerate(groups):
            lr[s, j] = base_lr * (0.5 + 0.25 * s) * (1.0 + 0.5 * j) * (3.0 if name.endswith(".x3") else 1.0)
            mom[s, j] = momentum - 0.02 * (STEPS - 1 - s) - 0.01 * j
    decay = torch.tensor([wd if name.split(".")[0] in decay_groups else 0.0 for name in groups], dtype=torch.float32)
    return lr, mom, decay


def bf(x, on):
    """x rounded to bf16 (through f32, as torch converts) when on, kept in x's dtype."""
    return x.to(torch.float32).to(torch.bfloat16).to(x.dtype) if on else x


def newton_schulz(u, rounding, steps=5):
    x = bf(u, rounding)
    transposed = x.shape[0] > x.shape[1]
    if transposed:
        x = x.T
    x = bf(x / (torch.sqrt((x * x).sum()) + 1e-7), rounding)
    for _ in range(steps):
        a = bf(x @ x.T, rounding)
        b = bf(NS_C * (a @ a) + NS_B * a, rounding)
        x = bf(b @ x + NS_A * x, rounding)
    return x.T if transposed else x


def run_torch(kind, init, grads, groups, lr, mom, decay):
    params = {k: init[k].clone().requires_grad_(True) for k in KEYS}
    param_groups = []
    for j, name in enumerate(groups):
        members = [params[k] for k in KEYS if group_of(k, False) == name]
        param_groups.append({"params": members, "weight_decay": float(decay[j])})
    if kind == "sgd":
        opt = torch.optim.SGD(param_groups, lr=0.1, momentum=0.9, nesterov=True, dampening=0)
    else:
        opt = torch.optim.AdamW(param_groups, lr=0.1, betas=(0.9, 0.999), eps=1e-8)
    out = {}
    for s in range(STEPS):
        for j, g in enumerate(opt.param_groups):
            g["lr"] = float(lr[s, j])
            if kind == "sgd":
                g["momentum"] = float(mom[s, j])
            else:
                g["betas"] = (float(mom[s, j]), 0.999)
        for k in KEYS:
            params[k].grad = grads[s][k].clone()
        opt.step()
        for k in KEYS:
            out[f"{kind}.{s}.{k}"] = params[k].detach().clone()
    for k in KEYS:
        st = opt.state[params[k]]
        if kind == "sgd":
            out[f"sgd.state.{k}.momentum_buffer"] = st["momentum_buffer"]
        else:
            out[f"adamw.state.{k}.exp_avg"] = st["exp_avg"]
            out[f"adamw.state.{k}.exp_avg_sq"] = st["exp_avg_sq"]
    return out


def musgd_update(p, g, buf1, buf2, lr, beta, wd, rounding, muon=None):
    """One MuSGD step of a tensor p with gradient g (any float dtype: the arithmetic runs in p's): the Muon part when
    muon (default: p has rank >= 2; buf1 its momentum buffer, ignored otherwise), then Nesterov SGD with buffer buf2
    (the plain SGD of the other groups). Returns the new (p, buf1, buf2); the inputs are not modified."""
    shape = p.shape
    if muon if muon is not None else len(shape) >= 2:
        buf1 = buf1 + (1 - beta) * (g - buf1)
        u = (1 - beta) * g + beta * buf1
        x = newton_schulz(u.reshape(shape[0], -1), rounding).reshape(shape)
        scale = math.sqrt(max(1.0, shape[-2] / shape[-1]))
        p = p - lr * 0.2 * scale * x
    gp = g + wd * p
    buf2 = beta * buf2 + gp
    p = p - lr * (gp + beta * buf2)
    return p, buf1, buf2


def run_musgd(init, grads, groups, lr, mom, decay, rounding, prefix):
    p = {k: init[k].to(torch.float64) for k in KEYS}
    buf1 = {k: torch.zeros_like(p[k]) for k in KEYS}
    buf2 = {k: torch.zeros_like(p[k]) for k in KEYS}
    out = {}
    for s in range(STEPS):
        for k in KEYS:
            j = groups.index(group_of(k, True))
            lr_, beta, wd = float(lr[s, j]), float(mom[s, j]), float(decay[j])
            g = grads[s][k].to(torch.float64)
            p[k], buf1[k], buf2[k] = musgd_update(p[k], g, buf1[k], buf2[k], lr_, beta, wd, rounding)
            out[f"{prefix}.{s}.{k}"] = p[k]
    if prefix == "musgd":
        for k in KEYS:
            out[f"musgd.state.{k}.momentum_buffer"] = buf2[k]
            if len(SHAPES[k]) >= 2:
                out[f"musgd.state.{k}.muon_momentum_buffer"] = buf1[k]
    return out


def main(path):
    gen = torch.Generator().manual_seed(2026)
    init = {k: torch.rand(s, generator=gen, dtype=torch.float32) * 2 - 1 for k, s in SHAPES.items()}
    grads = [{k: (torch.rand(s, generator=gen, dtype=torch.float32) * 2 - 1) * 0.5 for k, s in SHAPES.items()}
             for _ in range(STEPS)]
    tensors = {f"init.{k}": v for k, v in init.items()}
    for s in range(STEPS):
        for k in KEYS:
            tensors[f"grad.{s}.{k}"] = grads[s][k]
    metadata = {"steps": str(STEPS)}

    plain_groups = group_names(False)
    for kind, base_lr, momentum, wd in (("sgd", 0.05, 0.937, 0.05), ("adamw", 0.01, 0.9, 0.05)):
        lr, mom, decay = hyper(plain_groups, base_lr, momentum, {"weight"}, wd)
        tensors[f"hyper.{kind}.lr"], tensors[f"hyper.{kind}.momentum"] = lr, mom
        tensors[f"hyper.{kind}.weight_decay"] = decay
        metadata[f"groups.{kind}"] = ",".join(plain_groups)
        tensors.update(run_torch(kind, init, grads, plain_groups, lr, mom, decay))

    mu_groups = group_names(True)
    lr, mom, decay = hyper(mu_groups, 0.05, 0.9, {"weight", "muon"}, 0.05)
    tensors["hyper.musgd.lr"], tensors["hyper.musgd.momentum"] = lr, mom
    tensors["hyper.musgd.weight_decay"] = decay
    metadata["groups.musgd"] = ",".join(mu_groups)
    tensors.update(run_musgd(init, grads, mu_groups, lr, mom, decay, True, "musgd"))
    tensors.update(run_musgd(init, grads, mu_groups, lr, mom, decay, False, "musgd_exact"))

    for i, shape in enumerate([(4, 6), (6, 27), (16, 48), (32, 32)]):
        u = (torch.rand(shape, generator=gen, dtype=torch.float32) * 2 - 1).to(torch.float64)
        tensors[f"ns.input.{i}"] = u
        tensors[f"ns.bf16.{i}"] = newton_schulz(u, True)
        tensors[f"ns.exact.{i}"] = newton_schulz(u, False)
    metadata["ns.count"] = "4"

    fixture_io.write_safetensors(path, tensors, metadata)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/optimizers.safetensors")
