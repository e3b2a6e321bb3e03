//! What etcd says about itself (issue 43): its Prometheus `/metrics` on the client port, read
//! on a connection of the sampler's own (GET, no token: etcd serves it to anyone who may
//! connect) — Raft proposals, leader changes, the WAL's fsyncs and the backend's commits with
//! the seconds they took, the database's size. A reply may hold 4 MiB (etcd 3.4's is about
//! 150 KB) and must come within the sampler's deadline; a leader change seen between two
//! samples is a `leader_change` event at the later one.

use super::super::stats::{self, stat, Role, StatKind::*, StatSpec, StoreEvent};
use std::sync::atomic::{AtomicU64, Ordering};

/// The statistics, each with the series it is read from (a histogram's `_count` or `_sum`;
/// a `_sum` in seconds is kept in microseconds).
pub static STATS: &[StatSpec] = &[
    stat("proposals_committed", "count", Counter, Role::Work, "Raft proposals committed (etcd_server_proposals_committed_total)"),
    stat("proposals_applied", "count", Counter, Role::Plain, "Raft proposals applied (etcd_server_proposals_applied_total)"),
    stat("proposals_failed", "count", Counter, Role::Work, "Raft proposals that failed (etcd_server_proposals_failed_total)"),
    stat("leader_changes", "count", Counter, Role::Work, "leader changes this member saw (etcd_server_leader_changes_seen_total)"),
    stat("wal_fsyncs", "count", Counter, Role::Work, "fsyncs of the write-ahead log (etcd_disk_wal_fsync_duration_seconds_count)"),
    stat("wal_fsync_us", "us", Counter, Role::Plain, "time in those fsyncs (etcd_disk_wal_fsync_duration_seconds_sum)"),
    stat("backend_commits", "count", Counter, Role::Plain, "commits of the backend database (etcd_disk_backend_commit_duration_seconds_count)"),
    stat("backend_commit_us", "us", Counter, Role::Plain, "time in those commits (etcd_disk_backend_commit_duration_seconds_sum)"),
    stat("proposals_pending", "count", Gauge, Role::Backlog, "Raft proposals waiting to commit (etcd_server_proposals_pending)"),
    stat("has_leader", "bool", Gauge, Role::Plain, "1 while this member knows a leader (etcd_server_has_leader)"),
    stat("db_bytes", "bytes", Gauge, Role::Plain, "bytes of the backend database file (etcd_mvcc_db_total_size_in_bytes)"),
    stat("db_in_use_bytes", "bytes", Gauge, Role::Plain, "bytes of it in use; the rest awaits defragmentation (etcd_mvcc_db_total_size_in_use_in_bytes)"),
];

/// The series each statistic is read from, in `STATS`'s order, and whether it is seconds.
const SERIES: [(&str, bool); 12] = [
    ("etcd_server_proposals_committed_total", false),
    ("etcd_server_proposals_applied_total", false),
    ("etcd_server_proposals_failed_total", false),
    ("etcd_server_leader_changes_seen_total", false),
    ("etcd_disk_wal_fsync_duration_seconds_count", false),
    ("etcd_disk_wal_fsync_duration_seconds_sum", true),
    ("etcd_disk_backend_commit_duration_seconds_count", false),
    ("etcd_disk_backend_commit_duration_seconds_sum", true),
    ("etcd_server_proposals_pending", false),
    ("etcd_server_has_leader", false),
    ("etcd_mvcc_db_total_size_in_bytes", false),
    ("etcd_mvcc_db_total_size_in_use_in_bytes", false),
];

/// The most bytes etcd's `/metrics` may take.
pub const METRICS_LIMIT: usize = 4 << 20;

/// Sets each statistic from a Prometheus text exposition: a series without labels, its value
/// a non-negative finite number (seconds become microseconds); anything else leaves it unset.
/// Returns how many were set.
pub fn parse(text: &str, out: &mut [Option<u64>]) -> usize {
    out.fill(None);
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once(' ') else {
            continue;
        };
        let Some(i) = SERIES.iter().position(|(s, _)| *s == name) else {
            continue;
        };
        let Ok(v) = value.split(' ').next().unwrap_or("").parse::<f64>() else {
            continue;
        };
        let v = if SERIES[i].1 { v * 1e6 } else { v };
        if v.is_finite() && v >= 0.0 && v < u64::MAX as f64 {
            out[i] = Some(v.round() as u64);
        }
    }
    out.iter().filter(|v| v.is_some()).count()
}

/// The leader changes last sampled and last reported as events.
#[derive(Default)]
pub struct LeaderChanges {
    sampled: AtomicU64,
    reported: AtomicU64,
}

/// `u64::MAX`: no sample yet.
const NONE: u64 = u64::MAX;

impl LeaderChanges {
    pub fn new() -> Self {
        LeaderChanges {
            sampled: AtomicU64::new(NONE),
            reported: AtomicU64::new(NONE),
        }
    }

    pub fn sampled(&self, out: &[Option<u64>]) {
        if let Some(n) = out[3] {
            self.sampled.store(n, Ordering::Relaxed);
        }
    }

    /// A `leader_change` event for each change since the last report (the first sample is
    /// the baseline), at `now_us`.
    pub fn events(&self, now_us: u64, out: &mut Vec<StoreEvent>) {
        let now = self.sampled.load(Ordering::Relaxed);
        if now == NONE {
            return;
        }
        let before = self.reported.swap(now, Ordering::Relaxed);
        if before == NONE || now <= before {
            return;
        }
        let n = (now - before).min(stats::MAX_EVENTS_PER_POLL as u64);
        for _ in 0..n {
            out.push(StoreEvent {
                unix_us: now_us,
                event: "leader_change",
                job: None,
                bytes: None,
                duration_us: None,
                detail: format!(
                    "etcd_server_leader_changes_seen_total {before} → {now}, seen at this sample (the change came since the one before)"
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_without_labels_are_taken_and_seconds_become_microseconds() {
        let text = "# HELP etcd_server_has_leader x\n# TYPE etcd_server_has_leader gauge\netcd_server_has_leader 1\netcd_server_proposals_committed_total 1042\netcd_disk_wal_fsync_duration_seconds_sum 0.25\netcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.001\"} 7\netcd_mvcc_db_total_size_in_bytes 2.097152e+06\netcd_server_proposals_failed_total -3\netcd_server_proposals_pending NaN\n";
        let mut out = vec![Some(9); STATS.len()];
        parse(text, &mut out);
        assert_eq!(out[0], Some(1042));
        assert_eq!(out[5], Some(250_000));
        assert_eq!(out[9], Some(1));
        assert_eq!(out[10], Some(2_097_152));
        assert_eq!(out[2], None, "negative");
        assert_eq!(out[8], None, "NaN");
        assert_eq!(out[4], None, "absent; a bucket is not the count");
        assert_eq!(STATS.len(), SERIES.len());
    }

    #[test]
    fn leader_changes_after_the_first_sample_are_events() {
        let l = LeaderChanges::new();
        let mut ev = vec![];
        let mut s = vec![None; STATS.len()];
        s[3] = Some(2);
        l.sampled(&s);
        l.events(10, &mut ev);
        assert!(ev.is_empty(), "the baseline");
        s[3] = Some(4);
        l.sampled(&s);
        l.events(20, &mut ev);
        assert_eq!(ev.len(), 2);
        assert_eq!(ev[0].event, "leader_change");
        assert_eq!(ev[0].unix_us, 20);
        l.events(30, &mut ev);
        assert_eq!(ev.len(), 2);
    }
}
