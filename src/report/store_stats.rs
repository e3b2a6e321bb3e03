//! The store's own statistics in a run directory (issue 43): `store_stats.csv`, a row per
//! interval boundary on the same clock as intervals.csv (appended by every phase, written as
//! the run goes), and each phase's figures in summary.json — a counter's increase over the
//! phase, a gauge's value at the end and its highest sample — with what kvmeter derives from
//! them: write amplification (bytes the store wrote to storage over the bytes it was asked to
//! write, both from its own counters) and the cache's hit ratio. The statistics are the
//! store's declaration (`store::stats`); a store that declares none has no file and no figure.

use super::csv::Row;
use super::rundir::append;
use crate::store::stats::{Role, StatKind, StatSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// The file's name in a run directory.
pub const STORE_STATS_CSV: &str = "store_stats.csv";

/// The most statistics (and event kinds) one agent's figures may hold to be merged.
pub const MAX_MERGED: usize = 512;

/// One statistic over one phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StatFigure {
    pub kind: StatKind,
    pub unit: String,
    /// Its part in kvmeter's figures: work, storage_write, user_write, user_read, cache_hit,
    /// cache_miss, stall, backlog or unwritten (none: only itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A counter's increase from the phase's start to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub increase: Option<u64>,
    /// A gauge's value at the phase's end, and its highest sample in the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
}

/// What the store said about itself over one phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct StoreStats {
    /// Each statistic by its name; one the store could not give at the start or the end of the
    /// phase is left out and named in `unavailable`.
    pub stats: BTreeMap<String, StatFigure>,
    /// Write amplification from the store's own counters: storage bytes written (the sum of
    /// the statistics whose role is a storage write) over user bytes written; null when the
    /// phase wrote no user bytes.
    pub write_amplification: Option<f64>,
    /// How `write_amplification` was computed: its numerator's and denominator's statistics.
    pub write_amplification_source: String,
    /// The cache's hits over hits and misses; null without either.
    pub cache_hit_ratio: Option<f64>,
    /// How many of each event the store logged in the phase (store_events.csv has each):
    /// flush_started, compaction_finished, write_stop, ...
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub events: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unavailable: BTreeMap<String, String>,
    /// A distributed run's merged phase: where its figures come from (one agent's, for a
    /// server they all sampled; or the agents' own stores, added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_from: Option<String>,
}

impl StoreStats {
    /// The phase's figures from its first and last samples and each gauge's highest sample.
    pub fn of(
        specs: &[StatSpec],
        start: &[Option<u64>],
        end: &[Option<u64>],
        max: &[Option<u64>],
    ) -> StoreStats {
        let mut stats = BTreeMap::new();
        let mut unavailable = BTreeMap::new();
        let (mut storage, mut user, mut hits, mut misses) = (0u64, 0u64, 0u64, 0u64);
        let (mut num, mut den) = (vec![], vec![]);
        for (i, s) in specs.iter().enumerate() {
            let figure = match s.kind {
                StatKind::Counter => match (start[i], end[i]) {
                    // A counter that went down was reset (the store reopened): not a figure.
                    (Some(a), Some(b)) if b >= a => Some(StatFigure {
                        kind: s.kind,
                        unit: s.unit.into(),
                        role: role_name(s.role),
                        increase: Some(b - a),
                        end: None,
                        max: None,
                    }),
                    _ => None,
                },
                StatKind::Gauge => end[i].map(|e| StatFigure {
                    kind: s.kind,
                    unit: s.unit.into(),
                    role: role_name(s.role),
                    increase: None,
                    end: Some(e),
                    max: max[i].max(Some(e)),
                }),
            };
            let Some(f) = figure else {
                unavailable.insert(
                    s.name.to_string(),
                    "unavailable: the store gave no value at the phase's start or end at this setting".into(),
                );
                continue;
            };
            let inc = f.increase.unwrap_or(0);
            match s.role {
                Role::StorageWrite => {
                    storage += inc;
                    num.push(s.name);
                }
                Role::UserWrite => {
                    user += inc;
                    den.push(s.name);
                }
                Role::CacheHit => hits += inc,
                Role::CacheMiss => misses += inc,
                _ => {}
            }
            stats.insert(s.name.to_string(), f);
        }
        let ratio = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        StoreStats {
            stats,
            write_amplification: if num.is_empty() || den.is_empty() {
                None
            } else {
                ratio(storage, user)
            },
            write_amplification_source: if num.is_empty() || den.is_empty() {
                "unavailable: the store reports no storage and user write bytes".into()
            } else {
                format!(
                    "store's counters: ({}) / ({})",
                    num.join(" + "),
                    den.join(" + ")
                )
            },
            cache_hit_ratio: ratio(hits, hits + misses),
            events: BTreeMap::new(),
            unavailable,
            merged_from: None,
        }
    }

