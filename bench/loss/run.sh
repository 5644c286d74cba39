#!/usr/bin/env bash
# YOLO26 E2ELoss + both assigners + backward: ours (bench_loss) and the PyTorch reference (peer.py) on one batch that
# peer.py makes, timed in the same run on this GPU, printed as one table with the speed-up (required: >= 10x). Build
# first:
#   cmake --preset default -DVISION_BENCH=ON && cmake --build build --target bench_loss
# Usage: bench/loss/run.sh [BUILD_DIR] [--device cuda|cpu] [--quick] [--batch N] [--size PX] [--classes N]
#                          [--min-boxes N] [--max-boxes N] [--rows M] [--seed S]
#   --device cpu --quick: a smoke test of both sides on the CPU (batch 2 of 160x160, 8 classes).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
if [[ $# -gt 0 && $1 != -* ]]; then
  build=$1
  shift
fi
device=cuda
make_args=()
peer_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --device) device=$2; shift 2 ;;
    --quick) make_args+=(--quick); peer_args+=(--quick); shift ;;
    --batch|--size|--classes|--min-boxes|--max-boxes|--rows|--seed) make_args+=("$1" "$2"); shift 2 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
py=${PYTHON:-python3}
out=${OUT_DIR:-$(mktemp -d /tmp/bench_loss.XXXXXX)}
mkdir -p "$out"
"$py" "$here/peer.py" --make-inputs "$out/inputs.safetensors" "${make_args[@]}"
"$build/bench/loss/bench_loss" --inputs "$out/inputs.safetensors" --device "$device" --json "$out/ours.jsonl"
"$py" "$here/peer.py" --inputs "$out/inputs.safetensors" --device "$device" --json "$out/peer.jsonl" "${peer_args[@]}"
"$py" - "$out/ours.jsonl" "$out/peer.jsonl" <<'PY' | tee "$out/table.txt"
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1])]
peer = [json.loads(l) for l in open(sys.argv[2])]
o = ours[0]
print(f"E2ELoss + both assigners + backward: batch {o['batch']}, {o['anchors']} anchors, {o['classes']} classes, "
      f"{o['boxes']} boxes (positives o2m {o['positives'][0]}, o2o {o['positives'][1]}), f32 on {o['device']}")
print(f"{'':<16} {'ms':>9} {'min ms':>9} {'loss':>14} {'vs ours':>9} {'/ ours':>8}")
print(f"{'ours (eager)':<16} {o['us'] / 1e3:>9.3f} {o['min_us'] / 1e3:>9.3f} {o['loss']:>14.6f} {'':>9} {'':>8}")
for p in peer:
    diff = abs(p["loss"] - o["loss"]) / abs(p["loss"])
    print(f"{'pytorch (' + p['mode'] + ')':<16} {p['us'] / 1e3:>9.3f} {p['min_us'] / 1e3:>9.3f} {p['loss']:>14.6f} "
          f"{diff:>9.1e} {p['us'] / o['us']:>7.1f}x")
if peer:
    best = min(p["us"] for p in peer)
    if o["device"] == "cuda":
        verdict = "meets" if best >= 10 * o["us"] else "misses"
        verdict += " the >= 10x requirement"
    else:
        verdict = "a CPU smoke test: the >= 10x requirement is for the GPU"
    print(f"speed-up over the best PyTorch row: {best / o['us']:.1f}x ({verdict})")
PY
echo "results in $out"
