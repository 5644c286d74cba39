#!/usr/bin/env bash
# FlashAttention-2: our kernels (bench_attention) against PyTorch's (peer.py), measured in the same run on this GPU,
# printed as one table (see NOTES.md). Builds nothing: build first with
#   cmake --preset default -DVISION_BENCH=ON && cmake --build build --target bench_attention
# Usage: bench/attention/run.sh [bench_attention options, e.g. --only bf16 --replays 20]
# Environment: BENCH_ATTENTION (the binary; default build/bench/attention/bench_attention), PYTHON (default python3),
# OUT_DIR (where ours.json, peer.json and table.txt go; default a new temporary directory).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${BENCH_ATTENTION:-$root/build/bench/attention/bench_attention}
python=${PYTHON:-python3}
out=${OUT_DIR:-$(mktemp -d /tmp/bench_attention.XXXXXX)}
mkdir -p "$out"

if [[ ! -x "$bin" ]]; then
  echo "run.sh: $bin not found; build it with: cmake --preset default -DVISION_BENCH=ON && cmake --build build --target bench_attention" >&2
  exit 2
fi

"$bin" --json "$out/ours.json" --csv "$out/ours.csv" "$@" >&2
# peer.py takes its shapes from ours.json, so an --only filter given to bench_attention applies to the peers too.
"$python" "$here/peer.py" --shapes-from "$out/ours.json" --json "$out/peer.json" >&2

"$python" - "$out/ours.json" "$out/peer.json" <<'EOF' | tee "$out/table.txt"
import json
import sys

ours = json.load(open(sys.argv[1]))
peer = json.load(open(sys.argv[2]))


def best(key, field):
    """The fastest peer for a shape and a measurement: (µs, name, TFLOP/s), or None."""
    rows = [r for r in peer["results"] if r["key"] == key and r.get(field + "_us")]
    if not rows:
        return None
    r = min(rows, key=lambda r: r[field + "_us"])
    return r[field + "_us"], r["peer"], r.get(field + "_tflops", 0.0)


def us(x):
    return "{:.1f}".format(x) if x else "n/a"


print("FlashAttention-2 on {}: ours ({}) vs the best PyTorch peer ({}) per shape".format(
    ours["device"], ours["implementation"], peer["implementation"]))
print("Times: {}. FLOPs: forward {}, backward {}.".format(
    ours["method"], ours["flops"]["forward"], ours["flops"]["backward"]))
print("speedup = best peer time / our time (> 1: ours is faster).")
print()
head = ("{:<26} {:>5} | {:>9} {:>9} {:<16} {:>7} {:>7} {:>7} | {:>9} {:>9} {:<16} {:>7} {:>7} {:>7}")
print(head.format("shape", "dtype", "ours fwd", "peer fwd", "(peer)", "speedup", "TF/s", "peerTF", "ours f+b",
                  "peer f+b", "(peer)", "speedup", "TF/s", "peerTF"))
print("-" * 164)
for r in ours["results"]:
    key = r["key"]
    shape = key.rsplit("_", 1)[0]
    cells = []
    for field in ("fwd", "fwdbwd"):
        mine = r[field + "_us"]
        b = best(key, field)
        if b:
            cells += [us(mine), us(b[0]), "(" + b[1] + ")", "{:.2f}x".format(b[0] / mine),
                      "{:.1f}".format(r[field + "_tflops"]), "{:.1f}".format(b[2])]
        else:
            cells += [us(mine), "n/a", "", "", "{:.1f}".format(r[field + "_tflops"]), ""]
    print(head.format(shape, r["dtype"], *cells))
EOF
echo "results in $out" >&2
