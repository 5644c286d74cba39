#!/usr/bin/env python3
"""PyTorch peer of bench_loss: YOLO26's E2ELoss (both heads' task-aligned assigners, CIoU, BCE and L1 terms) and its
backward to both heads' outputs, as tools/reference/yolo26_loss.py computes it (written from
../../../shared/YOLO26.md), on the same inputs as ours, f32 on the GPU. It also makes those inputs.

    peer.py --make-inputs inputs.safetensors [--batch 64 --size 640 --classes 80 --min-boxes 1 --max-boxes 16]
    peer.py --inputs inputs.safetensors [--json peer.jsonl] [--modes eager,graph]
    /usr/bin/python3 bench/loss/peer.py --make-inputs /tmp/in.safetensors --quick    # tiny, for a CPU smoke test
    /usr/bin/python3 bench/loss/peer.py --inputs /tmp/in.safetensors --device cpu --quick

The inputs (make_inputs): per image 1-16 boxes (classes uniform, sides log-uniform in [4, size/3] px, so some are
STAL-widened), M = 16 target rows (garbage past each count); each head predicts, per anchor, the box of the gt whose
centre is nearest, each coordinate jittered by N(0, 0.15 * side) (30% of anchors a random box), so alignments are not
all zero; logits uniform in [-6, 2]; loss weights (o2m, o2o) = (0.8, 0.2), ProgLoss' first epoch.

Timed per call, as bench_loss does: copy the four head outputs into the tensors the loss reads (ours copies them into
its plan's arena), E2ELoss forward, and the gradients of the total with respect to both heads' outputs. Modes: eager,
and graph (the same captured in a CUDA graph and replayed: the reference has no host synchronisation). Prints one
table; --json writes JSON lines for run.sh.
"""
import argparse
import math
import os
import sys

import torch

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(_here, "..", "common"), os.path.join(_here, "..", "..", "tools", "reference")]
from fixture_io import read_safetensors, write_safetensors  # noqa: E402
from peer_util import capture, time_us, write_json_lines  # noqa: E402
from yolo26_loss import anchor_grid, e2e_loss  # noqa: E402

HEADS = ("o2m", "o2o")


