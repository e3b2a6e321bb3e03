#!/usr/bin/env bash
# Issue 30's engine mechanism, chosen on evidence: the same closed-loop memcached GET load
# generator driven by epoll through mio (kvmeter's engine), tokio (a current_thread runtime per
# thread; and the multi-thread runtime), and io_uring -- bench/mechanisms/, one binary, --mech.
# BENCHMARKS.md "Engine mechanism".
#   REPS=5 DUR=5 bench/mechanisms.sh    -> bench/results/mechanisms-<date>/{raw.tsv,summary.tsv,compare.tsv,env.txt}
#   ANALYZE=bench/results/mechanisms-<date> bench/mechanisms.sh   -> the tables again from raw.tsv
# Environment: REPS (rounds, default 5), DUR (seconds per run, default 5), MECHS (default
# "mio tokio tokio-mt uring"), SHAPES (CONNSxDEPTH, default "1x1 100x1 1000x1 10000x1 1000x4"),
# THREADS (default 2; 1 connection runs 1 thread), WAIT_MAX (seconds to wait before a round
# for no rustc to be running, default 300; the round runs anyway after it, and every row
# records how many rustc processes there were and the load average), CARGO_TARGET_DIR
# (default bench/mechanisms/target; the crate, its own workspace, is built first: release,
# --locked), PIN (1: memcached on CPU 1 and
# the client on CPU 0 through taskset, so neither migrates nor takes the other's CPU; default 0,
# unpinned as bench/conns.sh), SYSCALLS (1: after the rounds, one more run per case under
# `perf stat -e raw_syscalls:sys_enter,context-switches` -> syscalls.tsv, system calls and context
# switches per operation, connection set-up included).
# Server: memcached -l 127.0.0.1 -p 21591 -t 2 -m 1024 -c 20000 -b 20000 (-u nobody as root),
# started once, kept for every round, unpinned (client and server share the CPUs); the binary's
# --load sets key:0000000..key:0099999 to 1,024 bytes first. Each run: --threads T --conns N
# --depth D --secs DUR, uniform keys; the rounds interleave the mechanisms (their order rotates
# every round). Columns: the binary's own (ops/s over the measured window, the window's client
# CPU from getrusage, p50/p99 from the send, misses, errors) plus the whole process's CPU and max
# RSS under /usr/bin/time (connection set-up included). summary.tsv: medians per case, with the
# min and max over the rounds; compare.tsv: each mechanism against mio per shape, ratios of the
# medians and the per-round (paired) ratios' range.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-5}
DUR=${DUR:-5}
MECHS=${MECHS:-mio tokio tokio-mt uring}
SHAPES=${SHAPES:-1x1 100x1 1000x1 10000x1 1000x4}
THREADS=${THREADS:-2}
WAIT_MAX=${WAIT_MAX:-300}
PIN=${PIN:-0}
SYSCALLS=${SYSCALLS:-0}
CPIN=() SPIN=()
(( PIN )) && CPIN=(taskset -c 0) SPIN=(taskset -c 1)
PORT=21591
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/bench/mechanisms/target}

