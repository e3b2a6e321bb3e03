//! YCSB's text report (`TextMeasurementsExporter`, ycsb-workload-spec §8.8), so scripts that
//! parse YCSB output parse kvmeter's. Metric and `Return=` lines follow YCSB's
//! `ConcurrentHashMap` order; paced runs add `Intended-<OP>` sections, as YCSB's
//! `measurement.interval=both` does.
//!
//! Values come from kvmeter's nanosecond histograms, truncated to whole microseconds where
//! YCSB prints integers; they agree with YCSB's own µs histograms within HdrHistogram's
//! 3-significant-digit precision.

use super::javafmt::double_to_string;
use crate::measure::{percentile, Metric, OpStats, Stats};
use crate::workload::keys::java_string_hash;
use hdrhistogram::Histogram;
use std::fmt::Write;

/// Slot of a name in a 16-slot Java `ConcurrentHashMap`.
fn slot(name: &str) -> u32 {
    let h = java_string_hash(name.as_bytes()) as u32;
    (h ^ (h >> 16)) & 15
}

fn status_slot(name: &str) -> u32 {
    match name {
        "OK" | "NOT_IMPLEMENTED" => 5,
        "BAD_REQUEST" | "FORBIDDEN" => 6,
        "UNEXPECTED_STATE" => 8,
        "SERVICE_UNAVAILABLE" | "BATCHED_OK" => 9,
        "NOT_FOUND" => 11,
        _ => 15,
    }
}

/// YCSB's `ordinal(p)` + "PercentileLatency(us)".
fn percentile_label(p: f64) -> String {
    if p.fract() == 0.0 {
        let n = p as i32;
        let suffix = match (n % 100, n % 10) {
            (11..=13, _) => "th",
            (_, 1) => "st",
            (_, 2) => "nd",
            (_, 3) => "rd",
            _ => "th",
        };
        format!("{n}{suffix}PercentileLatency(us)")
    } else {
        format!("{}PercentileLatency(us)", double_to_string(p))
    }
}

fn returns(o: &OpStats) -> Vec<(&'static str, u64)> {
    let s = &o.statuses;
    use crate::store::ErrorKind as K;
    let e = |k: K| s[2 + k as usize];
    let mut v = vec![
        ("OK", s[0]),
        ("NOT_FOUND", s[1]),
        ("NOT_IMPLEMENTED", e(K::NotImplemented)),
        ("UNEXPECTED_STATE", e(K::UnexpectedState)),
        ("SERVICE_UNAVAILABLE", e(K::Busy)),
        (
            "ERROR",
            e(K::Io) + e(K::Timeout) + e(K::Corruption) + e(K::Other) + e(K::Protocol),
        ),
    ];
    v.retain(|(_, n)| *n > 0);
    // The status map hashes `Status` objects (name and description), so its slots come from
    // the spec's table (§8.8) rather than from the name alone.
    v.sort_by_key(|(name, _)| status_slot(name));
    v
}

fn section(out: &mut String, name: &str, h: &Histogram<u64>, percentiles: &[f64]) {
    let us = |ns: u64| ns / 1000;
    let _ = writeln!(out, "[{name}], Operations, {}", h.len());
    let _ = writeln!(
        out,
        "[{name}], AverageLatency(us), {}",
        double_to_string(percentile::mean(h) / 1000.0)
    );
    let _ = writeln!(out, "[{name}], MinLatency(us), {}", us(percentile::min(h)));
    let _ = writeln!(out, "[{name}], MaxLatency(us), {}", us(percentile::max(h)));
    for &p in percentiles {
        let _ = writeln!(
            out,
            "[{name}], {}, {}",
            percentile_label(p),
            us(percentile::value_at(h, p))
        );
    }
}

