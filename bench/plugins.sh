#!/usr/bin/env bash
# The YCSB suite on the stores built from source as plug-ins (SplinterDB, Parallax) next to the
# built-in RocksDB and WiredTiger, one command shape for all (BENCHMARKS.md, "Store plug-ins").
#   bench/plugins.sh            # plug-ins from plugins/*/build.sh's default places
#   RECORDS=200000 OPS=200000 THREADS=1 bench/plugins.sh
# Prints one row per store: ops/s of each suite phase; run directories stay in $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
RECORDS=${RECORDS:-200000}
OPS=${OPS:-200000}
THREADS=${THREADS:-1}
SPLINTERDB=${SPLINTERDB:-target/plugins/splinterdb/libkvm_splinterdb.so}
PARALLAX=${PARALLAX:-target/plugins/parallax/libkvm_parallax.so}
OUT=${OUT:-kvmeter-runs/plugins-$(date -u +%Y%m%dT%H%M%SZ)}
K=target/release/kvmeter
cargo build --release --quiet --features all-stores
stores=(rocksdb wiredtiger)
for so in "$SPLINTERDB" "$PARALLAX"; do
  if [ -f "$so" ]; then stores+=("plugin:$so"); else echo "skipping $so: build it with plugins/*/build.sh" >&2; fi
done
mkdir -p "$OUT"
for s in "${stores[@]}"; do
  name=$(basename "${s#plugin:}" .so); name=${name#libkvm_}
  echo "suite on $s" >&2
  $K suite --store "$s" --records "$RECORDS" --ops "$OPS" --threads "$THREADS" --out "$OUT/$name" >/dev/null 2>"$OUT/$name.stderr" || echo "$s failed: $OUT/$name.stderr" >&2
done
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = []
for name in sorted(os.listdir(out)):
    p = os.path.join(out, name, "summary.json")
    if not os.path.exists(p):
        continue
    s = json.load(open(p))
    phases = {ph["name"]: ph["throughput_ops_per_s"] for ph in s["phases"] if ph.get("kind") != "clear"}
    rows.append((name, phases))
cols = [c for c in ["load-a", "run-a", "run-b", "run-c", "run-f", "run-d", "load-e", "run-e"] if any(c in r[1] for r in rows)]
print("| store | " + " | ".join(cols) + " |")
print("|---|" + "---:|" * len(cols))
for name, ph in rows:
    print(f"| {name} | " + " | ".join(f"{ph[c]:,.0f}" if c in ph else "—" for c in cols) + " |")
PY
echo "runs: $OUT" >&2
