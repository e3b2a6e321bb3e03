#!/usr/bin/env bash
# Packs what bench/ramcloud-16cpu.sh needs on a host that has no compiler and no package
# registry (issue 45: RAMCloud measured on a machine with a core for each polling thread): a
# stripped kvmeter, RAMCloud's coordinator, server and client library, kvmeter's RAMCloud
# plug-in, and every shared library they load except glibc's own (the host's loader must match
# its libc). Everything in one folder, run with LD_LIBRARY_PATH set to it.
#   ARCH=x86-64-v2 plugins/ramcloud/build.sh ~/src/ramcloud   # first: binaries for another CPU
#   cargo build --release
#   bash bench/ramcloud-bundle.sh [OUT]     # default target/ramcloud-bundle (about 35 MB)
# Then carry OUT to the host and run: bash bench/ramcloud-16cpu.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/ramcloud-bundle}
rc=target/plugins/ramcloud
need=("$rc/libkvm_ramcloud.so" "$rc/src/obj/coordinator" "$rc/src/obj/server" "$rc/src/obj/libramcloud.so")
for f in "${need[@]}"; do
  [[ -e $f ]] || { echo "ramcloud-bundle: $f missing (run plugins/ramcloud/build.sh first)" >&2; exit 2; }
done
[[ -x target/release/kvmeter ]] || { echo "ramcloud-bundle: target/release/kvmeter missing (cargo build --release)" >&2; exit 2; }
if [[ -e $out ]] && [[ -n $(ls -A "$out") ]] && [[ ! -e $out/.ramcloud-bundle ]]; then
  echo "ramcloud-bundle: $out exists and is not a bundle this script made: choose another OUT" >&2
  exit 2
fi
# RAMCloud's own build uses -march=native: on an AVX-512 CPU its binaries can hold
# instructions another host lacks (SIGILL there). A zmm register is the plainest sign.
if objdump -d "$rc/src/obj/server" | grep -q '%zmm'; then
  echo "ramcloud-bundle: RAMCloud's server uses AVX-512 registers (built with -march=native?):" \
    "rebuild with ARCH=x86-64-v2 plugins/ramcloud/build.sh for another host" >&2
  exit 2
fi
rm -rf "$out"
mkdir -p "$out"
touch "$out/.ramcloud-bundle"
cp target/release/kvmeter "${need[@]}" "$out/"
strip "$out"/kvmeter "$out"/coordinator "$out"/server "$out"/libramcloud.so "$out"/libkvm_ramcloud.so
# Every library ldd resolves, but glibc's (loader, libc, libm, libpthread, libdl, librt).
for bin in "$out"/kvmeter "$out"/coordinator "$out"/server "$out"/libkvm_ramcloud.so; do
  LD_LIBRARY_PATH="$out" ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*) continue ;;
  esac
  [[ -e $out/$(basename "$lib") ]] || cp -L "$lib" "$out/"
done
{
  echo "kvmeter: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "ramcloud: $(strings "$out/libkvm_ramcloud.so" | grep -m1 'kvmeter-patches' || echo unknown)"
  echo "built on: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(date -u +%FT%TZ)"
} > "$out/facts.txt"
size=$(du -sm "$out" | cut -f1)
if (( size > 60 )); then
  echo "ramcloud-bundle: $out is $size MiB, more than a 64 MiB carry allows" >&2
  exit 1
fi
echo "ramcloud-bundle: $out ($size MiB): $(ls "$out" | tr '\n' ' ')" >&2
echo "$out"
