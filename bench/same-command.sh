#!/usr/bin/env bash
# Every row of issue 45's table in one command: kvmeter beside the peer a user knows, on the same
# server, data and command, interleaved rounds, medians, with the machine's facts (issue 45,
# BENCHMARKS.md "Same command, every peer").
#   bash bench/same-command.sh            -> bench/results/same-command-<date>/{facts.txt,rows.tsv, ...}
# Rows (ROWS, default: the 2-CPU rows everywhere, the 16-CPU rows where nproc >= 16):
#   (with AB_OLD=<an older kvmeter binary>, the redis rows are also run by that binary, interleaved)
#   redis   Redis HGETALL of 1,000-byte one-field hashes, 1 and 2 threads x 1 connection:
#           kvmeter's worker threads (t1, t2) and its event-driven engine (--connections 2, e2)
#           against redis-benchmark -c 1 and -c 2 --threads 2 (bench/compare.sh redis-same-*)
#   mc      memcached GET in memcslap's own data shape, 1 and 2 threads, against memcslap
#           (libmemcached-tools; bench/compare.sh mc-same-*)
#   rocks   RocksDB readrandom, 100 k x 1,000 B, 1 thread, in memory, db_bench's data shape
#           (keys in order): kvmeter against db_bench built from kvmeter's own RocksDB
#           (bench/build-db_bench.sh; bench/compare.sh rocks-kvmeter-seq-t1, rocks-dbbench-same-t1),
#           with the rows that explain the ratio: the direct loop with YCSB's keys and with
#           db_bench's (rocks-direct-seq(-dbbkeys)-t1) and db_bench --histogram=1; kvmeter with
#           statistics=off against db_bench's default (neither has RocksDB's counters) and kvmeter's
#           default against db_bench --statistics=1 --stats_level=1 (both have them: the same
#           RocksDB configuration each way); and the random-order twin: YCSB's default hashed
#           keys against db_bench's filluniquerandom (rocks-kvmeter-t1, rocks-dbbench-same-rand-t1, and the
#           direct loop with those keys, rocks-direct-cold-t1)
#   mc16    memcached GET of 1 KiB values at 8 / 96 / 1,000 / 10,000 connections, the server on
#           the upper half of the CPUs (memcached -t half), each client on the lower half with
#           half as many threads: kvmeter's engine against memtier_benchmark, ops/s and ops per
#           client CPU-second (bench/conns.sh mc-get-*)
#   null16  the null store, workload C for DUR seconds, 1 thread against nproc threads
# Environment: REPS (rounds, default 3), DUR (seconds per server run, default 5), KVMETER (a
# prebuilt binary for the null16 and mc16 rows, which then need no cargo: a bare host), MEMTIER, GNU_TIME (passed
# to bench/conns.sh). Peers come from ../shared/peers (install-memtier.sh; redis-tools;
# bench/build-db_bench.sh); a row whose peer is missing is skipped with a warning.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
DUR=${DUR:-5}
N=$(nproc)
if [[ -z ${ROWS:-} ]]; then
  ROWS="redis mc rocks"
  (( N >= 16 )) && ROWS+=" mc16 null16"
fi
OUT=bench/results/same-command-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "kvmeter: $(git describe --always --dirty 2>/dev/null || echo "${KVMETER_REV:-unknown}")"
  echo "cpus: $N, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "threads per core: $(lscpu 2>/dev/null | sed -n 's/^Thread(s) per core: *//p')"
  echo "kernel: $(uname -r)"
  echo "memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "virtualization: $(systemd-detect-virt 2>/dev/null || echo unknown)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "rows: $ROWS; REPS=$REPS DUR=$DUR"
} | tee "$OUT/facts.txt"
has() { [[ " $ROWS " == *" $1 "* ]]; }

