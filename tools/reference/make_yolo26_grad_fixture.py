#!/usr/bin/env python3
"""Fixture for YOLO26n's gradients (issue #15): one training step's forward and backward of the independent reference
(yolo26_model.py + yolo26_loss.py, both written from ../shared/YOLO26.md) on the weights of
tests/fixtures/yolo26n_random.safetensors (nc 80), in training mode: BatchNorm on batch statistics (eps 1e-3,
momentum 0.03, running statistics updated with the unbiased batch variance, as PyTorch does), the one-to-one head on
detached features (Detect.forward), E2ELoss with weights (o2m, o2o) = (0.8, 0.2).

The batch: 4 synthetic images of 160×160 (make_yolo26_fixture.synthetic_images, u8, the model's input is u8 / 255)
and 0–20 random target boxes of random classes per image (one image has none, one has 20; M = 32 rows, garbage past
each count). The targets are redrawn (next seed) until no decision of either head's assignment lies within rounding
of a tie (make_loss_fixture.fragile) and the float32 reference assigns as the float64 one does, so that a float32
implementation reproduces the assignment and its gradients are comparable.

Stored (every float tensor the float64 result rounded to f32):

    images [4, 3, 160, 160] u8, targets [4, 32, 5] (class, x1, y1, x2, y2 in input pixels), count [4] i32,
    weights [2] = (o2m, o2o)
    loss.total [1], loss.components [3] (the one-to-one head's 7.5 box, 0.5 cls, 1.5 l1),
    loss.<head>.box / .cls / .l1 [1] (ungained, divided by target_scores_sum), <head> o2m and o2o
    grad.<key>          the gradient of loss.total for every trainable parameter (366 tensors, ultralytics keys)
    bn.<key>            every BatchNorm running_mean / running_var after the step
    err.<name> [8] f32  the reference's own float32 error against its float64 result: ‖f32 − f64‖/‖f64‖,
                        max|f32 − f64|, and the same for the change of the tensor in the step (bn.* only: new − old,
                        whose error the running statistics' large old part hides; NaN elsewhere); [0:4] of the float32
                        run in NCHW, [4:8] of one in channels_last

Both float32 runs are PyTorch on the CPU (no TF32 there); channels_last takes other convolution and BatchNorm kernels,
and on this step its gradients' errors are about 3.5× those of NCHW (median 8.7e-5 against 2.5e-5). The CPU test holds
ours to the NCHW run's errors; the CUDA test, whose natural peer (PyTorch on CUDA) the fixture cannot run, to the
larger of the two. Their gradients are not stored, only the errors.
bf16 is left out: PyTorch 1.13's CPU autocast does not emulate what our bf16 plans do (bf16 activations with f32
BatchNorm statistics and losses), so its error would bound nothing meaningful.

    /usr/bin/python3 tools/reference/make_yolo26_grad_fixture.py tests/fixtures/yolo26n_grads.safetensors
"""
import copy
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import make_loss_fixture  # noqa: E402
import safetensors_io  # noqa: E402
import yolo26_model as y  # noqa: E402
from fixture_io import write_safetensors  # noqa: E402
from make_yolo26_fixture import synthetic_images  # noqa: E402
from yolo26_loss import ONE_TO_MANY, ONE_TO_ONE, e2e_loss  # noqa: E402

SEED = 2027
B, NC, M, H, W = 4, 80, 32, 160, 160
WEIGHTS = (0.8, 0.2)  # o2m, o2o
HEADS = {"o2m": "one2many", "o2o": "one2one"}


def load_model(path):
    tensors, _ = safetensors_io.read(path)
    model = y.YOLO26("n", NC)
    model.load_state_dict({k: (v.double() if v.is_floating_point() else v) for k, v in tensors.items()})
    return model.double()


def draw_targets(gen):
    u = lambda: torch.rand(1, generator=gen, dtype=torch.float64).item()  # noqa: E731
    counts = [0, 20] + [1 + int(u() * 19) for _ in range(B - 2)]
    perm = torch.randperm(B, generator=gen).tolist()
    counts = [counts[i] for i in perm]
    targets = torch.empty((B, M, 5), dtype=torch.float64)
    max_side = 0.9 * min(H, W)
    for b in range(B):
        for g in range(M):
            if g >= counts[b]:
                targets[b, g] = torch.tensor([1e6, -5.0, 7.0, 3.0, 1e9])  # garbage past the count
                continue
            bw, bh = 3 * (max_side / 3) ** u(), 3 * (max_side / 3) ** u()
            x1, y1 = u() * (W - bw), u() * (H - bh)
            targets[b, g] = torch.tensor([min(NC - 1, int(u() * NC)), x1, y1, x1 + bw, y1 + bh])
    return targets.float(), torch.tensor(counts, dtype=torch.int32)


