#!/usr/bin/env bash
# kvmeter against memtier_benchmark (Redis Labs' load generator), redis-benchmark (redis-tools) and
# memcslap (libmemcached-tools) at many connections, on the same private servers and the same kind
# of data, round-robin, REPS rounds, medians (issue 30, BENCHMARKS.md "Connections"). memtier comes
# from ../shared/peers/install-memtier.sh SRC (RedisLabs/memtier_benchmark); redis-benchmark and
# memcslap from Debian (apt-get install redis-tools libmemcached-tools).
#   REPS=5 DUR=5 ONLY=regex bench/conns.sh   -> bench/results/conns-<date>/{raw.tsv,summary.tsv,ratios.tsv,commands.log}
#   ANALYZE=bench/results/conns-<date> bench/conns.sh   -> summary.tsv and ratios.tsv again from its raw.tsv
# Environment: KVMETER (binary, default target/release/kvmeter; copied first, so a build during the
# run does not swap it; KVMETER_REV: what it was built from, for raw.tsv's header), MEMTIER
# (default /opt/peers/memtier/bin/memtier_benchmark), REDIS_BENCHMARK (default redis-benchmark),
# MEMCSLAP (default memcslap; a peer whose binary is missing is skipped with a warning), PEER_RATE
# (see redis-benchmark below), DUR (seconds per run, --duration / --test-time; default 5), CONNS
# (default "1 100 1000 10000"), GNU_TIME (GNU time, default /usr/bin/time), CLIENT_THREADS (threads of each client: kvmeter's engine and
# memtier; default 2), MC_THREADS (memcached -t; default 2), SERVER_CPUS and CLIENT_CPUS (CPU lists
# for taskset: the servers, and every client run, pinned to them; default unpinned; on a 16-CPU
# host SERVER_CPUS=8-15 CLIENT_CPUS=0-7 CLIENT_THREADS=8 MC_THREADS=8), ARRIVAL (kvmeter's open-loop arrivals, default fixed: memtier's
# rate limiting spaces each connection's requests evenly),
# BACKLOG (the servers' listen backlog, default 4096: at 1,024 a 10,000-connection start
# overflowed memcached's accept queue thousands of times), LEGACY_MAX (see below).
# Servers (started once by the script on loopback, kept for every round, stopped at exit; unpinned,
# client and server share the CPUs):
#   memcached -c 20000 -t 2 -m 1024 -b BACKLOG -U 0 (-u nobody when root) on 127.0.0.1:21491
#   redis-server --save '' --appendonly no --maxclients 20000 --tcp-backlog BACKLOG: one for string values (GET) on
#   127.0.0.1:16591, one for hashes (HGETALL) on 127.0.0.1:16592
#   memcslap's own memcached, the same flags, on 127.0.0.1:21492: memcslap loads fresh random keys
#   on every run (it cannot reuse keys), so it gets a server of its own that it flushes (--flush)
#   before each load, and the others' keys are never evicted by its loads
# Data, loaded once per server before the first round, 100,000 keys of 1 KiB each tool:
#   kvmeter: its own keys (workload C, fieldcount=1 fieldlength=1024, recordcount=100000) by
#            `kvmeter run --phase load` (memcached; Redis string mode with encoding=string; hashes;
#            through the engine, --connections 8, when it has one: string mode is engine-only)
#   memtier: its own keys memtier-1..memtier-100000 by memtier itself, each key once
#            (--key-pattern P:P --requests allkeys --ratio 1:0 --data-size 1024; for the hashes
#            --command 'HSET __key__ field0 __data__' --command-key-pattern P)
#   redis-benchmark: key:000000000000 .. key:000000099999 (the names its -r 100000 draws), 1 KiB
#            values, loaded once by `redis-cli --pipe` (SET commands written by the script)
#   Each tool then reads its own 100,000 keys, uniformly: the same key space size and value size.
#   memcslap cannot: it loads E keys of its own before each run (values of random length, 2,592
#   bytes a GET reply on average by the server's bytes_written / get_hits; libmemcached 1.1.4 has
#   no flag for it), and each of its N threads then GETs E of them; E = the run's target count / N,
#   at most 100,000 (--execute-number; so at 10,000 connections its key space is a few dozen keys,
#   and at 1 connection a run can end before DUR).
# Cases (case names: <shape>-<tool>):
#   mc-get-c<N>       memcached GET, N connections, one request in flight each
#   redis-get-c<N>    Redis GET of string values (kvmeter --store-opt encoding=string)
#   redis-hgetall-c<N> Redis HGETALL of one-field hashes (kvmeter's default Redis encoding)
#   ol20k-c16, ol20k-c1000  open loop at 20,000 req/s over 16 / 1,000 connections, memcached GET:
#                     kvmeter --rate 20000; memtier --rate-limiting 20000/N per connection, its
#                     ops/s taken as its request count / DUR (its printed Ops/sec divides by a
#                     merged duration that can be a second off under rate limiting)
# kvmeter runs with the event-driven engine (--connections N --depth 1 --threads 2) when its
# `run --help` lists --depth; without it (before issue 30's engine) with one thread per
# connection (--threads N), only up to LEGACY_MAX connections (default 100). memtier: --threads 2
# --clients N/2 (N=1: --threads 1 --clients 1), --pipeline 1, --test-time DUR.
# redis-benchmark (case redis-get-c<N>-redisbench): -t get -d 1024 -r 100000 -P 1 -c N --threads 2
#   (N=1: no --threads) --csv -n COUNT; memcslap (case mc-get-c<N>-memcslap): --test get
#   --concurrency N (N threads, one blocking connection each) --execute-number E --flush. Both run a
#   request count, not a duration: COUNT = DUR x the median rate this case had in earlier rounds
#   (round 1: PEER_RATE, default 30000/s), so each run lasts about DUR seconds.
# Every row: ops/s (kvmeter: summary.json's throughput; memtier: its Totals Ops/sec, or count/DUR
# in open loop; redis-benchmark: its csv rps; memcslap: N x E / its "Time to get", a span that
# includes its threads' connecting), ops (memcslap: N x E GETs + its E loading SETs, all in the
# CPU it used: its per-op CPU is over both), client CPU seconds (user + system of the whole client process, from
# /usr/bin/time -f, the same way for both) and its ns per op, max RSS (KiB, /usr/bin/time %M),
# p50 and p99 from each tool's own output (kvmeter: summary.json READ latency_us, from the send;
# memtier: --json-out-file Totals "Percentile Latencies", ms -> us; memtier's histogram has 2
# significant digits from 10 us; redis-benchmark: its --csv p50/p99, ms with 3 decimals; memcslap
# reports none), kvmeter's from-intended p99 in open loop, errors (kvmeter's
# failed operations; memtier's Connection Errors), steady ops/s (the mean of the per-second
# counts from second 1 to DUR: memtier connects inside --test-time, kvmeter before its phase's
# clock starts, so at 10,000 connections the whole-run rate charges memtier its connection
# set-up), and the 1-minute load average when the case started (a concurrent build shows
# there). summary.tsv: medians per case; ratios.tsv: kvmeter / each peer per shape (ops/s, ops per
# client CPU-second, max RSS, p50, p99) as ratios of the medians, and the median of the
# per-round ratios of ops/s and ops per CPU-second (paired: the tools of a shape run back to back,
# and their order rotates by one every round).
set -euo pipefail
cd "$(dirname "$0")/.."
KVMETER=${KVMETER:-target/release/kvmeter}
MEMTIER=${MEMTIER:-/opt/peers/memtier/bin/memtier_benchmark}
REDIS_BENCHMARK=${REDIS_BENCHMARK:-redis-benchmark}
MEMCSLAP=${MEMCSLAP:-memcslap}
PEER_RATE=${PEER_RATE:-30000}
REPS=${REPS:-5}
ONLY=${ONLY:-.}
DUR=${DUR:-5}
CONNS=${CONNS:-1 100 1000 10000}
GNU_TIME=${GNU_TIME:-/usr/bin/time}
CLIENT_THREADS=${CLIENT_THREADS:-2}
MC_THREADS=${MC_THREADS:-2}
SERVER_PIN=() CLIENT_PIN=()
[[ -n ${SERVER_CPUS:-} ]] && SERVER_PIN=(taskset -c "$SERVER_CPUS")
[[ -n ${CLIENT_CPUS:-} ]] && CLIENT_PIN=(taskset -c "$CLIENT_CPUS")
ARRIVAL=${ARRIVAL:-fixed}
# Extra kvmeter flags for the open-loop cases, e.g. KV_OPEN_EXTRA='--send-slack 1ms'.
KV_OPEN_EXTRA=${KV_OPEN_EXTRA:-}
LEGACY_MAX=${LEGACY_MAX:-100}
BACKLOG=${BACKLOG:-4096}
MC_PORT=21491 MS_PORT=21492 RS_PORT=16591 RH_PORT=16592
SHAPE=(-p fieldcount=1 -p fieldlength=1024 -p requestdistribution=uniform --records 100000)
MT_KEYS=(--key-minimum 1 --key-maximum 100000 --data-size 1024)

