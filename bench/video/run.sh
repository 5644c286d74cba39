#!/usr/bin/env bash
# Video detection and tracking end to end (issue #32) on a synthetic 1080p H.264 video (bench_video makes it and times
# each stage alone: encode, decode, model, tracker, annotate + encode), then the whole pipeline through the CLI on it:
# `vision predict --source bench.mp4 --batch B` (decode on its own thread, letterbox, model, postprocess) and
# `vision track --source bench.mp4 --batch B` (the same, plus ByteTrack) and with `--save DIR` (the tracks drawn and
# the video encoded). One table of frames/s. Required on the H200 (YOLO26n, batch 32, from a file): ≥ 1,000 frames/s detecting
# and ≥ 500 tracking. Build first: cmake --build build --target vision_cli bench_video (VISION_BENCH=ON).
# Usage: bench/video/run.sh [BUILD_DIR] [--device cpu|cuda] [--batch 32] [--frames 300] [--hwaccel none|cuda]
#                           [--model FILE] [--threads N]
# Environment: OUT_DIR (the video, logs and table; default a temporary folder, removed unless KEEP=1).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
if [[ $# -gt 0 && $1 != -* ]]; then build=$1; shift; fi
device=cuda batch=32 frames=300 hwaccel=none model=$root/assets/yolo26n_synth.safetensors threads=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --device) device=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --frames) frames=$2; shift 2 ;;
    --hwaccel) hwaccel=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
vision=$build/apps/vision/vision
bench=$build/bench/video/bench_video
[[ -x $vision && -x $bench ]] || { echo "run.sh: build vision_cli and bench_video first (VISION_BENCH=ON)" >&2; exit 2; }
out=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$out"
[[ -n ${OUT_DIR:-} || ${KEEP:-0} == 1 ]] || trap 'rm -rf "$out"' EXIT
hw=none
[[ $hwaccel == cuda ]] && hw=none,cuda
"$bench" --out "$out/video" --device "$device" --batch "$batch" --frames "$frames" --hwaccel "$hw" --threads "$threads" \
  --model "$model" | tee "$out/stages.txt"
video=$out/video/bench.mp4
common=(--model "$model" --source "$video" --device "$device" --imgsz 640 --batch "$batch" --hwaccel "$hwaccel")
[[ $threads != 0 ]] && common+=(--threads "$threads")
timed() {  # label, command…: frames/s over the video's frames, wall clock of the whole command (start-up included)
  local label=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  "$@" > "$out/$label.log" 2>&1 || { echo "run.sh: $label failed:"; tail -5 "$out/$label.log"; exit 1; }
  t1=$(date +%s.%N)
  awk -v l="$label" -v n="$frames" -v a="$t0" -v b="$t1" 'BEGIN { printf "%-34s %8d %10.1f %10.2f\n", l, n, n / (b - a), 1000 * (b - a) / n }'
}
{
  echo "end to end through the CLI ($device, batch $batch, decode $hwaccel; wall clock, start-up included):"
  printf "%-34s %8s %10s %10s\n" "pipeline" "frames" "frames/s" "ms/frame"
  timed "vision predict" "$vision" predict "${common[@]}" --conf 0.25 --json
  timed "vision track (ByteTrack)" "$vision" track "${common[@]}"
  timed "vision track (ByteTrack, --save)" "$vision" track "${common[@]}" --save "$out/tracked"
  echo
  echo "the CLI's own account (from the first frame read, start-up excluded):"
  for label in "vision predict" "vision track (ByteTrack)" "vision track (ByteTrack, --save)"; do
    grep -hE "frames/s end to end|: time: " "$out/$label.log" | sed -E "s/^.*(vision (predict|track): )/  \1/"
  done
} | tee "$out/table.txt"
