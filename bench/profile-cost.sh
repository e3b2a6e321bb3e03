#!/bin/bash
# The cost of --profile at its default frequency (issue 44): one binary, without and with
# --profile, interleaved (ROUNDS rounds, default 4), on three shapes:
#   rocksdb  : readrandom-like, workload C, 100,000 records of one 1,000-byte field, 1 thread
#   memcached: a managed memcached, workload C, 10,000 records, 100 connections on 1 event loop
#   null     : the null store, workload C, 1 thread
# each a run phase of DURATION (default 8s). Prints each run phase's throughput, the
# profile's own CPU (% of one CPU) and its samples; then the medians and their ratio.
#   bash bench/profile-cost.sh            (needs perf; as root, or perf_event_paranoid <= 1)
set -u
K=$(realpath target/release/kvmeter)
W=$(mktemp -d /tmp/kvprof.XXXX)
ROUNDS=${ROUNDS:-4}
D=${DURATION:-8s}
declare -A SHAPE=(
  [rocksdb]="--store rocksdb -P workloadc --records 100000 -p fieldcount=1 -p fieldlength=1000 --threads 1"
  [memcached]="--store memcached -P workloadc --records 10000 --connections 100 --threads 1"
  [null]="--store null -P workloadc --records 10000 --threads 1"
)
fig() { python3 - "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + '/summary.json'))
p = [p for p in s['phases'] if p['name'] == 'run'][0]
pr = (p.get('telemetry') or {}).get('profile')
extra = f" perf {pr['cost_pct_of_one_cpu']:.1f}% samples {pr['samples']}" if pr else ""
print(f"{p['throughput_ops_per_s']:.0f}{extra}")
PY
}
for round in $(seq 1 "$ROUNDS"); do
  for shape in rocksdb memcached null; do
    line="round $round $shape:"
    for mode in off on; do
      flag=""; [ "$mode" = on ] && flag="--profile"
      out=$W/r-$round-$shape-$mode
      # shellcheck disable=SC2086
      $K run ${SHAPE[$shape]} --duration "$D" $flag --out "$out" >/dev/null 2>"$out.stderr"
      line="$line $mode $(fig "$out")"
    done
    echo "$line"
  done
done | tee "$W/rounds.txt"
python3 - "$W/rounds.txt" <<'PY'
import re, statistics, sys
rows = {}
for l in open(sys.argv[1]):
    m = re.match(r"round \d+ (\w+): off (\d+) on (\d+)", l)
    if m:
        rows.setdefault(m[1], []).append((int(m[2]), int(m[3])))
for shape, v in rows.items():
    off = statistics.median(a for a, _ in v); on = statistics.median(b for _, b in v)
    ratios = sorted(b / a for a, b in v)
    print(f"{shape}: median off {off:.0f} on {on:.0f} ops/s, on/off {on/off:.3f} (pairs {ratios[0]:.3f}-{ratios[-1]:.3f})")
PY
echo "dir $W"
