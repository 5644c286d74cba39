#!/usr/bin/env bash
# The installed package, as a user meets it (issue #28): `cmake --install` into a fresh prefix; every installed header
# compiles on its own with -I<prefix>/include and nothing else (so no internal, CUDA, oneDNN or JSON header is
# reachable from the public API); examples/ builds as an outside project through find_package(vision) and its
# detect_images finds the shapes in the samples, as `vision predict` does; pkg-config gives flags a program builds
# with; the installed CLI and the installed Python module run.
#
#   check_install.sh BUILD_DIR SOURCE_DIR CMAKE CXX PYTHON
set -euo pipefail
build=$1 source=$2 cmake=$3 cxx=$4 python=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"
fail() { echo "check_install: $*"; exit 1; }

# The public headers, each alone.
headers=$(cd "$prefix/include" && find vision -name '*.h' | sort)
[ -n "$headers" ] || fail "no headers installed"
for h in $headers; do
  echo "#include <$h>" | "$cxx" -std=c++20 -fsyntax-only -I"$prefix/include" -x c++ - ||
    fail "$h does not compile on its own with -I$prefix/include"
done
echo "check_install: $(wc -w <<<"$headers") public headers compile on their own"
[ ! -e "$prefix/include/vision/graph" ] && [ ! -e "$prefix/include/vision/cuda" ] || fail "internal headers installed"
cmp -s "$prefix/share/doc/vision/LICENSE" "$source/LICENSE" || fail "the LICENSE is not installed in share/doc/vision"

# examples/ as an outside project.
"$cmake" -S "$source/examples" -B "$work/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" >"$work/configure.log" || { cat "$work/configure.log"; fail "examples do not configure"; }
"$cmake" --build "$work/examples" >"$work/build.log" || { cat "$work/build.log"; fail "examples do not build"; }
model=$source/assets/yolo26n_synth.safetensors
image=$source/assets/samples/images/000000.jpg
out=$("$work/examples/detect_images" "$model" "$image" --device cpu) || fail "detect_images failed: $out"
echo "$out"
mine=$(grep -c "000000.jpg: " <<<"$out" || true)
[ "$mine" -gt 0 ] || fail "detect_images found nothing"
# The installed CLI prints a header line per image and then one line per detection.
cli=$("$prefix/bin/vision" predict --model "$model" --source "$image" --device cpu --json --quiet)
cli_count=$("$python" -c 'import json,sys; print(len(json.load(sys.stdin)[0]["detections"]))' <<<"$cli")
[ "$mine" -eq "$cli_count" ] || fail "detect_images found $mine objects, the installed vision predict $cli_count"

# pkg-config.
pc=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs vision) || fail "pkg-config vision failed"
cat >"$work/version.cpp" <<'CPP'
#include <vision/vision.h>
#include <cstdio>
int main() { std::printf("%s\n", vision::kVersion); }
CPP
# shellcheck disable=SC2086
"$cxx" "$work/version.cpp" -o "$work/version" $pc || fail "a program does not build with pkg-config's flags: $pc"
[ "$("$work/version")" = "$("$prefix/bin/vision" --version | awk '{print $2}')" ] || fail "versions differ"

# The installed Python module.
site=$(cd "$prefix" && find . -path '*dist-packages/vision/__init__.py' | head -1)
if [ -n "$site" ]; then
  PYTHONPATH="$prefix/$(dirname "$(dirname "$site")")" "$python" -c "
import vision
r = vision.YOLO('$model').predict('$image', device='cpu')[0]
assert len(r) == $cli_count, len(r)
print('check_install: the installed Python module finds', len(r), 'objects')" || fail "the installed Python module failed"
fi
echo "check_install: ok"
