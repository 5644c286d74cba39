#!/usr/bin/env bash
# Conv-BN-SiLU/C2f stack: our graph engine (bench_graph) against the same stack in PyTorch (peer.py), measured in the
# same run on this GPU, printed as one table with the issue's checks (see NOTES.md). Builds nothing: build first with
#   cmake --preset default -DVISION_BENCH=ON && cmake --build build --target bench_graph
# Usage: bench/graph/run.sh [BUILD_DIR] [options for both programs, e.g. --batches 32 --only infer --repeats 30]
#   BUILD_DIR: the CMake build directory (default: build); the binary is BUILD_DIR/bench/graph/bench_graph.
# Environment: BENCH_GRAPH (the binary, overrides BUILD_DIR), PYTHON (a Python with PyTorch and CUDA; default
#   python3), OURS_ARGS / PEER_ARGS (extra options for one side only, e.g. PEER_ARGS="--compile none" or
#   OURS_ARGS="--describe"), CHECK=0 (skip the numerical cross-check), CHECK_ARGS (options for both sides of the
#   cross-check, e.g. "--device cpu --size 64"), OUT_DIR (where ours.jsonl, peer.jsonl, the
#   check files and table.txt go; default a new temporary directory).
# Exit status: 1 when a required check fails (after printing everything), 0 otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
if [[ $# -gt 0 && $1 != -* ]]; then
  build=$1
  shift
fi
bin=${BENCH_GRAPH:-$build/bench/graph/bench_graph}
python=${PYTHON:-python3}
out=${OUT_DIR:-$(mktemp -d /tmp/bench_graph.XXXXXX)}
mkdir -p "$out"
read -r -a ours_args <<<"${OURS_ARGS:-}"
read -r -a peer_args <<<"${PEER_ARGS:-}"
read -r -a check_args <<<"${CHECK_ARGS:-}"

if [[ ! -x "$bin" ]]; then
  echo "run.sh: $bin not found; build it with: cmake --preset default -DVISION_BENCH=ON && cmake --build build --target bench_graph" >&2
  exit 2
fi

# Numerical cross-check (small, before the timing): our state, input, output, loss and gradients at batch 2 against
# the torch stack loaded with the same state; f32 NCHW, and f16 NHWC (the format pass).
: >"$out/check.txt"
if [[ ${CHECK:-1} != 0 ]]; then
  for fmt in f32_nchw f16_nhwc; do
    dump=$out/check_$fmt.safetensors
    if "$bin" --check-dump "$dump" --formats "$fmt" --inputs native --batches 2 "${check_args[@]}" >&2 &&
      "$python" "$here/peer.py" --check-against "$dump" "${check_args[@]}" >>"$out/check.txt"; then
      echo "CHECK $fmt ok" >>"$out/check.txt"
    else
      echo "CHECK $fmt FAILED (see above or stderr)" >>"$out/check.txt"
    fi
  done
fi

"$bin" --json "$out/ours.jsonl" "$@" "${ours_args[@]}" >&2 || echo "run.sh: bench_graph exited with $?" >&2
"$python" "$here/peer.py" --json "$out/peer.jsonl" "$@" "${peer_args[@]}" >&2 || echo "run.sh: peer.py exited with $?" >&2

set +e
"$python" - "$out/ours.jsonl" "$out/peer.jsonl" "$out/check.txt" <<'EOF' | tee "$out/table.txt"
import json
import os
import sys


def load(path):
    meta, rows = {}, []
    if not os.path.exists(path):
        return meta, rows
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            if r.get("kind") == "meta":
                meta = r
            else:
                rows.append(r)
    return meta, rows


ours_meta, ours = load(sys.argv[1])
peer_meta, peer = load(sys.argv[2])
check_text = open(sys.argv[3]).read() if os.path.exists(sys.argv[3]) else ""


def ms(x):
    return "{:.3f}".format(x) if x is not None else "n/a"


def peer_rows(key, variant=None):
    return [r for r in peer
            if r["key"] == key and r.get("ms") is not None and (variant is None or r["variant"] == variant)]


def best_peer(pred):
    rows = [r for r in peer if r.get("ms") is not None and pred(r)]
    return min(rows, key=lambda r: r["ms"]) if rows else None


gflops = ours_meta.get("gflops_per_image") or peer_meta.get("gflops_per_image") or 0.0
print("Conv-BN-SiLU/C2f stack at {0}x{0} on {1}: ours ({2}) vs PyTorch ({3})".format(
    ours_meta.get("size", peer_meta.get("size")), ours_meta.get("device", peer_meta.get("device")),
    ours_meta.get("implementation", "n/a"), peer_meta.get("implementation", "n/a")))
print("{:.3f} GFLOP/image forward (training step counted as 3x), {} parameters; times: {}".format(
    gflops, ours_meta.get("parameters"), ours_meta.get("method", peer_meta.get("method"))))
print("ms per batch; speedup = best PyTorch time / ours (> 1: ours is faster). Inference: BatchNorm folded.")
print()
head = "{:<33} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>9} | {:>9} {:<14} {:>7}"
print(head.format("row (mode_format_input_batch)", "ours ms", "img/s", "TF/s", "pt eager", "pt graph", "pt compl",
                  "pt best", "(peer)", "speedup"))
print("-" * 130)
keys = [r["key"] for r in ours] + [r["key"] for r in peer if r["key"] not in {o["key"] for o in ours}]
seen = set()
for key in keys:
    if key in seen:
        continue
    seen.add(key)
    o = next((r for r in ours if r["key"] == key), None)
    mine = o.get("ms") if o else None
    batch = (o or next(r for r in peer if r["key"] == key))["batch"]
    mode = key.split("_", 1)[0]
    tf = gflops * batch * (3 if mode == "train" else 1) / mine if mine else None

    def variant_ms(v):
        rows = peer_rows(key, v)
        return min(r["ms"] for r in rows) if rows else None

    b = min(peer_rows(key), key=lambda r: r["ms"]) if peer_rows(key) else None
    cells = [ms(mine), "{:.1f}".format(batch * 1000.0 / mine) if mine else "n/a", "{:.1f}".format(tf) if tf else "",
             ms(variant_ms("eager")), ms(variant_ms("graph")), ms(variant_ms("compile+graph")),
             ms(b["ms"]) if b else "n/a", "(" + b["variant"] + ")" if b else "",
             "{:.2f}x".format(b["ms"] / mine) if b and mine else ""]
    print(head.format(key, *cells))
    if o and o.get("error"):
        print("    ours: " + o["error"][:200])
    not_replayed = mode == "infer" and o is not None and o.get("graph_replayed") is False
    if o and o.get("ms") is not None and (o.get("finite") is False or not_replayed):
        print("    ours: " + ("non-finite output " if o.get("finite") is False else "") +
              ("(the plan did not replay a CUDA graph)" if o.get("graph_replayed") is False else ""))
errors = sorted({(r["variant"], r["error"]) for r in peer if r.get("error")})
for v, e in errors:
    print("    pytorch {}: {}".format(v, e[:200]))

print()
print("Checks:")
failed_required = False


def check(required, ok, text):
    global failed_required
    tag = "PASS" if ok else ("FAIL" if ok is False else "N/A ")
    print("  {} {}{}".format(tag, "[required] " if required else "", text))
    if required and ok is not True:
        failed_required = True


o32 = next((r for r in ours if r["key"] == "infer_f16_nhwc_in-native_b32"), None)
b32 = best_peer(lambda r: r["mode"] == "infer" and r["format"] == "f16_nhwc" and r["batch"] == 32)
if o32 and o32.get("ms") is not None and b32:
    check(True, o32["ms"] <= b32["ms"],
          "ours f16 NHWC inference, batch 32 ({:.3f} ms) <= PyTorch's best f16 at batch 32 ({:.3f} ms, {} input {})"
          .format(o32["ms"], b32["ms"], b32["variant"], b32["input"]))
else:
    check(True, None, "ours f16 NHWC inference at batch 32 vs PyTorch's best f16: a row is missing or failed")
o32c = next((r for r in ours if r["key"] == "infer_f16_nhwc_in-f32_nchw_b32"), None)
p32c = best_peer(lambda r: r["key"] == "infer_f16_nhwc_in-f32_nchw_b32")
if o32c and o32c.get("ms") is not None and p32c:
    check(False, o32c["ms"] <= p32c["ms"],
          "(info) with an f32 NCHW input converted inside: ours {:.3f} ms, PyTorch graph {:.3f} ms".format(
              o32c["ms"], p32c["ms"]))
for batch in sorted({r["batch"] for r in ours if r["mode"] == "train"} | {32}):
    bf = next((r for r in ours if r["key"] == "train_bf16_nhwc_in-native_b{}".format(batch)), None)
    f32 = next((r for r in ours if r["key"] == "train_f32_nchw_in-native_b{}".format(batch)), None)
    required = batch == 32
    if bf and f32 and bf.get("ms") is not None and f32.get("ms") is not None:
        check(required, bf["ms"] < f32["ms"], "ours bf16 NHWC training step, batch {} ({:.3f} ms) < ours f32 NCHW "
              "({:.3f} ms): {:.2f}x".format(batch, bf["ms"], f32["ms"], f32["ms"] / bf["ms"]))
    else:
        check(required, None, "ours bf16 vs f32 training step, batch {}: a row is missing or failed".format(batch))
if ours_meta and peer_meta:
    same = ours_meta.get("state") == peer_meta.get("state")
    check(False, same, "the same stack on both sides: state keys and shapes equal ({} entries, {} parameters)".format(
        len(ours_meta.get("state", {})), ours_meta.get("parameters")))
    check(False, peer_meta.get("fold_check_ok"), "PyTorch's BatchNorm fold reproduces the unfolded model (rel. err "
          "{:.1e})".format(peer_meta.get("fold_check_rel_err", float("nan"))))
for line in check_text.splitlines():
    if line.startswith("CHECK "):
        parts = line.split()
        check(False, parts[2] == "ok", "numerical cross-check at batch 2, {}: ours vs torch with our state "
              "(output, loss, gradients; details in check.txt)".format(parts[1]))
sys.exit(1 if failed_required else 0)
EOF
status=${PIPESTATUS[0]}
if [[ -s "$out/check.txt" ]]; then
  echo >&2
  cat "$out/check.txt" >&2
fi
echo "results in $out" >&2
exit "$status"
