#!/bin/bash
# The cost of sampling a Redis Cluster's statistics (issue 43): each interval, CLUSTER SLOTS
# and `INFO all` of every master. One binary, `--store-stats on` against `off`, interleaved
# (4 rounds), on a managed three-master cluster: workload A, 20,000 records, 8 s at 100 ms
# intervals, on 100 connections of the event-driven engine and on 2 worker threads.
# Prints each run phase's throughput.
set -u
K=$(realpath target/release/kvmeter)
W=$(mktemp -d /tmp/kvcs.XXXX); cd "$W"
C="-P workloada --store redis --store-opt cluster=3 --records 20000 --duration 8s --interval 100ms"
ops() { python3 -c "import json,sys; s=json.load(open(sys.argv[1]+'/summary.json')); p=[p for p in s['phases'] if p['name']=='run'][0]; print(round(p['throughput_ops_per_s']))" $1; }
for round in 1 2 3 4; do
 for shape in "--connections 100" "--threads 2"; do
  line="round $round ${shape// /=}:"
  for st in off on; do
   out=$W/r-$round-${shape// /}-$st
   $K run $C $shape --store-stats $st --out $out >/dev/null 2>&1
   line="$line $st $(ops $out)"
  done
  echo "$line"
 done
done
echo "dir $W"
