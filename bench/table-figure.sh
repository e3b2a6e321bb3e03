#!/bin/sh
# Makes docs/figures/table-sweep.svg: a small sweep on embedded RocksDB, its tidy table
# (`kvmeter table`), and the figure of docs/table.md's pandas example drawn from it.
# Needs python3 with pandas and matplotlib (e.g. a venv: pip install pandas matplotlib).
# Usage: bench/table-figure.sh [KVMETER] [PYTHON]   (from the repository root)
set -eu
K=${1:-target/release/kvmeter}
PY=${2:-python3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$K" sweep --store rocksdb -P workloada --records 10000 --duration 3s --warmup 1s \
    --param threads=1,2,4,8 --repeat 3 --seed 1 --out "$dir/sweep" >/dev/null
"$K" table "$dir/sweep" --output "$dir/table.csv"
"$PY" bench/table-figure.py "$dir/table.csv" docs/figures/table-sweep.svg
echo "docs/figures/table-sweep.svg from $(wc -l <"$dir/table.csv") lines of table"
