#!/usr/bin/env bash
# Fuzzing (issue 27 item 6; docs/fuzzing.md): runs each fuzz target for SECONDS (default
# 60) in its own process and prints the table: target, inputs, accepted, panics, hangs, peak
# RSS. Crashing and hanging inputs go to bench/results/fuzz-<time>/crashes/.
# Usage: bench/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]    (run it under `nice -n 10` on a
# shared machine; FEATURES=... and FUZZ_EXE=... optional). Exit status: 0 when no target panicked, hung or passed 256 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
case $secs in
  ''|*[!0-9.]*) echo "bench/fuzz.sh: SECONDS_PER_TARGET '$secs': expected a number of seconds" >&2; exit 2 ;;
esac
out=bench/results/fuzz-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out/crashes"
features=${FEATURES:-all-stores}
# Build, then run the test executable itself: cargo would hold the build lock for the whole
# campaign, and other builds sharing the target directory would wait. FUZZ_EXE=path skips the
# build (an executable `cargo test --test fuzz --no-run` printed).
exe=${FUZZ_EXE:-}
[ -n "$exe" ] || exe=$(cargo test --release --features "$features" --test fuzz --no-run --message-format=json \
  2>"$out/build.log" | python3 -c '
import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "fuzz" and m.get("executable"):
        print(m["executable"])') || true
[ -n "$exe" ] || { cat "$out/build.log" >&2; exit 2; }
# A private copy: a rebuild during the campaign replaces the file the children are run from.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$exe" "$tmp/fuzz"
exe=$tmp/fuzz
started=$(date -u +%FT%TZ)
set +e
KVMETER_FUZZ_SECS=$secs KVMETER_FUZZ_TARGETS="$*" KVMETER_FUZZ_CRASHES="$PWD/$out/crashes" \
KVMETER_FUZZ_TABLE="$PWD/$out/table.txt" \
  "$exe" --exact fuzz_every_target --nocapture >"$out/log.txt" 2>&1
rc=$?
set -e
{
  echo "# bench/fuzz.sh $secs ${*:-(all targets)}  started $started  $(nproc) CPUs"
  cat "$out/table.txt" 2>/dev/null || tail -30 "$out/log.txt"
} | tee "$out/summary.txt"
grep '^crash: ' "$out/log.txt" || true
echo "raw: $out (exit $rc)"
exit $rc
