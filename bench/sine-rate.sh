#!/usr/bin/env bash
# mixgraph's sine rate (issue 32, docs/workloads-models.md "The sine, paced"): runs an open
# loop paced by rate(t) = a·sin(b·t + c) + d and compares each interval's achieved rate (its
# operations over its width, intervals.csv) with the formula's mean over that interval,
# (Λ(end) − Λ(start)) / width, Λ(t) = d·t + (a/b)(cos c − cos(b·t + c)). Prints per arrival
# process the mean and max relative error over the intervals, and, for scale, the error a
# Poisson count alone would have (1/√expected per interval). Noise is off (the formula is then
# the whole schedule). No timing assertion lives in the tests: this is the measurement.
#
# Usage: [KVMETER=target/release/kvmeter] [STORE=null|rocksdb] [A=2000 B=0.5 C=0 D=5000]
#        [DUR=30s] [INTERVAL=1s] [ARRIVALS="fixed poisson"] [THREADS=4] bench/sine-rate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${KVMETER:-target/release/kvmeter}
store=${STORE:-null}
a=${A:-2000}; b=${B:-0.5}; c=${C:-0}; d=${D:-5000}
dur=${DUR:-30s}; interval=${INTERVAL:-1s}; threads=${THREADS:-4}
out=bench/results/sine-rate-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
echo "# $bin run --store $store -p workload=mixgraph -p mixgraph.sine_mix_rate=true" \
  "-p mixgraph.sine_a=$a -p mixgraph.sine_b=$b -p mixgraph.sine_c=$c -p mixgraph.sine_d=$d" \
  "--arrival ARRIVAL --records 10000 --duration $dur --interval $interval --threads $threads"
echo "# $(uname -n), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
printf "%-8s %9s %11s %11s %13s %12s %8s\n" arrival intervals mean_err% max_err% poisson_sd% achieved/s kept_up
for arrival in ${ARRIVALS:-fixed poisson}; do
  dir="$out/$arrival"
  "$bin" run --store "$store" -p workload=mixgraph -p mixgraph.sine_mix_rate=true \
    -p mixgraph.sine_a="$a" -p mixgraph.sine_b="$b" -p mixgraph.sine_c="$c" \
    -p mixgraph.sine_d="$d" -p mixgraph.mix_get_ratio=0.9 -p mixgraph.mix_put_ratio=0.1 \
    --arrival "$arrival" --records 10000 --duration "$dur" --interval "$interval" \
    --threads "$threads" --telemetry-interval 0 --out "$dir" >/dev/null 2>"$dir.stderr"
  python3 - "$dir" "$arrival" "$a" "$b" "$c" "$d" <<'PY'
import csv, json, math, sys
d, arrival = sys.argv[1], sys.argv[2]
a, b, c, dd = map(float, sys.argv[3:7])
lam = lambda t: dd * t + (a / b) * (math.cos(c) - math.cos(b * t + c)) if b else (a * math.sin(c) + dd) * t
per = {}
for r in csv.DictReader(open(d + "/intervals.csv")):
    if r["phase"] != "run" or r["metric"] in ("CLEANUP", "SCHEDULE"):
        continue
    k = (float(r["start_s"]), float(r["end_s"]))
    per[k] = per.get(k, 0) + int(r["count"])
errs, sds = [], []
rows = sorted(per.items())
for (t0, t1), n in rows[:-1]:  # the last interval may be cut by the deadline
    if t1 - t0 < 0.5 * (rows[0][0][1] - rows[0][0][0]):
        continue
    want = lam(t1) - lam(t0)
    errs.append(abs(n - want) / want)
    sds.append(1 / math.sqrt(want))
s = json.load(open(d + "/summary.json"))
p = [x for x in s["phases"] if x["name"] == "run"][0]
o = p.get("open_loop") or {}
print("%-8s %9d %11.3f %11.3f %13.3f %12.0f %8s" % (arrival, len(errs),
      100 * sum(errs) / len(errs), 100 * max(errs), 100 * sum(sds) / len(sds),
      o.get("achieved_ops_per_s", float("nan")), o.get("kept_up")))
PY
done
echo "raw: $out"
