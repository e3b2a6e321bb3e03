#!/usr/bin/env bash
# Everything CI checks: formatting, lints, and every test (unit, conformance against the real
# RocksDB, end-to-end runs of the binary). Release mode, so the bundled RocksDB is built once
# and shared with 'scripts/run-suite.sh'.
set -euo pipefail
cd "$(dirname "$0")/.."
KVMETER_SETUP_TESTS=1 bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --release --all-targets --features all-stores --quiet -- -D warnings
# --no-fail-fast: one failing file does not hide the others' results.
cargo test --release --features all-stores --no-fail-fast
