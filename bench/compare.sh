#!/usr/bin/env bash
# Runs kvmeter next to its peers in one session, round-robin, REPS times, and prints medians.
# Peers come from ../shared/peers (YCSB 0.17.0 + RocksDB shim, Debian's db_bench 7.8.3);
# install them first with ../shared/peers/install-ycsb.sh and install-db_bench.sh.
#   REPS=3 ONLY=regex bench/compare.sh        -> bench/results/<date>/{raw.tsv,summary.tsv}
# Cases (name: what runs):
#   ceiling-*   null store / YCSB BasicDB, 1 thread, zipfian, latency recording on
#   ceiling-floor-*  benches/null_floor.rs: YCSB's next operation + two clock reads + the
#               histogram in a bare loop (no session, no driver): the least kvmeter can spend
#   rocks-*     100,000 records of one 1,000-byte value, uniform reads (workload C shape),
#               256 MiB block cache, no compression, no bloom filter, in memory;
#               rocks-direct-cold-*: the direct loop reopened and not warmed, as kvmeter's run
#               phase starts (its block cache empty), so both read the same DB state
#               rocks-*-seq-*: db_bench's data shape — keys loaded in order ("user" + 19
#               digits, 23 bytes: insertorder=ordered, zeropadding=19; the direct loop's
#               ORDERED=1), like db_bench's fillseq, so the flushed files do not overlap (hashed
#               keys leave overlapping L0 files and, without bloom filters, a read searches each);
#               rocks-direct-seq-dbbkeys-*: the same direct loop with db_bench's key content
#               (DBB_KEYS=1: the number's 8 bytes big-endian, '0'-padded to 23), so its ratio to
#               rocks-direct-seq-* is what YCSB's key content costs RocksDB, and its ratio to
#               rocks-dbbench-same-* what the Rust binding costs;
#               rocks-dbbench-same-*: db_bench built from the crate's own RocksDB sources
#               against kvmeter's librocksdb.a (bench/build-db_bench.sh), so the version is one,
#               with kvmeter's LRU block cache (db_bench 11.8's own default is the hyper clock
#               cache: -hcc- cases, kvmeter with --store-opt block_cache=hyper_clock)
#   rss-*       kvmeter's peak RSS (KiB) on the null store at 1 M and 100 M operations
#   tel-*       telemetry at its default 100 ms against --telemetry-interval 0, null and RocksDB
#   emb-*       WiredTiger and LMDB: kvmeter against a minimal direct loop (benches/
#               embedded_direct.rs), 100,000 records of one 1,000-byte value, uniform reads
#   *-direct-timed-*  the direct loop with TIMED=1: kvmeter's clock read before and after each
#               read, the latency recorded in its histogram and (embedded stores, TOUCH=1) the
#               value's first bytes read, as kvmeter's record indexing does; nothing else — the
#               floor of a harness that times every operation exactly (benches/common/timed.rs)
#   *-direct-ycsb-*  the floor of a YCSB-exact harness: the timed loop with kvmeter's exact key
#               choice (YCSB_KEYS=1: its CoreWorkload picks each key, benches/common/keys.rs) and
#               each record indexed inside the timed call as kvmeter's adapters and YCSB's
#               bindings do (DECODE=1, benches/common/decode.rs); what kvmeter adds beyond it is
#               its driver alone (session dispatch, status and view handling, recorder, tick)
#   rocks-dbbench-same-rand-*  db_bench of the same RocksDB, filluniquerandom then readrandom:
#               the random-order twin of the -seq- shape, against rocks-kvmeter-* (YCSB's default
#               hashed key order) and rocks-direct-cold-*
#   rocks-kvmeter(-seq)-off-*  kvmeter with --store-opt statistics=off: what RocksDB's counters
#               (statistics=basic, the default) cost the ratio
#   rocks-dbbench-same-hist-*  db_bench timing every operation too (--histogram=1): without it
#               db_bench reads no clock per operation and keeps no latencies
#   rocks-dbbench-same(-rand)-stats-*  db_bench with RocksDB's counters on at kvmeter's default
#               level (--statistics=1 --stats_level=1, kExceptHistogramOrTimers = kvmeter's
#               statistics=basic): the same RocksDB configuration as rocks-kvmeter(-seq)-*;
#               db_bench's default has no Statistics object, as kvmeter's statistics=off
#   emb-plugin-lmdb-*  the same LMDB reads through the example store plug-in
#               (examples/plugins/kvm_lmdb.c, built here): the plug-in boundary's cost against the
#               built-in adapter (emb-kvmeter-lmdb-*) and the direct loop
#   redis-*     Redis GET-heavy on loopback: kvmeter (workload C, one 1,000-byte field, HGETALL)
#               against redis-benchmark GET of 1,000-byte values; 1 connection per thread,
#               no pipelining; managed/private servers with persistence off. redis-kvmeter-hget-*:
#               readallfields=false, so each read is HGET key field0 (one bulk reply, like GET)
#   redis-*-p16 one connection, 16 requests per round trip (kvmeter pipeline=16, HGET; -P 16)
#   *-pin0      client and server both pinned to CPU 0 (kvmeter under taskset: its managed
#               server inherits the affinity; the peers' SERVER_CPUS/CLIENT_CPUS)
#   mc-*        memcached GETs on loopback: kvmeter (workload C, one 1,000-byte field) against
#               memcslap -t get (its own keys and value sizes); 1 connection per thread
#   redis-same-*  the same command and data on both sides: 100,000 hashes of one 1,000-byte
#               field, uniform HGETALL of the whole record; kvmeter (workload C, its own keys
#               "user<hash>") against redis-benchmark "HGETALL key:__rand_int__" -r 100000 over
#               hashes filled the same way (keys "key:<12 digits>"); one private redis-server per
#               case, persistence off; unpinned; t1/t2: 1 or 2 threads, one connection each;
#               p16: one connection, 16 requests per round trip (pipeline=16; -P 16); e2: kvmeter's
#               event-driven engine, --connections 2 --depth 1 --threads 2 (against bench-t2)
#   null-scale-t1, null-scale-tN  the null store, workload C for 5 s on 1 thread and on nproc
#   mc-same-*   memcached GET in the shape Debian's memcslap (libmemcached-tools 1.1.4) uses
#               itself: -e 20000 sets 20,000 keys of 20 bytes with random values (2,568 bytes
#               per item on average in memcached's own stats, up to ~5 KB), then each of its T
#               threads GETs all of them; kvmeter: 20,000 records, fieldlength=5000 uniform
#               (mean 2,500 bytes), 20,000·T uniform GETs; unpinned; one connection per thread
#   Every case prints its throughput and, where the process can be measured alone, its CPU
#   per operation (user + system, ns): kvmeter's own process from summary.json kvmeter_cpu
#   (the measured window); the direct loops' read loops; redis-benchmark under /usr/bin/time.
#   ab-old-*, ab-new-*  with AB_OLD=<an older kvmeter binary>: the ceiling (C and A) and the
#               RocksDB and LMDB cases (t1, t2) run by that binary and by this build,
#               interleaved (refactors and hot-path changes); redis-same-old-*: redis-same-kvmeter-*
#               run by that binary
set -euo pipefail
cd "$(dirname "$0")/.."
PEERS=${PEERS:-$(cd ../shared/peers 2>/dev/null && pwd || echo /work/shared/peers)}
REPS=${REPS:-3}
ONLY=${ONLY:-.}
CEILING_OPS=${CEILING_OPS:-10000000}
cargo build --release --quiet --features all-stores
cargo build --release --quiet --features all-stores --bench rocksdb_direct --bench embedded_direct --bench null_floor
# The example store plug-in for the emb-plugin-* cases (needs liblmdb-dev; those cases print
# nothing without it, the others run).
make -s -C examples/plugins || echo "warning: examples/plugins not built (apt-get install liblmdb-dev): emb-plugin-* cases skipped" >&2
DIRECT=$(ls -t target/release/deps/rocksdb_direct-* | grep -v '\.d$' | head -1)
EMB=$(ls -t target/release/deps/embedded_direct-* | grep -v '\.d$' | head -1)
FLOOR=$(ls -t target/release/deps/null_floor-* | grep -v '\.d$' | head -1)
# db_bench of kvmeter's own RocksDB version for rocks-dbbench-same-* (empty: those cases skipped).
DBB_SAME=$(bash bench/build-db_bench.sh || echo "warning: db_bench of the crate's RocksDB not built: rocks-dbbench-same-* skipped" >&2)
EMB_SHAPE=(-p fieldcount=1 -p fieldlength=1000 -p requestdistribution=uniform --records 100000 --ops 1000000)
SRV_SHAPE=(-p fieldcount=1 -p fieldlength=1000 -p requestdistribution=uniform --records 100000 --ops 200000)
K=target/release/kvmeter
OUT=bench/results/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ROCKS_OPTS=(--store-opt block_cache_mb=256 --store-opt compression=none --store-opt bloom_bits=0)
ROCKS_SHAPE=(-p fieldcount=1 -p fieldlength=1000 -p requestdistribution=uniform --records 100000 --ops 1000000)

