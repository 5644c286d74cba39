#!/usr/bin/env bash
# Installs the Debian packages vision-cpp builds with (only those missing); --test adds those the tests need, and the
# tests' ONNX Runtime peer (the npm package onnxruntime-node, CPU library, into ~/.cache/vision-peers). The CUDA toolkit
# (13.x, with NVRTC, cuDNN 9 and cuBLAS) is not a Debian package here: install it from NVIDIA, or build -DVISION_CUDA=OFF.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev libfmt-dev libcli11-dev
      libstb-dev libyaml-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev libssl-dev libturbojpeg0-dev libspng-dev
      libzip-dev fonts-dejavu-core pybind11-dev python3-dev python3-numpy libonnx-dev libprotobuf-dev
      libavformat-dev libavcodec-dev libswscale-dev libavutil-dev libavdevice-dev libopencv-video-dev
      libopencv-calib3d-dev libopenmpi-dev openmpi-bin)
# With --test, also what the test suite adds: Debian's clang and its libFuzzer runtime (tools/fuzz.sh), and pytest for
# the Python module's tests (python/tests); node and npm for the ONNX Runtime peer unless the machine has them.
test=false
[ "${1:-}" = "--test" ] && test=true
if $test; then
  pkgs+=(clang libclang-rt-dev python3-pytest)
  command -v node > /dev/null && command -v npm > /dev/null || pkgs+=(nodejs npm)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
else
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The ONNX Runtime peer: its CPU library ships inside the package; --ignore-scripts skips the install script, which
# downloads GPU extras from a host that may not be reachable. A test peer only: the engine never loads it.
if $test; then
  peers=${VISION_PEERS_DIR:-$HOME/.cache/vision-peers}
  ort=onnxruntime-node@1.31.1
  if [ -f "$peers/node_modules/onnxruntime-node/package.json" ] &&
     grep -q '"version": "1.31.1"' "$peers/node_modules/onnxruntime-node/package.json"; then
    echo "install-deps: $ort present in $peers"
  else
    echo "install-deps: npm install $ort into $peers"
    mkdir -p "$peers"
    # Without the npm registry the ONNX Runtime tests report a skip: the build and every other test go on.
    npm install --prefix "$peers" --ignore-scripts --no-audit --no-fund --loglevel=error "$ort" ||
      echo "install-deps: warning: npm could not install $ort: the ONNX Runtime tests will skip"
  fi
fi
