#!/usr/bin/env python3
"""The library's layers (docs/architecture.md), bottom to top; a source includes only headers of its own layer and of
lower ones. This check reads every #include "vision/..." under src/vision and fails on one that runs upward, or
sideways between two layers of the same floor, or into the CUDA backend's internals (graph/cuda/) from a source that
is not CUDA-specific (those reach the backend through graph/backend.h).

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
    "dist": 2,                 # the ranks of data-parallel training and their collectives (MPI)
    "ops": 3, "eval": 3,       # the built-in ops; metrics
    "track": 3,                # multi-object tracking: Kalman filter, assignment, ByteTrack
    "train": 4,                # optimizers, EMA, schedules, checkpoints
    "models": 5,               # YOLO26: blocks, its ops and kernels, loss, trainer, weights
    "api": 6,                  # the files at the top: vision::Detector, vision::train
}
# Who may include the CUDA backend's own headers (graph/cuda/): the graph itself, CUDA-specific sources (under a
# cuda/ folder or named *_cuda.cpp / *_cuda.h: launchers on the backend's stream) and the detector's GPU letterbox.


def may_reach_cuda_backend(rel, layer):
    name = rel.rsplit("/", 1)[-1]
    return (layer in ("graph", "api") or "/cuda/" in rel or name.endswith(("_cuda.cpp", "_cuda.h")))
INCLUDE = re.compile(r'^\s*#\s*include\s+"vision/([^"]+)"')


def layer_of(path):
    """The layer of a path under src/vision (or of an include written as "vision/...")."""
    first = path.split("/")[0]
    return "api" if "/" not in path and first.endswith((".h", ".cpp")) else first


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    findings = []
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
            elif header.startswith("graph/cuda/") and not may_reach_cuda_backend(rel, src):
                why = "includes the CUDA backend's own header from a source that is not CUDA-specific"
            if why is None:
                continue
            findings.append(f"{rel}:{n}: #include \"vision/{header}\": {why}")
    for f in findings:
        print("check-layers: " + f)
    if findings:
        return 1
    print("check-layers: every include of src/vision keeps the layer order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
