#!/usr/bin/env bash
# On the H200 host: build from source, run the whole suite with VISION_REQUIRE_GPU=1, run the demo on both
# backends, and optionally the benchmarks. Logs go to $OUT (or ./gpu-logs).
#   tools/gpu-host-check.sh [--bench] [--ctest-args "..."]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
bench=0
ctest_args=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=1 ;;
    --ctest-args) ctest_args="$2"; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
[ -f .gpu-host/env.sh ] && source .gpu-host/env.sh
# A kernel cache compiled ahead of time (`vision kernels build --arch sm_90a`, no GPU needed) may be carried in.
export VISION_CACHE_DIR=${VISION_CACHE_DIR:-/tmp/vision-kernel-cache}
t0=$(date +%s)
# OpenCV (BoT-SORT's camera motion), FFmpeg's libraries (video) and ONNX (export) are optional: the host's image may
# lack them (the offline host's .gpu-host/debs carries the required packages, libzip-dev and libzip4 among them).
has() { find /usr/include /usr/include/x86_64-linux-gnu /opt/gpu-host-deps/usr/include /opt/gpu-host-deps/usr/include/x86_64-linux-gnu -maxdepth 4 -path "*$1" 2>/dev/null | grep -q .; }
opencv=ON; has 'opencv4/opencv2/video/tracking.hpp' || opencv=OFF
video=ON; has 'libavformat/avformat.h' || video=OFF
onnx=ON; has 'onnx/onnx_pb.h' || onnx=OFF
echo "optional parts: opencv $opencv, video $video, onnx $onnx"
cmake --preset default -DVISION_BENCH=$([ $bench = 1 ] && echo ON || echo OFF) -DVISION_OPENCV=$opencv \
  -DVISION_VIDEO=$video -DVISION_ONNX=$onnx >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build -j16 >"$out/build.log" 2>&1 || { grep -E "error" -A5 "$out/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
VISION_REQUIRE_GPU=1 ctest --test-dir build -j8 --timeout 600 $ctest_args >"$out/ctest.log" 2>&1
status=$?
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|\(Skipped\)" "$out/ctest.log" | head -40
if [ $status -ne 0 ]; then
  ctest --test-dir build --rerun-failed --output-on-failure >"$out/failed.log" 2>&1
  grep -E "Failure|error|Expected|Which is|rel_error|  [a-z].*<|Value of" "$out/failed.log" | head -80
fi
echo "tests: $(( $(date +%s) - t0 )) s"
./build/apps/vision/vision demo --device cuda >"$out/demo_cuda.log" 2>&1; tail -8 "$out/demo_cuda.log"
./build/apps/vision/vision demo --device cpu >"$out/demo_cpu.log" 2>&1; tail -4 "$out/demo_cpu.log"
if [ $bench = 1 ] && [ -x bench/attention/run.sh ]; then
  OUT_DIR=/tmp/bench_attention bench/attention/run.sh >/tmp/bench_attention.log 2>&1
  tail -60 /tmp/bench_attention.log
  cp /tmp/bench_attention/table.txt /tmp/bench_attention/ours.json /tmp/bench_attention/peer.json "$out/" 2>/dev/null
fi
echo "total: $(( $(date +%s) - t0 )) s"
exit $status