summarize() {
python3 - "$1/raw.tsv" "$1/summary.tsv" "$1/compare.tsv" <<'PY'
import sys, statistics, collections
raw, summ, comp = sys.argv[1:]
rows = []
hdr = None
for line in open(raw):
    if line.startswith('#'): continue
    f = line.rstrip('\n').split('\t')
    if hdr is None: hdr = f; continue
    rows.append(dict(zip(hdr, f)))
num = lambda r, k: float(r[k])
by = collections.defaultdict(list)
order = []
for r in rows:
    key = (r["shape"], r["mech"])
    if key not in by: order.append(key)
    by[key].append(r)
med = lambda rs, k: statistics.median(num(r, k) for r in rs)
cols = ["ops_per_s", "win_cpu_ns_per_op", "proc_cpu_ns_per_op", "proc_maxrss_kib", "p50_us", "p99_us"]
with open(summ, "w") as out:
    print("shape\tmech\tn\tops_per_s\tops_per_s_min\tops_per_s_max\twin_cpu_ns_per_op\tcpu_min\tcpu_max\tproc_cpu_ns_per_op\tmaxrss_kib\tp50_us\tp99_us\terrors_max\tmisses_max\trustc_max\tload1_max", file=out)
    for k in order:
        rs = by[k]
        ops = [num(r, "ops_per_s") for r in rs]; cpu = [num(r, "win_cpu_ns_per_op") for r in rs]
        print("\t".join([k[0], k[1], str(len(rs)), f"{med(rs,'ops_per_s'):.0f}", f"{min(ops):.0f}", f"{max(ops):.0f}",
              f"{med(rs,'win_cpu_ns_per_op'):.0f}", f"{min(cpu):.0f}", f"{max(cpu):.0f}", f"{med(rs,'proc_cpu_ns_per_op'):.0f}",
              f"{med(rs,'proc_maxrss_kib'):.0f}", f"{med(rs,'p50_us'):.1f}", f"{med(rs,'p99_us'):.1f}",
              f"{max(num(r,'errors') for r in rs):.0f}", f"{max(num(r,'misses') for r in rs):.0f}",
              f"{max(num(r,'rustc') for r in rs):.0f}", f"{max(num(r,'load1') for r in rs):.2f}"]), file=out)
with open(comp, "w") as out:
    print("shape\tmech\tops_per_s_vs_mio\tpaired_min\tpaired_max\tcpu_per_op_vs_mio\tpaired_min\tpaired_max\tverdict\t(ratios of medians, mech / mio; paired: the per-round ratios, min..max; verdict: higher or lower when every round's paired ratio is on that side of 1, else within spread)", file=out)
    shapes = []
    for s, _ in order:
        if s not in shapes: shapes.append(s)
    for s in shapes:
        base = by.get((s, "mio"))
        if not base: continue
        brep = {r["rep"]: r for r in base}
        for (s2, m) in order:
            if s2 != s or m == "mio": continue
            rs = by[(s2, m)]
            def pr(k):
                v = [num(r, k) / num(brep[r["rep"]], k) for r in rs if r["rep"] in brep and num(brep[r["rep"]], k) > 0]
                return v
            po, pc = pr("ops_per_s"), pr("win_cpu_ns_per_op")
            side = lambda v: "higher" if min(v) > 1 else "lower" if max(v) < 1 else "within spread"
            print("\t".join([s, m, f"{med(rs,'ops_per_s')/med(base,'ops_per_s'):.2f}", f"{min(po):.2f}", f"{max(po):.2f}",
                  f"{med(rs,'win_cpu_ns_per_op')/med(base,'win_cpu_ns_per_op'):.2f}", f"{min(pc):.2f}", f"{max(pc):.2f}",
                  f"ops/s {side(po)}, cpu/op {side(pc)}"]), file=out)
PY
column -t -s $'\t' "$1/summary.tsv"; echo; column -t -s $'\t' "$1/compare.tsv"
}
if [[ -n ${ANALYZE:-} ]]; then summarize "$ANALYZE"; exit 0; fi

(cd bench/mechanisms && cargo build --release --locked -q)
OUT=bench/results/mechanisms-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
TMP=$(mktemp -d)
MC=
cleanup() { [[ -n $MC ]] && { kill "$MC" 2>/dev/null || true; wait "$MC" 2>/dev/null || true; }; rm -rf "$TMP"; }
trap cleanup EXIT
cp "$CARGO_TARGET_DIR/release/kvmeter-mechanisms" "$TMP/mech"
B=$TMP/mech
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
{
  echo "date: $(date -u +%FT%TZ); $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); kernel $(uname -r)"
  echo "io_uring_disabled sysctl: $(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null || echo absent); probe: $("$B" --probe 2>&1 || true)"
  echo "nofile: $(ulimit -n); memcached: $(memcached -V); rev: $(git rev-parse --short HEAD)$(git diff --quiet -- bench/mechanisms || echo +dirty)"
  echo "REPS=$REPS DUR=$DUR THREADS=$THREADS MECHS=$MECHS SHAPES=$SHAPES PIN=$PIN"
} | tee "$OUT/env.txt"

