#!/usr/bin/env bash
# YOLO26's PSA Attention block: ours through the graph engine (bench_psa_block, f16 NHWC, both PSA forms) against the
# same block in PyTorch (psa_peer.py: ultralytics' math and SDPA, eager, CUDA-graph replay, torch.compile), measured
# in the same run on this GPU, printed as one table with the issue's check (see NOTES.md, "PSA block"). Builds
# nothing: build first with
#   cmake --preset default -DVISION_BENCH=ON && cmake --build build --target bench_psa_block
# Usage: bench/attention/run_psa.sh [BUILD_DIR] [bench_psa_block options, e.g. --batches 32 --only n_ --repeats 30]
#   BUILD_DIR: the CMake build directory (default: build); the binary is BUILD_DIR/bench/attention/bench_psa_block.
#   The peers take their shapes from our rows (psa_peer.py --shapes-from), so a filter given to ours applies to both.
# Environment: BENCH_PSA_BLOCK (the binary, overrides BUILD_DIR), PYTHON (a Python with PyTorch and CUDA; default
#   python3), PEER_ARGS (extra options for psa_peer.py, e.g. "--compile none" or "--attentions math-ul,sdpa-cudnn"),
#   BREAKDOWN=0 (skip ours' per-step estimate), CHECK=0 (skip the numerical cross-check), CHECK_ARGS (options for both
#   sides of the cross-check, e.g. "--device cpu"), OUT_DIR (where ours.jsonl, peer.jsonl, the check files and
#   table.txt go; default a new temporary directory).
# Exit status: 1 when the required check fails (after printing everything), 0 otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
if [[ $# -gt 0 && $1 != -* ]]; then
  build=$1
  shift
fi
bin=${BENCH_PSA_BLOCK:-$build/bench/attention/bench_psa_block}
python=${PYTHON:-python3}
out=${OUT_DIR:-$(mktemp -d /tmp/bench_psa_block.XXXXXX)}
mkdir -p "$out"
read -r -a peer_args <<<"${PEER_ARGS:-}"
read -r -a check_args <<<"${CHECK_ARGS:-}"
breakdown=()
if [[ ${BREAKDOWN:-1} != 0 ]]; then breakdown=(--breakdown); fi

if [[ ! -x "$bin" ]]; then
  echo "run_psa.sh: $bin not found; build it with:" \
    "cmake --preset default -DVISION_BENCH=ON && cmake --build build --target bench_psa_block" >&2
  exit 2
fi

# Numerical cross-check (small, before the timing): our f16 NHWC output at batch 2 (YOLO26n width, 20x20) in each
# form against the torch block loaded with our state, in float64.
: >"$out/check.txt"
if [[ ${CHECK:-1} != 0 ]]; then
  for form in two_pass one_pass; do
    dump=$out/check_$form.safetensors
    if "$bin" --check-dump "$dump" --scales n --sides 20 --forms "$form" --check-batch 2 "${check_args[@]}" >&2 &&
      "$python" "$here/psa_peer.py" --check-against "$dump" "${check_args[@]}" >>"$out/check.txt"; then
      echo "CHECK $form ok" >>"$out/check.txt"
    else
      echo "CHECK $form FAILED (see above or stderr)" >>"$out/check.txt"
    fi
  done
fi

"$bin" --json "$out/ours.jsonl" "${breakdown[@]}" "$@" >&2 || echo "run_psa.sh: bench_psa_block exited with $?" >&2
if [[ -s "$out/ours.jsonl" ]]; then
  "$python" "$here/psa_peer.py" --json "$out/peer.jsonl" --shapes-from "$out/ours.jsonl" "${peer_args[@]}" >&2 ||
    echo "run_psa.sh: psa_peer.py exited with $?" >&2
fi

set +e
"$python" "$here/psa_table.py" "$out/ours.jsonl" "$out/peer.jsonl" "$out/check.txt" | tee "$out/table.txt"
status=${PIPESTATUS[0]}
if [[ -s "$out/check.txt" ]]; then
  echo >&2
  cat "$out/check.txt" >&2
fi
echo "results in $out" >&2
exit "$status"
