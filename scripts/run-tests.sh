#!/usr/bin/env bash
# Everything CI checks: formatting, lints, and every test (unit, conformance against the real
# RocksDB, end-to-end runs of the binary). Release mode, so the bundled RocksDB is built once
# and shared with 'scripts/run-suite.sh'.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's wall time goes to stderr, so a CI log says where its minutes went.
step() {
    local t0=$SECONDS
    "$@"
    echo "run-tests: '$*' took $((SECONDS - t0)) s" >&2
}
step env KVMETER_SETUP_TESTS=1 bash scripts/setup.sh
step cargo fmt --all -- --check
step cargo clippy --release --all-targets --features all-stores --quiet -- -D warnings
# --no-fail-fast: one failing file does not hide the others' results. The output is also kept
# in target/test-output.txt and, when a test fails, each panic's message is printed again at
# the very end: a CI page that shows only the head and tail of a long log still says why.
log=target/test-output.txt
mkdir -p target
# Most tests spend their time waiting (servers starting, elections, deadlines, replies a byte a
# second), not on a CPU: on the 2-vCPU CI machine, twice as many tests at once as CPUs took the
# test binaries from about 605 s to about 415 s, the quiet ones included (BENCHMARKS.md, issue
# 42). The few tests whose figures need kvmeter to get a CPU when it wants one (its CPU time,
# its pace, its latency at a rate, a throughput difference) live in modules named `quiet`; they
# run afterwards, one test per CPU (libtest's default), as every test did before. At most 8 at
# once: more was never tried, and many tests start servers (etcd groups, Redis clusters,
# chromium) of their own.
threads=$((2 * $(nproc)))
[ "$threads" -le 8 ] || threads=8
threads=${RUST_TEST_THREADS:-$threads}
set +e
t0=$SECONDS
cargo test --release --features all-stores --no-fail-fast --tests -- --test-threads "$threads" \
    --skip ::quiet:: 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "run-tests: 'cargo test' (build, then $threads tests at once) took $((SECONDS - t0)) s" >&2
t0=$SECONDS
cargo test --release --features all-stores --no-fail-fast --tests -- ::quiet:: 2>&1 | tee -a "$log"
quiet_rc=${PIPESTATUS[0]}
echo "run-tests: 'cargo test -- ::quiet::' took $((SECONDS - t0)) s" >&2
[ "$rc" -ne 0 ] || rc=$quiet_rc
set -e
if [ "$rc" -ne 0 ]; then
    echo "==== why the failing tests failed (from $log) ===="
    # || true: no panic (a build error) or head closing the pipe keeps cargo's exit code.
    grep -A 6 "panicked at" "$log" | cut -c1-300 | head -n 120 || true
fi
exit "$rc"