/// The report of one phase: `runtime_ms` is the measured window, `ops_done` every operation
/// the workers completed in it.
pub fn report(stats: &Stats, runtime_ms: u64, ops_done: u64, percentiles: &[f64]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "[OVERALL], RunTime(ms), {runtime_ms}");
    let tput = if runtime_ms == 0 {
        f64::INFINITY
    } else {
        1000.0 * ops_done as f64 / runtime_ms as f64
    };
    let _ = writeln!(
        out,
        "[OVERALL], Throughput(ops/sec), {}",
        double_to_string(tput)
    );
    // No JVM: the totals print as zeros so existing parsers still find them.
    let _ = writeln!(out, "[TOTAL_GCs], Count, 0");
    let _ = writeln!(out, "[TOTAL_GC_TIME], Time(ms), 0");
    let _ = writeln!(out, "[TOTAL_GC_TIME_%], Time(%), 0.0");

    // Actual map: NAME (ok latencies + Return= lines), NAME-FAILED (failed latencies).
    let mut entries: Vec<(String, &Histogram<u64>, Option<&OpStats>)> = Vec::new();
    for (m, o) in stats.metrics() {
        entries.push((m.name().to_string(), &o.ok, Some(o)));
        if let Some(f) = o.failed.as_ref().filter(|f| !f.is_empty()) {
            entries.push((format!("{}-FAILED", m.name()), f, None));
        }
    }
    // Stable sort: within a slot, kvmeter's metric order, each -FAILED after its plain name
    // (YCSB uses first-recorded order there, which is not reproducible).
    entries.sort_by_key(|(n, _, o)| (slot(n), o.is_none()));
    for (name, h, o) in &entries {
        section(&mut out, name, h, percentiles);
        if let Some(o) = o {
            // CLEANUP and READ-MODIFY-WRITE have no status count in YCSB.
            if !matches!(name.as_str(), "CLEANUP" | "READ-MODIFY-WRITE") {
                for (status, n) in returns(o) {
                    let _ = writeln!(out, "[{name}], Return={status}, {n}");
                }
            }
        }
    }
    // Intended map (paced runs), keyed by the plain name.
    let mut intended: Vec<(Metric, &Histogram<u64>)> = stats
        .metrics()
        .filter_map(|(m, o)| o.intended.as_ref().map(|h| (m, h)))
        .collect();
    intended.sort_by_key(|(m, _)| slot(m.name()));
    for (m, h) in intended {
        section(&mut out, &format!("Intended-{}", m.name()), h, percentiles);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Status;

    #[test]
    fn slots_match_spec_table() {
        for (name, want) in [
            ("READ", 0),
            ("UPDATE-FAILED", 0),
            ("SCAN-FAILED", 1),
            ("DELETE", 2),
            ("READ-MODIFY-WRITE", 3),
            ("READ-NOT_FOUND", 3),
            ("CLEANUP", 8),
            ("READ-ERROR", 8),
            ("SCAN-LATENCY-PER-RECORD", 9),
            ("UPDATE", 10),
            ("INSERT", 10),
            ("VERIFY", 10),
            ("READ-FAILED", 10),
            ("SCAN", 11),
            ("INSERT-FAILED", 15),
        ] {
            assert_eq!(slot(name), want, "{name}");
        }
        let order: Vec<u32> = ["OK", "NOT_FOUND", "ERROR", "UNEXPECTED_STATE"]
            .iter()
            .map(|s| status_slot(s))
            .collect();
        assert_eq!(order, [5, 11, 15, 8]);
        assert_eq!(percentile_label(50.0), "50thPercentileLatency(us)");
        assert_eq!(percentile_label(1.0), "1stPercentileLatency(us)");
        assert_eq!(percentile_label(22.0), "22ndPercentileLatency(us)");
        assert_eq!(percentile_label(13.0), "13thPercentileLatency(us)");
        assert_eq!(percentile_label(99.9), "99.9PercentileLatency(us)");
    }

    #[test]
    fn workload_f_layout_and_values() {
        let mut s = Stats::new(
            &[
                Metric::Read,
                Metric::Update,
                Metric::ReadModifyWrite,
                Metric::Cleanup,
            ],
            false,
        );
        for v in 1..=100u64 {
            s.record(Metric::Read, Status::Ok, v * 1000, 0, 0);
        }
        s.record(Metric::Read, Status::NotFound, 5000, 0, 0);
        s.record(Metric::Update, Status::Ok, 2000, 0, 0);
        s.record(Metric::ReadModifyWrite, Status::Ok, 3000, 0, 0);
        s.record(Metric::Cleanup, Status::Ok, 1000, 0, 0);
        let text = report(&s, 1234, 1000, &[50.0, 95.0, 99.0]);
        let heads: Vec<&str> = text
            .lines()
            .filter(|l| l.ends_with(", Operations, 100") || l.contains("], Operations,"))
            .map(|l| l.split(']').next().unwrap().trim_start_matches('['))
            .collect();
        // Slot order (spec §8.8 table: F is READ, READ-MODIFY-WRITE, CLEANUP, UPDATE); within
        // slot 10 plain metrics come before -FAILED ones.
        assert_eq!(
            heads,
            [
                "READ",
                "READ-MODIFY-WRITE",
                "CLEANUP",
                "UPDATE",
                "READ-FAILED"
            ]
        );
        assert!(text.starts_with(
            "[OVERALL], RunTime(ms), 1234\n[OVERALL], Throughput(ops/sec), 810.3727714748784\n"
        ));
        let avg: f64 = text
            .lines()
            .find(|l| l.starts_with("[READ], AverageLatency(us), "))
            .unwrap()
            .rsplit(", ")
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // Mean of 1..=100 µs is 50.5; ns buckets keep it within 3 significant digits.
        assert!((avg - 50.5).abs() < 0.05, "{avg}");
        assert!(text.contains("[READ], MinLatency(us), 1\n[READ], MaxLatency(us), 100\n[READ], 50thPercentileLatency(us), 50\n[READ], 95thPercentileLatency(us), 95\n[READ], 99thPercentileLatency(us), 99\n[READ], Return=OK, 100\n[READ], Return=NOT_FOUND, 1\n"), "{text}");
        assert!(!text.contains("[CLEANUP], Return="));
        assert!(!text.contains("[READ-MODIFY-WRITE], Return="));
    }
}
