#!/usr/bin/env bash
# Development loop on the H200 host for the FA2 kernels alone: build, the FA2 GPU tests with VISION_REQUIRE_GPU=1,
# then the benchmark (bench/attention/run.sh, extra arguments passed on). Logs go to $OUT (or ./gpu-logs).
#   bench/attention/dev-check.sh [--no-bench] [run.sh arguments...]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
bench=1
if [ "${1:-}" = "--no-bench" ]; then bench=0; shift; fi
[ -f .gpu-host/env.sh ] && source .gpu-host/env.sh >/dev/null
export VISION_CACHE_DIR=/tmp/vision-kernel-cache
t0=$(date +%s)
cmake --preset default -DVISION_BENCH=ON >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build -j16 >"$out/build.log" 2>&1 || { grep -E "error" -A5 "$out/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
VISION_REQUIRE_GPU=1 timeout 400 build/tests/vision_tests --gtest_filter='FlashAttention2*' >"$out/fa2_tests.log" 2>&1
status=$?
grep -E "^\[  (PASSED|FAILED) |tests ran" "$out/fa2_tests.log" | head -20
grep -E "Failure|Expected|Which is|rel_error|vs CPU|^ +[a-z_]+ *$|bh [0-9]" "$out/fa2_tests.log" | head -40
echo "tests: $(( $(date +%s) - t0 )) s (status $status)"
if [ $bench = 1 ]; then
  OUT_DIR="$out/bench" bench/attention/run.sh "$@" >"$out/bench.log" 2>&1
  tail -40 "$out/bench.log"
fi
echo "total: $(( $(date +%s) - t0 )) s"
exit $status
