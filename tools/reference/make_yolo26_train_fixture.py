#!/usr/bin/env python3
"""Fixture for YOLO26n's training trajectory (issue #15): the reference trainer — the independent model and loss
(yolo26_model.py, yolo26_loss.py) driven by the schedule, accumulation, parameter groups, clipping and optimizers of
../shared/YOLO26.md (Training, Optimizers), with the semantics of src/vision/models/yolo/trainer.cpp — run for a few
steps on two fixed batches, in float64 and in float32, from the weights of tests/fixtures/yolo26n_random.safetensors
(nc 80). The C++ test (tests/models/yolo/test_yolo26_train_trajectory.cpp) runs Yolo26Trainer with the same options on
the same batches and holds its loss at every iteration to the reference's own float32 divergence.

One iteration ni (= epoch · batches_per_epoch + i), as Yolo26Trainer::train_batch does it:
  every group's lr and momentum for (epoch, ni) (the warmup's np.interp ramps, the bias groups from warmup_bias_lr,
  AdamW's β1 not warmed; after the warmup lr0 · lr_scale · lf(epoch), linear lf); accumulate(ni);
  forward in training mode (BatchNorm on batch statistics, running statistics updated with momentum 0.03, eps 1e-3;
  the one-to-one head on detached features) + E2ELoss with the ProgLoss weights of the epochs completed (as f32, what
  the trainer feeds its graph); backward, gradients summed since the last step;
  when ni − last_step ≥ accumulate(ni): the global gradient norm clipped to 10 (clip_grad_norm_), the optimizer step
  (weight decay · batch · accumulate / nbs on the decay groups), gradients zeroed.
  After every batches_per_epoch iterations the epoch ends (the ProgLoss weights and lf move on).
Parameter groups: (MuSGD) rank ≥ 2 → muon; "bias" in the key → bias; a BatchNorm weight → bn; else weight; under
MuSGD the Detect class branch (model.23.*cv3*) gets lr × 3. SGD and AdamW are torch.optim's (Nesterov SGD; AdamW with
decoupled decay, betas (momentum, 0.999), eps 1e-8); MuSGD is make_optimizer_fixture.musgd_update, with the bf16
rounding of vision-cpp's Newton–Schulz emulated (the arithmetic between roundings in the run's dtype).

The batches: 2 × 2 synthetic images of 128×128 (u8; the model's input is u8 / 255) with 0–8 random boxes of random
classes each (the first image has none; M = 16 rows, garbage past each count). They are redrawn (next seed) until, at
every iteration of every run, no decision of either head's assignment lies within rounding of a tie
(make_loss_fixture.fragile, on the float64 run's outputs) and every float32 run assigns as the float64 one does, so that
a float32 implementation follows the same assignments and its losses are comparable.

Runs, each from the same initial weights (options in the metadata as JSON, the names of TrainerOptions; epochs 10, two
batches an epoch, so the ProgLoss weights and lf move every two iterations):
    sgd    SGD, 21 iterations = 20 steps + the loss after them: warmup on (lr and momentum ramp, the bias groups' lr from
           0.1 down), nbs 3 with batch 2 (accumulate 1 while warming, weight decay scaled by 2·2/3), weight decay 5e-3
    adamw  AdamW lr0 2e-5, 11 iterations = 5 steps of 2 accumulated batches + the loss after them: no warmup
           (lr0 · lf(e)), weight decay 0.05 (scaled by 4/3)
    musgd  MuSGD lr0 5e-4, 6 iterations = 5 steps + the loss after them: no warmup, nbs 2 (a step per batch)
The AdamW and MuSGD learning rates are low on purpose: both updates are normalised (AdamW's first steps are about
lr · sign(g); MuSGD's Muon part is an orthogonalised matrix rounded to bf16 five times), so the float32 runs' divergence
from float64 is a fixed fraction of how far the weights move, not of the gradients' rounding; at the usual rates
(AdamW 1.2e-4, MuSGD 0.01) the reference's own float32 runs differ from float64 by 2e-3 to 1e-2 within 5 steps (and
assign differently), beyond what a test at 1e-3 can hold anyone to; at these rates they stay below 4e-5.

Each run in float64 (the reference) and in 16 float32 variants (VARIANTS: NCHW or channels_last × the batch in order
or reversed × the initial weights as given or perturbed by ±1 ulp with 3 seeds). A training trajectory is not smooth in
the weights: SPPF's max-pools route the gradient to the largest value of each window, and a near-tie there (a relative
gap of 1.7e-5 among the 6,400 windows of one 160×160 batch was seen) is crossed by one float32 run and not by another,
after which that run's gradient differs by ~3e-3 and its later losses by up to ~1e-4 (found by comparing Yolo26Trainer's
weights under 4 OpenMP threads with the reference's); 3 of the 16 runs here jump to ~8e-4 from sgd iteration 17 on.
So the divergence of one float32 run is a heavy-tailed draw, and the envelope of many runs is the scale another
float32 implementation must be held to.

Stored (float64 results rounded to f32; V = 16 variants):
    images.J [2, 3, 128, 128] u8, targets.J [2, 16, 5] (class, x1, y1, x2, y2 in input pixels), count.J [2] i32, J = 0, 1
    initial.head_losses.J [2]  the untrained model's one-to-many and one-to-one loss (B · …) on batch J, float64
    RUN.loss [N]          the E2E total at each iteration (B · …, what backward starts from), float64
    RUN.loss_err [N, V]   |f32 − f64| / |f64| of it, per float32 variant
    RUN.grad_norm [N]     the gradient norm before clipping at the iterations that step (NaN elsewhere), float64
    RUN.grad_norm_err [N, V]
    RUN.lr [N, G], RUN.momentum [N, G], RUN.weight_decay [G]  each group's hyperparameters at each iteration
    RUN.assign.J [K, 2] i32  the positives of each head (o2m, o2o) at the K iterations on batch J (float64)
    sgd.bn.KEY            every BatchNorm running_mean / running_var after the sgd run's last iteration
    err.sgd.bn.KEY [V, 2] ‖f32 − f64‖ / ‖f64‖ and max |f32 − f64| of it, per variant
    metadata: options.RUN (JSON), groups.RUN (the groups in Yolo26Trainer's order, comma-separated), variants, seed

    /usr/bin/python3 tools/reference/make_yolo26_train_fixture.py tests/fixtures/yolo26n_train.safetensors
"""
import copy
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import make_loss_fixture  # noqa: E402
from fixture_io import write_safetensors  # noqa: E402
from make_optimizer_fixture import musgd_update  # noqa: E402
from make_yolo26_fixture import synthetic_images  # noqa: E402
from make_yolo26_grad_fixture import load_model  # noqa: E402
from yolo26_loss import ONE_TO_MANY, ONE_TO_ONE, e2e_loss  # noqa: E402

