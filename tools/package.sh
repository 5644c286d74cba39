#!/usr/bin/env bash
# Builds the Debian packages: vision-cuda (the CUDA build, preset default) and vision-cpu (the CPU-only build, preset
# cpu), each configured for prefix /usr, into dist/. Needs what tools/install-deps.sh installs, and dpkg-dev.
#
#   tools/package.sh [cuda|cpu]...      (default: both; cuda only where the CUDA toolkit is found)
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
if [ ${#kinds[@]} -eq 0 ]; then
  kinds=(cpu)
  if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then kinds=(cuda cpu); fi
fi
mkdir -p dist
for kind in "${kinds[@]}"; do
  case $kind in
    cuda) preset=default dir=build-package-cuda ;;
    cpu) preset=cpu dir=build-package-cpu ;;
    *) echo "package: unknown kind '$kind' (cuda or cpu)"; exit 2 ;;
  esac
  cmake --preset "$preset" -B "$dir" -DCMAKE_INSTALL_PREFIX=/usr -DVISION_TESTS=OFF >/dev/null
  cmake --build "$dir"
  (cd "$dir" && cpack -G DEB -B "$PWD/../dist" >/dev/null)
done
rm -rf dist/_CPack_Packages
ls -l dist/*.deb
