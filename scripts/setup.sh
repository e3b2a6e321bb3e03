#!/usr/bin/env bash
# Installs the system packages kvmeter's build and tests need, only if they are missing:
# a C++ compiler and libclang (the bundled RocksDB is compiled from source and bindgen needs
# libclang), the libraries of the embedded stores that link Debian's builds (WiredTiger,
# LevelDB), the servers kvmeter starts itself (memcached, redis-server, etcd), and the
# headless browser the report tests open report.html in, the LMDB library the example store
# plug-in links, the openssl command line the TLS tests make certificates with and the
# Prometheus the metrics tests scrape with (chromium, liblmdb-dev, openssl and prometheus,
# with KVMETER_SETUP_TESTS=1).
# Debian/Ubuntu only; runs apt-get as root, or through sudo.
set -euo pipefail

need=()
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
if command -v dpkg >/dev/null 2>&1; then
  dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
elif ! ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/*/libclang.so* >/dev/null 2>&1; then
  need+=(libclang-dev)
fi
# Stores: Debian package → a file it installs.
for pair in libwiredtiger-dev:/usr/include/wiredtiger.h libleveldb-dev:/usr/include/leveldb/db.h \
            memcached:/usr/bin/memcached redis-server:/usr/bin/redis-server etcd-server:/usr/bin/etcd; do
  pkg=${pair%%:*}; file=${pair#*:}
  [ -e "$file" ] || need+=("$pkg")
done
# The browser only the tests need (run-tests.sh sets it); the suite does not download it.
if [ "${KVMETER_SETUP_TESTS:-0}" = 1 ] && [ ! -e /usr/bin/chromium ]; then
  need+=(chromium)
fi
# The tests make TLS certificates with the openssl command line (Redis and etcd over TLS).
if [ "${KVMETER_SETUP_TESTS:-0}" = 1 ] && ! command -v openssl >/dev/null 2>&1; then
  need+=(openssl)
fi
if [ "${KVMETER_SETUP_TESTS:-0}" = 1 ] && [ ! -e /usr/include/lmdb.h ]; then
  need+=(liblmdb-dev)
fi
# tests/report/metrics.rs scrapes a run with a real Prometheus (2.42 has native histograms).
if [ "${KVMETER_SETUP_TESTS:-0}" = 1 ] && ! command -v prometheus >/dev/null 2>&1; then
  need+=(prometheus)
fi
# --profile's tests sample with perf (Debian's linux-perf).
if [ "${KVMETER_SETUP_TESTS:-0}" = 1 ] && ! command -v perf >/dev/null 2>&1; then
  need+=(linux-perf)
fi
if [ "${#need[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: kvmeter's build and stores need: ${need[*]}; install them with your package manager" >&2
    exit 2
  fi
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "error: installing ${need[*]} needs root: run 'apt-get install ${need[*]}' as root, then retry" >&2
      exit 2
    fi
  fi
  echo "installing system packages: ${need[*]}" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

# rustfmt and clippy are part of rustup's default profile; add them if this toolchain lacks them.
if command -v rustup >/dev/null 2>&1; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c" >&2 || true
  done
fi
