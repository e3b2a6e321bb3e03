#!/usr/bin/env bash
# Packs what bench/ramcloud-16cpu.sh needs on a host that has no compiler and no package
# registry (issue 45: RAMCloud measured on a machine with a core for each polling thread): a
# stripped kvmeter, RAMCloud's coordinator, server and client library, kvmeter's RAMCloud
# plug-in, and every shared library they load except glibc's own (the host's loader must match
# its libc: the host needs glibc at least as new as this machine's, recorded in facts.txt).
#   RAMCLOUD_ARCH=x86-64-v2 plugins/ramcloud/build.sh ~/src/ramcloud   # binaries for another CPU
#   cargo build --release --features all-stores
#   bash bench/ramcloud-bundle.sh [OUT]     # default target/ramcloud-bundle (about 37 MiB)
# Then carry OUT and a checkout of this repository (the scripts) to the host and run
#   bash bench/ramcloud-16cpu.sh OUT        # needs python3 and taskset there
# OUT must be new, empty, or a bundle this script made (only the files it listed are replaced).
set -euo pipefail
out=${1:-}
here=$(cd "$(dirname "$0")/.." && pwd)
[[ -n $out ]] || out=$here/target/ramcloud-bundle
[[ $out == /* ]] || out=$PWD/$out
cd "$here"
rc=target/plugins/ramcloud
need=("$rc/libkvm_ramcloud.so" "$rc/src/obj/coordinator" "$rc/src/obj/server" "$rc/src/obj/libramcloud.so")
for f in "${need[@]}"; do
  [[ -e $f ]] || { echo "ramcloud-bundle: $f missing (run plugins/ramcloud/build.sh first)" >&2; exit 2; }
done
[[ -x target/release/kvmeter ]] || { echo "ramcloud-bundle: target/release/kvmeter missing (cargo build --release)" >&2; exit 2; }
# RAMCloud's own build uses -march=native: its binaries may hold instructions another host
# lacks (SIGILL there). build.sh records the target it compiled for.
arch=$(cat "$rc/arch" 2>/dev/null || echo unknown)
case $arch in
  native|unknown)
    echo "ramcloud-bundle: RAMCloud was built for -march=$arch ($rc/arch), which another host may not run:" \
      "rebuild with RAMCLOUD_ARCH=x86-64-v2 plugins/ramcloud/build.sh" >&2
    exit 2 ;;
esac
for tool in ldd strip; do
  command -v "$tool" >/dev/null || { echo "ramcloud-bundle: $tool not found (binutils, libc-bin)" >&2; exit 2; }
done
# OUT: new, empty, or an earlier bundle holding nothing but the files its manifest lists.
manifest=.ramcloud-bundle
if [[ -L $out ]]; then echo "ramcloud-bundle: $out is a symbolic link: name a directory" >&2; exit 2; fi
if [[ -e $out ]]; then
  [[ -d $out ]] || { echo "ramcloud-bundle: $out exists and is not a directory" >&2; exit 2; }
  listing=$(ls -A "$out") || { echo "ramcloud-bundle: cannot list $out" >&2; exit 2; }
  if [[ -n $listing ]]; then
    [[ -f $out/$manifest ]] || { echo "ramcloud-bundle: $out is not empty and not a bundle this script made: choose another OUT" >&2; exit 2; }
    while read -r f; do
      [[ $f == "$manifest" ]] || grep -qxF -- "$f" "$out/$manifest" ||
        { echo "ramcloud-bundle: $out/$f is not one of the bundle's files: choose another OUT" >&2; exit 2; }
    done <<< "$listing"
    while read -r f; do [[ -n $f ]] && rm -f -- "${out:?}/$f"; done < "$out/$manifest"
    rm -f -- "$out/$manifest"
  fi
fi
mkdir -p "$out"
files=(kvmeter coordinator server libramcloud.so libkvm_ramcloud.so)
cp target/release/kvmeter "${need[@]}" "$out/"
strip "${files[@]/#/$out/}"
# Every library ldd resolves, but glibc's (loader, libc, libm, libpthread, libdl, librt); a
# library ldd cannot find stops the bundle here rather than on the host.
libs=$(for bin in "$out"/kvmeter "$out"/coordinator "$out"/server "$out"/libkvm_ramcloud.so; do
  LD_LIBRARY_PATH="$out" ldd "$bin"
done)
if grep -q 'not found' <<< "$libs"; then
  echo "ramcloud-bundle: ldd finds no $(grep 'not found' <<< "$libs" | awk '{print $1}' | sort -u | tr '\n' ' ')" >&2
  exit 1
fi
while read -r lib; do
  name=$(basename "$lib")
  case $name in
    ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*) continue ;;
  esac
  [[ -e $out/$name ]] && continue
  cp -L "$lib" "$out/"
  files+=("$name")
done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 }' <<< "$libs" | sort -u)
{
  echo "kvmeter: $(git describe --always --dirty 2>/dev/null || echo unknown)"
  echo "ramcloud: $(grep -a -m1 -o '[[:alnum:]._-]*+kvmeter-patches' "$out/libkvm_ramcloud.so" || echo unknown), -march=$arch"
  echo "built on: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(date -u +%FT%TZ)"
  echo "glibc: $(getconf GNU_LIBC_VERSION | awk '{print $2}')"
} > "$out/facts.txt"
files+=(facts.txt)
printf '%s\n' "${files[@]}" > "$out/$manifest"
size=$(du -sm "$out" | cut -f1)
if (( size > 60 )); then
  echo "ramcloud-bundle: $out is $size MiB, more than a 64 MiB carry allows" >&2
  exit 1
fi
echo "ramcloud-bundle: $out ($size MiB): ${files[*]}" >&2
echo "$out"