[[ -n ${ANALYZE:-} || -x $KVMETER ]] || { echo "error: KVMETER=$KVMETER is not an executable (build kvmeter first)" >&2; exit 2; }
[[ -n ${ANALYZE:-} || -x $MEMTIER ]] || { echo "error: MEMTIER=$MEMTIER is not an executable (run ../shared/peers/install-memtier.sh SRC)" >&2; exit 2; }
# summarize DIR: summary.tsv (medians per case) and ratios.tsv from DIR/raw.tsv, printed.
summarize() {
python3 - "$1/raw.tsv" "$1/summary.tsv" "$1/ratios.tsv" <<'PY'
import sys, statistics, collections
cols = ["ops_per_s", "ops", "cpu_s", "cpu_ns_per_op", "maxrss_kib", "p50_us", "p99_us", "intended_p99_us", "errors", "steady_ops_per_s", "load1"]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
by_rep = collections.defaultdict(dict)  # (case, rep) -> row, for the per-round (paired) ratios
order = []
for line in open(sys.argv[1]):
    if line.startswith('#') or line.startswith('case'): continue
    f = line.rstrip('\n').split('\t')
    if f[0] not in rows: order.append(f[0])
    for k, v in zip(cols, f[2:]):
        if v != "": rows[f[0]][k].append(float(v))
    by_rep[f[0]][f[1]] = dict((k, float(v)) for k, v in zip(cols, f[2:]) if v != "")
med = lambda c, k: statistics.median(rows[c][k]) if rows[c][k] else None
fmt = lambda v, d=0: "" if v is None else f"{v:.{d}f}"
with open(sys.argv[2], "w") as out:
    print("case\tn\tops_per_s\tops_per_s_min\tops_per_s_max\tsteady_ops_per_s\tcpu_ns_per_op\tmaxrss_kib\tp50_us\tp99_us\tintended_p99_us\terrors_max\tload1_max", file=out)
    for c in order:
        r = rows[c]
        print("\t".join([c, str(len(r["ops_per_s"])), fmt(med(c, "ops_per_s")), fmt(min(r["ops_per_s"])), fmt(max(r["ops_per_s"])),
              fmt(med(c, "steady_ops_per_s")), fmt(med(c, "cpu_ns_per_op")), fmt(med(c, "maxrss_kib")), fmt(med(c, "p50_us"), 1), fmt(med(c, "p99_us"), 1),
              fmt(med(c, "intended_p99_us"), 1), fmt(max(r["errors"], default=None)), fmt(max(r["load1"], default=None), 2)]), file=out)
with open(sys.argv[3], "w") as out:
    print("shape\tpeer\tops_per_s\tsteady_ops_per_s\tops_per_cpu_s\tmaxrss\tp50\tp99\tpaired_ops_per_s\tpaired_ops_per_cpu_s\t(kvmeter / peer: ratios of the medians; paired_*: median of the per-round ratios, the tools of a shape run back to back)", file=out)
    for c, peer in [(c, peer) for c in order if c.endswith("-kvmeter") for peer in ("memtier", "redisbench", "memcslap")]:
        m = c[:-len("kvmeter")] + peer
        if m not in rows: continue
        def ratio(k, inv=False):
            a, b = med(c, k), med(m, k)
            if not a or not b: return ""
            return f"{(b / a if inv else a / b):.2f}"
        def paired(k, inv=False):
            rs = [(b[k] / a[k] if inv else a[k] / b[k]) for rep, a in by_rep[c].items()
                  for b in [by_rep[m].get(rep)] if b and a.get(k) and b.get(k)]
            return f"{statistics.median(rs):.2f}" if rs else ""
        print("\t".join([c[:-len("-kvmeter")], peer, ratio("ops_per_s"), ratio("steady_ops_per_s"), ratio("cpu_ns_per_op", inv=True), ratio("maxrss_kib"),
              ratio("p50_us"), ratio("p99_us"), paired("ops_per_s"), paired("cpu_ns_per_op", inv=True), ""]), file=out)
PY
# column is util-linux's (bsdextrautils on Debian): a bare host without it prints the tsv as is.
column -t -s $'\t' "$1/summary.tsv" 2>/dev/null || cat "$1/summary.tsv"
echo
column -t -s $'\t' "$1/ratios.tsv" 2>/dev/null || cat "$1/ratios.tsv"
}
if [[ -n ${ANALYZE:-} ]]; then summarize "$ANALYZE"; exit 0; fi
OUT=bench/results/conns-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
cp "$KVMETER" "$TMP/kvmeter"
K=$TMP/kvmeter
ENGINE=0
"$K" run --help 2>/dev/null | grep -q -- '--depth' && ENGINE=1

