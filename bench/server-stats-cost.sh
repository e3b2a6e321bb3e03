#!/bin/bash
# The cost of sampling a server's own statistics (issue 43: memcached `stats`, Redis `INFO all`
# on a connection of their own, every interval): an older binary, which samples nothing,
# against this one, interleaved (5 rounds), on the same managed servers and command: workload C
# over 100 engine connections (depth 4), 10 s, --interval 100ms (ten samples a second, the
# issue's rate). Prints each run's throughput and kvmeter's peak RSS.
# Usage: bench/server-stats-cost.sh OLD_KVMETER [NEW_KVMETER]
set -u
OLD=$(realpath "$1"); NEW=$(realpath "${2:-target/release/kvmeter}")
W=$(mktemp -d /tmp/kvsv.XXXX); cd "$W"
C="--connections 100 --depth 4 --records 10000 --duration 10s --interval 100ms --telemetry-interval 100ms"
ops() { python3 -c "import json,sys; s=json.load(open(sys.argv[1]+'/summary.json')); p=[p for p in s['phases'] if p['name']=='run'][0]; print(round(p['throughput_ops_per_s']))" $1; }
for round in 1 2 3 4 5; do
 for store in memcached redis; do
  line="round $round $store:"
  for which in old new; do
   K=$OLD; [ $which = new ] && K=$NEW
   /usr/bin/time -f "%M" -o $W/rss $K run -P workloadc --store $store $C --out $W/$store-$which-$round >/dev/null 2>&1
   line="$line $which $(ops $W/$store-$which-$round) ops/s rss $(cat $W/rss) KiB"
  done
  echo "$line"
 done
done
echo "dir $W"
