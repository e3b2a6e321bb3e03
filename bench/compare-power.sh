#!/usr/bin/env bash
# How often `kvmeter compare` gives a verdict (issue 28 item 4), with real RocksDB runs:
#   power:       A against B = the same configuration paced with --target at 90 % of A's rate
#                (a 10 % throughput change); the share of tries with a verdict (and "worse").
#   false alarm: A against A' = the same configuration again; the share with NO verdict.
# Rounds of three runs (A, A', B) in a random order per round, so drift hits every side alike;
# each block of N consecutive rounds is one try of each kind (N runs a side, disjoint data).
#   MINUTES=15 N=5 DURATION=2s bench/compare-power.sh   -> bench/results/compare-power-<time>/
#   (the run directories, ~130 KB each, go to $WORK/kvmeter-compare-power-<time>, WORK=/tmp)
#   ANALYZE=bench/results/compare-power-<time> bench/compare-power.sh   (compare again only)
# RESAMPLE_ABOVE=<ops/s> (0: all runs) adds an estimate from resampling: 5 + 5 runs drawn from
# the A and A' runs above that rate (e.g. the quiet machine's mode), B = 0.9 × its draws, with
# compare's rule for 5 + 5 (at most 2 of the 25 pairs on the wrong side, Hodges-Lehmann beyond
# 2 %; RESAMPLE_ROUNDS=K: rounds 1..K only): a true 10 % multiplicative change at the runs' own noise, which --target pacing is not
# when the machine is slower than the pilot was.
# Also reported per try: the stricter rule "the whole interval beyond ±--noise" (a CI-only
# minimum effect), from compare.json's interval, to see what it would cost in power.
set -euo pipefail
cd "$(dirname "$0")/.."
KV=${KV:-target/release/kvmeter}
MINUTES=${MINUTES:-15}
N=${N:-5}
DURATION=${DURATION:-2s}
SHAPE=(-P workloadc --store rocksdb --records 20000 --duration "$DURATION" --warmup 0.5s --telemetry-interval 0)

