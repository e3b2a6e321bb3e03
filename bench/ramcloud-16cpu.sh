#!/usr/bin/env bash
# RAMCloud itself (papers/002), measured where it can be: a host with a core for each polling
# thread (issue 45). On 2 vCPUs every request waits for a scheduler tick (~100 ops/s,
# docs/plugins.md); papers/002 reports 5 µs reads on dedicated hosts over InfiniBand. Here the
# transport is TCP on loopback: say so next to every figure.
#   bash bench/ramcloud-16cpu.sh BUNDLE [OUT]    # BUNDLE from bench/ramcloud-bundle.sh
# Layout: the client (kvmeter) on the lower half of the CPUs, the coordinator and the masters on
# the upper half (taskset), every RAMCloud process with --maxCores MAX_CORES (default 2).
# Steps, each a `kvmeter run` of DUR seconds after its load (RECORDS records of one 1,000-byte
# field, uniform requests):
#   latency   workload C, 1 thread, 1 master: the read latency beside the paper's 5 µs
#   suite     `kvmeter suite` with CLIENT_THREADS threads, 1 master (E's scans: N/A, RAMCloud
#             enumerates a table in hash order)
#   clients   workload C at 1, 2, 4 ... CLIENT_THREADS threads, 1 master (the preset's `clients`
#             step: papers/002 Table II, throughput against clients)
#   servers   workload C, CLIENT_THREADS threads, the table spread over 1, 2 and 3 masters
#             (the preset's `servers` step: §IV-A, 1 → 5 servers gained only 10 %)
# Environment: RECORDS (100000), DUR (5, at least 3), MAX_CORES (2), MEMORY_MB per master (1024), STEPS
# (default "latency suite clients servers"), FORCE=1 (run on fewer than 8 CPUs: a smoke test of
# this script, its figures meaningless). OUT/summary.tsv: one row per run.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: $0 BUNDLE [OUT]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
B=$(cd "$1" 2>/dev/null && pwd) || { echo "ramcloud-16cpu: $1: no such directory (a bundle from bench/ramcloud-bundle.sh was expected)" >&2; exit 2; }
for f in kvmeter coordinator server libkvm_ramcloud.so; do
  [[ -e $B/$f ]] || { echo "ramcloud-16cpu: $B/$f missing: not a bundle from bench/ramcloud-bundle.sh" >&2; exit 2; }
done
OUT=${2:-bench/results/ramcloud-$(date -u +%Y%m%dT%H%M%SZ)}
if [[ -e $OUT ]] && [[ -n $(ls -A "$OUT") ]]; then echo "ramcloud-16cpu: $OUT exists and is not empty" >&2; exit 2; fi
RECORDS=${RECORDS:-100000}
DUR=${DUR:-5}
STEPS=${STEPS:-latency suite clients servers}
[[ $DUR =~ ^[0-9]+$ ]] && (( DUR >= 3 )) || { echo "ramcloud-16cpu: DUR=$DUR: expected whole seconds, at least 3 (the suite's warm-up is 2 s)" >&2; exit 2; }
[[ $RECORDS =~ ^[0-9]+$ ]] && (( RECORDS > 0 )) || { echo "ramcloud-16cpu: RECORDS=$RECORDS: expected a whole number above 0" >&2; exit 2; }
N=$(nproc)
if (( N < 8 )) && [[ ${FORCE:-0} != 1 ]]; then
  echo "ramcloud-16cpu: $N CPUs here; RAMCloud's polling threads need a core each (8 or more CPUs; FORCE=1 runs anyway)" >&2
  exit 2
fi
h=$(( N / 2 ))
CLIENT_CPUS="0-$(( h - 1 ))"
SERVER_CPUS="$h-$(( N - 1 ))"
CLIENT_THREADS=${CLIENT_THREADS:-$h}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export LD_LIBRARY_PATH="$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
K=("taskset" "-c" "$CLIENT_CPUS" "$B/kvmeter")
STORE=(--store "plugin:$B/libkvm_ramcloud.so")
SHAPE=(-p fieldcount=1 -p fieldlength=1000 -p requestdistribution=uniform --records "$RECORDS")
{
  echo "date: $(date -u +%FT%TZ)"
  cat "$B/facts.txt"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $N CPUs"
  echo "kernel: $(uname -r)"
  echo "client CPUs: $CLIENT_CPUS ($CLIENT_THREADS threads); RAMCloud CPUs: $SERVER_CPUS; --maxCores ${MAX_CORES:-2}; transport: TCP on loopback"
  echo "records: $RECORDS of one 1,000-byte field; $DUR s per run"
} | tee "$OUT/facts.txt"

