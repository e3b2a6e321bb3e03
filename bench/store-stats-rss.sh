#!/bin/bash
# Sampling for 10 minutes at 100 ms intervals (issue 43): kvmeter's RSS (VmRSS, every 30 s)
# and the size of store_stats.csv and store_events.csv, for RocksDB (statistics, DB
# properties and its LOG's events) and Redis (INFO all on its own connection), run side by
# side. Flat RSS and files that grow by their rows only are what is asked.
# Usage: bench/store-stats-rss.sh [path/to/kvmeter] [duration, default 10m]
set -u
K=$(realpath "${1:-target/release/kvmeter}"); D=${2:-10m}
W=$(mktemp -d /tmp/kvrss.XXXX); cd "$W"
C="-P workloada --duration $D --interval 100ms --telemetry-interval 100ms --target 5000"
$K run $C --records 100000 -p fieldcount=1 -p fieldlength=1000 --store-opt write_buffer_mb=4 --out $W/rocksdb >/dev/null 2>&1 &
R=$!
$K run $C --store redis --records 100000 --out $W/redis >/dev/null 2>&1 &
S=$!
sleep 20
while kill -0 $R 2>/dev/null || kill -0 $S 2>/dev/null; do
  line="$(date -u +%H:%M:%S)"
  for p in $R $S; do
    line="$line $(awk '/VmRSS/ {print $2}' /proc/$p/status 2>/dev/null || echo -) KiB"
  done
  for f in rocksdb/store_stats.csv rocksdb/store_events.csv redis/store_stats.csv; do
    line="$line $f $(wc -lc < $W/$f 2>/dev/null | tr -s ' ' '/')"
  done
  echo "$line"
  sleep 30
done
echo "dir $W"
