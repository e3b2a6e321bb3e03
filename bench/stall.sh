#!/usr/bin/env bash
# bench/stall.sh: the engine's from-intended latency after a server stall, against the ground
# truth computed from the schedule (issue 30: "from-intended p99 after a 200 ms SIGSTOP within
# 15 % of the ground truth"). kvmeter starts memcached itself, sends fixed arrivals at RATE over
# N connections, and SIGSTOPs the server for STALL at 2 s (--fault ... stop=server,for=...);
# the stop and continue instants come from kvmeter's own fault_events. Ground truth: arrival k
# at k/RATE waits until the continue if it fell in the stall, plus the median from-send latency
# outside it; its p99 over every arrival of the phase is compared with kvmeter's from-intended
# p99 (READ). Results: bench/results/stall-<date>/{raw.tsv,summary.tsv}.
#
#   REPS=3 RATE=20000 DUR=5 STALL_MS=200 CONNS="16 1000" bench/stall.sh
set -euo pipefail
cd "$(dirname "$0")/.."
KVMETER=${KVMETER:-target/release/kvmeter}
REPS=${REPS:-3}; RATE=${RATE:-20000}; DUR=${DUR:-5}; STALL_MS=${STALL_MS:-200}
CONNS=${CONNS:-"16 1000"}; SLACK=${SLACK:-}
OUT=bench/results/stall-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
ulimit -n 20000 2>/dev/null || true
printf 'conns\tround\tslack\tkvmeter_p99_ms\ttruth_p99_ms\tratio\tstall_ms\tops\n' > "$OUT/raw.tsv"
for r in $(seq 1 "$REPS"); do
  for n in $CONNS; do
    d=$(mktemp -d)
    args=(run --store memcached -P workloadc --records 10000 --connections "$n"
          --rate "$RATE" --arrival fixed --duration "${DUR}s"
          --fault "at=2s,stop=server,for=${STALL_MS}ms" --out "$d/run")
    [ -n "$SLACK" ] && args+=(--send-slack "$SLACK")
    echo "$KVMETER ${args[*]}" >> "$OUT/commands.log"
    "$KVMETER" "${args[@]}" > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
    python3 - "$d/run/summary.json" "$n" "$r" "${SLACK:-0}" >> "$OUT/raw.tsv" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
p = [p for p in s["phases"] if p["name"] == "run"][0]
ev = {e["event"]: e["t_s"] for e in p["fault_events"]}
stop, cont = ev["stop"], ev["continue"]
rate = p["open_loop"]["offered_ops_per_s"]
dur = p["wall_seconds"] if "wall_seconds" in p else p["measured_seconds"]
base = p["ops"]["READ"]["latency_us"]["p50"] / 1e6
n = int(round(rate * p["measured_seconds"]))
lat = sorted(max(0.0, cont - k / rate) + base if stop <= k / rate < cont else base
             for k in range(n))
truth = lat[min(n - 1, int(0.99 * n))] * 1e3
got = p["ops"]["READ"]["intended_latency_us"]["p99"] / 1e3
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}\t{got:.1f}\t{truth:.1f}\t{got / truth:.3f}\t{(cont - stop) * 1e3:.1f}\t{p['ops']['READ']['count']}")
PY
    rm -rf "$d"
  done
done
python3 - "$OUT/raw.tsv" > "$OUT/summary.tsv" <<'PY'
import csv, sys, statistics
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print("conns\tslack\tmedian_ratio\tmin_ratio\tmax_ratio\tmedian_kvmeter_p99_ms\tmedian_truth_p99_ms")
for n in sorted({r["conns"] for r in rows}, key=int):
    rs = [r for r in rows if r["conns"] == n]
    q = [float(r["ratio"]) for r in rs]
    print(f"{n}\t{rs[0]['slack']}\t{statistics.median(q):.3f}\t{min(q):.3f}\t{max(q):.3f}\t"
          f"{statistics.median(float(r['kvmeter_p99_ms']) for r in rs):.1f}\t"
          f"{statistics.median(float(r['truth_p99_ms']) for r in rs):.1f}")
PY
cat "$OUT/summary.tsv"
echo "results: $OUT"