# File descriptors: the most connections a case opens, plus room for the process's own files.
max_conns=0
for n in $CONNS 1000; do (( n > max_conns )) && max_conns=$n; done
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (( $(ulimit -n) < max_conns + 200 )); then
  echo "warning: open-file limit $(ulimit -n) < $((max_conns + 200)): cases above $(( $(ulimit -n) - 200 )) connections will fail" >&2
fi

# ---- servers ---------------------------------------------------------------------------------
wait_port() {
  local _
  for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "error: no server on 127.0.0.1:$1" >&2; return 1
}
start_memcached() {  # PORT
  local user=(); [[ $(id -u) == 0 ]] && user=(-u nobody)
  "${SERVER_PIN[@]}" memcached -l 127.0.0.1 -p "$1" -U 0 -c 20000 -t "$MC_THREADS" -m 1024 -b "$BACKLOG" "${user[@]}" &
  PIDS+=($!); wait_port "$1"
}
start_redis() {
  local dir; dir=$(mktemp -d "$TMP/redis.XXXXXX")
  "${SERVER_PIN[@]}" redis-server --bind 127.0.0.1 --port "$1" --save '' --appendonly no --maxclients 20000 --tcp-backlog "$BACKLOG" \
    --dir "$dir" --logfile "$dir/redis.log" --daemonize no &
  PIDS+=($!); wait_port "$1"
}
# log CMD...: the command into commands.log, then run it.
log() { { printf '%q ' "$@"; echo; } >> "$OUT/commands.log"; "$@"; }
kv_load() {  # STORE-ARGS...: kvmeter's 100,000 records
  local par=(--threads 4); (( ENGINE )) && par=(--connections 8 --threads 2)  # string mode: engine only
  log "$K" run -P workloadc --phase load "$@" "${SHAPE[@]}" "${par[@]}" --out "$TMP/load-$RANDOM" >/dev/null 2>"$TMP/load.err" \
    || { echo "warning: kvmeter load $* failed: $(tail -1 "$TMP/load.err")" >&2; return 1; }
}
rb_load() {  # PORT: redis-benchmark's key names for -r 100000, 1 KiB values, through redis-cli --pipe
  python3 -c '
import sys
v = b"x" * 1024
out = sys.stdout.buffer
for i in range(100000):
    k = b"key:%012d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1024\r\n%s\r\n" % (len(k), k, v))
