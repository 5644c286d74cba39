#!/usr/bin/env python3
"""The library's layers (docs/architecture.md), bottom to top; a source includes only headers of its own layer and of
lower ones. This check reads every #include "vision/..." under src/vision and fails on one that runs upward, or
sideways between two layers of the same floor, or into the CUDA backend's internals (graph/cuda/) from a layer that
should reach the backend only through graph/backend.h.

The three crossings issue #28 names are known and listed below; the check fails when a new one appears, and also when a
listed one is gone (so that the list shrinks with the fixes).

  tools/check-layers.py          (exit 1 on a finding)
"""
import pathlib
import re
import sys

# Floor of each layer: a layer may include the layers of lower floors.
FLOORS = {
    "core": 0,
    "cpu": 1, "cuda": 1,       # the CPU (oneDNN, OpenMP) and CUDA (runtime, NVRTC, cuDNN) foundations
    "graph": 2, "data": 2,     # the graph and its backends; images, labels, datasets, the loader
    "ops": 3, "eval": 3,       # the built-in ops; metrics
    "train": 4,                # optimizers, EMA, schedules, checkpoints
    "models": 5,               # YOLO26: blocks, its ops and kernels, loss, trainer, weights
    "detector": 6,             # vision::Detector
}
# Who may include the CUDA backend's own headers (graph/cuda/): the graph, the ops and models that launch on its
# stream, and the detector's GPU letterbox.
CUDA_BACKEND_USERS = {"graph", "ops", "models", "detector"}
# Known crossings (issue #28), as (including file, included header).
KNOWN = {
    ("src/vision/data/dataset.h", "eval/metrics.h"),
    ("src/vision/train/checkpoint.h", "models/yolo/yolo26.h"),
    ("src/vision/train/checkpoint.cpp", "models/yolo/weights.h"),
    ("src/vision/train/ema.cpp", "graph/cuda/cuda_backend.h"),
    ("src/vision/train/optimizer.cpp", "graph/cuda/cuda_backend.h"),
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"vision/([^"]+)"')


def layer_of(path):
    """The layer of a path under src/vision (or of an include written as "vision/...")."""
    first = path.split("/")[0]
    return "detector" if first.startswith("detector.") else first


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    findings, seen = [], set()
    for path in sorted((root / "src/vision").rglob("*")):
        if path.suffix not in (".h", ".cpp", ".cuh"):
            continue
        rel = path.relative_to(root).as_posix()
        src = layer_of(path.relative_to(root / "src/vision").as_posix())
        if src not in FLOORS:
            findings.append(f"{rel}: layer '{src}' has no floor in tools/check-layers.py")
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            header = m.group(1)
            dst = layer_of(header)
            if dst not in FLOORS:
                findings.append(f"{rel}:{n}: includes {header}, of no known layer")
                continue
            why = None
            if dst != src and FLOORS[dst] >= FLOORS[src]:
                why = (f"{src} (floor {FLOORS[src]}) includes {dst} (floor {FLOORS[dst]})"
                       + (": upward" if FLOORS[dst] > FLOORS[src] else ": sideways on one floor"))
            elif header.startswith("graph/cuda/") and src not in CUDA_BACKEND_USERS:
                why = f"{src} includes the CUDA backend's own header (only {', '.join(sorted(CUDA_BACKEND_USERS))} may)"
            if why is None:
                continue
            if (rel, header) in KNOWN:
                seen.add((rel, header))
                continue
            findings.append(f"{rel}:{n}: #include \"vision/{header}\": {why}")
    for rel, header in sorted(KNOWN - seen):
        findings.append(f"{rel} no longer includes {header}: take it off KNOWN in tools/check-layers.py")
    for f in findings:
        print("check-layers: " + f)
    if findings:
        return 1
    print(f"check-layers: every include of src/vision keeps the layer order ({len(KNOWN)} known crossings, issue #28)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