SEED = 2028
B, NC, M, H, W = 2, 80, 16, 128, 128
BATCHES = 2
MAX_BOXES = 8  # per image
HEADS = {"o2m": "one2many", "o2o": "one2one"}
COMMON = dict(epochs=10, batch=B, batches_per_epoch=BATCHES, imgsz=H, lrf=0.01, warmup_momentum=0.8,
              max_grad_norm=10.0, cos_lr=False)
RUNS = {
    "sgd": dict(COMMON, optimizer="SGD", iterations=21, lr0=0.01, momentum=0.937, weight_decay=5e-3,
                warmup_epochs=3.0, warmup_bias_lr=0.1, nbs=3),
    "adamw": dict(COMMON, optimizer="AdamW", iterations=11, lr0=2e-5, momentum=0.9, weight_decay=0.05,
                  warmup_epochs=0.0, warmup_bias_lr=0.0, nbs=3),
    "musgd": dict(COMMON, optimizer="MuSGD", iterations=6, lr0=5e-4, momentum=0.9, weight_decay=5e-3,
                  warmup_epochs=0.0, warmup_bias_lr=0.0, nbs=2),
}
# The float32 runs: (name, channels_last, batch order reversed, seed of a ±1 ulp perturbation of the initial weights or
# 0). Each is a float32 implementation of the same arithmetic with its own rounding (other convolution and BatchNorm
# kernels, other summation orders over the batch, other rounding of the weights); the envelope of their divergences
# from float64 is the scale of what another one gets.
PERTURBATIONS = 4
VARIANTS = tuple((("channels_last" if cl else "nchw") + ("_reversed" if rev else "") + (f"_perturbed{p}" if p else ""),
                  cl, rev, p) for p in range(PERTURBATIONS) for rev in (False, True) for cl in (False, True))


