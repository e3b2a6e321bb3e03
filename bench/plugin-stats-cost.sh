#!/bin/bash
# The cost of a plug-in's statistics (issue 43): the example LMDB plug-in built with the
# optional statistics calls (sampled every 100 ms) against the same source built without them
# (-DKVM_LMDB_NO_STATS: a plug-in from before the calls), and, when a SplinterDB build is
# given, the SplinterDB plug-in before its per-session byte counting (OLD_SPLINTER_SO) against
# after (NEW_SPLINTER_SO). Interleaved (4 rounds), same binary, same command and data shape:
# 1 thread, 20,000 records of one 1,000-byte field, a fresh data directory per run, workload C
# (reads) and workload A (half updates), 8 s each. Prints each run phase's throughput.
# Usage: bench/plugin-stats-cost.sh [OLD_SPLINTER_SO NEW_SPLINTER_SO]
set -u
K=$(realpath target/release/kvmeter)
REPO=$(pwd)
W=$(mktemp -d /tmp/kvps.XXXX)
for v in with without; do
  mkdir -p "$W/$v"; cp examples/plugins/Makefile examples/plugins/kvm_lmdb.c "$W/$v/"
  flags="-O2"; [ $v = without ] && flags="-O2 -DKVM_LMDB_NO_STATS"
  make -s -C "$W/$v" KVMETER_INCLUDE="$REPO/include" CFLAGS="$flags" >/dev/null
done
cd "$W"
C="--records 20000 -p fieldcount=1 -p fieldlength=1000 --duration 8s --interval 100ms"
ops() { python3 -c "import json,sys; s=json.load(open(sys.argv[1]+'/summary.json')); p=[p for p in s['phases'] if p['name']=='run'][0]; print(round(p['throughput_ops_per_s']))" $1; }
pairs="lmdb:$W/without/libkvm_lmdb.so:$W/with/libkvm_lmdb.so"
[ $# -eq 2 ] && pairs="$pairs splinterdb:$(realpath "$1"):$(realpath "$2")"
for round in 1 2 3 4; do
 for pair in $pairs; do
  IFS=: read -r name old new <<<"$pair"
  extra="--store-opt sync=nosync"; [ $name = splinterdb ] && extra="--store-opt cache_mb=256 --store-opt disk_size_gb=2"
  for w in workloadc workloada; do
   line="round $round $name $w:"
   for which in old new; do
    so=$old; [ $which = new ] && so=$new
    $K run -P $w --store plugin:$so $extra $C --data-dir $W/d --out $W/$name-$w-$which-$round >/dev/null 2>&1
    line="$line $which $(ops $W/$name-$w-$which-$round)"
    rm -rf $W/d
   done
   echo "$line"
  done
 done
done
echo "dir $W"
