#!/usr/bin/env bash
# The five paper presets (experiments/*.toml) at a scale (default quick), one after another,
# nothing else running: what EXPERIMENTS.md shows. Each experiment directory goes under
# kvmeter-runs/experiments-<date>/ (not kept in git); its figures (SVG) and findings.md are
# copied to docs/experiments/<preset>/, which EXPERIMENTS.md links.
#   bench/experiments.sh [preset-name ...]     e.g. bench/experiments.sh papers-004-pressure-scale
#   SCALE=smoke bench/experiments.sh           every preset in seconds
set -euo pipefail
cd "$(dirname "$0")/.."
K=${K:-target/release/kvmeter}
SCALE=${SCALE:-quick}
OUT=${OUT:-kvmeter-runs/experiments-$(date -u +%Y-%m-%d)}
mkdir -p "$OUT"
names=${*:-$(for f in experiments/*.toml; do basename "$f" .toml; done)}
for n in $names; do
  dir="$OUT/$n"
  if [ -d "$dir" ]; then
    echo "$dir exists: resuming it" >&2
    args=(--resume "$dir")
  else
    args=(--scale "$SCALE" --out "$dir")
  fi
  start=$(date +%s)
  code=0
  "$K" experiment "experiments/$n.toml" "${args[@]}" > "$OUT/$n.out" 2> "$OUT/$n.err" || code=$?
  echo "$n: exit $code, $(( $(date +%s) - start )) s, $(date -u +%Y-%m-%dT%H:%MZ)"
  mkdir -p "docs/experiments/$n"
  rm -f "docs/experiments/$n"/*.svg
  cp "$dir"/figures/*.svg "docs/experiments/$n/" 2>/dev/null || true
  cp "$dir/findings.md" "docs/experiments/$n/findings.md"
done
