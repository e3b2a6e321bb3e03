#!/usr/bin/env bash
# Builds db_bench from the RocksDB sources the `rocksdb` crate bundles (librocksdb-sys), linked
# against the very librocksdb.a kvmeter's release build made, so db_bench and kvmeter read with
# the same RocksDB version and build flags. Debian's db_bench is 7.8.3; kvmeter's RocksDB is the
# crate's (11.8.1 for librocksdb-sys 0.19): without this, a db_bench ratio mixes the harness
# with two library versions. The defines are librocksdb-sys's build.rs for Linux x86_64
# (NDEBUG changes some class layouts, so they must match the library's). The crate's
# build_version.cc also defines RocksDbIOUringEnable, which db_bench defines for its
# --io_uring_enabled flag: the linker keeps db_bench's (the first) definition.
#   bash bench/build-db_bench.sh   -> target/db_bench-<version>/db_bench (prints its path)
# Needs: a release build (cargo build --release), g++, libgflags-dev, and the compression
# headers the library was built with (libsnappy-dev liblz4-dev libzstd-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
ver=$(sed -n '/^name = "librocksdb-sys"/{n;s/^version = "\(.*\)"/\1/p}' Cargo.lock)
src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/librocksdb-sys-"$ver"/rocksdb 2>/dev/null | head -1)
[[ -n $src ]] || { echo "build-db_bench: librocksdb-sys $ver sources not in the cargo registry (run cargo build --release first)" >&2; exit 2; }
lib=$(ls -t target/release/build/librocksdb-sys-*/out/librocksdb.a 2>/dev/null | head -1)
[[ -n $lib ]] || { echo "build-db_bench: no target/release/build/librocksdb-sys-*/out/librocksdb.a (run cargo build --release first)" >&2; exit 2; }
out=target/db_bench-${ver#*+}
if [[ $out/db_bench -nt $lib ]]; then echo "$PWD/$out/db_bench"; exit 0; fi
for h in gflags/gflags.h snappy.h lz4.h zstd.h; do
  [[ -e /usr/include/$h ]] || { echo "build-db_bench: /usr/include/$h missing (apt-get install libgflags-dev libsnappy-dev liblz4-dev libzstd-dev)" >&2; exit 2; }
done
libdir=$(dirname "$lib")
lz4=$(ls -t target/release/build/lz4-sys-*/out/liblz4.a | head -1)
zstd=$(ls -t target/release/build/zstd-sys-*/out/libzstd.a | head -1)
mkdir -p "$out"
echo "build-db_bench: compiling db_bench ${ver#*+} against $lib (a few minutes)" >&2
(cd "$src" && g++ -O2 -std=c++20 -DNDEBUG=1 -DHAVE_ALIGNED_NEW -DHAVE_UINT128_EXTENSION \
  -DOS_LINUX -DROCKSDB_PLATFORM_POSIX -DROCKSDB_LIB_IO_POSIX -DROCKSDB_SCHED_GETCPU_PRESENT \
  -DROCKSDB_AUXV_GETAUXVAL_PRESENT -DROCKSDB_FALLOCATE_PRESENT -DROCKSDB_RANGESYNC_PRESENT \
  -DGFLAGS=1 -DSNAPPY=1 -DLZ4=1 -DZSTD=1 -msse2 -I. -Iinclude \
  tools/db_bench.cc tools/db_bench_tool.cc tools/tool_hooks.cc tools/simulated_hybrid_file_system.cc \
  test_util/testutil.cc "$OLDPWD/$lib" "$OLDPWD/$libdir/libsnappy.a" "$OLDPWD/$lz4" "$OLDPWD/$zstd" \
  -Wl,--allow-multiple-definition -lgflags -lpthread -ldl -o "$OLDPWD/$out/db_bench")
echo "$PWD/$out/db_bench"