    /// A distributed run's figures from its agents' (`agent`, figures): for a store they all
    /// sampled (`shared`: a server), the lowest agent's, said so; for each agent's own store,
    /// the counters' increases and the gauges' ends added (a gauge's highest samples did not
    /// coincide, so no `max`), write amplification and the hit ratio from the sums. Figures an
    /// agent sent beyond `MAX_MERGED` statistics are not merged (they arrive through etcd).
    pub fn merged(each: &[(usize, &StoreStats)], shared: bool) -> Option<StoreStats> {
        let each: Vec<_> = each
            .iter()
            .filter(|(_, s)| s.stats.len() <= MAX_MERGED && s.events.len() <= MAX_MERGED)
            .collect();
        let (first_agent, first) = each.iter().min_by_key(|(a, _)| *a)?;
        if shared {
            let mut out = (*first).clone();
            out.merged_from = Some(format!(
                "agent {first_agent}'s samples: every agent samples the same server"
            ));
            return Some(out);
        }
        let mut out = (*first).clone();
        out.unavailable.clear();
        for (name, f) in out.stats.iter_mut() {
            let all: Option<Vec<&StatFigure>> =
                each.iter().map(|(_, s)| s.stats.get(name)).collect();
            let Some(all) = all else {
                out.unavailable.insert(
                    name.clone(),
                    "unavailable: not every agent's store gave it".into(),
                );
                continue;
            };
            let sum = |get: fn(&StatFigure) -> Option<u64>| {
                all.iter().map(|f| get(f)).sum::<Option<u64>>()
            };
            f.increase = sum(|f| f.increase);
            f.end = sum(|f| f.end);
            f.max = None;
        }
        out.stats
            .retain(|name, _| !out.unavailable.contains_key(name));
        for (_, s) in &each {
            for (k, v) in &s.unavailable {
                out.unavailable
                    .entry(k.clone())
                    .or_insert_with(|| v.clone());
            }
        }
        let role_sum = |r: &str| -> u64 {
            out.stats
                .values()
                .filter(|f| f.role.as_deref() == Some(r))
                .filter_map(|f| f.increase)
                .sum()
        };
        let (storage, user) = (role_sum("storage_write"), role_sum("user_write"));
        let (hits, misses) = (role_sum("cache_hit"), role_sum("cache_miss"));
        if out.write_amplification.is_some() {
            out.write_amplification = (user > 0).then(|| storage as f64 / user as f64);
        }
        out.cache_hit_ratio = (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64);
        out.events = BTreeMap::new();
        for (_, s) in &each {
            for (k, v) in &s.events {
                *out.events.entry(k.clone()).or_default() += v;
            }
        }
        out.merged_from = Some(format!(
            "the {} agents' own stores, added (counters' increases and gauges' ends)",
            each.len()
        ));
        Some(out)
    }

    /// A counter's increase, by name.
    pub fn increase(&self, name: &str) -> Option<u64> {
        self.stats.get(name).and_then(|f| f.increase)
    }
}

fn role_name(r: Role) -> Option<String> {
    let name = match r {
        Role::Plain => return None,
        Role::Work => "work",
        Role::StorageWrite => "storage_write",
        Role::UserWrite => "user_write",
        Role::UserRead => "user_read",
        Role::CacheHit => "cache_hit",
        Role::CacheMiss => "cache_miss",
        Role::Stall => "stall",
        Role::Backlog => "backlog",
        Role::Unwritten => "unwritten",
    };
    Some(name.into())
}

