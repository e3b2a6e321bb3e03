#!/usr/bin/env bash
# Open-loop rate precision against a managed memcached on loopback (issue: open loop,
# BENCHMARKS.md "Open loop"): offered vs achieved, send lag, and kvmeter's own CPU per
# 100 k req/s, at rising fixed-arrival rates. Usage: bench/openloop.sh [rates...]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/kvmeter
rates=${*:-"10000 20000 40000 60000 80000 100000"}
out=bench/results/openloop-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
printf "%9s %10s %8s %7s %12s %12s %10s %12s %14s\n" offered achieved ratio kept lag_p99_us lag_max_us kvm_cpu% server_cpu% cpu%/100k
for r in $rates; do
  d="$out/rate-$r"
  $bin run -P workloadc --store memcached --records 10000 --rate "$r" --arrival fixed \
    --duration 12s --warmup 2s --out "$d" >/dev/null 2>"$d.stderr" || true
  python3 - "$d/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
p = [x for x in s["phases"] if x["name"] == "run"][0]
o = p["open_loop"]; t = p["telemetry"] or {}
kc = (t.get("process") or {}).get("cpu_pct", float("nan"))
sc = (t.get("server") or {}).get("cpu_pct", float("nan"))
print("%9.0f %10.0f %8.4f %7s %12.1f %12.1f %10.1f %12.1f %14.1f" % (
    o["offered_ops_per_s"], o["achieved_ops_per_s"], o["achieved_ratio"], o["kept_up"],
    o["send_lag_us"]["p99"], o["send_lag_us"]["max"], kc, sc, kc / o["achieved_ops_per_s"] * 1e5))
PY
done
echo "raw: $out"