user=(); [[ $(id -u) == 0 ]] && user=(-u nobody)
"${SPIN[@]}" memcached -l 127.0.0.1 -p $PORT -t 2 -m 1024 -c 20000 -b 20000 "${user[@]}" &
MC=$!
for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done
"$B" --addr 127.0.0.1:$PORT --load --keys 100000

{ echo "# $(head -1 "$OUT/env.txt")"
  echo -e "shape\trep\t$("$B" --header)\tproc_cpu_s\tproc_cpu_ns_per_op\tproc_maxrss_kib\trustc\tload1"; } > "$OUT/raw.tsv"
read -ra M <<<"$MECHS"
for rep in $(seq 1 "$REPS"); do
  waited=0
  while (( $(pgrep -c rustc || true) > 0 && waited < WAIT_MAX )); do sleep 5; waited=$((waited + 5)); done
  echo "round $rep (waited ${waited}s for rustc; $(pgrep -c rustc || true) running)" >&2
  for shape in $SHAPES; do
    n=${shape%x*} d=${shape#*x} t=$THREADS
    (( n < t )) && t=$n
    for ((k = 0; k < ${#M[@]}; k++)); do
      m=${M[(k + rep - 1) % ${#M[@]}]}
      rustc_n=$(pgrep -c rustc || true) load1=$(cut -d' ' -f1 /proc/loadavg)
      line=$(/usr/bin/time -f '%U %S %M' -o "$TMP/time" timeout $((DUR + 120)) "${CPIN[@]}" "$B" --addr 127.0.0.1:$PORT \
        --mech "$m" --threads "$t" --conns "$n" --depth "$d" --secs "$DUR" 2>"$TMP/err") \
        || { echo "warning: $m $shape failed: $(tail -1 "$TMP/err")" >&2; continue; }
      read -r u s rss < <(tail -1 "$TMP/time")
      ops=$(cut -f6 <<<"$line")
      pc=$(python3 -c "print(f'{$u+$s:.2f}\t{($u+$s)*1e9/max($ops,1):.0f}')")
      echo -e "$shape\t$rep\t$line\t$pc\t$rss\t$rustc_n\t$load1" | tee -a "$OUT/raw.tsv" >&2
    done
  done
done
summarize "$OUT"
if (( SYSCALLS )); then
  echo -e "shape\tmech\tops\tsyscalls\tsyscalls_per_op\tcswitches_per_op\trustc" > "$OUT/syscalls.tsv"
  for shape in $SHAPES; do
    n=${shape%x*} d=${shape#*x} t=$THREADS
    (( n < t )) && t=$n
    for m in "${M[@]}"; do
      line=$("${CPIN[@]}" perf stat -x, -o "$TMP/perf" -e raw_syscalls:sys_enter,context-switches "$B" --addr 127.0.0.1:$PORT \
        --mech "$m" --threads "$t" --conns "$n" --depth "$d" --secs "$DUR" 2>/dev/null) || continue
      ops=$(cut -f6 <<<"$line")
      sc=$(grep raw_syscalls "$TMP/perf" | cut -d, -f1) cs=$(grep context-switches "$TMP/perf" | cut -d, -f1)
      echo -e "$shape\t$m\t$ops\t$sc\t$(python3 -c "print(f'{$sc/$ops:.2f}\t{$cs/$ops:.3f}')")\t$(pgrep -c rustc || true)" >> "$OUT/syscalls.tsv"
    done
  done
  column -t -s $'\t' "$OUT/syscalls.tsv"
fi
echo "results: $OUT" >&2