# kvmeter_tput OUTDIR PHASE: throughput of a phase from summary.json, and kvmeter's own CPU per
# operation over it (ns)
kvmeter_tput() {
  python3 -c '
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
p = [p for p in s["phases"] if p["name"] == sys.argv[2]][0]
c = p.get("kvmeter_cpu") or {}
print(round(p["throughput_ops_per_s"]), round(c["ns_per_op"]) if c else "")' "$1" "$2"
}
# A peer's output: ops_per_sec=<n> (last such line) and, when printed, cpu_ns_per_op=<n>.
last_ops() {
  local out; out=$(cat)
  echo "$(sed -n 's/^ops_per_sec=//p' <<<"$out" | tail -1 | cut -d. -f1) $(sed -n 's/^cpu_ns_per_op=//p' <<<"$out" | tail -1 | cut -d. -f1)"
}
# CPU per op (ns) of a command timed by /usr/bin/time -f '%U %S' into FILE, over OPS operations.
cpu_per_op() { awk -v n="$2" '{printf "%.0f", ($1 + $2) * 1e9 / n}' "$1"; }
# A private redis-server on loopback port $1, persistence off (as ../shared/peers/run-redis.sh).
start_redis() {
  local dir; dir=$(mktemp -d "$TMP/redis.XXXXXX")
  redis-server --bind 127.0.0.1 --port "$1" --save '' --appendonly no --dir "$dir" \
    --logfile "$dir/redis.log" --daemonize no &
  SRV=$!
  for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis-server on $1 did not start" >&2; return 1
}
start_memcached() {
  local extra=(); [[ $(id -u) == 0 ]] && extra=(-u root)
  memcached -l 127.0.0.1 -p "$1" -U 0 -m 1024 "${extra[@]}" &
  SRV=$!
  for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "memcached on $1 did not start" >&2; return 1
}
stop_srv() { kill "$SRV" 2>/dev/null || true; wait "$SRV" 2>/dev/null || true; }
# 100,000 hashes key:<12 digits> -> field0 = 1,000 bytes, as redis-benchmark's __rand_int__ names them.
fill_bench_hashes() {
  python3 -c '
import sys, random
random.seed(1)
v = bytes(random.choice(b"abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(1000))
out = sys.stdout.buffer
for i in range(100000):
    k = b"key:%012d" % i
    out.write(b"*4\r\n$4\r\nHSET\r\n$%d\r\n%s\r\n$6\r\nfield0\r\n$1000\r\n%s\r\n" % (len(k), k, v))
' | redis-cli -p "$1" --pipe >/dev/null
}

run_case() {
  local name=$1 d="$TMP/$1-$RANDOM"
  case "$name" in
    ceiling-kvmeter-c) $K run -P workloadc --store null --phase run --ops "$CEILING_OPS" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    ceiling-kvmeter-a) $K run -P workloada --store null --phase run --ops "$CEILING_OPS" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    ceiling-floor-[ca]) WORKLOAD=${name: -1} OPS=$CEILING_OPS ROUNDS=1 "$FLOOR" 2>/dev/null | last_ops ;;
    ceiling-ycsb-c) DB=basic WORKLOAD=c OPS=$CEILING_OPS THREADS=1 bash "$PEERS/run-ycsb.sh" 2>/dev/null | last_ops ;;
    ceiling-ycsb-a) DB=basic WORKLOAD=a OPS=$CEILING_OPS THREADS=1 bash "$PEERS/run-ycsb.sh" 2>/dev/null | last_ops ;;
    rocks-kvmeter-t[12]) $K run -P workloadc "${ROCKS_SHAPE[@]}" "${ROCKS_OPTS[@]}" --threads "${name: -1}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    rocks-direct-t[12]) RECORDS=100000 OPS=1000000 THREADS="${name: -1}" CACHE_MB=256 "$DIRECT" 2>/dev/null | last_ops ;;
    rocks-direct-timed-t[12]) TIMED=1 COLD=1 RECORDS=100000 OPS=1000000 THREADS="${name: -1}" CACHE_MB=256 "$DIRECT" 2>/dev/null | last_ops ;;
    # The floor of a YCSB-exact harness: kvmeter's clock, histogram, key choice and record
    # indexing around the bare read, nothing else.
    rocks-direct-ycsb-t[12]) YCSB_KEYS=1 DECODE=1 TIMED=1 COLD=1 RECORDS=100000 OPS=1000000 THREADS="${name: -1}" CACHE_MB=256 "$DIRECT" 2>/dev/null | last_ops ;;
    rocks-direct-cold-t[12]) COLD=1 RECORDS=100000 OPS=1000000 THREADS="${name: -1}" CACHE_MB=256 "$DIRECT" 2>/dev/null | last_ops ;;
    rocks-dbbench-t[12]) WORKLOAD=c RECORDS=100000 OPS=1000000 THREADS="${name: -1}" KEY_SIZE=23 VALUE_SIZE=1000 \
        DB_BENCH_EXTRA="--cache_size=268435456 --compression_type=none" bash "$PEERS/run-db_bench.sh" 2>/dev/null | last_ops ;;
    # db_bench's own data shape: keys loaded in order (fillseq), 23 bytes, uniform reads.
    rocks-kvmeter-seq-t[12]) $K run -P workloadc "${ROCKS_SHAPE[@]}" "${ROCKS_OPTS[@]}" -p insertorder=ordered -p zeropadding=19 \
        --threads "${name: -1}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    rocks-direct-seq-t[12]) ORDERED=1 COLD=1 RECORDS=100000 OPS=1000000 THREADS="${name: -1}" CACHE_MB=256 "$DIRECT" 2>/dev/null | last_ops ;;
    rocks-direct-seq-dbbkeys-t[12]) DBB_KEYS=1 ORDERED=1 COLD=1 RECORDS=100000 OPS=1000000 THREADS="${name: -1}" CACHE_MB=256 "$DIRECT" 2>/dev/null | last_ops ;;
    rocks-kvmeter-seq-hcc-t[12]) $K run -P workloadc "${ROCKS_SHAPE[@]}" "${ROCKS_OPTS[@]}" --store-opt block_cache=hyper_clock \
        -p insertorder=ordered -p zeropadding=19 --threads "${name: -1}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    # -off-: kvmeter without RocksDB's counters (--store-opt statistics=off; the default,
    # basic, counts tickers on every read): the counters' share of a ratio.
    rocks-kvmeter-seq-off-t[12]) $K run -P workloadc "${ROCKS_SHAPE[@]}" "${ROCKS_OPTS[@]}" -p insertorder=ordered -p zeropadding=19 \
        --store-opt statistics=off --threads "${name: -1}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    rocks-kvmeter-off-t[12]) $K run -P workloadc "${ROCKS_SHAPE[@]}" "${ROCKS_OPTS[@]}" --store-opt statistics=off \
        --threads "${name: -1}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    # YCSB's default key order (hashed: each key once, in random order) against db_bench's
    # filluniquerandom (each key once, random order), then readrandom: both leave two overlapping
    # L0 files, so this is the random-order twin of the -seq- shape (rocks-kvmeter-t*).
    rocks-dbbench-same-rand-t[12]|rocks-dbbench-same-rand-stats-t[12])
      [[ -n $DBB_SAME ]] || return 0
      local t=${name: -1} base=(--db="$d.db" --num=100000 --key_size=23 --value_size=1000 --cache_size=268435456
        --compression_type=none --cache_type=lru_cache) stats=()
      [[ $name == *-stats-* ]] && stats=(--statistics=1 --stats_level=1)
      "$DBB_SAME" --benchmarks=filluniquerandom --threads=1 "${base[@]}" "${stats[@]}" >/dev/null 2>&1 || return 0
      "$DBB_SAME" --benchmarks=readrandom --use_existing_db=1 --threads="$t" --reads=$(( 1000000 / t )) "${base[@]}" "${stats[@]}" 2>/dev/null \
        | sed -n 's/^readrandom *:.* \([0-9][0-9.]*\) ops\/sec.*/ops_per_sec=\1/p' | last_ops
      rm -rf "$d.db" ;;
    # -hist-: db_bench timing every operation too (--histogram=1; without it db_bench reads no
    # clock per operation and keeps no latencies).
    rocks-dbbench-same-t[12]|rocks-dbbench-same-hcc-t[12]|rocks-dbbench-same-hist-t[12]|rocks-dbbench-same-stats-t[12])
      [[ -n $DBB_SAME ]] || return 0
      local cache=lru_cache hist=0 stats=""; [[ $name == *-hcc-* ]] && cache=hyper_clock_cache; [[ $name == *-hist-* ]] && hist=1
      [[ $name == *-stats-* ]] && stats=" --statistics=1 --stats_level=1"
      PATH="$(dirname "$DBB_SAME"):$PATH" WORKLOAD=c RECORDS=100000 OPS=1000000 THREADS="${name: -1}" KEY_SIZE=23 VALUE_SIZE=1000 \
        DB_BENCH_EXTRA="--cache_size=268435456 --compression_type=none --cache_type=$cache --histogram=$hist$stats" bash "$PEERS/run-db_bench.sh" 2>/dev/null | last_ops ;;
    rocks-ycsb-t[12]) DB=rocksdb WORKLOAD=c RECORDS=100000 OPS=1000000 THREADS="${name: -1}" FIELD_COUNT=1 VALUE_SIZE=1000 \
        YCSB_EXTRA="-p rocksdb.cache_mb=256 -p requestdistribution=uniform" bash "$PEERS/run-ycsb.sh" 2>/dev/null | last_ops ;;
    emb-kvmeter-lmdb-t[12]|emb-kvmeter-wiredtiger-t[12])
      local st=${name#emb-kvmeter-}; st=${st%-t?}
      local so=(); [[ $st == lmdb ]] && so=(--store-opt sync=nosync)  # a fast load; reads are the same
      $K run -P workloadc --store "$st" "${so[@]}" "${EMB_SHAPE[@]}" --threads "${name: -1}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    emb-plugin-lmdb-t[12])
      $K run -P workloadc --store "plugin:examples/plugins/libkvm_lmdb.so" --store-opt sync=nosync "${EMB_SHAPE[@]}" --threads "${name: -1}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    emb-direct-lmdb-t[12]|emb-direct-wiredtiger-t[12]|emb-direct-timed-lmdb-t[12]|emb-direct-timed-wiredtiger-t[12]|emb-direct-ycsb-lmdb-t[12]|emb-direct-ycsb-wiredtiger-t[12])
      local st=${name#emb-direct-}; st=${st#timed-}; st=${st#ycsb-}; st=${st%-t?}
      local timed=0 ycsb=0; [[ $name == *-timed-* || $name == *-ycsb-* ]] && timed=1; [[ $name == *-ycsb-* ]] && ycsb=1
      YCSB_KEYS=$ycsb DECODE=$ycsb TIMED=$timed TOUCH=$timed STORE=$st RECORDS=100000 OPS=1000000 THREADS="${name: -1}" "$EMB" 2>/dev/null | last_ops ;;
    redis-kvmeter-hget-t[12]) $K run -P workloadc --store redis "${SRV_SHAPE[@]}" -p readallfields=false --threads "${name: -1}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    redis-kvmeter-p16) $K run -P workloadc --store redis --store-opt pipeline=16 "${SRV_SHAPE[@]}" -p readallfields=false --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    redis-bench-p16) PIPELINE=16 TEST=get RECORDS=100000 OPS=200000 THREADS=1 VALUE_SIZE=1000 bash "$PEERS/run-redis.sh" 2>/dev/null | last_ops ;;
    redis-kvmeter-pin0) taskset -c 0 $K run -P workloadc --store redis "${SRV_SHAPE[@]}" -p readallfields=false --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    redis-bench-pin0) SERVER_CPUS=0 CLIENT_CPUS=0 TEST=get RECORDS=100000 OPS=200000 THREADS=1 VALUE_SIZE=1000 bash "$PEERS/run-redis.sh" 2>/dev/null | last_ops ;;
    mc-kvmeter-pin0) taskset -c 0 $K run -P workloadc --store memcached "${SRV_SHAPE[@]}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    mc-memcslap-pin0) SERVER_CPUS=0 CLIENT_CPUS=0 TOOL=memcslap TEST=get OPS=200000 THREADS=1 bash "$PEERS/run-memcached.sh" 2>/dev/null | last_ops ;;
    redis-kvmeter-t[12]) $K run -P workloadc --store redis "${SRV_SHAPE[@]}" --threads "${name: -1}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    redis-bench-t[12]) TEST=get RECORDS=100000 OPS=200000 THREADS="${name: -1}" VALUE_SIZE=1000 bash "$PEERS/run-redis.sh" 2>/dev/null | last_ops ;;
    mc-kvmeter-t[12]) $K run -P workloadc --store memcached "${SRV_SHAPE[@]}" --threads "${name: -1}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    mc-memcslap-t[12]) TOOL=memcslap TEST=get OPS=200000 THREADS="${name: -1}" bash "$PEERS/run-memcached.sh" 2>/dev/null | last_ops ;;
    redis-same-kvmeter-t[12]|redis-same-kvmeter-p16|redis-same-kvmeter-e2|redis-same-old-t[12]|redis-same-old-e2)
      local t=1 so=() bin=$K; [[ $name == *p16 ]] && so=(--store-opt pipeline=16) || t=${name: -1}
      [[ $name == *-e2 ]] && t=2 so=(--connections 2 --depth 1)  # the event-driven engine, 2 threads
      [[ $name == redis-same-old-* ]] && bin=$AB_OLD
      start_redis 16391 || return 0
      $bin run -P workloadc --store redis --store-opt addr=127.0.0.1:16391 "${so[@]}" "${SRV_SHAPE[@]}" --threads "$t" --out "$d" >/dev/null 2>&1
      stop_srv; kvmeter_tput "$d" run ;;
    redis-same-bench-t[12]|redis-same-bench-p16)
      local t=1 p=1; [[ $name == *p16 ]] && p=16 || t=${name: -1}
      start_redis 16391 || return 0
      fill_bench_hashes 16391
      /usr/bin/time -f '%U %S' -o "$d.cpu" redis-benchmark -h 127.0.0.1 -p 16391 -n 200000 -r 100000 \
        -c "$t" --threads "$t" -P "$p" --csv HGETALL 'key:__rand_int__' > "$d.out" 2>&1
      stop_srv
      echo "$(awk -F'","' '/HGETALL/ {print int($2)}' "$d.out" | tail -1) $(cpu_per_op "$d.cpu" 200000)" ;;
    mc-same-kvmeter-t[12])
      start_memcached 21291 || return 0
      $K run -P workloadc --store memcached --store-opt addr=127.0.0.1:21291 -p fieldcount=1 -p fieldlength=5000 \
        -p fieldlengthdistribution=uniform -p requestdistribution=uniform --records 20000 --ops $(( 20000 * ${name: -1} )) \
        --threads "${name: -1}" --out "$d" >/dev/null 2>&1
      stop_srv; kvmeter_tput "$d" run ;;
    mc-same-memcslap-t[12])
      start_memcached 21291 || return 0
      memcslap -s 127.0.0.1:21291 --test=get --execute-number=20000 --concurrency="${name: -1}" > "$d.out" 2>&1
      stop_srv
      # "Time to get N keys by T threads: S seconds."
      awk '/^Time to get/ {printf "%.0f\n", $4 / $(NF-1)}' "$d.out" ;;
    # The null store's scaling: workload C for 5 s on 1 thread and on every CPU (--duration,
    # so no thread idles while the last finishes its share).
    null-scale-t1) $K run -P workloadc --store null --phase run --ops 0 --duration 5s --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    null-scale-tN) $K run -P workloadc --store null --phase run --ops 0 --duration 5s --threads "$(nproc)" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    tel-null-on)  $K run -P workloadc --store null --phase run --ops "$CEILING_OPS" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    tel-null-off) $K run -P workloadc --store null --phase run --ops "$CEILING_OPS" --telemetry-interval 0 --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    tel-rocks-on)  $K run -P workloadc "${ROCKS_SHAPE[@]}" "${ROCKS_OPTS[@]}" --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    tel-rocks-off) $K run -P workloadc "${ROCKS_SHAPE[@]}" "${ROCKS_OPTS[@]}" --telemetry-interval 0 --out "$d" >/dev/null 2>&1; kvmeter_tput "$d" run ;;
    ab-old-*|ab-new-*)
      local bin=$K rest=${name#ab-???-}; [[ $name == ab-old-* ]] && bin=$AB_OLD
      case "$rest" in
        ceiling-c) $bin run -P workloadc --store null --phase run --ops "$CEILING_OPS" --out "$d" >/dev/null 2>&1 ;;
        ceiling-a) $bin run -P workloada --store null --phase run --ops "$CEILING_OPS" --out "$d" >/dev/null 2>&1 ;;
        rocks-t[12]) $bin run -P workloadc "${ROCKS_SHAPE[@]}" "${ROCKS_OPTS[@]}" --threads "${rest: -1}" --out "$d" >/dev/null 2>&1 ;;
        lmdb-t[12]) $bin run -P workloadc --store lmdb --store-opt sync=nosync "${EMB_SHAPE[@]}" --threads "${rest: -1}" --out "$d" >/dev/null 2>&1 ;;
      esac
      kvmeter_tput "$d" run ;;
    rss-kvmeter-1M|rss-kvmeter-100M)
      local n=1000000; [[ $name == *100M ]] && n=100000000
      /usr/bin/time -f '%M' -o "$d.rss" $K run -P workloadc --store null --phase run --ops $n --out "$d" >/dev/null 2>&1
      cat "$d.rss" ;;
  esac
}

