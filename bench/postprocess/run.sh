#!/usr/bin/env bash
# Decode + end-to-end postprocess: ours (bench_postprocess) and the PyTorch topk/gather peer (peer.py), in the same
# run on this GPU, printed as one table. Build first:
#   cmake --preset default -DVISION_BENCH=ON && cmake --build build --target bench_postprocess
# Usage: bench/postprocess/run.sh [BUILD_DIR] [options for both programs, e.g. --batches 32]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
if [[ $# -gt 0 && $1 != -* ]]; then
  build=$1
  shift
fi
out=${OUT_DIR:-$(mktemp -d /tmp/bench_postprocess.XXXXXX)}
mkdir -p "$out"
"$build/bench/postprocess/bench_postprocess" --json "$out/ours.jsonl" "$@"
"${PYTHON:-python3}" "$here/peer.py" --json "$out/peer.jsonl" "$@"
"${PYTHON:-python3}" - "$out/ours.jsonl" "$out/peer.jsonl" <<'PY' | tee "$out/table.txt"
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1])]
peer = [json.loads(l) for l in open(sys.argv[2])]
print(f"{'batch':>6} | {'ours us':>9} | {'pt eager':>9} {'pt graph':>9} | {'pt best / ours':>14}")
for o in ours:
    p = {r["mode"]: r["us"] for r in peer if r["batch"] == o["batch"]}
    best = min(p.values()) if p else float("nan")
    print(f"{o['batch']:>6} | {o['us']:>9.1f} | {p.get('eager', float('nan')):>9.1f} {p.get('graph', float('nan')):>9.1f}"
          f" | {best / o['us']:>13.2f}x")
PY
echo "results in $out"