# The 2-CPU rows and the null store's scaling: bench/compare.sh, its cases interleaved.
only=()
has redis && only+=('redis-same-(kvmeter|bench|old)-t[12]' 'redis-same-(kvmeter|old)-e2')
has mc && only+=('mc-same-(kvmeter|memcslap)-t[12]')
# The RocksDB row with what explains it: the direct loop (the Rust binding, no harness) with
# YCSB's keys and with db_bench's, and db_bench timing every read (--histogram=1).
has rocks && only+=('rocks-kvmeter-seq-t1' 'rocks-direct-seq(-dbbkeys)?-t1' 'rocks-dbbench-same(-hist|-stats)?-t1')
# The same in YCSB's default (hashed) key order against db_bench's filluniquerandom, and both
# shapes without RocksDB's counters (statistics=off).
has rocks && only+=('rocks-kvmeter(-seq)?-off-t1' 'rocks-kvmeter-t1' 'rocks-direct-cold-t1' 'rocks-dbbench-same-rand(-stats)?-t1')
if (( ${#only[@]} )); then
  re="^($(IFS='|'; echo "${only[*]}"))\$"
  REPS=$REPS ONLY="$re" bash bench/compare.sh 2>&1 | tee "$OUT/compare.log" | grep -v '^warning' || true
  d=$(sed -n 's/^results: //p' "$OUT/compare.log" | tail -1)
  [[ -n $d && -d $d ]] && cp "$d"/raw.tsv "$d"/summary.tsv "$OUT/" 2>/dev/null || true
fi

# The null store's scaling, 1 thread against nproc, interleaved (no cargo needed: a bare host).
K=${KVMETER:-target/release/kvmeter}
if has null16; then
  [[ -x $K ]] || cargo build --release --quiet --features all-stores
  tmp=$(mktemp -d)
  for rep in $(seq 1 "$REPS"); do
    for t in 1 "$N"; do
      "$K" run -P workloadc --store null --phase run --ops 0 --duration "${DUR}s" --threads "$t" --out "$tmp/n$t-$rep" >/dev/null 2>&1
      v=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(round([p for p in s["phases"] if p["name"]=="run"][0]["throughput_ops_per_s"]))' "$tmp/n$t-$rep/summary.json")
      echo -e "null-scale-t$([[ $t == 1 ]] && echo 1 || echo N)\t$rep\t$v" | tee -a "$OUT/null.tsv" >&2
    done
  done
  rm -rf "$tmp"
fi

# The 16-CPU memcached rows: bench/conns.sh, server and client on disjoint halves.
if has mc16; then
  h=$(( N / 2 ))
  SERVER_CPUS="$h-$(( N - 1 ))" CLIENT_CPUS="0-$(( h - 1 ))" CLIENT_THREADS=$h MC_THREADS=$h \
    CONNS="8 96 1000 10000" ONLY='^mc-get-c[0-9]+-(kvmeter|memtier)$' REPS=$REPS DUR=$DUR \
    bash bench/conns.sh 2>&1 | tee "$OUT/conns.log" || true
  d=$(ls -td bench/results/conns-* | head -1)
  cp "$d"/ratios.tsv "$OUT/mc16-ratios.tsv" 2>/dev/null || true
  cp "$d"/summary.tsv "$OUT/mc16-summary.tsv" 2>/dev/null || true
fi

# One table of the rows against their goals.
python3 - "$OUT" <<'PY'
import csv, os, sys
out = sys.argv[1]
rows = []
import statistics
def med(case):
    p = os.path.join(out, "summary.tsv")
    if os.path.exists(p):
        for r in csv.DictReader(open(p), delimiter="\t"):
            if r["case"] == case: return float(r["median"])
    p = os.path.join(out, "null.tsv")
    if os.path.exists(p):
        vs = [float(l.split("\t")[2]) for l in open(p) if l.split("\t")[0] == case]
        if vs: return statistics.median(vs)
    return None
def add(name, a, b, goal):
    va, vb = med(a), med(b)
    ratio = f"{va / vb:.2f}" if va and vb else ""
    rows.append((name, f"{va:.0f}" if va else "", f"{vb:.0f}" if vb else "", ratio, goal))
add("redis HGETALL t1 (workers) / redis-benchmark -c 1", "redis-same-kvmeter-t1", "redis-same-bench-t1", ">= 1.0")
add("redis HGETALL t2 (workers) / redis-benchmark -c 2 --threads 2", "redis-same-kvmeter-t2", "redis-same-bench-t2", ">= 1.0")
add("redis HGETALL e2 (engine) / redis-benchmark -c 2 --threads 2", "redis-same-kvmeter-e2", "redis-same-bench-t2", ">= 1.0")
add("  the same, the older binary (AB_OLD), t1 / redis-benchmark", "redis-same-old-t1", "redis-same-bench-t1", "(before)")
add("  the same, the older binary (AB_OLD), t2 / redis-benchmark", "redis-same-old-t2", "redis-same-bench-t2", "(before)")
add("  the same, the older binary (AB_OLD), e2 / redis-benchmark", "redis-same-old-e2", "redis-same-bench-t2", "(before)")
add("memcached GET t1 / memcslap (its data shape)", "mc-same-kvmeter-t1", "mc-same-memcslap-t1", ">= 1.0")
add("memcached GET t2 / memcslap (its data shape)", "mc-same-kvmeter-t2", "mc-same-memcslap-t2", ">= 1.0")
# The same RocksDB configuration on both sides: RocksDB's counters on (kvmeter's default,
# statistics=basic, against db_bench --statistics=1 --stats_level=1) or off on both (kvmeter's
# statistics=off against db_bench's default).
add("rocksdb readrandom t1 / db_bench (same RocksDB, its counters on both)", "rocks-kvmeter-seq-t1", "rocks-dbbench-same-stats-t1", ">= 1.0")
add("rocksdb readrandom t1, statistics=off / db_bench (same RocksDB, no counters on either)", "rocks-kvmeter-seq-off-t1", "rocks-dbbench-same-t1", ">= 1.0")
add("  kvmeter / db_bench (counters on kvmeter's side only)", "rocks-kvmeter-seq-t1", "rocks-dbbench-same-t1", "(explains)")
add("  db_bench with counters / without (RocksDB's counters' share)", "rocks-dbbench-same-stats-t1", "rocks-dbbench-same-t1", "(explains)")
add("  kvmeter, statistics=off / db_bench --histogram=1 (timing every read too)", "rocks-kvmeter-seq-off-t1", "rocks-dbbench-same-hist-t1", "(explains)")
add("  direct loop, YCSB's keys / db_bench (the binding and key content, no harness)", "rocks-direct-seq-t1", "rocks-dbbench-same-t1", "(explains)")
add("  direct loop, db_bench's keys / db_bench (the binding alone)", "rocks-direct-seq-dbbkeys-t1", "rocks-dbbench-same-t1", "(explains)")
add("  kvmeter / direct loop, YCSB's keys (the harness alone)", "rocks-kvmeter-seq-t1", "rocks-direct-seq-t1", "(explains)")
add("rocksdb readrandom t1, random key order: kvmeter (YCSB's hashed keys) / db_bench filluniquerandom, counters on both", "rocks-kvmeter-t1", "rocks-dbbench-same-rand-stats-t1", "(twin)")
add("  kvmeter, statistics=off / db_bench filluniquerandom, no counters on either", "rocks-kvmeter-off-t1", "rocks-dbbench-same-rand-t1", "(twin)")
add("  direct loop, YCSB's hashed keys / db_bench filluniquerandom", "rocks-direct-cold-t1", "rocks-dbbench-same-rand-t1", "(explains)")
add("null store: nproc threads / 1 thread", "null-scale-tN", "null-scale-t1", ">= 15 on 16 CPUs")
p = os.path.join(out, "mc16-ratios.tsv")
if os.path.exists(p):
    for r in csv.DictReader(open(p), delimiter="\t"):
        rows.append((f"{r['shape']} / {r['peer']}: ops/s", "", "", r["ops_per_s"], ">= 1.0"))
        rows.append((f"{r['shape']} / {r['peer']}: ops per client CPU-s", "", "", r["ops_per_cpu_s"], ">= 1.5"))
with open(os.path.join(out, "rows.tsv"), "w") as f:
    print("row\tkvmeter\tpeer\tratio\tgoal", file=f)
    for r in rows: print("\t".join(r), file=f)
for r in rows: print(" | ".join(r))
PY
echo "results: $OUT" >&2
