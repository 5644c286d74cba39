#!/usr/bin/env bash
# On a GPU host: runs the GPU tests (the `gpu` ctest label, less the suites that launch nothing on the GPU) under each
# of compute-sanitizer's tools — memcheck, racecheck, initcheck, synccheck — and fails on any finding or failed test.
# Logs go to $OUT/compute-sanitizer (default gpu-logs/compute-sanitizer/). Build the default preset first
# (tools/gpu-host-check.sh does).
#   tools/compute-sanitizer.sh [-j JOBS] [--shards N] [--all] [--filter GTEST_FILTER] [--exclude PATTERNS] [TOOL…]
# --all keeps the whole-model training suites (Yolo26TrainerGpu, …), which the default leaves out: they run the same
# kernels as the op suites, at full size, and take 50–340 s a test under initcheck (over the 10-minute call).
# Each tool's tests are split into N gtest shards (GTEST_TOTAL_SHARDS, default 3), and up to JOBS (tool, shard)
# processes run at once (default: 8): the sanitizer's cost is mostly on the host, so a 16-core host runs all four
# tools within one of its 10-minute calls. Each process is bounded by VISION_SANITIZER_TIMEOUT seconds (default 540).
set -uo pipefail
cd "$(dirname "$0")/.."
[ -f .gpu-host/env.sh ] && source .gpu-host/env.sh
jobs=8
shards=3
filter=""
exclude=""
all=0
tools=()
while [ $# -gt 0 ]; do
  case "$1" in
    -j) jobs="$2"; shift ;;
    --shards) shards="$2"; shift ;;
    --filter) filter="$2"; shift ;;
    --all) all=1 ;;
    --exclude) exclude="$2"; shift ;;
    memcheck|racecheck|initcheck|synccheck) tools+=("$1") ;;
    *) echo "compute-sanitizer.sh: unknown argument '$1'"; exit 2 ;;
  esac
  shift
done
[ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck initcheck synccheck)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$sanitizer" ] || { echo "compute-sanitizer not found (CUDA toolkit)"; exit 2; }
[ -x build/tests/vision_tests ] || { echo "build/tests/vision_tests is not built (cmake --preset default)"; exit 2; }
if [ -z "$filter" ]; then
  # Every test of the gpu label, by name, less those that run no GPU work of their own: kernel sources, snapshots,
  # descriptors and NVRTC compiles (no launch), the library loaders, and the tests that hide the GPU from a child
  # process (under the sanitizer the child sees its injection library, not the plain driver they expect).
  # CTest's names are tests ("Suite.Test") or, with VISION_TEST_PER_SUITE (the default preset), suites ("Suite").
  skip='(^|/)(KernelSnapshot|KernelRegistry|KernelsCommand|KernelDescriptor|KernelCacheNvrtc|Nvrtc|Sha256|Embedded|'
  skip+='LazyLibrary|CudaCheck|[A-Za-z0-9]*Descriptors)(\.|$)|WithoutA?Gpu'
  # The whole-model training runs and the benchmark CLI (whose child process dies under the sanitizer).
  [ $all = 1 ] || skip+='|(^|/)(Yolo26TrainerGpu|Yolo26TrainTrajectoryGpu|LibraryTrainingGpu|Yolo26ReferenceGpuTraining|'
  [ $all = 1 ] || skip+='Yolo26GradsGpu|BenchCliGpu)(\.|$)'
  names=$(ctest --test-dir build -N -L gpu | sed -nE 's/^ *Test +#[0-9]+: (.*)$/\1/p' | grep -vE "$skip" |
          sed -E 's/^([^.]+)$/\1.*/')
  [ -n "$names" ] || { echo "no gpu-labelled tests found in build/ (ctest -N -L gpu)"; exit 2; }
  filter=$(tr '\n' ':' <<<"$names")
  # Within a suite, the tests that hide the GPU from a child process.
  exclude+="${exclude:+:}*WithoutGpu*:*WithoutAGpu*"
  echo "compute-sanitizer: $(wc -l <<<"$names") tests of the gpu label, in $shards shards per tool"
