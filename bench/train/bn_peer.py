#!/usr/bin/env python3
"""PyTorch peer of bench_batchnorm: BatchNorm2d (training mode, f32 parameters) + SiLU on the shapes bench_batchnorm
found in a YOLO26 training step, forward and backward (autograd, the backward of the SiLU output), timed with CUDA
events; prints one per-op table beside ours (bench_batchnorm --json) with bandwidths as a fraction of the copy
bandwidth ours measured.

    bn_peer.py --ours ours.jsonl [--json peer.jsonl]

The dtype and layout follow ours: bf16 NHWC is a bf16 tensor in channels_last (PyTorch's BatchNorm takes bf16 input
with f32 parameters and statistics, as under autocast); f32 NCHW is contiguous f32.

PyTorch is timed both eagerly and with the calls captured into a CUDA graph (torch.cuda.graph) and replayed, as ours
are (bench_batchnorm's default); the table keeps PyTorch's faster of the two for each pass and says which it was.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from peer_util import capture, time_us  # noqa: E402


def timed_us(fn, iters, repeats=11):
    """Median µs per call of fn, `iters` back-to-back eager calls a measurement, after three warm-up calls."""
    for _ in range(3):
        fn()
    return time_us(fn, iters, repeats, "cuda")[0]


def graphed_us(fn, iters, repeats=11):
    """fn called `iters` times inside one captured CUDA graph (peer_util.capture), replayed; None when PyTorch cannot
    capture it."""
    try:
        g, _ = capture(lambda: [fn() for _ in range(iters)])
    except RuntimeError as e:
        print(f"  (no captured timing: {str(e).splitlines()[0]})")
        return None
    g.replay()
    return timed_us(g.replay, 1, repeats) / iters


def best(eager, graphed):
    return (eager, "eager") if graphed is None or eager <= graphed else (graphed, "graph")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ours", required=True)
    p.add_argument("--json")
    a = p.parse_args()
    ours = [json.loads(line) for line in open(a.ours)]
    torch.backends.cudnn.benchmark = True
    gen = torch.Generator().manual_seed(0)
    rows = []
    print(f"PyTorch {torch.__version__} BatchNorm2d + SiLU (training) beside ours; GB/s as in bench_batchnorm "
          f"(forward 3, backward 5 activation passes)")
    print(f"{'shape (NCHW)':<20} {'n':>3} {'ours fwd':>9} {'torch fwd':>10} {'ours bwd':>9} {'torch bwd':>10} "
          f"{'ours %copy':>11} {'torch %copy':>12} {'speed-up':>9}  torch fwd/bwd timed")
    tot_ours = tot_torch = tot_bytes = 0.0
    for r in ours:
        n, c, h, w = r["shape"]
        dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[r["dtype"]]
        fmt = torch.channels_last if r["layout"] == "nhwc" else torch.contiguous_format
        # Drawn on the host: the CUDA generator is not touched once a graph has been captured.
        x = (torch.rand(n, c, h, w, generator=gen) * 5 - 2).to(dtype).cuda().contiguous(memory_format=fmt)
        x.requires_grad_(True)
        dz = (torch.rand(n, c, h, w, generator=gen) * 2 - 1).to(dtype).cuda().contiguous(memory_format=fmt)
        bn = torch.nn.BatchNorm2d(c, eps=1e-3, momentum=0.03).cuda().train()
        iters = max(1, min(100, int(2e9 / (x.numel() * x.element_size() * 3))))

        def forward():
            return F.silu(bn(x))

        fwd, fwd_mode = best(timed_us(forward, iters), graphed_us(forward, iters))
        z = forward()

        def backward():
            return torch.autograd.grad(z, (x, bn.weight, bn.bias), dz, retain_graph=True)

        bwd, bwd_mode = best(timed_us(backward, iters), graphed_us(backward, iters))
        e = x.element_size()
        numel = x.numel()
        copy = r["copy_gbs"]
        ours_pct = 100 * 8 * numel * e / ((r["fwd_us"] + r["bwd_us"]) * 1e3) / copy
        torch_pct = 100 * 8 * numel * e / ((fwd + bwd) * 1e3) / copy
        speed = (fwd + bwd) / (r["fwd_us"] + r["bwd_us"])
        k = r["count"]
        tot_ours += k * (r["fwd_us"] + r["bwd_us"])
        tot_torch += k * (fwd + bwd)
        tot_bytes += k * 8 * numel * e
        shape = f"[{n}, {c}, {h}, {w}]"
        print(f"{shape:<20} {k:>3} {r['fwd_us']:>9.1f} {fwd:>10.1f} {r['bwd_us']:>9.1f} {bwd:>10.1f} "
              f"{ours_pct:>10.0f}% {torch_pct:>11.0f}% {speed:>8.2f}x  {fwd_mode}/{bwd_mode}", flush=True)
        rows.append(dict(side="pytorch", shape=r["shape"], count=k, dtype=r["dtype"], layout=r["layout"], fwd_us=fwd,
                         bwd_us=bwd, fwd_mode=fwd_mode, bwd_mode=bwd_mode))
        del x, dz, z, bn
        torch.cuda.empty_cache()
    copy = ours[0]["copy_gbs"] if ours else float("nan")
    print(f"one step's BatchNorm + SiLU: ours {tot_ours / 1e3:.2f} ms ({100 * tot_bytes / (tot_ours * 1e3) / copy:.0f}% "
          f"of copy), PyTorch {tot_torch / 1e3:.2f} ms ({100 * tot_bytes / (tot_torch * 1e3) / copy:.0f}%): "
          f"{tot_torch / tot_ours:.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