RUN_DIR="$OUT/cluster"   # each step's cluster logs: OUT/cluster-<step>
cluster() {  # cluster start|stop [SERVERS]
  RAMCLOUD_BIN="$B" RUN_DIR="$RUN_DIR" CPUS="$SERVER_CPUS" SERVERS="${2:-1}" \
    MEMORY_MB="${MEMORY_MB:-1024}" MAX_CORES="${MAX_CORES:-2}" bash plugins/ramcloud/cluster.sh "$1"
}
trap 'cluster stop >/dev/null 2>&1 || true' EXIT
echo -e "step\tpoint\tphase\tops_per_s\tread_p50_us\tread_p99_us\tupdate_p50_us\terrors\tnot_applicable" > "$OUT/summary.tsv"
# row STEP POINT RUNDIR: one line per phase of a run directory into summary.tsv.
row() {
  python3 - "$1" "$2" "$3" >> "$OUT/summary.tsv" <<'PY'
import json, sys
step, point, d = sys.argv[1:]
try:
    s = json.load(open(d + "/summary.json"))
except (OSError, ValueError) as e:
    print(f"{step}\t{point}\t-\t\t\t\t\tno summary: {e}")
    sys.exit(0)
def lat(p, op, q):
    v = (p.get("ops", {}).get(op) or {}).get("latency_us") or {}
    return f"{v[q]:.1f}" if v.get(q) is not None else ""
for p in s["phases"]:
    tput = p.get("throughput_ops_per_s")
    na = ",".join(p.get("not_applicable") or [])
    print(f"{step}\t{point}\t{p['name']}\t{tput:.0f}\t{lat(p,'READ','p50')}\t{lat(p,'READ','p99')}\t{lat(p,'UPDATE','p50')}\t{p.get('errors', '')}\t{na}"
          if tput is not None else f"{step}\t{point}\t{p['name']}\t\t\t\t\t{p.get('outcome')}\t")
PY
}
# A fresh cluster per run: every run loads its own table into empty masters. fresh NAME SERVERS
fresh() { cluster stop >/dev/null 2>&1 || true; RUN_DIR="$OUT/cluster-$1"; cluster start "$2"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

if has latency; then
  fresh latency 1
  "${K[@]}" run -P workloadc "${STORE[@]}" "${SHAPE[@]}" --threads 1 --ops 0 --duration "${DUR}s" \
    --out "$OUT/latency" > "$OUT/latency.log" 2>&1 || true
  row latency t1 "$OUT/latency"
fi
if has suite; then
  fresh suite 1
  "${K[@]}" suite "${STORE[@]}" "${SHAPE[@]}" --threads "$CLIENT_THREADS" --ops 0 --duration "${DUR}s" \
    --out "$OUT/suite" > "$OUT/suite.log" 2>&1 || true
  row suite "t$CLIENT_THREADS" "$OUT/suite"
fi
if has clients; then
  t=1
  while (( t <= CLIENT_THREADS )); do
    fresh "clients-t$t" 1
    "${K[@]}" run -P workloadc "${STORE[@]}" "${SHAPE[@]}" --threads "$t" --ops 0 --duration "${DUR}s" \
      --out "$OUT/clients-t$t" > "$OUT/clients-t$t.log" 2>&1 || true
    row clients "t$t" "$OUT/clients-t$t"
    t=$(( t * 2 ))
  done
fi
if has servers; then
  for s in 1 2 3; do
    fresh "servers-$s" "$s"
    "${K[@]}" run -P workloadc "${STORE[@]}" --store-opt "server_span=$s" "${SHAPE[@]}" --threads "$CLIENT_THREADS" \
      --ops 0 --duration "${DUR}s" --out "$OUT/servers-$s" > "$OUT/servers-$s.log" 2>&1 || true
    row servers "masters=$s" "$OUT/servers-$s"
  done
fi
cluster stop >/dev/null 2>&1 || true
column -t -s $'\t' "$OUT/summary.tsv" 2>/dev/null || cat "$OUT/summary.tsv"
echo "results: $OUT" >&2
