#!/usr/bin/env bash
# Reproduces the bundled model (assets/yolo26n_synth.safetensors): a `vision synth` dataset, `vision train` of
# YOLO26n on it, and `vision export` of the best checkpoint in f16. The three commands are the README's; this script
# only gives them their arguments. On the H200 the training takes a few minutes (bench/train/NOTES.md, main job).
#   tools/train_synth.sh [BUILD_DIR] [--out DIR] [--epochs 100] [--device auto] [--resume] [-- extra train args]
# The run goes to DIR/runs/synth (DIR default: synth-run); --resume continues an interrupted run (Ctrl-C or SIGINT
# saves weights/last.safetensors first).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$here/build
if [[ $# -gt 0 && $1 != -* ]]; then build=$1; shift; fi
out=synth-run epochs=100 device=auto resume=0 extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --resume) resume=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "train_synth.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
vision=$build/apps/vision/vision
workers=$(nproc)
if [[ $resume = 1 ]]; then
  "$vision" train --resume "$out/runs/synth" --device "$device" --workers "$workers" --quiet
else
  [[ -f $out/shapes/data.yaml ]] ||
    "$vision" synth --out "$out/shapes" --train 4000 --val 500 --imgsz 320 --seed 0
  "$vision" train --data "$out/shapes/data.yaml" --scale n --imgsz 320 --batch 64 --epochs "$epochs" \
    --device "$device" --workers "$workers" --project "$out/runs" --name synth --exist-ok --quiet "${extra[@]}"
fi
"$vision" export --model "$out/runs/synth/weights/best.safetensors" --out "$out/yolo26n_synth.safetensors" --dtype f16