class Fragile(Exception):
    pass


# ---------------------------------------------------------------------------------------------------------------------
# Schedule (YOLO26.md "Training"; ultralytics' trainer, np.interp and Python's round)


def warmup_iterations(o):
    return max(round(o["warmup_epochs"] * o["batches_per_epoch"]), 100) if o["warmup_epochs"] > 0 else -1


def lf(o, epoch):
    return max(1 - epoch / o["epochs"], 0) * (1.0 - o["lrf"]) + o["lrf"]


def accumulate(o, ni):
    nw = warmup_iterations(o)
    if 0 <= nw and ni <= nw:
        return max(1, int(np.interp(ni, [0, nw], [1, o["nbs"] / o["batch"]]).round()))
    return max(round(o["nbs"] / o["batch"]), 1)


def progloss_weights(updates, epochs):
    o2m = max(1 - updates / max(epochs - 1, 1), 0) * 0.7 + 0.1
    return float(np.float32(o2m)), float(np.float32(max(1 - o2m, 0)))  # as the trainer feeds them: f32


# ---------------------------------------------------------------------------------------------------------------------
# Parameter groups (src/vision/train/param_groups.h), in Yolo26Trainer's order: weight, bn, bias, muon, each followed by
# its lr × 3 twin (MuSGD), empty groups left out.


def group_of(key, shape, bn_prefixes, musgd):
    if musgd and len(shape) >= 2:
        kind = "muon"
    elif "bias" in key:
        kind = "bias"
    elif key.endswith(".weight") and key[:-len(".weight")] in bn_prefixes:
        kind = "bn"
    else:
        kind = "weight"
    boosted = musgd and key.startswith("model.23.") and "cv3" in key[len("model.23."):]
    return kind + (".x3" if boosted else "")


def param_groups(model, musgd):
    bn_prefixes = {k[:-len(".running_mean")] for k in model.state_dict() if k.endswith(".running_mean")}
    members = {}
    for key, p in model.named_parameters():
        members.setdefault(group_of(key, p.shape, bn_prefixes, musgd), []).append((key, p))
    order = [k + t for k in ("weight", "bn", "bias", "muon") for t in ("", ".x3")]
    return [(name, members[name]) for name in order if name in members]


# ---------------------------------------------------------------------------------------------------------------------
# The reference trainer


class MuSGD:
    """MuSGD over (name, params) groups: make_optimizer_fixture.musgd_update per tensor, the group's hyperparameters in
    self.hyper[name] = {lr, momentum, weight_decay}."""

    def __init__(self, groups):
        self.groups = groups
        self.state = {}

    def step(self, hyper):
        with torch.no_grad():
            for name, members in self.groups:
                h = hyper[name]
                for key, p in members:
                    buf1, buf2 = self.state.get(key, (torch.zeros_like(p), torch.zeros_like(p)))
                    new, buf1, buf2 = musgd_update(p.detach(), p.grad, buf1, buf2, h["lr"], h["momentum"],
                                                   h["weight_decay"], True, muon=name.startswith("muon"))
                    p.copy_(new)
                    self.state[key] = (buf1, buf2)


