#!/usr/bin/env python3
"""PyTorch peer of bench_postprocess: YOLO26's decode + end-to-end postprocess written with torch ops (as ultralytics
computes it, from ../../../shared/YOLO26.md, Detect head): boxes = (anchor -/+ LTRB) * stride in pixels, scores =
sigmoid(logits); k = min(max_det, A) anchors by max class score (topk + gather), then topk over the k x nc
(anchor, class) pairs -> [B, max_det, 6] (x1, y1, x2, y2, score, class), and the count of rows with score > conf.
f16 inputs on the GPU, eager and CUDA-graph replay (inputs copied into static tensors each call, as ours copies its
inputs into the plan's arena). Prints one table; --json writes JSON lines for run.sh.

    python3 bench/postprocess/peer.py [--batches 1,32] [--json peer.jsonl]
    /usr/bin/python3 bench/postprocess/peer.py --device cpu --quick     # the logic, without a GPU
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from peer_util import capture, time_us, write_json_lines  # noqa: E402


def anchor_grid(size, device):
    xs, ys, ss = [], [], []
    for s in (8, 16, 32):
        n = size // s
        y, x = torch.meshgrid(torch.arange(n, device=device), torch.arange(n, device=device), indexing="ij")
        xs.append(x.flatten() + 0.5)
        ys.append(y.flatten() + 0.5)
        ss.append(torch.full((n * n,), float(s), device=device))
    return torch.cat(xs), torch.cat(ys), torch.cat(ss)


def decode_postprocess(ltrb, logits, ax, ay, st, max_det, conf):
    l, t, r, b = ltrb.float().unbind(1)                              # [B, A] each
    boxes = torch.stack(((ax - l) * st, (ay - t) * st, (ax + r) * st, (ay + b) * st), dim=-1)   # [B, A, 4]
    scores = logits.float().sigmoid().transpose(1, 2)                # [B, A, nc]
    batch, anchors, nc = scores.shape
    k = min(max_det, anchors)
    top_anchor = scores.amax(dim=-1).topk(k, dim=-1).indices         # [B, k]
    boxes = boxes.gather(1, top_anchor.unsqueeze(-1).expand(-1, -1, 4))
    scores = scores.gather(1, top_anchor.unsqueeze(-1).expand(-1, -1, nc))
    best, flat = scores.flatten(1).topk(k, dim=-1)                   # over the k x nc pairs
    cls = (flat % nc).float()
    boxes = boxes.gather(1, (flat // nc).unsqueeze(-1).expand(-1, -1, 4))
    det = torch.cat((boxes, best.unsqueeze(-1), cls.unsqueeze(-1)), dim=-1)   # [B, k, 6]
    count = (best > conf).sum(dim=-1, dtype=torch.int32)
    return det, count


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batches", default="1,32")
    p.add_argument("--size", type=int, default=640)
    p.add_argument("--classes", type=int, default=80)
    p.add_argument("--max-det", type=int, default=300)
    p.add_argument("--conf", type=float, default=0.25)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="tiny sizes (a logic check)")
    p.add_argument("--json")
    a = p.parse_args()
    if a.quick:
        a.size, a.classes, a.max_det, a.repeats, a.iters, a.batches = 64, 3, 20, 2, 2, "1,2"
    dev = a.device
    dtype = torch.float16 if dev == "cuda" else torch.float32
    ax, ay, st = anchor_grid(a.size, dev)
    anchors = ax.numel()
    rows = []
    gen = torch.Generator(device="cpu").manual_seed(1)
    for batch in (int(x) for x in a.batches.split(",")):
        ltrb = (torch.rand((batch, 4, anchors), generator=gen) * 6).to(dev, dtype)
        logits = (torch.rand((batch, a.classes, anchors), generator=gen) * 12 - 9).to(dev, dtype)
        det, count = decode_postprocess(ltrb, logits, ax, ay, st, a.max_det, a.conf)
        assert det.shape == (batch, min(a.max_det, anchors), 6) and count.shape == (batch,)
        # The pair stage finds the top k over every (anchor, class) pair: check against a direct topk.
        direct = logits.float().sigmoid().flatten(1).topk(min(a.max_det, anchors), dim=-1).values
        assert torch.allclose(det[..., 4], direct, atol=1e-6), "two-stage top-k differs from the direct one"
        eager = time_us(lambda: decode_postprocess(ltrb, logits, ax, ay, st, a.max_det, a.conf), a.iters,
                        a.repeats, dev)
        rows.append({"side": "pytorch", "mode": "eager", "batch": batch, "us": eager[0], "min_us": eager[1]})
        if dev == "cuda":
            static_l, static_g = ltrb.clone(), logits.clone()
            graph, _ = capture(lambda: decode_postprocess(static_l, static_g, ax, ay, st, a.max_det, a.conf))

            def replay():
                static_l.copy_(ltrb)
                static_g.copy_(logits)
                graph.replay()
            g = time_us(replay, a.iters, a.repeats, dev)
            rows.append({"side": "pytorch", "mode": "graph", "batch": batch, "us": g[0], "min_us": g[1]})
    print(f"PyTorch {torch.__version__} decode + end-to-end postprocess, {a.size}x{a.size} ({anchors} anchors), "
          f"{a.classes} classes, max_det {a.max_det}, {dtype} inputs on {dev}")
    print(f"{'mode':<8} {'batch':>6} {'us':>10} {'min us':>10}")
    for r in rows:
        print(f"{r['mode']:<8} {r['batch']:>6} {r['us']:>10.1f} {r['min_us']:>10.1f}")
    write_json_lines(a.json, rows)


if __name__ == "__main__":
    main()
