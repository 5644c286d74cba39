#!/usr/bin/env bash
# YOLO26 training step, ours (bench_train) against the PyTorch reference (peer.py) in the same run on this GPU; one
# table with the speed-up over PyTorch's best mode per scale and dtype (required: ≥ 1.5×; see NOTES.md).
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
"$build/bench/train/bench_train" --scales "$scales" --dtypes f32,bf16 --batch "$batch" --imgsz "$imgsz" \
  --steps "$steps" --json "$out/ours.jsonl" ${OURS_ARGS:-}
"${PYTHON:-python3}" "$here/peer.py" --scales "$scales" --modes f32,bf16 --batch "$batch" --imgsz "$imgsz" \
  --steps "$steps" --json "$out/peer.jsonl"
"${PYTHON:-python3}" - "$out" <<'PY' | tee "$out/table.txt"
import json, sys
out = sys.argv[1]
ours = [json.loads(l) for l in open(f"{out}/ours.jsonl")]
peer = [json.loads(l) for l in open(f"{out}/peer.jsonl")]
best = {}
for r in peer:
    best[r["scale"]] = min(best.get(r["scale"], 1e30), r["ms"])
print(f"{'scale':<6}{'dtype':<6}{'ours ms':>10}{'img/s':>9}{'PyTorch best ms':>17}{'speed-up':>10}  required 1.5x")
bad = 0
for r in ours:
    b = best.get(r["scale"])
    s = b / r["ms"] if b else float("nan")
    bad += not (s >= 1.5)
    print(f"{r['scale']:<6}{r['dtype']:<6}{r['ms']:>10.2f}{r['batch'] * 1000 / r['ms']:>9.1f}{b:>17.2f}{s:>9.2f}x  "
          f"{'met' if s >= 1.5 else 'NOT met'}")
sys.exit(1 if bad else 0)
PY
