#!/usr/bin/env bash
# Distributed runs at scale (issue 33): a real `kvmeter dist run` coordinator and a real etcd
# on this machine, N simulated agents (examples/dist_sim.rs) posting real-content interval
# reports recorded from one real agent run, through etcd (MODE=etcd) or straight to the
# coordinator (MODE=direct, `--reports`). Per run it samples etcd's DB size and revision
# (/v3/maintenance/status) and the coordinator's CPU and RSS (/proc) every second, and prints:
# etcd DB size start/end/max, revisions added, coordinator CPU-s per merged interval, merge ms
# and lateness ms p50/p99/max (dist/merge.csv), peak RSS, intervals merged / expected, failed
# writes. Everything shares this machine's CPUs (say so next to every figure).
#
#   NS="10 100 1000" MODES="etcd direct" INTERVALS=60 EVERY=1000 bench/dist-scale.sh
#
# Time is compressed when EVERY < 1000: each report's content is a recorded 1-s interval,
# posted every EVERY ms (a "simulated hour" is INTERVALS=3600). QUOTA is etcd's
# --quota-backend-bytes (default 2 GiB, etcd's own default). KILL=I@K loses agent I at
# interval K in every run. REC=DIR reuses a recorded agent run directory. COORD_CPUS=LIST pins
# the coordinator (taskset -c LIST): with one CPU its merge runs on one thread, the issue's
# "one core" figure measured in the whole pipeline.
# Results: bench/results/dist-scale/<UTC stamp>/ (runs, samples, summary.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
K=${K:-target/release/kvmeter}
SIM=${SIM:-target/release/examples/dist_sim}
NS=${NS:-10 100 1000}
MODES=${MODES:-etcd direct}
INTERVALS=${INTERVALS:-60}
EVERY=${EVERY:-1000}
THREADS=${THREADS:-16}
QUOTA=${QUOTA:-2147483648}
KILL=${KILL:-}
COORD_CPUS=${COORD_CPUS:-}
PIN=(); [ -n "$COORD_CPUS" ] && PIN=(taskset -c "$COORD_CPUS")
OUT=${OUT:-bench/results/dist-scale/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export KVMETER_PLAN_KEY=${KVMETER_PLAN_KEY:-dist-scale-bench-key-0123456789abcdef}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
MP=$(port)
memcached -u root -l 127.0.0.1 -p "$MP" -t 1 -U 0 >"$OUT/memcached.log" 2>&1 & pids+=($!)

# start_etcd DIR: a fresh single-member etcd with its own data directory and quota; sets EP.
start_etcd() {
  EP=$(port); local pp; pp=$(port)
  etcd --data-dir "$1/etcd" --quota-backend-bytes "$QUOTA" \
    --listen-client-urls "http://127.0.0.1:$EP" --advertise-client-urls "http://127.0.0.1:$EP" \
    --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
    --initial-cluster "default=http://127.0.0.1:$pp" >"$1/etcd.log" 2>&1 &
  ETCD_PID=$!; pids+=("$ETCD_PID")
  for _ in $(seq 100); do status >/dev/null 2>&1 && return; sleep 0.1; done
  echo "etcd did not start: $1/etcd.log" >&2; exit 1
}
status() { curl -sf -m 2 -X POST "http://127.0.0.1:$EP/v3/maintenance/status" -d '{}'; }
run_opts() { echo "--store memcached --store-opt addr=127.0.0.1:$MP -P workloada --records 10000 --threads 1 --interval 1s --telemetry-interval 0"; }

# The content: one real agent's run (1-s intervals) unless REC names one.
if [ -z "${REC:-}" ]; then
  d="$OUT/record"; mkdir -p "$d"; start_etcd "$d"
  # shellcheck disable=SC2046
  $K dist run --coord "http://127.0.0.1:$EP" --job record --agents 1 --out "$d/merged" \
    $(run_opts) --duration 20s >"$d/coord.log" 2>&1 & c=$!
  $K agent --coord "http://127.0.0.1:$EP" --job record --index 0 --out "$d/agent0" >"$d/agent0.log" 2>&1
  wait "$c"; kill "$ETCD_PID"; wait "$ETCD_PID" 2>/dev/null || true
  REC="$d/agent0"
fi
{
  echo "# bench/dist-scale.sh $(date -u +%FT%TZ) on $(hostname): $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# NS='$NS' MODES='$MODES' INTERVALS=$INTERVALS EVERY=${EVERY}ms THREADS=$THREADS QUOTA=$QUOTA KILL=$KILL REC=$REC COORD_CPUS=$COORD_CPUS"
} | tee "$OUT/summary.txt"

# sample FILE PID: etcd status and the coordinator's CPU ticks and RSS, every second.
sample() {
  echo "t,db_size,revision,cpu_ticks,rss_kb,hwm_kb" >"$1"
  local t0; t0=$(date +%s.%N)
  while kill -0 "$2" 2>/dev/null; do
    local st cpu rss hwm
    st=$(status 2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j.get("dbSize",0), j["header"]["revision"])' 2>/dev/null || echo "0 0")
    cpu=$(awk '{print $14+$15}' "/proc/$2/stat" 2>/dev/null || echo 0)
    rss=$(awk '/VmRSS/{print $2}' "/proc/$2/status" 2>/dev/null || echo 0)
    hwm=$(awk '/VmHWM/{print $2}' "/proc/$2/status" 2>/dev/null || echo 0)
    echo "$(python3 -c "import time; print('%.1f' % (time.time()-$t0))"),${st% *},${st#* },$cpu,$rss,$hwm" >>"$1"
    sleep 1
  done
}

for n in $NS; do
  for mode in $MODES; do
    d="$OUT/$mode-$n"; mkdir -p "$d"; start_etcd "$d"
    job="scale-$mode-$n"
    reports=etcd; [ "$mode" = direct ] && reports="127.0.0.1:$(port)"
    # shellcheck disable=SC2046
    ${PIN[@]+"${PIN[@]}"} $K dist run --coord "http://127.0.0.1:$EP" --job "$job" --agents "$n" --out "$d/merged" \
      $(run_opts) --phase run --register-timeout 300s --reports "$reports" >"$d/coord.log" 2>&1 &
    c=$!
    sample "$d/samples.csv" "$c" & s=$!
    $SIM run --coord "http://127.0.0.1:$EP" --job "$job" --agents "$n" --from "$REC" \
      --every "$EVERY" --intervals "$INTERVALS" --threads "$THREADS" ${KILL:+--kill "$KILL"} \
      >"$d/sim.json" 2>"$d/sim.log" & sp=$!
    # The coordinator ends the run; the simulator gets 30 s more to end (or is stopped).
    wait "$c" || true
    for _ in $(seq 300); do kill -0 "$sp" 2>/dev/null || break; sleep 0.1; done
    kill "$sp" 2>/dev/null || true
    wait "$sp" || true
    wait "$s" || true
    kill "$ETCD_PID"; wait "$ETCD_PID" 2>/dev/null || true
    python3 - "$d" "$n" "$mode" "$INTERVALS" <<'PY' | tee -a "$OUT/summary.txt"
import csv, json, os, sys
d, n, mode, expected = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
rows = list(csv.DictReader(open(f"{d}/samples.csv")))
db = [int(r["db_size"]) for r in rows if int(r["revision"]) > 0]
rev = [int(r["revision"]) for r in rows if int(r["revision"]) > 0]
cpu_s = max((int(r["cpu_ticks"]) for r in rows), default=0) / os.sysconf("SC_CLK_TCK")
hwm = max((int(r["hwm_kb"]) for r in rows), default=0)
try:
    info = json.load(open(f"{d}/merged/dist.json"))
    summary = json.load(open(f"{d}/merged/summary.json"))
    status = summary["status"]
except Exception as e:
    info, status = {}, f"no merged result ({e})"
merged = sum(p["intervals"] for p in info.get("phases", []))
m = info.get("merge") or {}
def spread(k):
    s = m.get(k) or {}
    return "/".join(f"{s.get(q, float('nan')):.1f}" for q in ("p50", "p99", "max"))
try:
    sim = json.loads(open(f"{d}/sim.json").read().strip().splitlines()[-1])
except Exception:
    sim = {}
mb = lambda b: f"{b / 1e6:.1f}"
print(f"{mode}\tN={n}\tetcd DB MB start/end/max {mb(db[0]) if db else '?'}/{mb(db[-1]) if db else '?'}/{mb(max(db)) if db else '?'}"
      f"\trevisions +{rev[-1] - rev[0] if rev else '?'}"
      f"\tcoord CPU-s/interval {cpu_s / merged if merged else float('nan'):.3f} ({cpu_s:.1f} s)"
      f"\tmerge ms p50/p99/max {spread('merge_ms')}\tlateness ms p50/p99/max {spread('lateness_ms')}"
      f"\tpeak RSS {hwm / 1024:.0f} MB\tintervals merged {merged}/{expected}"
      f"\tfailed writes {sim.get('failed_writes', '?')} ({sim.get('last_error', '')[:80]})"
      f"\tsim behind max {sim.get('behind_ms_max', '?')} ms\tlost {len(info.get('lost', []))}\tstatus {status}")
PY
  done
done
echo "results: $OUT"
