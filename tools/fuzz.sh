#!/usr/bin/env bash
# Builds the fuzz targets (tests/fuzz, libFuzzer + ASan + UBSan, Debian's clang) and runs each for SECONDS seconds
# (default 60) from its seed corpus in tests/fuzz/corpus/<target>, two at a time. A crash, a sanitizer report, a leak
# or an input slower than 10 s fails the run; the input that did it is left in build-fuzz/findings/<target>/.
#   tools/fuzz.sh [SECONDS] [TARGET…]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev): skipped"
  exit 0
fi
cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do
    t=$(basename "$f" .cpp)
    # A target whose libraries this machine lacks is not built (fuzz_video without FFmpeg's): said, not run.
    if [ -x "build-fuzz/$t" ]; then targets+=("$t"); else echo "fuzz: $t: not built here (see the configure step)"; fi
  done
fi
run() {
  local t=$1 corpus=build-fuzz/corpus/$1 findings=build-fuzz/findings/$1
  mkdir -p "$corpus" "$findings"
  # New inputs go to build-fuzz/corpus; the committed seeds are read only.
  if build-fuzz/"$t" "$corpus" "tests/fuzz/corpus/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=1024 -artifact_prefix="$findings/" -print_final_stats=1 >"build-fuzz/$t.log" 2>&1; then
    echo "fuzz: $t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "build-fuzz/$t.log" | grep -o '[0-9]*$') runs, no finding"
  else
    echo "fuzz: $t: FINDING (input in $findings/):"
    tail -40 "build-fuzz/$t.log"
    return 1
  fi
}
status=0
pids=()
for t in "${targets[@]}"; do
  run "$t" &
  pids+=($!)
  if [ ${#pids[@]} -eq 2 ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