class Trainer:
    def __init__(self, model, o, dtype, channels_last):
        self.o, self.dtype = o, dtype
        self.fmt = torch.channels_last if channels_last else torch.contiguous_format
        self.model = copy.deepcopy(model).to(dtype).to(memory_format=self.fmt)
        self.model.train()
        kind = o["optimizer"]
        self.groups = param_groups(self.model, kind == "MuSGD")
        acc = max(round(o["nbs"] / o["batch"]), 1)
        wd = o["weight_decay"] * o["batch"] * acc / o["nbs"]
        self.hyper = {}
        for name, _ in self.groups:
            decay = name.split(".")[0] in ("weight", "muon")
            self.hyper[name] = dict(lr_scale=3.0 if name.endswith(".x3") else 1.0, lr=0.0, momentum=o["momentum"],
                                    weight_decay=wd if decay else 0.0)
        torch_groups = [{"params": [p for _, p in members], "weight_decay": self.hyper[name]["weight_decay"]}
                        for name, members in self.groups]
        if kind == "SGD":
            self.opt = torch.optim.SGD(torch_groups, lr=o["lr0"], momentum=o["momentum"], nesterov=True, dampening=0)
        elif kind == "AdamW":
            self.opt = torch.optim.AdamW(torch_groups, lr=o["lr0"], betas=(o["momentum"], 0.999), eps=1e-8)
        else:
            self.opt = MuSGD(self.groups)
        self.params = [p for _, members in self.groups for _, p in members]
        for p in self.params:
            p.grad = None
        self.epoch, self.ni, self.last_step, self.updates = 0, 0, -1, 0

    def set_hyper(self):
        o, ni = self.o, self.ni
        nw = warmup_iterations(o)
        warm_momentum = o["optimizer"] != "AdamW"
        for name, h in self.hyper.items():
            target = o["lr0"] * h["lr_scale"] * lf(o, self.epoch)
            if 0 <= nw and ni <= nw:
                h["lr"] = float(np.interp(ni, [0, nw], [o["warmup_bias_lr"] if name.startswith("bias") else 0.0,
                                                        target]))
                if warm_momentum:
                    h["momentum"] = float(np.interp(ni, [0, nw], [o["warmup_momentum"], o["momentum"]]))
            else:
                h["lr"] = target
                if warm_momentum:
                    h["momentum"] = o["momentum"]
        if not isinstance(self.opt, MuSGD):
            for (name, _), g in zip(self.groups, self.opt.param_groups):
                g["lr"] = self.hyper[name]["lr"]
                if o["optimizer"] == "SGD":
                    g["momentum"] = self.hyper[name]["momentum"]
                else:
                    g["betas"] = (self.hyper[name]["momentum"], 0.999)

    def train_batch(self, images, targets, count, check_ties=False):
        """One iteration; returns (loss, grad norm or None, each head's gt_index)."""
        self.set_hyper()
        acc = accumulate(self.o, self.ni)
        x = (images.to(self.dtype) / 255).contiguous(memory_format=self.fmt)
        out = self.model(x)
        heads = {h: out[k] for h, k in HEADS.items()}
        if check_ties:
            reasons = [f"{h}: {r}" for h, opts in (("o2m", ONE_TO_MANY), ("o2o", ONE_TO_ONE))
                       for r in make_loss_fixture.fragile(*[t.detach() for t in heads[h]], targets, count, opts)]
            if reasons:
                raise Fragile(f"iteration {self.ni}: {'; '.join(reasons)}")
        w = progloss_weights(self.updates, self.o["epochs"])
        total, _, _, assignments = e2e_loss(heads, targets.to(self.dtype), count, (H, W), *w)
        total.backward()
        norm = None
        if self.ni - self.last_step >= acc:
            self.last_step = self.ni
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.o["max_grad_norm"]).item()
            if isinstance(self.opt, MuSGD):
                self.opt.step(self.hyper)
            else:
                self.opt.step()
            for p in self.params:
                p.grad = None
        self.ni += 1
        if self.ni % self.o["batches_per_epoch"] == 0:
            self.updates += 1
            self.epoch += 1
        return total.item(), norm, {h: assignments[h]["gt_index"] for h in HEADS}


def perturbed(model, seed):
    """A copy of model (float64 holding float32 values) with every parameter element moved by −1, 0 or +1 float32
    ulp at random."""
    m = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            v = p.float()
            step = torch.randint(-1, 2, v.shape, generator=gen)
            inf = torch.full_like(v, math.inf)
            v = torch.where(step > 0, torch.nextafter(v, inf), torch.where(step < 0, torch.nextafter(v, -inf), v))
            p.copy_(v.double())
    return m


