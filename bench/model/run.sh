#!/usr/bin/env bash
# YOLO26 inference end to end — a normalised input on the device to the [B, 300, 6] detections — ours (`vision bench`)
# against the PyTorch reference with its top-k postprocess (peer.py), measured in the same run on this machine, printed
# as one table with the speed-up and the issue's requirement (see NOTES.md). Builds nothing: build the CLI first with
#   cmake --preset default && cmake --build build --target vision_cli
# Usage: bench/model/run.sh [BUILD_DIR] [--device cuda|cpu] [--compile] [--quick] [--scales n,s] [--batches 1,32]
#                           [--imgsz 640] [--seconds S] [--iters N] [--warmup N] [--threads N] [--profile]
#   --device cuda (default): scales n and s, batches 1 and 32, f16; PyTorch eager, channels-last, CUDA-graph replay
#     (NCHW and channels-last). Required: ours not slower than PyTorch's best at each of those four rows.
#   --device cpu: YOLO26n, batch 1, f32; PyTorch eager NCHW and channels-last, and ONNX Runtime (mode
#     "ort": our ONNX export of the same model, npm onnxruntime-node's CPU library), all on --threads (reported, no requirement);
#     ours also in int8 (rows "n i8": the same weights through vision export --int8, calibrated on 16 synth images).
#   --threads N (--device cpu): every side on N threads (ours: vision bench --threads; PyTorch: set_num_threads; ONNX
#     Runtime: intra-op threads); default 2 (this project's CI machine), e.g. --threads $(nproc) on a larger host.
#   --profile: also each side's per-op profile, per scale and batch, into OUT_DIR: ours (`vision bench --profile`, every
#     step run eagerly and timed apart) in profile_ours_<scale>.txt, ONNX Runtime's (its profiler, summed per op kind by
#     ort_profile.py) in profile_ort_<scale>_b<batch>.txt (--device cpu). Profiled runs are not the table's.
#   --compile: also torch.compile (channels-last, captured and replayed), run as its own peer.py command (slow).
#   --quick: a logic check of everything at 64x64, batches 1 and 2, YOLO26n, 3 calls per row.
# Environment: PYTHON (a Python with PyTorch: CUDA for --device cuda; default python3), VISION (the CLI binary,
# overrides BUILD_DIR), OUT_DIR (where ours_*.jsonl, peer*.jsonl and table.txt go; default a new temporary directory).
# Exit status: 1 when a required row is missed or missing (after printing everything), 0 otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
if [[ $# -gt 0 && $1 != -* ]]; then
  build=$1
  shift
fi
device=cuda
compile=0
quick=0
scales=
batches=
imgsz=640
seconds=
iters=0
warmup=10
threads=2
profile=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --device) device=$2; shift 2 ;;
    --compile) compile=1; shift ;;
    --quick) quick=1; shift ;;
    --scales) scales=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --imgsz) imgsz=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --profile) profile=1; shift ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case $device in
  cuda) dtype=f16; scales=${scales:-n,s}; batches=${batches:-1,32}; seconds=${seconds:-3}; modes=eager,eager-cl,graph,graph-cl ;;
  cpu) dtype=f32; scales=${scales:-n}; batches=${batches:-1}; seconds=${seconds:-20}; modes=eager,eager-cl ;;
  *) echo "run.sh: --device takes cuda or cpu" >&2; exit 2 ;;
esac
if [[ $quick == 1 ]]; then
  scales=n batches=1,2 imgsz=64 iters=3 warmup=2
fi
bin=${VISION:-$build/apps/vision/vision}
py=${PYTHON:-python3}
out=${OUT_DIR:-$(mktemp -d /tmp/bench_model.XXXXXX)}
mkdir -p "$out"
if [[ ! -x "$bin" ]]; then
  echo "run.sh: $bin not found; build it with: cmake --preset default && cmake --build build --target vision_cli" >&2
  exit 2
