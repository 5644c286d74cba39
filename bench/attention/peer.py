#!/usr/bin/env python3
"""PyTorch peers of bench_attention (NOTES.md): the same attention problems, timed the same way.

Peers, per shape and dtype:
  sdpa-flash, sdpa-efficient, sdpa-cudnn, sdpa-math: torch.nn.functional.scaled_dot_product_attention with one
      backend forced through torch.nn.attention.sdpa_kernel(SDPBackend.X);
  matmul: softmax(scale * q @ k^T) @ v written out (two matmuls and a softmax).
Forward runs on inputs that need no gradient (the peer's cheapest forward); forward+backward runs the forward on
inputs that need gradients and torch.autograd.grad(o, (q, k, v), grad_o) (no .grad accumulation). Each measurement:
eager warm-up on a side stream, then `iters` iterations captured into one torch.cuda.CUDAGraph (iters chosen so that a
replay takes ~2 ms), replayed `replays` times with CUDA events around each replay; the median per iteration is
reported. A backend that cannot run a shape (flash needs d_v == d, for instance) is reported as n/a with the reason.

  python3 bench/attention/peer.py --json peer.json [--shapes-from ours.json] [--only TEXT]
"""
import argparse
import json
import math
import statistics
import sys
import warnings


def default_shapes():
    """The shapes of bench_attention.cpp (default_shapes()), in its key format."""
    shapes = []
    for dtype in ("f16", "bf16"):
        for b in (1, 16, 64):
            for h in (2, 4):
                for n in (400, 1600):
                    shapes.append(dict(B=b, H=h, N=n, d=32, dv=64, dtype=dtype))
    for n in (1024, 4096):
        for d in (64, 128):
            shapes.append(dict(B=8, H=16, N=n, d=d, dv=d, dtype="bf16"))
    for s in shapes:
        s["key"] = "B{B}_H{H}_N{N}_d{d}_dv{dv}_{dtype}".format(**s)
    return shapes


def flops(s):
    """Matmul FLOPs, as bench_attention counts them: forward 2*BH*N*N*(d+dv), backward 2*BH*N*N*(3d+2dv)."""
    base = 2.0 * s["B"] * s["H"] * s["N"] * s["N"]
    fwd = base * (s["d"] + s["dv"])
    return fwd, fwd + base * (3 * s["d"] + 2 * s["dv"])


def time_graph(torch, fn, replays, min_iters):
    """Median microseconds per call of fn, from CUDA-graph replays timed with events."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn()
    e1.record()
    e1.synchronize()
    eager_ms = max(e0.elapsed_time(e1), 1e-3)
    iters = min(max(math.ceil(2.0 / eager_ms), min_iters), 200)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        e0.record()
        graph.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0 / iters)
    del graph
    return statistics.median(times), min(times), iters


def peers(torch):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(backend):
        def run(q, k, v, scale):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, scale=scale)
        return run

    def matmul(q, k, v, scale):
        p = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, dim=-1)
        return torch.matmul(p, v)

    return [
        ("sdpa-flash", sdpa(SDPBackend.FLASH_ATTENTION)),
        ("sdpa-efficient", sdpa(SDPBackend.EFFICIENT_ATTENTION)),
        ("sdpa-cudnn", sdpa(SDPBackend.CUDNN_ATTENTION)),
        ("sdpa-math", sdpa(SDPBackend.MATH)),
        ("matmul", matmul),
    ]


def short(e):
    msg = str(e).strip().splitlines()
    return (type(e).__name__ + ": " + (msg[0] if msg else "")).strip()[:200]


def run_shape(torch, s, attn, replays, min_iters):
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[s["dtype"]]
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, device="cuda", dtype=dtype, generator=gen) * 2 - 1

    b, h, n, d, dv = s["B"], s["H"], s["N"], s["d"], s["dv"]
    q, k, v, go = rand(b, h, n, d), rand(b, h, n, d), rand(b, h, n, dv), rand(b, h, n, dv)
    scale = 1.0 / math.sqrt(d)
    out = {"key": s["key"]}
    try:
        with torch.no_grad():
            attn(q, k, v, scale)  # fails here, outside any capture, when the backend cannot run the shape
            out["fwd_us"], out["fwd_min_us"], out["fwd_iters"] = time_graph(
                torch, lambda: attn(q, k, v, scale), replays, min_iters)
        qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))

        def fwd_bwd():
            o = attn(qg, kg, vg, scale)
            return torch.autograd.grad(o, (qg, kg, vg), go)

        fwd_bwd()
        out["fwdbwd_us"], out["fwdbwd_min_us"], out["fwdbwd_iters"] = time_graph(torch, fwd_bwd, replays, min_iters)
    except Exception as e:  # noqa: BLE001 -- any failure of a backend is reported, not fatal
        out["error"] = short(e)
        torch.cuda.synchronize()
    finally:
        torch.cuda.empty_cache()
    f_fwd, f_all = flops(s)
    if "fwd_us" in out:
        out["fwd_tflops"] = f_fwd / out["fwd_us"] * 1e-6
    if "fwdbwd_us" in out:
        out["fwdbwd_tflops"] = f_all / out["fwdbwd_us"] * 1e-6
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the results here (run.sh reads them)")
    ap.add_argument("--shapes-from", help="take the shapes from bench_attention's --json output")
    ap.add_argument("--only", default="", help="run only the shapes whose key contains this text")
    ap.add_argument("--peers", default="", help="comma-separated subset of peers (default: all)")
    ap.add_argument("--replays", type=int, default=15)
    ap.add_argument("--min-iters", type=int, default=5)
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("peer.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    warnings.filterwarnings("ignore")

    if args.shapes_from:
        with open(args.shapes_from) as f:
            shapes = [{k: r[k] for k in ("key", "B", "H", "N", "d", "dv", "dtype")} for r in json.load(f)["results"]]
    else:
        shapes = default_shapes()
    shapes = [s for s in shapes if args.only in s["key"]]
    chosen = [p for p in peers(torch) if not args.peers or p[0] in args.peers.split(",")]

    results = []
    print("PyTorch {} peers on {}: median of {} CUDA-graph replays, per iteration".format(
        torch.__version__, torch.cuda.get_device_name(), args.replays))
    print("{:<28} {:<15} {:>10} {:>12}  {}".format("shape", "peer", "fwd us", "fwd+bwd us", "note"))
    for s in shapes:
        for name, attn in chosen:
            r = run_shape(torch, s, attn, args.replays, args.min_iters)
            r["peer"] = name
            results.append(r)
            fmt = lambda x: "{:.1f}".format(x) if x is not None else "n/a"  # noqa: E731
            print("{:<28} {:<15} {:>10} {:>12}  {}".format(
                s["key"], name, fmt(r.get("fwd_us")), fmt(r.get("fwdbwd_us")), r.get("error", "")), flush=True)

    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "implementation": "PyTorch " + torch.__version__,
                "device": torch.cuda.get_device_name(),
                "method": "CUDA-graph replays (median of {}), CUDA events, per iteration".format(args.replays),
                "results": results,
            }, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