def run(model, o, batches, dtype, channels_last=False, reverse=False, check_ties=False):
    """The reference trainer over o["iterations"] iterations; reverse: every batch in reverse image order (the
    assignments are reported in the original order)."""
    t = Trainer(model, o, dtype, channels_last)
    if reverse:
        batches = [tuple(x.flip(0) for x in b) for b in batches]
    res = dict(loss=[], grad_norm=[], gt=[], lr=[], momentum=[])
    for _ in range(o["iterations"]):
        images, targets, count = batches[t.ni % len(batches)]
        loss, norm, gt = t.train_batch(images, targets, count, check_ties)
        res["loss"].append(loss)
        res["grad_norm"].append(math.nan if norm is None else norm)
        res["gt"].append({h: g.flip(0) for h, g in gt.items()} if reverse else gt)
        res["lr"].append([t.hyper[n]["lr"] for n, _ in t.groups])
        res["momentum"].append([t.hyper[n]["momentum"] for n, _ in t.groups])
    res["groups"] = [n for n, _ in t.groups]
    res["weight_decay"] = [t.hyper[n]["weight_decay"] for n in res["groups"]]
    res["bn"] = {k: v.detach().double().clone() for k, v in t.model.state_dict().items()
                 if k.endswith("running_mean") or k.endswith("running_var")}
    return res


# ---------------------------------------------------------------------------------------------------------------------