fi
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]]; then commit="$commit+dirty"; fi
timing=(--warmup "$warmup" --seconds "$seconds")
[[ $iters != 0 ]] && timing+=(--iters "$iters")
[[ $threads =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --threads takes a positive number, got '$threads'" >&2; exit 2; }
cpu_threads=()
[[ $device == cpu ]] && cpu_threads=(--threads "$threads")

IFS=, read -r -a scale_list <<<"$scales"
for s in "${scale_list[@]}"; do
  "$bin" bench --scale "$s" --batch "$batches" --imgsz "$imgsz" --device "$device" --dtype "$dtype" "${timing[@]}" \
    "${cpu_threads[@]}" --json "$out/ours_$s.jsonl" >&2
  if [[ $profile == 1 ]]; then
    "$bin" bench --scale "$s" --batch "$batches" --imgsz "$imgsz" --device "$device" --dtype "$dtype" --warmup 2 \
      --iters 3 "${cpu_threads[@]}" --profile > /dev/null 2> "$out/profile_ours_$s.txt"
    echo "run.sh: our per-op profile in $out/profile_ours_$s.txt" >&2
  fi
done
"$py" "$here/peer.py" --device "$device" --scales "$scales" --batches "$batches" --imgsz "$imgsz" --dtype "$dtype" \
  --modes "$modes" "${timing[@]}" "${cpu_threads[@]}" --json "$out/peer.jsonl" >&2
# On the CPU, ONNX Runtime (npm onnxruntime-node's CPU library, --threads, every graph optimisation) runs our ONNX
# export of the same model (vision init's weights, vision export --format onnx at this size and batch) as a peer.
if [[ $device == cpu ]]; then
  ort_modules=${VISION_ORT_NODE_MODULES:-$HOME/.cache/vision-peers/node_modules}
  if command -v node > /dev/null && [[ -d $ort_modules/onnxruntime-node ]]; then
    IFS=, read -r -a batch_list <<<"$batches"
    for s in "${scale_list[@]}"; do
      "$bin" init --scale "$s" --out "$out/yolo26$s.safetensors" > /dev/null
      for b in "${batch_list[@]}"; do
        "$bin" export --model "$out/yolo26$s.safetensors" --format onnx --out "$out/yolo26${s}_b$b.onnx" \
          --imgsz "$imgsz" --batch "$b" > /dev/null
        "$py" -c "import numpy as np, sys; np.random.default_rng(0).random(($b, 3, $imgsz, $imgsz), np.float32).tofile(sys.argv[1])" \
          "$out/input_b$b.bin"
        reps=$([[ $iters != 0 ]] && echo "$iters" || echo 30)
        NODE_PATH=$ort_modules node "$root/tests/onnx/ort_run.js" "$out/yolo26${s}_b$b.onnx" "$out/input_b$b.bin" \
          "$b,3,$imgsz,$imgsz" f32 "$out/ort_out" "$threads" "$reps" |
          "$py" -c "import json, sys; r = json.loads(sys.stdin.read()); b = $b
print(json.dumps({'impl': 'onnxruntime', 'mode': 'ort', 'scale': '$s', 'batch': b, 'median_ms': r['median_ms'],
                  'p90_ms': r['p90_ms'], 'img_s': 1000.0 * b / r['median_ms'], 'version': r['version']}))" \
          >> "$out/peer_ort.jsonl"
        if [[ $profile == 1 ]]; then
          rm -f "$out/ort_trace_${s}_b$b"_*.json
          ORT_PROFILE=$out/ort_trace_${s}_b$b NODE_PATH=$ort_modules node "$root/tests/onnx/ort_run.js" \
            "$out/yolo26${s}_b$b.onnx" "$out/input_b$b.bin" "$b,3,$imgsz,$imgsz" f32 "$out/ort_out" "$threads" 5 > /dev/null
          "$py" "$here/ort_profile.py" "$out/ort_trace_${s}_b$b"_*.json > "$out/profile_ort_${s}_b$b.txt"
          echo "run.sh: ONNX Runtime's per-op profile in $out/profile_ort_${s}_b$b.txt" >&2
        fi
      done
    done
  else
    echo "run.sh: no ONNX Runtime peer (node and $ort_modules/onnxruntime-node; tools/install-deps.sh --test installs it)" >&2
  fi
  # Ours in int8: the same initial weights, calibrated (vision export --int8) on 16 images of a vision synth set.
  "$bin" synth --out "$out/calib" --train 16 --val 1 --imgsz "$imgsz" --seed 0 > /dev/null
  for s in "${scale_list[@]}"; do
    [[ -f $out/yolo26$s.safetensors ]] || "$bin" init --scale "$s" --out "$out/yolo26$s.safetensors" > /dev/null
    "$bin" export --int8 --model "$out/yolo26$s.safetensors" --data "$out/calib/data.yaml" --calib-images 16 \
      --imgsz "$imgsz" --out "$out/yolo26${s}_int8.safetensors" > /dev/null
    "$bin" bench --model "$out/yolo26${s}_int8.safetensors" --batch "$batches" --imgsz "$imgsz" --device cpu \
      "${timing[@]}" "${cpu_threads[@]}" --json "$out/ours_int8_$s.jsonl" >&2
  done
fi
if [[ $compile == 1 ]]; then
  "$py" "$here/peer.py" --device "$device" --scales "$scales" --batches "$batches" --imgsz "$imgsz" --dtype "$dtype" \
    --compile "${timing[@]}" --json "$out/peer_compile.jsonl" >&2 || echo "run.sh: peer.py --compile exited with $?" >&2
fi

set +e
"$py" - "$commit" "$quick" "$out"/ours_*.jsonl "$out"/peer*.jsonl <<'EOF' | tee "$out/table.txt"
import json
import sys

commit, quick, paths = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
ours, peer, metas = [], [], []
for path in paths:
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        if r.get("kind") == "meta":
            metas.append(r)
        elif r.get("impl") == "ours":
            ours.append(r)
        else:
            peer.append(r)
if not ours:
    print("run.sh: no rows from vision bench")
    sys.exit(1)
MODES = ["eager", "eager-cl", "graph", "graph-cl", "compile-cl", "ort"]
modes = [m for m in MODES if any(p["mode"] == m for p in peer)]
o0, meta = ours[0], (metas[0] if metas else {})
device = o0["device"]
print("YOLO26 inference at {}x{}, {}, on {} (commit {}): ours (vision bench, {}) vs {} (tools/reference model, "
      "BatchNorm fused, one-to-one head, top-k postprocess)".format(
          o0["imgsz"][0], o0["imgsz"][1], o0["dtype"], o0["device_name"], commit,
          "CUDA-graph replay, f16 NHWC" if device == "cuda" and o0["dtype"] == "f16" else
          "CUDA-graph replay, {} {}".format(o0["dtype"], o0["layout"]) if device == "cuda" else
          "{} {}".format(o0["dtype"], o0["layout"]),
          meta.get("implementation", "PyTorch") + (" on " + meta["device_name"] if device == "cpu" and meta else "")))
print("latency per call, input {} -> detections [B, 300, 6] ready: median/p90 ms; img/s = batch / median; "
      "speed-up = best peer median (PyTorch, ONNX Runtime on the CPU) / ours".format("on the device" if device == "cuda" else "in host memory"))
print()
head = "{:<5} {:>5} | {:>17} {:>9} | " + " ".join("{:>17}" for _ in modes) + " | {:>10} {:<11} {:>9} | {:>8} | {}"
print(head.format("scale", "batch", "ours ms", "img/s", *modes, "best ms", "(mode)", "img/s", "speed-up", "required"))
print("-" * (68 + 18 * len(modes) + 18))


def cell(r):
    if r is None:
        return "-"
    if r.get("median_ms") is None:
        return "failed"
    return "{:.3f}/{:.3f}".format(r["median_ms"], r["p90_ms"])


missed = False
notes = []
for o in sorted(ours, key=lambda r: ("nsmlx".index(r["scale"]), r["batch"], r.get("int8", False))):
    key = (o["scale"], o["batch"])
    rows = {p["mode"]: p for p in peer if (p["scale"], p["batch"]) == key}
    timed = [p for p in rows.values() if p.get("median_ms") is not None]
    best = min(timed, key=lambda p: p["median_ms"]) if timed else None
    required = (not o.get("int8") and device == "cuda" and o["dtype"] == "f16" and o["scale"] in ("n", "s") and o["batch"] in (1, 32)
                and tuple(o["imgsz"]) == (640, 640) and not quick)
    if best is None:
        verdict = "MISSING (no PyTorch row)" if required else "-"
        missed |= required
    elif required:
        ok = o["median_ms"] <= best["median_ms"]
        verdict = "met" if ok else "MISSED"
        missed |= not ok
    else:
        verdict = "reported" + (" (quick: sizes not the issue's)" if quick else "")
    print(head.format(
        o["scale"] + (" i8" if o.get("int8") else ""), o["batch"], cell(o), "{:.1f}".format(o["img_s"]), *[cell(rows.get(m)) for m in modes],
        "{:.3f}".format(best["median_ms"]) if best else "-", "(" + best["mode"] + ")" if best else "",
        "{:.1f}".format(best["img_s"]) if best else "-",
        "{:.2f}x".format(best["median_ms"] / o["median_ms"]) if best else "-", verdict))
    if device == "cuda" and not o.get("graph_replayed", False):
        notes.append("ours {}{} b{}: the plan did not replay a CUDA graph".format("YOLO26", o["scale"], o["batch"]))
    for m, p in rows.items():
        if p.get("error"):
            notes.append("pytorch {} {} b{}: {}".format(m, o["scale"], o["batch"], p["error"][:200]))
for m in metas:
    for scale, c in (m.get("fold_check") or {}).items():
        if not (c["fold_rel_err"] <= 1e-4 and c["postprocess_abs_err"] <= 1e-3):
            notes.append("peer check failed for {}: {}".format(scale, c))
if metas:
    checked = sorted({s for m in metas for s in (m.get("fold_check") or {})})
    print()
    print("peer: {}{}; its checks at 64x64 f32 (BatchNorm fold vs the unfused model, batched postprocess vs the "
          "reference's) for {}: {}".format(meta.get("implementation"),
                                          ", cuDNN {}".format(meta["cudnn"]) if meta.get("cudnn") else "",
                                          ",".join(checked), "FAILED" if any("peer check" in n for n in notes)
                                          else "passed"))
for n in notes:
    print("  note: " + n)
if device == "cuda":
    print("requirement (issue #14): ours not slower than PyTorch's best at YOLO26n and YOLO26s f16, batch 1 and 32: "
          + ("MISSED" if missed else "met"))
sys.exit(1 if missed else 0)
EOF
status=${PIPESTATUS[0]}
echo "results in $out" >&2
exit "$status"
