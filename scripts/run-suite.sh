#!/usr/bin/env bash
# The default job: the YCSB suite (load A, run A B C F D, clear, load E, run E) on embedded
# RocksDB in a fresh temporary directory (the build has every store: --store wiredtiger,
# memcached, ... work too). Extra arguments go to 'kvmeter suite'
# (for example --threads 2, --records 1000000, --duration 60s, --format ycsb).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --quiet --features all-stores
exec target/release/kvmeter suite "$@"
