#!/usr/bin/env bash
# Quick start: installs what is missing, builds vision-cpp and runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
preset=default
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "quickstart: no CUDA toolkit found: building the CPU-only engine"
  preset=cpu
fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
dir=build; [ "$preset" = cpu ] && dir=build-cpu
"$dir/apps/vision/vision" demo