def step(model, images, targets, count, dtype, channels_last=False):
    """One training forward + backward in dtype on a copy of the model: the results named as in the fixture, the
    BatchNorm buffers after the step and each head's assignment. channels_last: the model and the input in that memory
    format (other convolution and BatchNorm kernels, so other rounding)."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    m = copy.deepcopy(model).to(dtype).to(memory_format=fmt)
    m.train()
    out = m((images.to(dtype) / 255).contiguous(memory_format=fmt))
    heads = {h: out[k] for h, k in HEADS.items()}
    total, components, terms, assignments = e2e_loss(heads, targets.to(dtype), count, (H, W), *WEIGHTS)
    total.backward()
    res = {"loss.total": total.detach().reshape(1), "loss.components": components}
    for h in HEADS:
        for name, t in zip(("box", "cls", "l1"), terms[h]):
            res[f"loss.{h}.{name}"] = t.detach().reshape(1)
    for key, p in m.named_parameters():
        res["grad." + key] = p.grad.detach().clone()
    for key, t in m.state_dict().items():
        if key.endswith("running_mean") or key.endswith("running_var"):
            res["bn." + key] = t.detach().clone()
    return res, {h: assignments[h]["gt_index"] for h in HEADS}


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/yolo26n_grads.safetensors"
    here = os.path.dirname(os.path.abspath(__file__))
    torch.use_deterministic_algorithms(True)
    model = load_model(os.path.join(here, "..", "..", "tests", "fixtures", "yolo26n_random.safetensors"))
    images = synthetic_images(torch.Generator().manual_seed(SEED), B, H, W)

    # The heads' outputs (training mode) in float64: what the assignment sees.
    with torch.no_grad():
        m = copy.deepcopy(model)
        m.train()
        raw = m(images.double() / 255)
    make_loss_fixture.H, make_loss_fixture.W = H, W
    for seed in range(SEED, SEED + 200):
        targets, count = draw_targets(torch.Generator().manual_seed(seed))
        reasons = [f"{h}: {r}" for h, opts in (("o2m", ONE_TO_MANY), ("o2o", ONE_TO_ONE))
                   for r in make_loss_fixture.fragile(*raw[HEADS[h]], targets, count, opts)]
        if not reasons:
            ref64, gt64 = step(model, images, targets, count, torch.float64)
            ref32, gt32 = step(model, images, targets, count, torch.float32)
            cl32, gtcl = step(model, images, targets, count, torch.float32, channels_last=True)
            if any(not torch.equal(gt64[h], gt32[h]) or not torch.equal(gt64[h], gtcl[h]) for h in HEADS):
                reasons.append("the float32 reference assigns differently")
            zero = [n for n, t in ref64.items() if n.startswith("grad.") and t.norm() == 0]
            if zero:  # a level without a positive of a head: its box branch gets no gradient
                reasons.append(f"{len(zero)} zero gradients ({zero[0]}, ...)")
            if not reasons:
                break
        print(f"seed {seed}: redrawn ({'; '.join(reasons)})")
    else:
        sys.exit("no robust case in 200 seeds")

    old = {k: v for k, v in model.state_dict().items()}
    tensors = {"images": images, "targets": targets, "count": count,
               "weights": torch.tensor(WEIGHTS, dtype=torch.float32)}
    worst = {}
    for name, r in ref64.items():
        err = []
        for f32 in (ref32, cl32):
            d = f32[name].double() - r
            err += [(d.norm() / r.norm()).item() if r.norm() > 0 else math.nan, d.abs().max().item()]
            if name.startswith("bn."):
                delta = r - old[name[3:]].double()
                err += [(d.norm() / delta.norm()).item(), d.abs().max().item()]
            else:
                err += [math.nan, math.nan]
        rel = err[0]
        tensors[name] = r
        tensors["err." + name] = torch.tensor(err, dtype=torch.float32)
        cat = name.split(".")[0]
        if not math.isnan(rel) and rel > worst.get(cat, ("", -1))[1]:
            worst[cat] = (name, rel)
    grads = [n for n in ref64 if n.startswith("grad.")]
    zero = [n for n in grads if ref64[n].norm() == 0]
    write_safetensors(path, tensors, {"maker": "tools/reference/make_yolo26_grad_fixture.py", "seed": str(seed),
                                      "image_h": str(H), "image_w": str(W), "torch": torch.__version__})
    positives = {h: int((gt64[h] >= 0).sum()) for h in HEADS}
    print(f"wrote {path} (seed {seed}): counts {count.tolist()}, positives {positives}, "
          f"total {ref64['loss.total'].item():.6f} (float32 {ref32['loss.total'].item():.6f}), "
          f"{len(grads)} gradients ({len(zero)} zero: {zero[:5]})")
    for name in [n for n in ref64 if n.startswith("loss.")]:
        print(f"  {name:<22} {ref64[name].tolist()}  f32 rel {tensors['err.' + name][0].item():.2e}")
    for cat, (name, rel) in worst.items():
        print(f"  worst f32 error of {cat}: {name} rel {rel:.2e}")
    for n in grads:
        if tensors["err." + n][0].item() > 1e-3:
            print(f"  {n}: |ref| {ref64[n].norm().item():.3e}, f32 rel {tensors['err.' + n][0].item():.2e}, "
                  f"max {tensors['err.' + n][1].item():.2e}")
    rels = sorted(tensors["err." + n][0].item() for n in grads)
    print(f"  gradient f32 rel errors: median {rels[len(rels) // 2]:.2e}, 90% {rels[len(rels) * 9 // 10]:.2e}, "
          f"max {rels[-1]:.2e}")


if __name__ == "__main__":
    main()