' | log redis-cli -h 127.0.0.1 -p "$1" --pipe >/dev/null 2>&1 || echo "warning: redis-benchmark key load failed" >&2
}
mt_load() {  # MEMTIER-ARGS...: memtier's 100,000 keys, each once
  log "$MEMTIER" -s 127.0.0.1 "$@" "${MT_KEYS[@]}" --threads 2 --clients 5 --requests allkeys --hide-histogram >/dev/null 2>&1 \
    || echo "warning: memtier load $* failed" >&2
}

# ---- cases -----------------------------------------------------------------------------------
# have BINARY: whether a peer is installed (a missing one is skipped, with a warning, once)
have() { command -v "$1" >/dev/null || { echo "warning: $1 not found: its cases are skipped" >&2; return 1; }; }
RB=0 MS=0
have "$REDIS_BENCHMARK" && RB=1
have "$MEMCSLAP" && MS=1
CASES=()
for n in $CONNS; do
  CASES+=("mc-get-c$n-kvmeter" "mc-get-c$n-memtier")
  (( MS )) && CASES+=("mc-get-c$n-memcslap")
  CASES+=("redis-get-c$n-kvmeter" "redis-get-c$n-memtier")
  (( RB )) && CASES+=("redis-get-c$n-redisbench")
  CASES+=("redis-hgetall-c$n-kvmeter" "redis-hgetall-c$n-memtier")
