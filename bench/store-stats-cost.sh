#!/bin/bash
# The cost of RocksDB's statistics (issue 43): the same binary with --store-opt statistics=off
# against the default (basic: RocksDB's default level, sampled every interval into
# store_stats.csv), interleaved (3 rounds): fillrandom (a load of 200,000 1-KiB records into a
# fresh directory) and readrandom (workloadc for 4 s over a loaded directory), 1 and 2 threads.
# Usage: bench/store-stats-cost.sh [path/to/kvmeter]
set -u
K=$(realpath "${1:-target/release/kvmeter}")
W=$(mktemp -d /tmp/kvss.XXXX); cd "$W"
P="-p fieldcount=1 -p fieldlength=1024 --telemetry-interval 0"
$K run -P workloadc --phase load --records 200000 --threads 2 $P --data-dir $W/read --out $W/read-load >/dev/null 2>&1
ops() { python3 -c "import json,sys; s=json.load(open(sys.argv[1]+'/summary.json')); print(round(s['phases'][0]['throughput_ops_per_s']))" $1; }
for round in 1 2 3; do
 for stats in off basic; do
  line="round $round statistics=$stats:"
  for t in 1 2; do
   rm -rf $W/fill; $K run -P workloadc --phase load --records 200000 --threads $t $P --store-opt statistics=$stats --data-dir $W/fill --out $W/f-$stats-$t-$round >/dev/null 2>&1
   $K run -P workloadc --phase run --records 200000 --ops 0 --duration 4s --threads $t $P --store-opt statistics=$stats --data-dir $W/read --out $W/r-$stats-$t-$round >/dev/null 2>&1
   line="$line fill$t $(ops $W/f-$stats-$t-$round) read$t $(ops $W/r-$stats-$t-$round)"
  done
  echo "$line"
 done
done
echo "dir $W"