fi
out=${OUT:-gpu-logs}/compute-sanitizer
mkdir -p "$out"
# VISION_TEST_SMALL=1: the tests that take it run their smaller problems only (the flash-attention suites).
export VISION_REQUIRE_GPU=1 VISION_TEST_SMALL=1 VISION_CACHE_DIR=${VISION_CACHE_DIR:-/tmp/vision-kernel-cache}
# Two OpenMP threads per process: several run side by side.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
run_one() {
  local tool=$1 shard=$2 log="$out/$1.$2.log" conv1x1=${VISION_CONV1X1:-} f=$filter
  # racecheck: 1×1 convolutions on cuDNN, not cuBLAS, and without the tests that call cuBLAS's GEMMs themselves
  # (Newton–Schulz's cuBLAS paths: batched, grouped): cuBLAS's own GEMM kernel (nvjet) draws racecheck reports, after
  # which the process dies. MuSGD's default path, our ns_gemm kernel, is checked (NewtonSchulzGpu.GroupedKernel…,
  # the MuSGD optimizer tests). Nor NCCL's (NcclGpu): its all-reduce never completed under racecheck (the shard ran
  # into its timeout there).
  local negative=$exclude
  if [ "$tool" = racecheck ]; then
    conv1x1=${VISION_CONV1X1:-cudnn}
    negative+=":NewtonSchulzGpu.BatchedBf16MatchesTheCpuTwin:NewtonSchulzGpu.FreshScratchGivesThePoisonedScratchResult"
    negative+=":NewtonSchulzGpu.GroupedShapesMatchTheCpuTwin:NcclGpu.*"
  fi
  if [ -n "$negative" ]; then
    [[ $f == *-* ]] || f+="-"
    f+=":$negative"
  fi
  # --error-exitcode makes any finding fail the run; racecheck reports hazards, synccheck barrier misuse, initcheck
  # reads of uninitialised device memory (our outputs are poisoned before each run, so a read of one is a finding).
  # --nvtx yes: initcheck takes the engine's marks of what cuDNN and cuBLAS wrote (vision/cuda/sanitizer.h), stores
  # of their Hopper kernels that it does not see itself. VISION_SANITIZER_ARGS: more options (e.g. a kernel filter).
  # shellcheck disable=SC2086
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard VISION_CONV1X1=$conv1x1 \
    timeout -k 15 "${VISION_SANITIZER_TIMEOUT:-540}" "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 \
    --nvtx yes ${VISION_SANITIZER_ARGS:-} build/tests/vision_tests --gtest_filter="$f" >"$log" 2>&1
  echo $? >"$log.rc"
}
for tool in "${tools[@]}"; do
  for ((s = 0; s < shards; ++s)); do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
    run_one "$tool" "$s" &
  done
done
wait
status=0
for tool in "${tools[@]}"; do
  for ((s = 0; s < shards; ++s)); do
    log="$out/$tool.$s.log"
    rc=$(cat "$log.rc" 2>/dev/null || echo "?")
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    tests=$(grep -cE "^\[       OK \]" "$log")
    failed=$(grep -E "^\[  FAILED  \] [A-Za-z]" "$log" | sed -E 's/^\[  FAILED  \] //; s/ \(.*//' | sort -u | tr '\n' ' ')
    echo "compute-sanitizer $tool shard $s: exit $rc; $tests tests passed; ${summary:-no summary (see $log)}${failed:+; failed: $failed}"
    if [ "$rc" != 0 ]; then
      status=1
      [ "$rc" = 124 ] && echo "  timed out after ${VISION_SANITIZER_TIMEOUT:-540} s; last test: $(grep -E '^\[ RUN' "$log" | tail -1)"
      grep -m20 -E "^========= [A-Z]" "$log"
    fi
  done
done
exit $status