done
CASES+=(ol20k-c16-kvmeter ol20k-c16-memtier ol20k-c1000-kvmeter ol20k-c1000-memtier)
SEL=()
for c in "${CASES[@]}"; do [[ $c =~ $ONLY ]] && SEL+=("$c"); done
(( ${#SEL[@]} )) || { echo "error: ONLY=$ONLY selects no case" >&2; exit 2; }
want() { local c; for c in "${SEL[@]}"; do [[ $c == $1 ]] && return 0; done; return 1; }
KV_STR=1
if want 'mc-*' || want 'ol20k-*'; then
  start_memcached $MC_PORT
  kv_load --store memcached --store-opt addr=127.0.0.1:$MC_PORT || true
  mt_load -p $MC_PORT -P memcache_text --ratio 1:0 --key-pattern P:P
fi
want 'mc-get-*-memcslap' && start_memcached $MS_PORT
if want 'redis-get-*'; then
  start_redis $RS_PORT
  kv_load --store redis --store-opt addr=127.0.0.1:$RS_PORT --store-opt encoding=string || KV_STR=0
  mt_load -p $RS_PORT --ratio 1:0 --key-pattern P:P
  want 'redis-get-*-redisbench' && rb_load $RS_PORT
fi
if want 'redis-hgetall-*'; then
  start_redis $RH_PORT
  kv_load --store redis --store-opt addr=127.0.0.1:$RH_PORT || true
  mt_load -p $RH_PORT --command 'HSET __key__ field0 __data__' --command-key-pattern P
fi

# kv_row DIR TIMEFILE: ops/s ops cpu_s cpu_ns_per_op maxrss_kib p50_us p99_us intended_p99_us errors
# steady_ops_per_s
kv_row() {
  python3 - "$1/summary.json" "$2" "$DUR" "$1/intervals.csv" <<'PY'
import csv, json, sys
s = json.load(open(sys.argv[1]))
p = [p for p in s["phases"] if p["name"] == "run"][0]
u, sy, rss = open(sys.argv[2]).read().split()[-3:]
cpu = float(u) + float(sy)
ops = p["operations"]
r = p["ops"].get("READ", {})
lat = r.get("latency_us") or {}
il = r.get("intended_latency_us") or {}
f = lambda v: "" if v is None else f"{v:.1f}"
# Seconds 1 .. DUR of the run phase (READ rows of intervals.csv, 1 s intervals), as memtier's.
dur = float(sys.argv[3])
steady = [int(r["count"]) for r in csv.DictReader(open(sys.argv[4])) if r["phase"] == "run" and r["metric"] == "READ"
          and float(r["start_s"]) >= 1 and float(r["end_s"]) <= dur + 1e-9 and abs(float(r["end_s"]) - float(r["start_s"]) - 1) < 1e-6]
print(round(p["throughput_ops_per_s"]), ops, f"{cpu:.2f}", round(cpu * 1e9 / ops) if ops else "", rss,
      f(lat.get("p50")), f(lat.get("p99")), f(il.get("p99")), p["errors"], round(sum(steady) / len(steady)) if steady else "")
PY
}
# mt_row JSON TIMEFILE OPEN(0|1): the same fields from memtier's JSON
mt_row() {
  python3 - "$1" "$2" "$3" "$DUR" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["ALL STATS"]["Totals"]
u, sy, rss = open(sys.argv[2]).read().split()[-3:]
cpu = float(u) + float(sy)
ops = t["Count"]
rate = ops / float(sys.argv[4]) if sys.argv[3] == "1" else t["Ops/sec"]
pl = t.get("Percentile Latencies") or {}
us = lambda k: f"{pl[k] * 1000:.1f}" if k in pl else ""
# Seconds 1 .. DUR-1 of its per-second series: after its connections are made (memtier connects
# inside --test-time, kvmeter before its phase's clock) and before the partial last second.
ts = t.get("Time-Serie") or {}
steady = [v["Count"] for k, v in ts.items() if 1 <= int(k) <= int(sys.argv[4]) - 1]
print(round(rate), ops, f"{cpu:.2f}", round(cpu * 1e9 / ops) if ops else "", rss,
      us("p50.00"), us("p99.00"), "", t.get("Connection Errors", 0), round(sum(steady) / len(steady)) if steady else "")
PY
}
# rb_row CSV TIMEFILE COUNT: the same fields from redis-benchmark's --csv line
rb_row() {
  python3 - "$1" "$2" "$3" <<'PY'
import csv, sys
row = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("test") == "GET"][0]
u, sy, rss = open(sys.argv[2]).read().split()[-3:]
cpu = float(u) + float(sy)
ops = int(sys.argv[3])
us = lambda k: f"{float(row[k]) * 1000:.1f}"
print(round(float(row["rps"])), ops, f"{cpu:.2f}", round(cpu * 1e9 / ops), rss, us("p50_latency_ms"), us("p99_latency_ms"), "", "", "")
PY
}
# ms_row OUTFILE ERRFILE TIMEFILE E: the same fields from memcslap's "Time to get G keys by N threads: S seconds";
# errors: the lines it wrote to stderr (it prints a line per failed request, and counts none)
ms_row() {
  python3 - "$@" <<'PY'
import re, sys
m = re.search(r"Time to get +(\d+) keys by +\d+ threads: +(\d+\.\d+) seconds", open(sys.argv[1]).read())
errs = sum(1 for _ in open(sys.argv[2]))
u, sy, rss = open(sys.argv[3]).read().split()[-3:]
cpu = float(u) + float(sy)
gets, secs = int(m.group(1)), float(m.group(2))
ops = gets + int(sys.argv[4])  # its gets, plus the sets of its own load: the CPU covers both
print(round(gets / secs) if secs > 0 else "", ops, f"{cpu:.2f}", round(cpu * 1e9 / ops), rss, "", "", "", errs, "")
PY
}
# peer_count NAME: the request count for a peer that runs a count, not a duration: DUR seconds at
# the median rate this case had so far (PEER_RATE before its first round)
peer_count() {
  local rate
  rate=$(awk -F'\t' -v c="$1" '$1 == c && $3 != "" { print $3 }' "$OUT/raw.tsv" | sort -n \
    | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }')
  (( rate > 0 )) || rate=$PEER_RATE
  echo $(( rate * DUR ))
}

# run_case NAME: prints the row's fields (nothing when the case does not apply)
run_case() {
  local name=$1 d="$TMP/$1-$RANDOM" shape=${1%-c*} rest=${1#*-c} n tool
  n=${rest%%-*}; tool=${rest#*-}
  local limit=$((DUR + 120)) tf="$d.time" port store=() mt=() open=0
  case "$shape" in
    mc-get|ol20k) port=$MC_PORT; store=(--store memcached); mt=(-P memcache_text --ratio 0:1 --key-pattern R:R) ;;
    redis-get) port=$RS_PORT; store=(--store redis --store-opt encoding=string); mt=(--ratio 0:1 --key-pattern R:R) ;;
    redis-hgetall) port=$RH_PORT; store=(--store redis); mt=(--command 'HGETALL __key__' --command-key-pattern R) ;;
  esac
  [[ $shape == ol20k ]] && open=1
  if [[ $tool == kvmeter ]]; then
    [[ $shape == redis-get && $KV_STR == 0 ]] && return 0
    local conn=()
    if (( ENGINE )); then
      conn=(--connections "$n" --depth 1 --threads $(( n < CLIENT_THREADS ? n : CLIENT_THREADS )))
    else
      (( n <= LEGACY_MAX )) || return 0
      conn=(--threads "$n")
    fi
    (( open )) && conn+=(--rate 20000 --arrival "$ARRIVAL" $KV_OPEN_EXTRA)
    log "$GNU_TIME" -f '%U %S %M' -o "$tf" "${CLIENT_PIN[@]}" timeout "$limit" "$K" run -P workloadc --phase run "${store[@]}" \
      --store-opt addr=127.0.0.1:$port "${SHAPE[@]}" --ops 0 --duration "${DUR}s" "${conn[@]}" --out "$d" \
      >/dev/null 2>"$d.err" || { echo "warning: $name: kvmeter failed: $(tail -1 "$d.err")" >&2; return 0; }
    # How kvmeter waited for replies (reply_wait=auto: spin beside the server, block apart).
    sed -n 's/^reply_wait: /  # reply_wait: /p' "$d.err" >> "$OUT/commands.log"
    kv_row "$d" "$tf"
  elif [[ $tool == redisbench ]]; then
    local count th=(); count=$(peer_count "$name")
    (( count >= n )) || count=$n
    (( n > 1 )) && th=(--threads 2)
    log "$GNU_TIME" -f '%U %S %M' -o "$tf" "${CLIENT_PIN[@]}" timeout "$limit" "$REDIS_BENCHMARK" -h 127.0.0.1 -p "$port" \
      -t get -d 1024 -r 100000 -P 1 -c "$n" "${th[@]}" -n "$count" --csv >"$d.csv" 2>"$d.err" \
      || { echo "warning: $name: redis-benchmark failed: $(tail -1 "$d.err")" >&2; return 0; }
    rb_row "$d.csv" "$tf" "$count"
  elif [[ $tool == memcslap ]]; then
    local count e; count=$(peer_count "$name")
    e=$(( (count + n - 1) / n ))
    (( e <= 100000 )) || e=100000  # at most the others' key space (and memory: it holds every value)
    log "$GNU_TIME" -f '%U %S %M' -o "$tf" "${CLIENT_PIN[@]}" timeout "$limit" "$MEMCSLAP" --servers=127.0.0.1:$MS_PORT \
      --test=get --concurrency="$n" --execute-number="$e" --flush >"$d.out" 2>"$d.err" \
      || { echo "warning: $name: memcslap failed: $(tail -1 "$d.err")" >&2; return 0; }
    ms_row "$d.out" "$d.err" "$tf" "$e"
  else
    local th=$(( n < CLIENT_THREADS ? n : CLIENT_THREADS )) cl; cl=$(( n / th ))
    (( open )) && mt+=(--rate-limiting $(( 20000 / n )))
    log "$GNU_TIME" -f '%U %S %M' -o "$tf" "${CLIENT_PIN[@]}" timeout "$limit" "$MEMTIER" -s 127.0.0.1 -p "$port" "${mt[@]}" \
      "${MT_KEYS[@]}" --threads "$th" --clients "$cl" --pipeline 1 --test-time "$DUR" --hide-histogram \
      --print-percentiles 50,99 --json-out-file "$d.json" >/dev/null 2>"$d.err" \
      || { echo "warning: $name: memtier failed: $(tail -1 "$d.err")" >&2; return 0; }
    mt_row "$d.json" "$tf" "$open"
  fi
}

{
  echo "# kvmeter $("$K" --version | awk '{print $2}') (${KVMETER}${KVMETER_REV:+ from $KVMETER_REV}, engine=$ENGINE) vs $("$MEMTIER" --version | head -1)$( (( RB )) && echo ", $("$REDIS_BENCHMARK" --version)")$( (( MS )) && echo ", memcslap $("$MEMCSLAP" --version 2>&1 | head -1)"); DUR=${DUR}s ARRIVAL=$ARRIVAL; $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), $(date -u +%FT%TZ); servers on CPUs ${SERVER_CPUS:-any} (memcached -t $MC_THREADS), clients on CPUs ${CLIENT_CPUS:-any} (${CLIENT_THREADS} threads); nofile $(ulimit -n)"
  echo -e "case\trep\tops_per_s\tops\tcpu_s\tcpu_ns_per_op\tmaxrss_kib\tp50_us\tp99_us\tintended_p99_us\terrors\tsteady_ops_per_s\tload1"
} > "$OUT/raw.tsv"
for rep in $(seq 1 "$REPS"); do
  # Within a shape (e.g. mc-get-c100), the tools' order rotates by one from round to round.
  order=()
  i=0
  while (( i < ${#SEL[@]} )); do
    grp=("${SEL[i]}"); j=$((i + 1))
    while (( j < ${#SEL[@]} )) && [[ ${SEL[j]%-*} == "${SEL[i]%-*}" ]]; do grp+=("${SEL[j]}"); j=$((j + 1)); done
    r=$(( (rep - 1) % ${#grp[@]} ))
    order+=("${grp[@]:r}" "${grp[@]:0:r}")
    i=$j
  done
  for c in "${order[@]}"; do
    load1=$(cut -d' ' -f1 /proc/loadavg)
    echo "# $c rep $rep" >> "$OUT/commands.log"
    row=$(run_case "$c" || true)
    [[ -n $row ]] || continue
    echo -e "$c\t$rep\t$(tr ' ' '\t' <<<"$row")\t$load1" | tee -a "$OUT/raw.tsv" >&2
  done
done
summarize "$OUT"
echo "results: $OUT" >&2
