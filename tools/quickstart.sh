#!/usr/bin/env bash
# Quick start: installs what is missing, builds vision-cpp and runs the main job (vision predict with the bundled model).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
preset=default
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "quickstart: no CUDA toolkit found: building the CPU-only engine"
  preset=cpu
fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" --target vision_cli   # the library and the CLI; tools/test.sh builds the tests
dir=build; [ "$preset" = cpu ] && dir=build-cpu
# The main job: the bundled YOLO26n (trained by `vision train` on a `vision synth` set: tools/train_synth.sh) detects
# the shapes in the sample images and writes them annotated to runs/quickstart (on the GPU when one is usable).
"$dir/apps/vision/vision" predict --model assets/yolo26n_synth.safetensors --source assets/samples/images --save runs/quickstart
echo "quickstart: annotated images in runs/quickstart/"
