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

/// One statistic over one phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StatFigure {
    pub kind: StatKind,
    pub unit: String,
    /// Its part in kvmeter's figures: storage_write, user_write, cache_hit, cache_miss, stall
    /// or backlog (none: only itself).
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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
        }
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
        Role::CacheHit => "cache_hit",
        Role::CacheMiss => "cache_miss",
        Role::Stall => "stall",
        Role::Backlog => "backlog",
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
        let mut backlog = vec![];
        for (name, f) in &self.stats {
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
        }
        let mut first = vec![];
        first.push(if work.is_empty() {
            "none of its own work counted".to_string()
        } else {
            work.join(", ")
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
        if !backlog.is_empty() {
            second.push(format!("backlog at the end: {}", backlog.join(", ")));
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
}
