#!/usr/bin/env bash
# End-to-end training speed (issue #27): `vision train` on a `vision synth` dataset of --images training images at
# --imgsz, for each scale and image cache mode asked, in one run on this machine. One table: the images/s of epochs
# 2…E (epoch 1 fills the cache and warms the kernels) and the fraction of that time the trainer waited for the
# loader's batches (the GPU idles then: every step is synchronous). Validation is off (it is not training speed).
# Required at 640, batch 64, on the H200 host's 16 cores: ≥ 1,000 img/s for YOLO26n with ≤ 10% data wait.
# Build first: cmake --build build --target vision
# Usage: bench/train/run_e2e.sh [BUILD_DIR] [--scales n,s] [--images 2048] [--imgsz 640] [--batch 64] [--epochs 3]
#                               [--cache ram,none] [--workers 16] [--device cuda]
# Environment: OUT_DIR (the dataset, the runs' logs and the table; default a temp dir, removed unless KEEP=1).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$here/../.." && pwd)/build
if [[ $# -gt 0 && $1 != -* ]]; then build=$1; shift; fi
scales=n images=2048 imgsz=640 batch=64 epochs=3 caches=ram,none workers=$(nproc) device=cuda
while [[ $# -gt 0 ]]; do
  case $1 in
    --scales) scales=$2; shift 2 ;;
    --images) images=$2; shift 2 ;;
    --imgsz) imgsz=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --cache) caches=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    *) echo "run_e2e.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
(( epochs >= 2 )) || { echo "run_e2e.sh: --epochs must be at least 2 (epoch 1 is not timed)" >&2; exit 2; }
vision=$build/apps/vision/vision
[[ -x $vision ]] || { echo "run_e2e.sh: $vision is missing: build it first" >&2; exit 2; }
out=${OUT_DIR:-$(mktemp -d /tmp/bench_e2e.XXXXXX)}
mkdir -p "$out"
"$vision" synth --out "$out/data" --train "$images" --val 8 --imgsz "$imgsz" --seed 0 --overwrite > /dev/null
table=$out/table.txt
printf '%-6s %-6s %8s %7s %12s %10s  %s\n' scale cache workers epochs "img/s (2…)" "data wait" "per epoch (img/s, wait)" \
  | tee "$table"
for scale in ${scales//,/ }; do
  for cache in ${caches//,/ }; do
    log=$out/train-$scale-$cache.log
    "$vision" train --data "$out/data/data.yaml" --scale "$scale" --imgsz "$imgsz" --batch "$batch" \
      --epochs "$epochs" --cache "$cache" --workers "$workers" --device "$device" --no-val --close-mosaic 0 \
      --project "$out/runs" --name "$scale-$cache" --exist-ok > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
    # Epoch lines: "epoch   2/3  … 12.3 s (1234 img/s, data wait 5%)".
    python3 - "$log" "$scale" "$cache" "$workers" <<'PY' | tee -a "$table"
import re, sys
log, scale, cache, workers = sys.argv[1:]
rows = [(float(m.group(1)), float(m.group(2)), float(m.group(3)))
        for m in re.finditer(r"^epoch\s+\d+/\d+ .*?([\d.]+) s \((\d+) img/s, data wait (\d+)%\)", open(log).read(), re.M)]
if len(rows) < 2:
    sys.exit(f"run_e2e.sh: fewer than two epoch lines in {log}")
timed = rows[1:]
seconds = sum(r[0] for r in timed)
rate = sum(r[0] * r[1] for r in timed) / seconds
wait = sum(r[0] * r[2] for r in timed) / seconds
each = ", ".join(f"{r[1]:.0f} {r[2]:.0f}%" for r in rows)
print(f"{scale:<6} {cache:<6} {workers:>8} {len(timed):>7} {rate:>12.0f} {wait:>9.0f}%  {each}")
PY
  done
done
[[ -n ${OUT_DIR:-} || ${KEEP:-0} == 1 ]] || rm -rf "$out"