CASES=(ceiling-kvmeter-c ceiling-floor-c ceiling-ycsb-c ceiling-kvmeter-a ceiling-floor-a ceiling-ycsb-a
       rocks-kvmeter-t1 rocks-direct-t1 rocks-direct-cold-t1 rocks-direct-timed-t1 rocks-direct-ycsb-t1 rocks-dbbench-t1 rocks-ycsb-t1
       rocks-kvmeter-t2 rocks-direct-t2 rocks-direct-cold-t2 rocks-direct-timed-t2 rocks-direct-ycsb-t2 rocks-dbbench-t2 rocks-ycsb-t2
       rocks-kvmeter-seq-t1 rocks-direct-seq-t1 rocks-direct-seq-dbbkeys-t1 rocks-dbbench-same-t1 rocks-dbbench-same-hist-t1 rocks-kvmeter-seq-hcc-t1 rocks-dbbench-same-hcc-t1
       rocks-kvmeter-seq-off-t1 rocks-kvmeter-off-t1 rocks-dbbench-same-rand-t1 rocks-dbbench-same-stats-t1 rocks-dbbench-same-rand-stats-t1
       rocks-kvmeter-seq-t2 rocks-direct-seq-t2 rocks-direct-seq-dbbkeys-t2 rocks-dbbench-same-t2 rocks-dbbench-same-hist-t2 rocks-kvmeter-seq-hcc-t2 rocks-dbbench-same-hcc-t2
       rocks-kvmeter-seq-off-t2 rocks-kvmeter-off-t2 rocks-dbbench-same-rand-t2 rocks-dbbench-same-stats-t2 rocks-dbbench-same-rand-stats-t2
       rss-kvmeter-1M rss-kvmeter-100M
       tel-null-on tel-null-off tel-rocks-on tel-rocks-off
       emb-kvmeter-lmdb-t1 emb-plugin-lmdb-t1 emb-direct-lmdb-t1 emb-direct-timed-lmdb-t1 emb-direct-ycsb-lmdb-t1
       emb-kvmeter-wiredtiger-t1 emb-direct-wiredtiger-t1 emb-direct-timed-wiredtiger-t1 emb-direct-ycsb-wiredtiger-t1
       emb-kvmeter-lmdb-t2 emb-plugin-lmdb-t2 emb-direct-lmdb-t2 emb-direct-timed-lmdb-t2 emb-direct-ycsb-lmdb-t2
       emb-kvmeter-wiredtiger-t2 emb-direct-wiredtiger-t2 emb-direct-timed-wiredtiger-t2 emb-direct-ycsb-wiredtiger-t2
       redis-kvmeter-t1 redis-kvmeter-hget-t1 redis-bench-t1 redis-kvmeter-t2 redis-kvmeter-hget-t2 redis-bench-t2
       mc-kvmeter-t1 mc-memcslap-t1 mc-kvmeter-t2 mc-memcslap-t2
       redis-kvmeter-pin0 redis-bench-pin0 mc-kvmeter-pin0 mc-memcslap-pin0
       redis-kvmeter-p16 redis-bench-p16
       redis-same-kvmeter-t1 redis-same-bench-t1 redis-same-kvmeter-t2 redis-same-bench-t2
       redis-same-kvmeter-p16 redis-same-bench-p16 redis-same-kvmeter-e2
       null-scale-t1 null-scale-tN
       mc-same-kvmeter-t1 mc-same-memcslap-t1 mc-same-kvmeter-t2 mc-same-memcslap-t2)
