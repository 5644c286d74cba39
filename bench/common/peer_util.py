"""What the PyTorch peers of the benchmarks share: timing back-to-back calls (CUDA events on the current stream, or
the host clock on the CPU), the median and minimum of repeated measurements, and the JSON lines run.sh reads."""
import json
import statistics
import time

import torch


def time_us(fn, iters, repeats, device):
    """(median, min) microseconds per call of fn over `repeats` measurements of `iters` back-to-back calls."""
    out = []
    for _ in range(repeats):
        if device == "cpu":
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            out.append((time.perf_counter() - t0) * 1e6 / iters)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1000 / iters)
    return statistics.median(out), min(out)


def write_json_lines(path, rows):
    """One JSON object per row (nothing when path is empty)."""
    if path:
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
