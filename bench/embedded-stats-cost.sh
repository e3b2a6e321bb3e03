#!/bin/bash
# The cost of sampling LMDB's, LevelDB's and SQLite's own statistics (issue 43) every 100 ms:
# an older binary, which samples nothing for them, against this one, interleaved (4 rounds),
# on the same command and data shape: 1 thread, 20,000 records of one 1,000-byte field, a
# fresh data directory per run, workload C (reads) and workload A (half updates), 8 s each.
# Prints each run phase's throughput.
# Usage: bench/embedded-stats-cost.sh OLD_KVMETER [NEW_KVMETER]
set -u
OLD=$(realpath "$1"); NEW=$(realpath "${2:-target/release/kvmeter}")
W=$(mktemp -d /tmp/kves.XXXX); cd "$W"
C="--records 20000 -p fieldcount=1 -p fieldlength=1000 --duration 8s --interval 100ms"
ops() { python3 -c "import json,sys; s=json.load(open(sys.argv[1]+'/summary.json')); p=[p for p in s['phases'] if p['name']=='run'][0]; print(round(p['throughput_ops_per_s']))" $1; }
for round in 1 2 3 4; do
 for store in lmdb leveldb sqlite; do
  for w in workloadc workloada; do
   line="round $round $store $w:"
   for which in old new; do
    K=$OLD; [ $which = new ] && K=$NEW
    extra=""; [ $store = lmdb ] && extra="--store-opt sync=nosync"
    $K run -P $w --store $store $extra $C --data-dir $W/d-$store-$w-$which-$round --out $W/$store-$w-$which-$round >/dev/null 2>&1
    line="$line $which $(ops $W/$store-$w-$which-$round)"
    rm -rf $W/d-$store-$w-$which-$round
   done
   echo "$line"
  done
 done
done
echo "dir $W"
