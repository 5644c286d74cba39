#!/usr/bin/env bash
# Builds and runs the whole test suite: the default (CUDA) build, the CPU-only build under ASan + UBSan (+ LSan), the
# threaded host code under TSan, and the fuzz targets.
# GPU tests skip cleanly without a usable GPU; VISION_REQUIRE_GPU=1 turns those skips into failures.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's time goes into the log (docs/getting-started.md records them).
t0=$SECONDS
phase() { echo "test: $1 took $((SECONDS - t0)) s"; t0=$SECONDS; }
tools/install-deps.sh --test
phase "checking the packages"
# The CPU-only engine is tested under AddressSanitizer and UndefinedBehaviorSanitizer (preset cpu-sanitize: the same
# code as preset cpu, at -O1 with the sanitizers), so every CPU test also checks for memory errors and undefined
# behaviour in the host code, and for leaks (LeakSanitizer). Preset cpu-tsan builds the CPU-only engine under
# ThreadSanitizer with the tests of the threaded host code alone (the training loader, the predict/val decoding pool,
# the CLI runs — a whole training run with validation each epoch, stopped and resumed —, datasets, the kernel cache)
# and runs them with one OpenMP thread.
presets=(default cpu-sanitize cpu-tsan)
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "test: no CUDA toolkit found: testing the CPU-only build alone"
  presets=(cpu-sanitize cpu-tsan)
fi
# Fresh random inputs each run, replayable: every test derives its seed from this and its name, and a failing test
# prints the VISION_TEST_SEED that replays it.
export VISION_TEST_SEED="${VISION_TEST_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
echo "test: VISION_TEST_SEED=$VISION_TEST_SEED"
status=0
passed=0
failed=0
# Four checks of the sources: the library, the CLI and the tests are unity builds, so no private helper may silently
# overload another source's (tools/check-private-names.py, over each); every include keeps the layer order
# (tools/check-layers.py).
for check in "tools/check-private-names.py src/vision" "tools/check-private-names.py apps/vision" \
             "tools/check-private-names.py tests" tools/check-layers.py; do
  # shellcheck disable=SC2086
  if python3 $check; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Adds the counts of CTest's summary line ("N% tests passed, F tests failed out of T") in $log to the totals.
count() {
  local line t f
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -1)
  if [ -z "$line" ]; then failed=$((failed + 1)); return; fi  # no summary: the run itself broke
  f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
  t=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
  passed=$((passed + t - f))
  failed=$((failed + f))
}
for p in "${presets[@]}"; do
  echo "=== preset $p"
  cmake --preset "$p" >/dev/null
  cmake --build --preset "$p"
  phase "building preset $p"
  # The numerical trajectory of three whole training runs against the reference (Yolo26TrainTrajectory, ~50 s of CPU
  # under ASan) runs in the default preset; under the sanitizers its host code (trainer, optimizer, loader) is the
  # same the trainer, training-run and CLI suites go through. The Python tools' tests (tools.*) run Python alone, the
  # same in every preset: once, in the default one.
  extra=()
  [ "$p" = cpu-sanitize ] && [[ " ${presets[*]} " == *" default "* ]] && extra=(-E '^(Yolo26TrainTrajectory|tools\..*)$')
  ctest --preset "$p" -j2 "${extra[@]}" 2>&1 | tee "$log" || status=1
  count
  phase "the tests of preset $p"
done
# The parsers of outside input under libFuzzer with ASan and UBSan, each for VISION_FUZZ_SECONDS (default 45) from
# its seed corpus (tests/fuzz/corpus): a crash or sanitizer report fails the run. Longer runs: tools/fuzz.sh SECONDS.
echo "=== fuzz"
tools/fuzz.sh "${VISION_FUZZ_SECONDS:-45}" 2>&1 | tee "$log" || status=1
passed=$((passed + $(grep -c "no finding$" "$log" || true)))
phase "fuzzing (build and runs)"
failed=$((failed + $(grep -c "FINDING" "$log" || true)))
# One closing line for the whole run: CTest's tests of every preset and the fuzz targets.
echo "test: $passed passed, $failed failed"
[ "$failed" -eq 0 ] || status=1
exit $status
