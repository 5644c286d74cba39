#!/usr/bin/env bash
# Installs the Debian packages vision-cpp builds with (only those missing); --test adds those the tests need. The CUDA toolkit (13.x, with
# NVRTC, cuDNN 9 and cuBLAS) is not a Debian package here: install it from NVIDIA, or build -DVISION_CUDA=OFF.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev libfmt-dev libcli11-dev
      libstb-dev libyaml-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev libssl-dev libturbojpeg0-dev libspng-dev
      libzip-dev fonts-dejavu-core pybind11-dev python3-dev python3-numpy)
# With --test, also what the test suite adds: Debian's clang and its libFuzzer runtime (tools/fuzz.sh), and pytest for
# the Python module's tests (python/tests).
[ "${1:-}" = "--test" ] && pkgs+=(clang libclang-rt-dev python3-pytest)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
