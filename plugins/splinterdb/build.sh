#!/usr/bin/env bash
# Builds SplinterDB from a source checkout you give it, and kvmeter's SplinterDB plug-in
# (plugins/splinterdb/kvm_splinterdb.c) against it (docs/plugins.md).
#
#   plugins/splinterdb/build.sh SPLINTERDB_SOURCE_DIR [OUT_DIR]
#     SPLINTERDB_SOURCE_DIR  a checkout of https://github.com/vmware/splinterdb
#     OUT_DIR                where the build goes (default: target/plugins/splinterdb);
#                            the checkout itself is not written to
# Then:  kvmeter suite --store plugin:OUT_DIR/libkvm_splinterdb.so
#
# SplinterDB's build needs Debian's libaio-dev, libconfig-dev and libxxhash-dev, and a C
# compiler; this script names what is missing rather than installing it.
set -euo pipefail
usage() { echo "usage: $0 SPLINTERDB_SOURCE_DIR [OUT_DIR]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
src="$(cd "$1" 2>/dev/null && pwd)" || { echo "error: $1: no such directory (a SplinterDB checkout was expected)" >&2; exit 2; }
[ -f "$src/include/splinterdb/splinterdb.h" ] && [ -f "$src/Makefile" ] || {
  echo "error: $src: not a SplinterDB checkout (no include/splinterdb/splinterdb.h or Makefile)" >&2; exit 2; }
out="${2:-$repo/target/plugins/splinterdb}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

missing=()
for pair in libaio-dev:/usr/include/libaio.h libconfig-dev:/usr/include/libconfig.h \
            libxxhash-dev:/usr/include/xxhash.h; do
  [ -e "${pair#*:}" ] || missing+=("${pair%%:*}")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "error: SplinterDB's build needs ${missing[*]}: apt-get install ${missing[*]}" >&2
  exit 2
fi

cc="${CC:-gcc}"
echo "building SplinterDB from $src into $out/build (CC=$cc)" >&2
# BUILD_ROOT keeps every output out of the checkout. SplinterDB's Makefile records the CC it
# was built with and refuses a build tree made with another; -j follows the CPUs.
# The version the library reports: the checkout's git description (or SPLINTERDB_VERSION for a
# source tree without git, e.g. a release tarball or an archive of a commit).
version="${SPLINTERDB_VERSION:-$(git -C "$src" describe --abbrev=8 --dirty --always --tags 2>/dev/null || echo unknown)}"
CC="$cc" make -C "$src" BUILD_ROOT="$out/build" GIT_VERSION="\"$version\"" -j"$(nproc)" libs >&2
lib="$out/build/release/lib"
[ -f "$lib/libsplinterdb.so" ] || { echo "error: SplinterDB's build made no $lib/libsplinterdb.so" >&2; exit 1; }

"$cc" -O2 -g -Wall -Wextra -fPIC -shared -DSPLINTERDB_PLATFORM_DIR=platform_linux \
  -I "$repo/include" -I "$src/include" "$here/kvm_splinterdb.c" \
  -L "$lib" -lsplinterdb -Wl,-rpath,"$lib" -o "$out/libkvm_splinterdb.so"
echo "$out/libkvm_splinterdb.so"
echo "try: kvmeter stores plugin:$out/libkvm_splinterdb.so" >&2
