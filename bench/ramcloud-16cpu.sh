#!/usr/bin/env bash
# RAMCloud itself (papers/002), measured where it can be: a host with a core for each polling
# thread (issue 45). On 2 vCPUs every request waits for a scheduler tick (~100 ops/s,
# docs/plugins.md); papers/002 reports 5 µs reads on dedicated hosts over InfiniBand. Here the
# transport is TCP on loopback: say so next to every figure.
#   bash bench/ramcloud-16cpu.sh BUNDLE [OUT]    # BUNDLE from bench/ramcloud-bundle.sh
# Layout: the CPUs this script may use, as whole cores (SMT siblings stay together), split in
# two: kvmeter on the first half, the coordinator and the masters on the second (taskset), every
# RAMCloud process with --maxCores MAX_CORES. The bundle's libraries are given to kvmeter and
# RAMCloud only (LD_LIBRARY_PATH), not to this script's python3 and taskset.
# Steps, each a `kvmeter run` of DUR seconds after its load (RECORDS records of one 1,000-byte
# field, uniform requests), each on a fresh cluster:
#   latency   workload C, 1 thread, 1 master: the read latency beside the paper's 5 µs
#   suite     `kvmeter suite` with CLIENT_THREADS threads, 1 master (E's scans: N/A, RAMCloud
#             enumerates a table in hash order)
#   clients   workload C at 1, 2, 4 ... and CLIENT_THREADS threads, 1 master (the preset's
#             `clients` step: papers/002 Table II, throughput against clients)
#   servers   workload C, CLIENT_THREADS threads, the table spread over 1, 2 and 3 masters
#             (the preset's `servers` step: §IV-A, 1 → 5 servers gained only 10 %)
# Environment: RECORDS (100000), DUR (5, at least 3: the suite's warm-up is 2 s), MAX_CORES (2),
# MEMORY_MB per master (1024), CLIENT_THREADS (the client's CPUs), STEPS (default "latency
# suite clients servers"), FORCE=1 (run on fewer than 8 CPUs: a smoke test of this script, its
# figures meaningless). OUT (default bench/results/ramcloud-<time>) must be new or empty;
# OUT/runs.csv is `kvmeter table` of every run (one row per run, phase and operation), written
# at the end however the script ends. Ctrl-C stops the step in progress (its results written),
# then the cluster, and exits 130.
set -euo pipefail
usage() { echo "usage: $0 BUNDLE [OUT]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
B=$(cd "$1" 2>/dev/null && pwd) || { echo "ramcloud-16cpu: $1: no such directory (a bundle from bench/ramcloud-bundle.sh was expected)" >&2; exit 2; }
OUT=${2:-}
[[ -z $OUT || $OUT == /* ]] || OUT=$PWD/$OUT
cd "$(dirname "$0")/.."
[[ -n $OUT ]] || OUT=$PWD/bench/results/ramcloud-$(date -u +%Y%m%dT%H%M%SZ)
for f in kvmeter coordinator server libramcloud.so libkvm_ramcloud.so facts.txt; do
  [[ -e $B/$f ]] || { echo "ramcloud-16cpu: $B/$f missing: not a bundle from bench/ramcloud-bundle.sh" >&2; exit 2; }
done
whole() { [[ $2 =~ ^[0-9]+$ ]] && (( $2 >= $3 )) || { echo "ramcloud-16cpu: $1=$2: expected a whole number, at least $3${4:+ ($4)}" >&2; exit 2; }; }
RECORDS=${RECORDS:-100000}; whole RECORDS "$RECORDS" 1
DUR=${DUR:-5}; whole DUR "$DUR" 3 "the suite's warm-up is 2 s"
MAX_CORES=${MAX_CORES:-2}; whole MAX_CORES "$MAX_CORES" 1
MEMORY_MB=${MEMORY_MB:-1024}; whole MEMORY_MB "$MEMORY_MB" 64
STEPS=${STEPS:-latency suite clients servers}
for s in $STEPS; do
  case $s in latency|suite|clients|servers) ;; *) echo "ramcloud-16cpu: STEPS: '$s' is not a step (latency, suite, clients, servers)" >&2; exit 2 ;; esac
done
for tool in python3 taskset; do
  command -v "$tool" >/dev/null || { echo "ramcloud-16cpu: $tool not found on this host" >&2; exit 2; }
done
want=$(sed -n 's/^glibc: //p' "$B/facts.txt")
have=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
if [[ -n $want ]] && [[ $(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1) != "$want" ]]; then
  echo "ramcloud-16cpu: the bundle needs glibc $want or newer; this host has $have" >&2
  exit 2
fi
# The allowed CPUs as whole cores, split in two: "client-list server-list threads-per-core cores".
read -r CLIENT_CPUS SERVER_CPUS TPC CORES < <(python3 - <<'PY'
import os, signal
signal.signal(signal.SIGINT, signal.SIG_DFL)
allowed = sorted(os.sched_getaffinity(0))
cores = {}
for c in allowed:
    try:
        sib = open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read().strip()
    except OSError:
        sib = str(c)
    cores.setdefault(sib, []).append(c)
groups = sorted(cores.values())
h = len(groups) // 2
if h == 0:
    print("- - 1 1"); raise SystemExit
lo = [c for g in groups[:h] for c in g]
hi = [c for g in groups[h:] for c in g]
tpc = max(len(g) for g in groups)
print(",".join(map(str, lo)), ",".join(map(str, hi)), tpc, len(groups))
PY
) || { echo "ramcloud-16cpu: could not read this host's CPUs (python3, /sys/devices/system/cpu)" >&2; exit 2; }
if [[ $CLIENT_CPUS == - ]]; then
  echo "ramcloud-16cpu: one core allowed here; client and cluster need one each at least" >&2
  exit 2
fi
if (( CORES < 8 )) && [[ ${FORCE:-0} != 1 ]]; then
  echo "ramcloud-16cpu: $CORES cores here; RAMCloud's polling threads need a core each (8 cores or more; FORCE=1 runs anyway)" >&2
  exit 2
fi
n_client=$(tr ',' '\n' <<< "$CLIENT_CPUS" | wc -l)
CLIENT_THREADS=${CLIENT_THREADS:-$n_client}; whole CLIENT_THREADS "$CLIENT_THREADS" 1
if [[ -e $OUT ]] && [[ -n $(ls -A "$OUT") ]]; then echo "ramcloud-16cpu: $OUT exists and is not empty" >&2; exit 2; fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LIB="$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
K=(env "LD_LIBRARY_PATH=$LIB" taskset -c "$CLIENT_CPUS" "$B/kvmeter")
STORE=(--store "plugin:$B/libkvm_ramcloud.so")
SHAPE=(-p fieldcount=1 -p fieldlength=1000 -p requestdistribution=uniform --records "$RECORDS")
n_server=$(tr ',' '\n' <<< "$SERVER_CPUS" | wc -l)
{
  echo "date: $(date -u +%FT%TZ)"
  cat "$B/facts.txt"
  echo "this script: $(git describe --always --dirty 2>/dev/null || echo unknown)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $CORES cores allowed, $TPC thread(s) per core"
  echo "glibc here: $have; kernel: $(uname -r)"
  echo "client CPUs: $CLIENT_CPUS ($CLIENT_THREADS threads); RAMCloud CPUs: $SERVER_CPUS; --maxCores $MAX_CORES; transport: TCP on loopback"
  echo "records: $RECORDS of one 1,000-byte field; $DUR s per run"
  # The servers step's 3 masters and the coordinator each poll on a thread of their own.
  (( n_server >= 4 )) || echo "warning: $n_server RAMCloud CPUs for up to 3 masters and a coordinator that each poll: the servers step shares CPUs"
} | tee "$OUT/facts.txt"

RUN_DIR="$OUT/cluster"   # each run's cluster logs: OUT/cluster-<step>
cluster() {  # cluster start|stop [SERVERS]
  LD_LIBRARY_PATH="$LIB" RAMCLOUD_BIN="$B" RUN_DIR="$RUN_DIR" CPUS="$SERVER_CPUS" SERVERS="${2:-1}" \
    MEMORY_MB="$MEMORY_MB" MAX_CORES="$MAX_CORES" bash plugins/ramcloud/cluster.sh "$1"
}
# At the end, however it comes: the cluster stopped, and every run so far as one table.
finish() {
  cluster stop >/dev/null 2>&1 || true
  [[ -e $OUT/runs.csv ]] || env "LD_LIBRARY_PATH=$LIB" "$B/kvmeter" table "$OUT" -o "$OUT/runs.csv" 2>/dev/null || true
}
trap finish EXIT
# Ctrl-C and SIGTERM: bash runs no INT trap when a foreground child catches the signal and exits
# (kvmeter does: it writes its results, then exits 130), and may not learn of it at all while a
# child script runs. So the long commands run as background children the script waits for
# (`child`): a signal ends the wait at once, is passed on to the child, and the script exits
# with 130 (143) once the child has finished.
interrupted=
child=
on_signal() { interrupted=$1; if [[ -n $child ]]; then kill -"$2" "$child" 2>/dev/null || true; fi; }
trap 'on_signal 130 INT' INT
trap 'on_signal 143 TERM' TERM
# child CMD...: runs CMD and waits for it, through signals; returns its exit status.
child() {
  local rc=0
  "$@" &
  child=$!
  while :; do
    rc=0
    wait "$child" || rc=$?
    kill -0 "$child" 2>/dev/null || break
  done
  child=
  return "$rc"
}
stop_if_interrupted() { if [[ -n $interrupted ]]; then exit "$interrupted"; fi; }
# measure NAME KVMETER-ARGS...: one kvmeter run on the client CPUs into OUT/NAME, its log
# beside it (NAME.log), its phases' one-line summaries on the terminal. kvmeter ends a run on
# Ctrl-C with its results written and exit code 130 (143 for SIGTERM): that ends the script.
# Any other failure is in the run's log.
measure() {
  local name=$1 rc=0
  shift
  child "${K[@]}" "$@" --out "$OUT/$name" > "$OUT/$name.log" 2>&1 || rc=$?
  grep -E '^(load|run|[a-z]+-[a-z]) .* (measured|completed|interrupted|failed)' "$OUT/$name.log" | sed "s/^/$name: /" || true
  (( rc == 0 )) || echo "$name: kvmeter exited $rc (see $OUT/$name.log)"
  if [[ -z $interrupted ]] && (( rc == 130 || rc == 143 )); then interrupted=$rc; fi
  stop_if_interrupted
}
# A fresh cluster per run: every run loads its own table into empty masters. fresh NAME SERVERS
fresh() {
  cluster stop >/dev/null 2>&1 || true
  stop_if_interrupted
  RUN_DIR="$OUT/cluster-$1"
  child cluster start "$2"
  stop_if_interrupted
}
has() { [[ " $STEPS " == *" $1 "* ]]; }

RUNFOR=(--ops 0 --duration "${DUR}s")
if has latency; then
  fresh latency 1
  measure latency run -P workloadc "${STORE[@]}" "${SHAPE[@]}" --threads 1 "${RUNFOR[@]}"
fi
if has suite; then
  fresh suite 1
  measure suite suite "${STORE[@]}" "${SHAPE[@]}" --threads "$CLIENT_THREADS" "${RUNFOR[@]}"
fi
if has clients; then
  points=()
  for (( t = 1; t < CLIENT_THREADS; t *= 2 )); do points+=("$t"); done
  points+=("$CLIENT_THREADS")
  for t in "${points[@]}"; do
    fresh "clients-t$t" 1
    measure "clients-t$t" run -P workloadc "${STORE[@]}" "${SHAPE[@]}" --threads "$t" "${RUNFOR[@]}"
  done
fi
if has servers; then
  for s in 1 2 3; do
    fresh "servers-$s" "$s"
    measure "servers-$s" run -P workloadc "${STORE[@]}" --store-opt "server_span=$s" "${SHAPE[@]}" \
      --threads "$CLIENT_THREADS" "${RUNFOR[@]}"
  done
fi
finish
echo "results: $OUT (runs.csv: kvmeter table of every run)" >&2