def draw_targets(gen, images):
    u = lambda: torch.rand(1, generator=gen, dtype=torch.float64).item()  # noqa: E731
    targets = torch.empty((B, M, 5), dtype=torch.float64)
    counts = []
    max_side = 0.9 * min(H, W)
    for b in range(B):
        n = 0 if images == 0 and b == 0 else 1 + int(u() * MAX_BOXES)  # the first batch's first image has none
        counts.append(n)
        for g in range(M):
            if g >= n:
                targets[b, g] = torch.tensor([1e6, -5.0, 7.0, 3.0, 1e9])  # garbage past the count
                continue
            bw, bh = 3 * (max_side / 3) ** u(), 3 * (max_side / 3) ** u()
            x1, y1 = u() * (W - bw), u() * (H - bh)
            targets[b, g] = torch.tensor([min(NC - 1, int(u() * NC)), x1, y1, x1 + bw, y1 + bh])
    return targets.float(), torch.tensor(counts, dtype=torch.int32)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/yolo26n_train.safetensors"
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else list(RUNS)  # for experiments: a subset of the runs
    here = os.path.dirname(os.path.abspath(__file__))
    torch.use_deterministic_algorithms(True)
    model = load_model(os.path.join(here, "..", "..", "tests", "fixtures", "yolo26n_random.safetensors"))
    images = synthetic_images(torch.Generator().manual_seed(SEED), B * BATCHES, H, W)
    make_loss_fixture.H, make_loss_fixture.W = H, W
    start = time.time()
    for seed in range(SEED, SEED + 100):
        gen = torch.Generator().manual_seed(seed)
        batches = []
        for j in range(BATCHES):
            targets, count = draw_targets(gen, j)
            batches.append((images[j * B:(j + 1) * B], targets, count))
        try:
            results = {}
            for name in only:
                results[name] = {"f64": run(model, RUNS[name], batches, torch.float64, check_ties=True)}
                print(f"  {name} float64: losses {[round(v, 4) for v in results[name]['f64']['loss']]} "
                      f"({time.time() - start:.0f} s)", flush=True)
            for name in only:
                for variant, cl, reverse, perturb in VARIANTS:
                    start_model = perturbed(model, 1000 * seed + perturb) if perturb else model
                    r = run(start_model, RUNS[name], batches, torch.float32, cl, reverse)
                    for i, (a, b) in enumerate(zip(results[name]["f64"]["gt"], r["gt"])):
                        for h in HEADS:
                            if not torch.equal(a[h], b[h]):
                                raise Fragile(f"{name} {variant} assigns differently at iteration {i} ({h})")
                    results[name][variant] = r
                print(f"  {name} float32 done ({time.time() - start:.0f} s)", flush=True)
            break
        except Fragile as e:
            print(f"seed {seed}: redrawn ({e})", flush=True)
    else:
        sys.exit("no robust case in 100 seeds")

    tensors = {}
    for j, (im, targets, count) in enumerate(batches):
        tensors[f"images.{j}"], tensors[f"targets.{j}"], tensors[f"count.{j}"] = im, targets, count
        with torch.no_grad():  # the untrained model's loss of each head on this batch (B · …, ungained by o2m, o2o)
            m = copy.deepcopy(model)
            m.train()
            out = m(im.double() / 255)
            heads = {h: out[k] for h, k in HEADS.items()}
            tensors[f"initial.head_losses.{j}"] = torch.stack(
                [e2e_loss(heads, targets.double(), count, (H, W), *w)[0] for w in ((1.0, 0.0), (0.0, 1.0))])
    metadata = {"maker": "tools/reference/make_yolo26_train_fixture.py", "seed": str(seed), "torch": torch.__version__,
                "weights": "yolo26n_random.safetensors", "runs": ",".join(only),
                "variants": ",".join(v[0] for v in VARIANTS)}

    def rel(a, b):
        a, b = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
        return ((a - b).abs() / b.abs()).tolist()

    for name in only:
        r = results[name]
        ref = r["f64"]
        n = RUNS[name]["iterations"]
        tensors[f"{name}.loss"] = torch.tensor(ref["loss"], dtype=torch.float64)
        tensors[f"{name}.loss_err"] = torch.tensor([rel(r[v[0]]["loss"], ref["loss"]) for v in VARIANTS]).T.contiguous()
        tensors[f"{name}.grad_norm"] = torch.tensor(ref["grad_norm"], dtype=torch.float64)
        tensors[f"{name}.grad_norm_err"] = torch.tensor(
            [rel(r[v[0]]["grad_norm"], ref["grad_norm"]) for v in VARIANTS]).T.contiguous()
        tensors[f"{name}.lr"] = torch.tensor(ref["lr"], dtype=torch.float64)
        tensors[f"{name}.momentum"] = torch.tensor(ref["momentum"], dtype=torch.float64)
        tensors[f"{name}.weight_decay"] = torch.tensor(ref["weight_decay"], dtype=torch.float64)
        for j in range(BATCHES):
            tensors[f"{name}.assign.{j}"] = torch.tensor(
                [[int((gt[h] >= 0).sum()) for h in HEADS] for gt in ref["gt"][j::BATCHES]], dtype=torch.int32)
        options = {k: v for k, v in RUNS[name].items()}
        metadata[f"options.{name}"] = json.dumps(options, sort_keys=True)
        metadata[f"groups.{name}"] = ",".join(ref["groups"])
        print(f"{name}: {RUNS[name]['optimizer']}, {n} iterations, groups {ref['groups']}, "
              f"weight decay {ref['weight_decay']}")
        for i in range(n):
            err = tensors[f"{name}.loss_err"][i].tolist()
            gerr = tensors[f"{name}.grad_norm_err"][i].tolist()
            print(f"  {i:2d} loss {ref['loss'][i]:.7f} f32 err {' '.join(f'{e:.1e}' for e in err)}  grad norm "
                  f"{ref['grad_norm'][i]:9.4f} err {' '.join(f'{e:.1e}' for e in gerr)}  lr[0] "
                  f"{ref['lr'][i][0]:.3g} positives {[int((ref['gt'][i][h] >= 0).sum()) for h in HEADS]}")
        if name == "sgd":
            worst = 0
            for key, t in ref["bn"].items():
                errs = [[((r[v[0]]["bn"][key] - t).norm() / t.norm()).item(),
                         (r[v[0]]["bn"][key] - t).abs().max().item()] for v in VARIANTS]
                tensors[f"sgd.bn.{key}"] = t
                tensors[f"err.sgd.bn.{key}"] = torch.tensor(errs)
                worst = max(worst, max(e[0] for e in errs))
            print(f"  BatchNorm running statistics after the run: worst f32 rel error {worst:.2e}")
    write_safetensors(path, tensors, metadata)
    print(f"wrote {path} (seed {seed}, {time.time() - start:.0f} s): counts "
          f"{[b[2].tolist() for b in batches]}")


if __name__ == "__main__":
    main()