def make_inputs(batch, size, nc, min_boxes, max_boxes, rows, seed):
    """A random batch (see the module docstring), f32 on the CPU."""
    g = torch.Generator().manual_seed(seed)
    u = lambda *shape: torch.rand(shape, generator=g)  # noqa: E731
    count = torch.randint(min_boxes, max_boxes + 1, (batch,), generator=g, dtype=torch.int32)
    side = 4 * (size / 3 / 4) ** u(batch, rows, 2)                                     # [B, M, 2] px
    x1y1 = u(batch, rows, 2) * (size - side)
    cls = torch.floor(u(batch, rows, 1) * nc).clamp(max=nc - 1)
    targets = torch.cat((cls, x1y1, x1y1 + side), dim=-1)
    valid = torch.arange(rows)[None, :] < count[:, None]                               # [B, M]
    garbage = torch.tensor([1e6, -5.0, 7.0, 3.0, 1e9])
    targets = torch.where(valid[..., None], targets, garbage)
    ax, ay, stride = anchor_grid(size, size, torch.float32)
    px, py = ax * stride, ay * stride                                                  # [A] px
    centre = (targets[..., 1:3] + targets[..., 3:5]) / 2                               # [B, M, 2]
    dist = (centre[..., 0, None] - px) ** 2 + (centre[..., 1, None] - py) ** 2        # [B, M, A]
    nearest = torch.where(valid[..., None], dist, torch.full_like(dist, math.inf)).argmin(dim=1)   # [B, A]
    gt = torch.gather(targets[..., 1:5], 1, nearest[..., None].expand(-1, -1, 4))     # [B, A, 4]
    n_anchors = ax.numel()
    tensors = {"targets": targets, "count": count, "weights": torch.tensor([0.8, 0.2])}
    for head in HEADS:
        wh = (gt[..., 2:] - gt[..., :2]).repeat(1, 1, 2)
        p = gt + torch.randn(gt.shape, generator=g) * 0.15 * wh
        p = torch.cat((torch.minimum(p[..., :2], p[..., 2:]), torch.maximum(p[..., :2], p[..., 2:])), dim=-1)
        c = u(batch, n_anchors, 2) * size
        s = 4 + u(batch, n_anchors, 2) * size / 3
        random_box = torch.cat((c - s / 2, c + s / 2), dim=-1)
        p = torch.where(u(batch, n_anchors, 1) < 0.3, random_box, p) / stride[None, :, None]   # grid units
        ltrb = torch.stack((ax - p[..., 0], ay - p[..., 1], p[..., 2] - ax, p[..., 3] - ay), dim=1)
        tensors[f"{head}.ltrb"] = ltrb
        tensors[f"{head}.logits"] = u(batch, nc, n_anchors) * 8 - 6
    return tensors


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--make-inputs", help="write a random batch to this file and exit")
    p.add_argument("--inputs", help="time the loss on this batch")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=640)
    p.add_argument("--classes", type=int, default=80)
    p.add_argument("--min-boxes", type=int, default=1)
    p.add_argument("--max-boxes", type=int, default=16)
    p.add_argument("--rows", type=int, default=16, help="target rows M (a bucket >= max-boxes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--modes", default="eager,graph")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="tiny sizes (a logic check)")
    p.add_argument("--json")
    a = p.parse_args()
    if a.quick:
        a.batch, a.size, a.classes, a.repeats, a.iters = 2, 160, 8, 2, 1
    if a.make_inputs:
        assert a.rows >= a.max_boxes, "--rows must hold --max-boxes"
        t = make_inputs(a.batch, a.size, a.classes, a.min_boxes, a.max_boxes, a.rows, a.seed)
        write_safetensors(a.make_inputs, t, {"image_h": str(a.size), "image_w": str(a.size), "seed": str(a.seed),
                                             "maker": "bench/loss/peer.py"})
        print(f"wrote {a.make_inputs}: batch {a.batch}, {a.size}x{a.size}, {a.classes} classes, "
              f"{int(t['count'].sum())} boxes")
        return
    assert a.inputs, "--inputs or --make-inputs"
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = a.device
    t, meta = read_safetensors(a.inputs)
    image = (int(meta["image_h"]), int(meta["image_w"]))
    sources = {h: (t[f"{h}.ltrb"].to(dev), t[f"{h}.logits"].to(dev)) for h in HEADS}
    leaves = {h: tuple(x.clone().requires_grad_(True) for x in sources[h]) for h in HEADS}
    targets, count = t["targets"].to(dev), t["count"].to(dev)
    o2m, o2o = (float(w) for w in t["weights"])
    flat = [x for h in HEADS for x in leaves[h]]

    def step():
        with torch.no_grad():
            for h in HEADS:
                for leaf, src in zip(leaves[h], sources[h]):
                    leaf.copy_(src)
        total, components, _, _ = e2e_loss(leaves, targets, count, image, o2m, o2o)
        grads = torch.autograd.grad(total, flat)
        return total, components, grads

    total, components, grads = step()
    batch, nc, anchors = t["o2m.logits"].shape
    boxes = int(count.sum())
    info = dict(side="pytorch", batch=batch, anchors=anchors, classes=nc, boxes=boxes, loss=float(total),
                components=[float(c) for c in components])
    rows = []
    for mode in a.modes.split(","):
        if mode == "eager":
            us = time_us(step, a.iters, a.repeats, dev)
        elif mode == "graph" and dev == "cuda":
            try:
                graph, captured = capture(step)
                graph.replay()
                torch.cuda.synchronize()
                assert math.isclose(float(captured[0]), float(total), rel_tol=1e-5), "the replay's loss differs"
                us = time_us(graph.replay, a.iters, a.repeats, dev)
            except Exception as e:  # report and go on: the eager row stands
                print(f"graph mode not timed: {type(e).__name__}: {e}", file=sys.stderr)
                continue
        else:
            continue
        rows.append(dict(info, mode=mode, us=us[0], min_us=us[1]))
    print(f"PyTorch {torch.__version__} E2ELoss + both assigners + backward, batch {batch}, {anchors} anchors, "
          f"{nc} classes, {boxes} boxes, f32 on {dev}; loss {float(total):.6f}")
    print(f"{'mode':<8} {'ms':>10} {'min ms':>10}")
    for r in rows:
        print(f"{r['mode']:<8} {r['us'] / 1000:>10.3f} {r['min_us'] / 1000:>10.3f}")
    write_json_lines(a.json, rows)


if __name__ == "__main__":
    main()