impl StoreStats {
    /// The terminal's lines for a phase: the store's counts of its own work, its stalls and
    /// cache, then write amplification with how it was computed and the backlog at the end.
    pub fn lines(&self) -> String {
        let role = |f: &StatFigure, r: &str| f.role.as_deref() == Some(r);
        let mut work = vec![];
        let mut stalled_us = None::<u64>;
        let (mut backlog, mut unwritten, mut running) = (vec![], vec![], vec![]);
        for (name, f) in &self.stats {
            // Redis's save or rewrite (counted as it starts), WiredTiger's checkpoint.
            let in_progress = name.ends_with("_in_progress") || name.ends_with("_running");
            if f.kind == StatKind::Gauge && f.unit == "bool" && in_progress && f.end == Some(1) {
                running.push(name.as_str());
            }
            if f.kind == StatKind::Counter && role(f, "work") {
                if let Some(n) = f.increase.filter(|n| *n > 0) {
                    work.push(format!("{} {n}", name.replace('_', " ")));
                }
            }
            if role(f, "stall") {
                *stalled_us.get_or_insert(0) += f.increase.unwrap_or(0);
            }
            if role(f, "backlog") {
                let v = f.end.unwrap_or(0);
                let v = if f.unit == "bytes" {
                    mb(v)
                } else {
                    v.to_string()
                };
                backlog.push(format!("{name} {v}"));
            }
            // An empty memtable still takes a few KB: below 0.1 MB there is nothing to say.
            if role(f, "unwritten") && f.unit == "bytes" {
                if let Some(v) = f.end.filter(|v| *v >= 50_000) {
                    unwritten.push(format!("{name} {}", mb(v)));
                }
            }
        }
        // Work its counters could not give (RocksDB counts compactions only with timers, none
        // with statistics off) is counted from the events it logged, and says so.
        // A flush job may write more than one memtable, so the log's are counted as jobs.
        for (counter, event, shown) in [
            ("flushes", "flush_finished", "flush jobs"),
            ("compactions", "compaction_finished", "compactions"),
        ] {
            let n = self.events.get(event).copied().unwrap_or(0);
            if n > 0 && !self.stats.contains_key(counter) {
                work.push(format!("{shown} {n} (its log)"));
            }
        }
        let mut first = vec![];
        first.push(match (work.is_empty(), self.unavailable.len()) {
            (false, _) => work.join(", "),
            (true, 0) => "none of its own work counted".to_string(),
            (true, n) => format!(
                "none of its own work counted by the statistics it gave ({n} unavailable: summary.json says why)"
            ),
        });
        if let Some(us) = stalled_us {
            first.push(format!("writes stalled {:.3} s", us as f64 / 1e6));
        }
        let logged = |k: &str| self.events.get(k).copied().unwrap_or(0);
        let (stops, slowdowns) = (logged("write_stop"), logged("write_slowdown"));
        if stops + slowdowns > 0 {
            first.push(format!(
                "writes stopped {stops}x, slowed {slowdowns}x (store_events.csv)"
            ));
        }
        let spikes = logged("latency_spike");
        if spikes > 0 {
            first.push(format!(
                "latency spikes it recorded {spikes} (store_events.csv)"
            ));
        }
        if let Some(h) = self.cache_hit_ratio {
            first.push(format!("cache hits {:.1} %", h * 100.0));
        }
        let mut out = format!("  store    {}\n", first.join("; "));
        let mut second = vec![];
        match self.write_amplification {
            Some(w) => second.push(format!(
                "write amplification {w:.2} ({})",
                self.write_amplification_source
            )),
            None if self.write_amplification_source.starts_with("unavailable") => {}
            None => second.push("write amplification: none (no user bytes written)".into()),
        }
        if !unwritten.is_empty() && self.write_amplification.is_some() {
            // Each phase ends by closing the store, which flushes what it holds (RocksDB's
            // memtables; their WAL bytes are already counted) after the phase's last sample.
            second.push(format!(
                "in memory at the end, not yet flushed to its data files: {} of memory (the close's flush, after the phase's last sample, is not in its write amplification)",
                unwritten.join(", ")
            ));
        }
        if !backlog.is_empty() {
            second.push(format!("backlog at the end: {}", backlog.join(", ")));
        }
        if !running.is_empty() {
            second.push(format!(
                "still running at the end: {} (its end is in no phase)",
                running.join(", ")
            ));
        }
        if !second.is_empty() {
            out.push_str(&format!("  store    {}\n", second.join("; ")));
        }
        out
    }
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

/// store_stats.csv, open for one phase's rows (every phase appends to the one file).
pub struct StatsCsv {
    file: File,
    phase: String,
}

impl StatsCsv {
    /// Opens `root`/store_stats.csv (created with its header: phase, seconds since the phase
    /// started, the wall clock in Unix microseconds read just before the sample — the time
    /// base of RocksDB's own event log — then each statistic).
    pub fn open(root: &Path, phase: &str, specs: &[StatSpec]) -> std::io::Result<StatsCsv> {
        let (mut file, new) = append(&root.join(STORE_STATS_CSV))?;
        if new {
            let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
            writeln!(file, "phase,t_s,unix_us,{}", names.join(","))?;
        }
        Ok(StatsCsv {
            file,
            phase: phase.to_string(),
        })
    }