if [[ -z ${ANALYZE:-} ]]; then
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  OUT=bench/results/compare-power-$stamp
  RUNS=${WORK:-/tmp}/kvmeter-compare-power-$stamp
  mkdir -p "$OUT" "$RUNS/runs"
  echo "$RUNS" > "$OUT/runs_dir"
  tput() { python3 -c 'import json,sys; print(round([p for p in json.load(open(sys.argv[1]+"/summary.json"))["phases"] if p["name"]=="run"][0]["throughput_ops_per_s"]))' "$1"; }
  # A's rate, for B's --target: the median of three pilot runs (kept out of the tries).
  pilot=()
  for i in 1 2 3; do
    "$KV" run "${SHAPE[@]}" --out "$RUNS/pilot$i" >/dev/null 2>&1
    pilot+=("$(tput "$RUNS/pilot$i")")
  done
  rate=$(printf '%s\n' "${pilot[@]}" | sort -n | sed -n 2p)
  target=$(( rate * 9 / 10 ))
  {
    echo "# kvmeter $(git rev-parse --short HEAD) on $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), $(date -u +%FT%TZ)"
    echo "# ${SHAPE[*]}; pilot ${pilot[*]} ops/s; B --target $target; N=$N; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  } > "$OUT/meta.txt"
  end=$(( $(date +%s) + MINUTES * 60 ))
  round=0
  while (( $(date +%s) < end )); do
    round=$((round + 1))
    for side in $(printf 'A\nA2\nB\n' | shuf); do
      extra=(); [[ $side == B ]] && extra=(--target "$target")
      d="$RUNS/runs/$side/$(printf 'r%03d' "$round")"
      "$KV" run "${SHAPE[@]}" "${extra[@]}" --out "$d" >/dev/null 2>&1 || { echo "run failed: $d" >&2; continue; }
      echo -e "$round\t$side\t$(tput "$d")" >> "$OUT/raw.tsv"
    done
  done
else
  OUT=$ANALYZE
  RUNS=$(head -1 "$OUT/runs_dir")
fi

rounds=$(ls "$RUNS/runs/A" | wc -l)
tries=$(( rounds / N ))
: > "$OUT/tries.tsv"
for t in $(seq 0 $((tries - 1))); do
  pick() { ls -d "$RUNS/runs/$1"/r* | sed -n "$((t * N + 1)),$((t * N + N))p"; }
  for kind in same change; do
    other=A2; [[ $kind == change ]] && other=B
    c="$RUNS/compare/$kind-$t"
    rm -rf "$c"
    # shellcheck disable=SC2046
    "$KV" compare $(pick A) --vs $(pick $other) --out "$c" >/dev/null 2>&1
    python3 - "$c/compare.json" "$kind" "$t" >> "$OUT/tries.tsv" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
r = [r for r in c["rows"] if r["tested"]][0]
lo, hi = r["ratio_ci"] or (None, None)
band = c["noise_band"]
strict = lo is not None and (lo > 1 + band or hi < 1 - band)
f = lambda x: "-" if x is None else f"{x:.4f}"
print(f'{sys.argv[2]}\t{sys.argv[3]}\t{f(r["ratio"])}\t{f(lo)}\t{f(hi)}\t{f(r["p"])}\t{r["verdict"]}\t{int(strict)}')
PY
  done
done
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import sys, statistics, collections
out = sys.argv[1]
print(open(out + "/meta.txt").read().rstrip())
raw = collections.defaultdict(list)
for line in open(out + "/raw.tsv"):
    _, side, v = line.split()
    raw[side].append(float(v))
for side, v in sorted(raw.items()):
    print(f"{side}: {len(v)} runs, median {statistics.median(v):.0f} ops/s, CV {statistics.stdev(v) / statistics.mean(v) * 100:.1f} %")
rows = [l.rstrip("\n").split("\t") for l in open(out + "/tries.tsv")]
for kind, want in [("same", "no verdict"), ("change", "verdict")]:
    k = [r for r in rows if r[0] == kind]
    if not k:
        continue
    verdicts = [r for r in k if r[6] in ("better", "worse")]
    strict = [r for r in k if r[7] == "1"]
    if kind == "same":
        print(f"identical: {len(k) - len(verdicts)}/{len(k)} tries without a verdict ({(len(k) - len(verdicts)) / len(k) * 100:.0f} %); "
              f"with the whole-interval-beyond-noise rule {len(k) - len(strict)}/{len(k)}")
    else:
        worse = [r for r in k if r[6] == "worse"]
        print(f"10 % slower: {len(worse)}/{len(k)} tries 'worse' ({len(worse) / len(k) * 100:.0f} %), {len(verdicts)} with any verdict; "
              f"with the whole-interval-beyond-noise rule {len(strict)}/{len(k)}; median B/A {statistics.median(float(r[2]) for r in k):.3f}")
PY
if [[ -n ${RESAMPLE_ABOVE:-} ]]; then
python3 - "$OUT/raw.tsv" "$RESAMPLE_ABOVE" "${RESAMPLE_ROUNDS:-100000}" <<'PY' | tee -a "$OUT/summary.txt"
import random, statistics, sys, math
raw = {}
for l in open(sys.argv[1]):
    n, s, v = l.split()
    if int(n) <= int(sys.argv[3]):
        raw.setdefault(s, []).append(float(v))
cut = float(sys.argv[2])
A = [v for v in raw["A"] + raw["A2"] if v > cut]
def verdict(a, b):
    d = sorted(math.log(y) - math.log(x) for x in a for y in b)
    wrong = min(sum(1 for x in d if x <= 0), sum(1 for x in d if x >= 0))
    hl = math.exp(statistics.median(d))
    return wrong <= 2 and abs(hl - 1) > 0.02, hl
random.seed(1)
T = 5000
fa = sum(verdict(random.sample(A, 5), random.sample(A, 5))[0] for _ in range(T))
pw = 0
for _ in range(T):
    s = random.sample(A, 10)
    ok, r = verdict(s[:5], [x * 0.9 for x in s[5:]])
    pw += ok and r < 1
print(f"resampled, {len(A)} A/A' runs above {cut:.0f} ops/s (CV {statistics.stdev(A) / statistics.mean(A) * 100:.1f} %): "
      f"identical {100 - fa / T * 100:.1f} % without a verdict; 10 % slower {pw / T * 100:.1f} % 'worse' ({T} draws)")
PY
fi
