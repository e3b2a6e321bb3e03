//! The pressure scale's results (papers/004): per step w0..w25, the store's throughput and
//! latency, the antagonists' own I/O, and what the store did inside (issue 43) — its storage
//! writes and stalls per step from its own statistics, so the scale can be read beside the
//! compaction work and stalls under it. The paper measures throughput only; the store's
//! figures are this tool's addition and absent when the store declares none.

use crate::store::stats::{Role, StatKind, StatSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One step of the pressure scale.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PressureStep {
    /// w0 .. w25.
    pub step: String,
    pub start_s: f64,
    pub seconds: f64,
    /// Each antagonist instance's write ratio; null when it was not running.
    pub write_ratios: Vec<Option<f64>>,
    /// The store's mean throughput over the step (ρ).
    pub ops_per_s: f64,
    /// (ρ(w0) − ρ(wi)) / ρ(w0).
    pub normalized_pressure: f64,
    /// Latency percentiles per operation type in the step (µs).
    pub p50_us: BTreeMap<String, f64>,
    pub p99_us: BTreeMap<String, f64>,
    pub p99_9_us: BTreeMap<String, f64>,
    pub antagonist_read_iops: f64,
    pub antagonist_write_iops: f64,
    pub antagonist_mb_per_s: f64,
    pub antagonist_avg_latency_us: f64,
    /// What the store reported about itself over the step; absent without statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<PressureStore>,
}

/// The store's own figures over one step, from its samples at the step's two ends.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PressureStore {
    /// Each counter of the store's work, storage writes, stalls and user bytes: its increase
    /// over the step (a counter not sampled at both ends is left out).
    pub increase: BTreeMap<String, u64>,
    /// Each backlog gauge (L0 files, pending compaction bytes, ...) at the step's end.
    pub backlog_end: BTreeMap<String, u64>,
    /// The bytes the store says it wrote to storage (WAL, flush, compaction: its
    /// storage-write counters), per second of the step, in MB/s; null when it declares none.
    pub storage_write_mb_per_s: Option<f64>,
    /// The same bytes per operation the store completed in the step: whether a slower step
    /// cost the store more work per operation, or only took longer.
    pub storage_write_bytes_per_op: Option<f64>,
    /// Writer-seconds stalled per second of the step (the stall counter's µs over the step's):
    /// summed over writers, so above 1 when several wait at once; null when none declared.
    pub stall_s_per_s: Option<f64>,
}

/// The mean of the store's figures over a group of steps (w1..w4 or w5..w25).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PressureStoreMeans {
    pub storage_write_mb_per_s: Option<f64>,
    pub storage_write_bytes_per_op: Option<f64>,
    pub stall_s_per_s: Option<f64>,
}

