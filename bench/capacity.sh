#!/usr/bin/env bash
# Capacity at mean < 1 ms (papers/003) on memcached, Redis (managed, loopback) and RocksDB:
# workload C (GETs), 16 workers, Poisson arrivals, 4 s points after 1 s warm-up, 10,000 records.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=$(date +%Y%m%d-%H%M%S)
for store in ${*:-memcached redis rocksdb}; do
  target/release/kvmeter capacity -P workloadc --store "$store" --records 10000 \
    --duration 4s --warmup 1s --start-rate 5000 --precision 0.05 \
    --out "bench/results/capacity-$store-$stamp" 2>"bench/results/capacity-$store-$stamp.stderr"
done