    /// One sample, at once (a crash of kvmeter keeps every row so far); an unavailable value
    /// is an empty field.
    pub fn row(&mut self, t_s: f64, unix_us: u64, values: &[Option<u64>]) -> std::io::Result<()> {
        let mut r = Row::default()
            .text(&self.phase)
            .val(format_args!("{t_s:.3}"))
            .val(unix_us);
        for v in values {
            r = r.opt(*v);
        }
        let mut text = String::new();
        r.end(&mut text);
        self.file.write_all(text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: &[StatSpec] = &[
        StatSpec {
            name: "wal",
            unit: "bytes",
            kind: StatKind::Counter,
            role: Role::StorageWrite,
            meaning: "",
        },
        StatSpec {
            name: "flush",
            unit: "bytes",
            kind: StatKind::Counter,
            role: Role::StorageWrite,
            meaning: "",
        },
        StatSpec {
            name: "user",
            unit: "bytes",
            kind: StatKind::Counter,
            role: Role::UserWrite,
            meaning: "",
        },
        StatSpec {
            name: "hit",
            unit: "count",
            kind: StatKind::Counter,
            role: Role::CacheHit,
            meaning: "",
        },
        StatSpec {
            name: "miss",
            unit: "count",
            kind: StatKind::Counter,
            role: Role::CacheMiss,
            meaning: "",
        },
        StatSpec {
            name: "l0",
            unit: "files",
            kind: StatKind::Gauge,
            role: Role::Backlog,
            meaning: "",
        },
    ];

    #[test]
    fn increases_ratios_and_gauges() {
        // WAL 1000 + flush 500 written for 600 user bytes: 2.5; 3 hits in 4 lookups.
        let start = [Some(100), Some(0), Some(400), Some(1), Some(0), Some(2)];
        let end = [Some(1100), Some(500), Some(1000), Some(4), Some(1), Some(1)];
        let max = [None, None, None, None, None, Some(7)];
        let s = StoreStats::of(SPECS, &start, &end, &max);
        assert_eq!(s.increase("wal"), Some(1000));
        assert_eq!(s.write_amplification, Some(2.5));
        assert_eq!(
            s.write_amplification_source,
            "store's counters: (wal + flush) / (user)"
        );
        assert_eq!(s.cache_hit_ratio, Some(0.75));
        assert_eq!((s.stats["l0"].end, s.stats["l0"].max), (Some(1), Some(7)));
        // A counter that went down, or a value missing at an end: unavailable, not 0.
        let end = [Some(50), None, Some(400), Some(1), Some(0), None];
        let s = StoreStats::of(SPECS, &start, &end, &max);
        assert!(s.unavailable.contains_key("wal") && s.unavailable.contains_key("flush"));
        assert!(s.unavailable.contains_key("l0"));
        // Nothing written: no ratio (not 0, not infinite).
        assert_eq!(s.write_amplification, None);
        assert_eq!(s.cache_hit_ratio, None);
    }

    /// Memory not yet flushed is named beside write amplification in a phase that wrote, and
    /// not for an empty memtable's few KB or a phase that wrote nothing.
    #[test]
    fn memory_not_yet_flushed_is_named_when_the_phase_wrote() {
        let held = StatSpec {
            name: "memtable_bytes",
            unit: "bytes",
            kind: StatKind::Gauge,
            role: Role::Unwritten,
            meaning: "",
        };
        let specs = [SPECS, &[held][..]].concat();
        let said = |user_end: u64, held: u64| {
            let start = [
                Some(0),
                Some(0),
                Some(0),
                Some(0),
                Some(0),
                Some(0),
                Some(0),
            ];
            let end = [
                Some(1000),
                Some(0),
                Some(user_end),
                Some(0),
                Some(0),
                Some(0),
                Some(held),
            ];
            let s = StoreStats::of(&specs, &start, &end, &[None; 7]);
            assert_eq!(s.stats["memtable_bytes"].role.as_deref(), Some("unwritten"));
            s.lines()
        };
        let line = said(1000, 22_022_144);
        assert!(
            line.contains("write amplification 1.00 (store's counters: (wal + flush) / (user)); in memory at the end, not yet flushed to its data files: memtable_bytes 22.0 MB of memory"),
            "{line}"
        );
        assert!(!said(1000, 2_048).contains("in memory at the end"));
        assert!(!said(0, 22_022_144).contains("in memory at the end"));
    }

    /// Work the counters could not give is never "none": a compaction RocksDB's `basic`
    /// statistics do not count, but its LOG has, is counted from the log and says so.
    #[test]
    fn work_the_counters_miss_comes_from_the_log_or_is_said_to_be_unknown() {
        let none = [Some(0); 6];
        let mut s = StoreStats::of(SPECS, &none, &none, &[None; 6]);
        assert!(s.lines().contains("store    none of its own work counted"));
        s.events.insert("compaction_finished".into(), 2);
        s.events.insert("compaction_started".into(), 3);
        assert!(
            s.lines().contains("store    compactions 2 (its log)"),
            "{}",
            s.lines()
        );
        // Statistics off: nothing counted, nothing logged: unknown, not none.
        let s = StoreStats::of(SPECS, &[None; 6], &[None; 6], &[None; 6]);
        assert!(
            s.lines()
                .contains("none of its own work counted by the statistics it gave (6 unavailable"),
            "{}",
            s.lines()
        );
    }

    /// A Redis latency spike is named on the terminal, and a save still running at the
    /// phase's end (which `rdb_saves` counted as it started) is said to be.
    #[test]
    fn spikes_and_what_still_runs_at_the_end_are_said() {
        let specs = [
            StatSpec {
                name: "rdb_saves",
                unit: "count",
                kind: StatKind::Counter,
                role: Role::Work,
                meaning: "",
            },
            StatSpec {
                name: "rdb_bgsave_in_progress",
                unit: "bool",
                kind: StatKind::Gauge,
                role: Role::Plain,
                meaning: "",
            },
        ];
        let mut s = StoreStats::of(&specs, &[Some(0), Some(0)], &[Some(1), Some(1)], &[None; 2]);
        s.events.insert("latency_spike".into(), 2);
        let l = s.lines();
        assert!(
            l.contains("rdb saves 1; latency spikes it recorded 2 (store_events.csv)"),
            "{l}"
        );
        assert!(
            l.contains("still running at the end: rdb_bgsave_in_progress"),
            "{l}"
        );
        let s = StoreStats::of(&specs, &[Some(0), Some(0)], &[Some(1), Some(0)], &[None; 2]);
        assert!(!s.lines().contains("still running"), "{}", s.lines());
    }

    #[test]
    fn agents_merge_as_one_server_or_as_their_own_stores_added() {
        let a = StoreStats::of(
            SPECS,
            &[Some(0), Some(0), Some(0), Some(0), Some(0), Some(1)],
            &[Some(100), Some(50), Some(50), Some(3), Some(1), Some(2)],
            &[None, None, None, None, None, Some(5)],
        );
        let b = StoreStats::of(
            SPECS,
            &[Some(0), Some(0), Some(0), Some(0), Some(0), Some(0)],
            &[Some(300), Some(0), Some(150), Some(1), Some(3), Some(4)],
            &[None, None, None, None, None, Some(4)],
        );
        // One server: agent 1's (the lowest), as it is.
        let one = StoreStats::merged(&[(2, &b), (1, &a)], true).unwrap();
        assert_eq!(one.stats, a.stats);
        assert!(one.merged_from.unwrap().starts_with("agent 1's samples"));
        // Each agent's own store: (100 + 50 + 300) / (50 + 150) = 2.25; 4 hits of 8.
        let own = StoreStats::merged(&[(1, &a), (2, &b)], false).unwrap();
        assert_eq!(own.increase("wal"), Some(400));
        assert_eq!(own.write_amplification, Some(2.25));
        assert_eq!(own.cache_hit_ratio, Some(0.5));
        assert_eq!((own.stats["l0"].end, own.stats["l0"].max), (Some(6), None));
        assert!(StoreStats::merged(&[], false).is_none());
    }
}