impl PressureStoreMeans {
    /// The means over `steps`: null for a figure no step has.
    pub fn of<'a>(steps: impl Iterator<Item = &'a PressureStep> + Clone) -> Option<Self> {
        let mean = |f: fn(&PressureStore) -> Option<f64>| {
            let v: Vec<f64> = steps
                .clone()
                .filter_map(|s| s.store.as_ref().and_then(f))
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let m = PressureStoreMeans {
            storage_write_mb_per_s: mean(|s| s.storage_write_mb_per_s),
            storage_write_bytes_per_op: mean(|s| s.storage_write_bytes_per_op),
            stall_s_per_s: mean(|s| s.stall_s_per_s),
        };
        (m != PressureStoreMeans::default()).then_some(m)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PressureResult {
    pub block_size_kib: usize,
    pub step_seconds: f64,
    pub random_ratio: f64,
    pub file_size_bytes: u64,
    pub steps: Vec<PressureStep>,
    /// Steps by decreasing normalized pressure (the pressure scale, papers/004 Def. 2).
    pub scale: Vec<String>,
    /// Mean normalized pressure of the read-only steps (w1–w4) and of the write steps (w5–w25).
    pub read_only_mean_pressure: f64,
    pub write_mean_pressure: f64,
    /// The store's own figures averaged over the read-only steps and over the write steps;
    /// absent without statistics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_store: Option<PressureStoreMeans>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_store: Option<PressureStoreMeans>,
}

impl PressureStore {
    /// The store's figures between its samples `before` and `after`, `secs` apart and `ops`
    /// operations apart, in the order of `specs`; None when the later sample holds nothing.
    pub fn between(
        specs: &[StatSpec],
        before: &[Option<u64>],
        after: &[Option<u64>],
        secs: f64,
        ops: u64,
    ) -> Option<Self> {
        if after.iter().all(Option::is_none) {
            return None;
        }
        let mut out = PressureStore::default();
        let (mut written, mut stalled) = (None::<u64>, None::<u64>);
        for (i, s) in specs.iter().enumerate() {
            let now = after.get(i).copied().flatten();
            match (s.kind, s.role) {
                (StatKind::Gauge, Role::Backlog) => {
                    if let Some(v) = now {
                        out.backlog_end.insert(s.name.to_string(), v);
                    }
                }
                (
                    StatKind::Counter,
                    Role::Work | Role::StorageWrite | Role::Stall | Role::UserWrite,
                ) => {
                    let Some(d) = now.zip(before.get(i).copied().flatten()) else {
                        continue;
                    };
                    let d = d.0.saturating_sub(d.1);
                    out.increase.insert(s.name.to_string(), d);
                    match s.role {
                        Role::StorageWrite => *written.get_or_insert(0) += d,
                        Role::Stall => *stalled.get_or_insert(0) += d,
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        let secs = secs.max(1e-9);
        out.storage_write_mb_per_s = written.map(|b| b as f64 / secs / 1e6);
        out.storage_write_bytes_per_op = written.filter(|_| ops > 0).map(|b| b as f64 / ops as f64);
        out.stall_s_per_s = stalled.map(|us| us as f64 / 1e6 / secs);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[rustfmt::skip]
    const SPECS: &[StatSpec] = &[
        StatSpec { name: "flushes", unit: "count", kind: StatKind::Counter, role: Role::Work, meaning: "" },
        StatSpec { name: "wal_bytes", unit: "bytes", kind: StatKind::Counter, role: Role::StorageWrite, meaning: "" },
        StatSpec { name: "flush_bytes", unit: "bytes", kind: StatKind::Counter, role: Role::StorageWrite, meaning: "" },
        StatSpec { name: "stall_us", unit: "us", kind: StatKind::Counter, role: Role::Stall, meaning: "" },
        StatSpec { name: "l0_files", unit: "files", kind: StatKind::Gauge, role: Role::Backlog, meaning: "" },
        StatSpec { name: "hits", unit: "count", kind: StatKind::Counter, role: Role::CacheHit, meaning: "" },
    ];

    #[test]
    fn a_step_is_the_difference_of_its_two_samples() {
        let before = [Some(1), Some(1_000_000), Some(0), Some(0), Some(2), Some(5)];
        let after = [
            Some(3),
            Some(3_000_000),
            Some(4_000_000),
            Some(500_000),
            Some(6),
            Some(9),
        ];
        let s = PressureStore::between(SPECS, &before, &after, 2.0, 1000).unwrap();
        assert_eq!(s.increase["flushes"], 2);
        assert_eq!(s.increase["wal_bytes"], 2_000_000);
        assert!(
            !s.increase.contains_key("hits"),
            "a cache counter is not work"
        );
        assert_eq!(s.backlog_end["l0_files"], 6);
        // (2 MB + 4 MB) over 2 s; 0.5 s stalled over 2 s.
        assert_eq!(s.storage_write_mb_per_s, Some(3.0));
        assert_eq!(s.stall_s_per_s, Some(0.25));
        assert_eq!(s.storage_write_bytes_per_op, Some(6000.0));
    }

    #[test]
    fn a_counter_missing_at_either_end_is_left_out_and_nothing_sampled_is_none() {
        let before = [None, Some(0), None, None, None, None];
        let after = [Some(3), Some(1_000_000), Some(7), None, None, None];
        let s = PressureStore::between(SPECS, &before, &after, 1.0, 0).unwrap();
        assert_eq!(s.increase.len(), 1);
        assert_eq!(s.storage_write_mb_per_s, Some(1.0));
        assert_eq!(s.stall_s_per_s, None);
        assert_eq!(
            s.storage_write_bytes_per_op, None,
            "no operation: no figure, not ∞"
        );
        assert!(PressureStore::between(SPECS, &before, &[None; 6], 1.0, 5).is_none());
    }
}
