#!/usr/bin/env bash
# The pressure-scale run quoted in docs/interference.md: RocksDB (direct reads and flush/
# compaction I/O, 16 MiB block cache, so the store really uses the device), 1,000,000
# records, 2 threads, workloads A and B, antagonist block sizes 4 and 512 KiB, 8 s steps after
# a 16 s warm-up, 1 GiB antagonist files on the same disk.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
OUT=${OUT:-docs/results/pressure-$(date -u +%Y%m%d)}
mkdir -p "$OUT"
for w in a b; do
  target/release/kvmeter pressure -P workload$w --records 1000000 --threads 2 \
    --store-opt direct_reads=true --store-opt direct_io_flush_compaction=true --store-opt block_cache_mb=16 \
    --block-sizes 4,512 --step 8s --warmup 16s --io-file-size 1GiB --seed 1 \
    --out "$OUT/workload$w" > "$OUT/workload$w.txt" 2> "$OUT/workload$w.log"
done
echo "results: $OUT"
