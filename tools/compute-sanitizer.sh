#!/usr/bin/env bash
# On a GPU host: runs the GPU kernels' tests (the `gpu` ctest label's suites that launch our kernels) under each of
# compute-sanitizer's tools — memcheck, racecheck, initcheck, synccheck — and fails on any finding. Logs go to $OUT
# (default gpu-logs/compute-sanitizer/). Build the default preset first (tools/gpu-host-check.sh does).
#   tools/compute-sanitizer.sh [GTEST_FILTER] [TOOL…]
# The default filter is every suite of our kernels and ops on the GPU; each tool's run is bounded by
# VISION_SANITIZER_TIMEOUT seconds (default 540, under the GPU host's 10-minute calls: run one tool a call there).
set -uo pipefail
cd "$(dirname "$0")/.."
[ -f .gpu-host/env.sh ] && source .gpu-host/env.sh
# The tests that hide the GPU from a child process (…WithoutGpu…, …WithoutAGpu…) are left out: under the sanitizer
# the child sees its injection library and not the plain driver they expect.
filter=${1:-'*Kernels*:*Gpu*:CudnnConv*:*GpuCapture*:CudaOps.*:CudaOpFormats*:*OpGpu*:LetterboxKernel.*-*WithoutGpu*:*WithoutAGpu*'}
shift || true
tools=("$@")
[ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck initcheck synccheck)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$sanitizer" ] || { echo "compute-sanitizer not found (CUDA toolkit)"; exit 2; }
out=${OUT:-gpu-logs}/compute-sanitizer
mkdir -p "$out"
# VISION_TEST_SMALL=1: the tests that take it run their smaller problems only (the flash-attention suites).
export VISION_REQUIRE_GPU=1 VISION_TEST_SMALL=1 VISION_CACHE_DIR=${VISION_CACHE_DIR:-/tmp/vision-kernel-cache}
status=0
for tool in "${tools[@]}"; do
  log="$out/$tool.log"
  # --error-exitcode makes any finding fail the run; racecheck reports hazards, synccheck barrier misuse, initcheck
  # reads of uninitialised device memory (our outputs are poisoned before each run, so a read of one is a finding).
  # --nvtx yes: initcheck takes the engine's marks of what cuDNN and cuBLAS wrote (vision/cuda/sanitizer.h), stores
  # of their Hopper kernels that it does not see itself. VISION_SANITIZER_ARGS: more options (e.g. a kernel filter).
  # racecheck: 1×1 convolutions on cuDNN, not cuBLAS (cuBLAS's own GEMM kernel draws racecheck reports, after which
  # the process dies); the suites that call cuBLAS themselves (Newton–Schulz) are best left out of its filter.
  conv1x1=${VISION_CONV1X1:-}
  [ "$tool" = racecheck ] && conv1x1=${VISION_CONV1X1:-cudnn}
  # shellcheck disable=SC2086
  VISION_CONV1X1=$conv1x1 timeout "${VISION_SANITIZER_TIMEOUT:-540}" "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 \
    --nvtx yes ${VISION_SANITIZER_ARGS:-} build/tests/vision_tests --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
  echo "compute-sanitizer $tool: exit $rc; ${summary:-no summary (see $log)}"
  [ $rc -eq 0 ] || { status=1; grep -m20 -E "=========" "$log"; }
done
exit $status