if [[ -n ${AB_OLD:-} ]]; then
  CASES+=(ab-old-ceiling-c ab-new-ceiling-c ab-old-ceiling-a ab-new-ceiling-a ab-old-rocks-t1 ab-new-rocks-t1
         ab-old-rocks-t2 ab-new-rocks-t2 ab-old-lmdb-t1 ab-new-lmdb-t1 ab-old-lmdb-t2 ab-new-lmdb-t2
         redis-same-old-t1 redis-same-old-t2 redis-same-old-e2)
fi
{
  echo "# kvmeter $(git rev-parse --short HEAD) on $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), $(date -u +%FT%TZ)"
  echo -e "case\trep\tvalue\tcpu_ns_per_op"
} > "$OUT/raw.tsv"
for rep in $(seq 1 "$REPS"); do
  for c in "${CASES[@]}"; do
    [[ $c =~ $ONLY ]] || continue
    read -r v cpu <<<"$(run_case "$c" || echo "")" || true
    echo -e "$c\t$rep\t${v:-}\t${cpu:-}" | tee -a "$OUT/raw.tsv" >&2
  done
done
python3 - "$OUT/raw.tsv" > "$OUT/summary.tsv" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
cpus = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith('#') or line.startswith('case'): continue
    c, _, v, cpu = (line.rstrip('\n').split('\t') + [''])[:4]
    if v: rows[c].append(float(v))
    if cpu: cpus[c].append(float(cpu))
print("case\tmedian\tmin\tmax\tn\tcpu_ns_per_op_median")
for c, vs in rows.items():
    cm = f"{statistics.median(cpus[c]):.0f}" if cpus[c] else ""
    print(f"{c}\t{statistics.median(vs):.0f}\t{min(vs):.0f}\t{max(vs):.0f}\t{len(vs)}\t{cm}")
PY
cat "$OUT/summary.tsv"
echo "results: $OUT" >&2
