#!/usr/bin/env bash
# YOLO26 training step, ours (bench_train) against the PyTorch reference (peer.py) in the same run on this GPU; one
# table: bf16 against PyTorch's best mode (required ≥ 1.5×), f32 against PyTorch's f32 with TF32 off on both sides
# (required ≥ 1.2×), and a TF32 row on both sides (reported); see NOTES.md.
# Build first: cmake --preset default -DVISION_BENCH=ON && cmake --build build --target bench_train
# Usage: bench/train/run.sh [BUILD_DIR] [--scales n,s] [--batch 64] [--imgsz 640] [--steps 10]
# Environment: PYTHON (a CUDA PyTorch; default python3), OUT_DIR (JSON lines and the table; default a temp dir),
# OURS_ARGS (more bench_train options, e.g. --profile: the per-op profile of the step on stderr).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$here/../.." && pwd)/build
if [[ $# -gt 0 && $1 != -* ]]; then build=$1; shift; fi
scales=n,s batch=64 imgsz=640 steps=10
while [[ $# -gt 0 ]]; do
  case $1 in
    --scales) scales=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --imgsz) imgsz=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
out=${OUT_DIR:-$(mktemp -d /tmp/bench_train.XXXXXX)}
mkdir -p "$out"
"$build/bench/train/bench_train" --scales "$scales" --dtypes bf16,f32,tf32 --batch "$batch" --imgsz "$imgsz" \
  --steps "$steps" --json "$out/ours.jsonl" ${OURS_ARGS:-}
"${PYTHON:-python3}" "$here/peer.py" --scales "$scales" --modes bf16,f32,tf32 --batch "$batch" --imgsz "$imgsz" \
  --steps "$steps" --json "$out/peer.jsonl"
"${PYTHON:-python3}" "$here/peer.py" --scales "$scales" --modes bf16 --channels-last --batch "$batch" \
  --imgsz "$imgsz" --steps "$steps" --json "$out/peer_cl.jsonl"
"${PYTHON:-python3}" - "$out" <<'PY' | tee "$out/table.txt"
import json, sys
out = sys.argv[1]
ours = [json.loads(l) for l in open(f"{out}/ours.jsonl")]
peer = [json.loads(l) for l in open(f"{out}/peer.jsonl")] + [json.loads(l) for l in open(f"{out}/peer_cl.jsonl")]
# bf16 against PyTorch's best mode (any dtype, either memory format): required 1.5x; f32 (TF32 off on both sides)
# against PyTorch's f32: required 1.2x; tf32 against PyTorch's tf32: reported.
def peer_ms(scale, dtype):
    ms = [r["ms"] for r in peer if r["scale"] == scale and (dtype is None or r["dtype"] == dtype)]
    return min(ms) if ms else float("nan")
need = {"bf16": (None, 1.5), "f32": ("f32", 1.2), "tf32": ("tf32", None)}
print(f"{'scale':<6}{'dtype':<6}{'ours ms':>10}{'img/s':>9}{'PyTorch ms':>12}  {'against':<12}{'speed-up':>9}  required")
bad = 0
for r in ours:
    against, req = need[r["dtype"]]
    b = peer_ms(r["scale"], against)
    s = b / r["ms"]
    ok = req is None or s >= req
    bad += not ok
    print(f"{r['scale']:<6}{r['dtype']:<6}{r['ms']:>10.2f}{r['batch'] * 1000 / r['ms']:>9.1f}{b:>12.2f}  "
          f"{(against or 'best mode'):<12}{s:>8.2f}x  " + (f"{req}x {'met' if ok else 'NOT met'}" if req else "-"))
sys.exit(1 if bad else 0)
PY
