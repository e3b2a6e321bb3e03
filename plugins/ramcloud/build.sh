#!/usr/bin/env bash
# Builds RAMCloud (papers/002) from a source checkout you give it — its client library, the
# coordinator and the server — and kvmeter's RAMCloud plug-in (plugins/ramcloud/kvm_ramcloud.cc)
# against it (docs/plugins.md).
#
#   plugins/ramcloud/build.sh RAMCLOUD_SOURCE_DIR [OUT_DIR]
#     RAMCLOUD_SOURCE_DIR  a checkout of https://github.com/PlatformLab/RAMCloud (b1866af1, 2019)
#     OUT_DIR              where the build goes (default: target/plugins/ramcloud); the
#                          checkout is copied there and patched, never written to
#   RAMCLOUD_ARCH          gcc's -march for RAMCloud (default native, RAMCloud's own); binaries
#                          that will run on another host need one it has, e.g.
#                          RAMCLOUD_ARCH=x86-64-v2 (recorded in OUT_DIR/arch for
#                          bench/ramcloud-bundle.sh)
# Then:  plugins/ramcloud/cluster.sh start        # a coordinator and a server on loopback
#        kvmeter run --store plugin:OUT_DIR/libkvm_ramcloud.so -P workloadb
#
# RAMCloud's last supported toolchain is gcc 4.9 and Python 2 (Ubuntu 16.04). On Debian 12 it
# builds with: python3.patch (its two build-time Python scripts), gcc12.patch (one access
# check gcc 12 enforces), -Wno-error (gcc 12 warns where
# gcc 4.9 did not: deprecated implicit copies, -Weffc++), -DTHREADED (ZooKeeper 3.8 declares the
# synchronous API only then), no InfiniBand, no DPDK. It needs Debian's libzookeeper-mt-dev
# protobuf-compiler libprotobuf-dev libboost-program-options-dev libboost-filesystem-dev
# libboost-system-dev libpcre3-dev libssl-dev, and a `python` that is Python 3
# (python-is-python3).
set -euo pipefail
usage() { echo "usage: $0 RAMCLOUD_SOURCE_DIR [OUT_DIR]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
src="$(cd "$1" 2>/dev/null && pwd)" || { echo "error: $1: no such directory (a RAMCloud checkout was expected)" >&2; exit 2; }
[ -f "$src/src/CRamCloud.h" ] && [ -f "$src/GNUmakefile" ] || {
  echo "error: $src: not a RAMCloud checkout (no src/CRamCloud.h or GNUmakefile)" >&2; exit 2; }
missing=()
for pair in libzookeeper-mt-dev:/usr/include/zookeeper/zookeeper.h protobuf-compiler:/usr/bin/protoc \
            libprotobuf-dev:/usr/include/google/protobuf/message.h \
            libboost-program-options-dev:/usr/include/boost/program_options.hpp \
            libboost-filesystem-dev:/usr/include/boost/filesystem.hpp libpcre3-dev:/usr/include/pcrecpp.h \
            libssl-dev:/usr/include/openssl/ssl.h; do
  [ -e "${pair#*:}" ] || missing+=("${pair%%:*}")
done
command -v python >/dev/null || missing+=(python-is-python3)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "error: RAMCloud's build needs ${missing[*]}: apt-get install ${missing[*]}" >&2
  exit 2
fi
arch="${RAMCLOUD_ARCH:-native}"
echo 'int x;' | "${CC:-gcc}" -march="$arch" -x c -c -o /dev/null - 2>/dev/null || {
  echo "error: RAMCLOUD_ARCH=$arch: gcc does not know -march=$arch (e.g. x86-64-v2, x86-64-v3, native)" >&2; exit 2; }
out="${2:-$repo/target/plugins/ramcloud}"
# The copy goes to OUT_DIR/src and is replaced on every build: only a copy this script made
# (its marker inside, or under the default OUT_DIR in kvmeter's target/) is ever removed, never
# a directory of the user's.
if [ -n "${2:-}" ] && [ -e "$out/src" ] && [ ! -e "$out/src/.kvmeter-ramcloud-copy" ]; then
  echo "error: $out/src exists and is not a copy build.sh made: choose another OUT_DIR" >&2
  exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
copy="$out/src"
rm -rf "$copy"
mkdir -p "$copy"
touch "$copy/.kvmeter-ramcloud-copy"
rm -f "$out/arch"
tar -C "$src" --exclude=./.git --exclude='./obj*' -cf - . | tar -C "$copy" -xf -
for p in "$here"/*.patch; do
  patch -s -p1 -d "$copy" < "$p" || { echo "error: $p does not apply to $src (another RAMCloud version?)" >&2; exit 1; }
done
version="${RAMCLOUD_VERSION:-$(git -C "$src" describe --abbrev=8 --dirty --always --tags 2>/dev/null || echo unknown)}+kvmeter-patches"
echo "building RAMCloud from $src (copied to $copy, patched); this takes 3-20 minutes on 2 cores" >&2
# OBJSUFFIX= : the copy has no git branch to name obj.<branch> after, so everything goes to obj/;
# RAMCloud's scripts ask git for the branch too, so keep git from finding a repository above the
# copy (target/ may sit inside one, kvmeter's own).
export GIT_CEILING_DIRECTORIES="$out"
make -C "$copy" -j"$(nproc)" DEBUG=no INFINIBAND=no OBJSUFFIX= ARCH="$arch" EXTRACXXFLAGS="-Wno-error -DTHREADED" \
  obj/libramcloud.so obj/coordinator obj/server >&2
"${CXX:-g++}" -O2 -g -Wall -fPIC -shared -std=c++11 -DRAMCLOUD_VERSION="\"$version\"" \
  -I "$repo/include" -I "$copy/src" -I "$copy/obj" "$here/kvm_ramcloud.cc" \
  -L "$copy/obj" -lramcloud -Wl,-rpath,"$copy/obj" -o "$out/libkvm_ramcloud.so"
echo "$arch" > "$out/arch"
echo "$out/libkvm_ramcloud.so"
echo "next: plugins/ramcloud/cluster.sh start   (RAMCLOUD_BIN=$copy/obj)" >&2
