"""What the PyTorch peers of the benchmarks share: timing back-to-back calls (CUDA events on the current stream, or
the host clock on the CPU), the median and minimum of repeated measurements, capturing a call into a CUDA graph, and
the JSON lines run.sh reads."""
import json
import math
import statistics
import time

import torch


def elapsed_us(fn, n, device):
    """Microseconds for n back-to-back calls of fn (CUDA events on the current stream, or the host clock)."""
    if device != "cuda":
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) * 1e6
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0


def time_us(fn, iters, repeats, device):
    """(median, min) microseconds per call of fn over `repeats` measurements of `iters` back-to-back calls."""
    out = [elapsed_us(fn, iters, device) / iters for _ in range(repeats)]
    return statistics.median(out), min(out)


def measure_us(fn, device, warmup, repeats, target_ms, max_iters):
    """(median, min, iters): `warmup` untimed calls, one timed call that sets iters so that a measurement takes about
    target_ms (at most max_iters), then time_us over `repeats` measurements."""
    for _ in range(warmup):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    one = elapsed_us(fn, 1, device)
    iters = min(max(math.ceil(target_ms * 1000.0 / max(one, 1e-3)), 1), max_iters)
    median, minimum = time_us(fn, iters, repeats, device)
    return median, minimum, iters


def capture(fn):
    """(graph, what fn returned while captured): fn captured into a CUDA graph after three warm-up calls on a side
    stream (PyTorch's recipe)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    # Captured on the warm-up stream: autograd binds a leaf's gradient accumulator to the stream it first ran on, and a
    # capture on another stream would wait on that one, which invalidates the capture.
    with torch.cuda.graph(graph, stream=side):
        out = fn()
    torch.cuda.synchronize()
    return graph, out


def write_json_lines(path, rows):
    """One JSON object per row (nothing when path is empty)."""
    if path:
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


def latencies_ms(fn, device, warmup, iters=0, seconds=3.0, min_iters=10, max_iters=10000):
    """Per-call latencies in milliseconds of fn, each call timed on its own and waited for (CUDA events on the current
    stream around it, then a synchronisation; on the CPU the host clock): `warmup` untimed calls, then `iters` timed
    calls, or (iters = 0) calls until about `seconds` have been timed (at least min_iters, at most max_iters). What
    `vision bench` does on its side."""
    for _ in range(warmup):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out, total = [], 0.0
    while len(out) < max_iters:
        if (len(out) >= iters) if iters > 0 else (len(out) >= min_iters and total >= 1000.0 * seconds):
            break
        if device == "cuda":
            start.record()
            fn()
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t0) * 1000.0
        out.append(ms)
        total += ms
    return out


def latency_stats(samples):
    """{median_ms, p90_ms (nearest rank), min_ms, mean_ms, iters} of per-call latencies, as `vision bench` reports."""
    s = sorted(samples)
    n = len(s)
    return {"median_ms": statistics.median(s), "p90_ms": s[math.ceil(0.9 * n) - 1], "min_ms": s[0],
            "mean_ms": sum(s) / n, "iters": n}


def randomize_batchnorm(model, gen):
    """Every BatchNorm2d of model: γ and running variance uniform in [0.5, 1.5), β and running mean in [-0.1, 0.1)
    (bench_util.h's randomize_batchnorm), drawn from the generator gen."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                for t, lo, hi in ((m.weight, 0.5, 1.5), (m.running_var, 0.5, 1.5), (m.bias, -0.1, 0.1),
                                  (m.running_mean, -0.1, 0.1)):
                    t.copy_(torch.rand(t.shape, generator=gen) * (hi - lo) + lo)
