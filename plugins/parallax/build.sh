#!/usr/bin/env bash
# Builds Parallax (Kreon's successor, papers/000) from a source checkout you give it, and
# kvmeter's Parallax plug-in (plugins/parallax/kvm_parallax.c) against it (docs/plugins.md).
#
#   plugins/parallax/build.sh PARALLAX_SOURCE_DIR [OUT_DIR]
#     PARALLAX_SOURCE_DIR  a checkout of https://github.com/CARV-ICS-FORTH/parallax
#     OUT_DIR              where the build goes (default: target/plugins/parallax); the
#                          checkout is copied there and patched (plugins/parallax/*.patch:
#                          fixes of Parallax bugs the plug-in hits), never written to
# Then:  kvmeter suite --store plugin:OUT_DIR/libkvm_parallax.so
#
# Parallax's CMake fetches six small libraries from GitHub at configure time (log.c, libyaml,
# uthash, cmake-scripts, libbloom@cmake, minos@parallax_fixes). Without network, set
# PARALLAX_DEPS to a directory holding checkouts of them named log, yaml, uthash, cmake-scripts,
# libbloom and minos. It needs cmake, a C compiler and Debian's libnuma-dev.
set -euo pipefail
usage() { echo "usage: $0 PARALLAX_SOURCE_DIR [OUT_DIR]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
src="$(cd "$1" 2>/dev/null && pwd)" || { echo "error: $1: no such directory (a Parallax checkout was expected)" >&2; exit 2; }
[ -f "$src/lib/include/parallax/parallax.h" ] && [ -f "$src/CMakeLists.txt" ] || {
  echo "error: $src: not a Parallax checkout (no lib/include/parallax/parallax.h or CMakeLists.txt)" >&2; exit 2; }
command -v cmake >/dev/null || { echo "error: Parallax's build needs cmake: apt-get install cmake" >&2; exit 2; }
[ -e /usr/include/numa.h ] || { echo "error: Parallax's build needs libnuma-dev: apt-get install libnuma-dev" >&2; exit 2; }
out="${2:-$repo/target/plugins/parallax}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

deps=()
if [ -n "${PARALLAX_DEPS:-}" ]; then
  for d in log yaml uthash cmake-scripts libbloom minos; do
    [ -d "$PARALLAX_DEPS/$d" ] || { echo "error: PARALLAX_DEPS=$PARALLAX_DEPS has no $d/" >&2; exit 2; }
    name=$(echo "$d" | tr '[:lower:]' '[:upper:]')
    deps+=("-DFETCHCONTENT_SOURCE_DIR_$name=$PARALLAX_DEPS/$d")
  done
  deps+=(-DFETCHCONTENT_FULLY_DISCONNECTED=ON)
fi

# A copy of the checkout with our fixes applied; the user's checkout stays as it is.
copy="$out/src"
rm -rf "$copy"
mkdir -p "$copy"
tar -C "$src" --exclude=./.git --exclude=./build -cf - . | tar -C "$copy" -xf -
for p in "$here"/*.patch; do
  patch -s -p1 -d "$copy" < "$p" || { echo "error: $p does not apply to $src (another Parallax version?)" >&2; exit 1; }
done
version="${PARALLAX_VERSION:-$(git -C "$src" describe --abbrev=8 --dirty --always --tags 2>/dev/null || echo unknown)}+kvmeter-patches"
build="$out/build"
echo "building Parallax from $src (copied to $copy, patched) into $build" >&2
# Shared libraries, position-independent: the plug-in is a shared object that links them.
cmake -S "$copy" -B "$build" -DCMAKE_BUILD_TYPE=Release -DDISABLE_LOGGING=ON \
  -DBUILD_SHARED_LIBS=ON -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DPARALLAX_BUILD_TESTING=OFF \
  "${deps[@]}" >&2
cmake --build "$build" --target parallax -j"$(nproc)" >&2
[ -f "$build/lib/libparallax.so" ] || { echo "error: Parallax's build made no $build/lib/libparallax.so" >&2; exit 1; }

rpath="$build/lib:$build/_deps/log-build:$build/_deps/minos-build:$build/_deps/yaml-build:$build/_deps/libbloom-build"
"${CC:-cc}" -O2 -g -Wall -Wextra -fPIC -shared -DPARALLAX_VERSION="\"$version\"" \
  -I "$repo/include" -I "$copy/lib/include" "$here/kvm_parallax.c" \
  -L "$build/lib" -lparallax -Wl,-rpath,"$rpath" -o "$out/libkvm_parallax.so"
echo "$out/libkvm_parallax.so"
echo "try: kvmeter stores plugin:$out/libkvm_parallax.so" >&2
