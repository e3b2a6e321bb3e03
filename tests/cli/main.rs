//! End-to-end tests of the `kvmeter` binary: real runs, real run directories, bad input,
//! SIGINT and SIGKILL. Expected values come from the plan (operation counts, proportions,
//! rates), not from kvmeter's own output.
//! One test binary (`--test cli`), one file per concern.

#[path = "../common/mod.rs"]
mod common;

mod circles;
mod endings;
mod harness_cost;
mod input;
mod input_bounds;
mod intervals;
mod layering;
mod load;
mod openloop;
mod panics;
mod power;
mod pressure;
mod runs;
mod shared_dirs;
mod signals;
mod telemetry;
mod telemetry_lines;

pub(crate) use common::*;
pub(crate) use std::path::Path;
pub(crate) use std::process::Stdio;
pub(crate) use std::time::Duration;

/// Reads an HDR interval log with the hdrhistogram crate's own reader; total count.
pub(crate) fn hlog_total(path: &Path) -> u64 {
    use base64::Engine;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    let bytes = std::fs::read(path).unwrap();
    let mut total = 0;
    let mut intervals = 0;
    for entry in IntervalLogIterator::new(&bytes) {
        if let LogEntry::Interval(h) = entry.unwrap_or_else(|e| panic!("{}: {e:?}", path.display()))
        {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(h.encoded_histogram())
                .unwrap();
            let hist: hdrhistogram::Histogram<u64> =
                Deserializer::new().deserialize(&mut &raw[..]).unwrap();
            total += hist.len();
            intervals += 1;
        }
    }
    assert!(intervals > 0, "{} has no intervals", path.display());
    total
}

pub(crate) fn stderr_of(args: &[&str]) -> (i32, String) {
    let o = kvmeter().args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}
