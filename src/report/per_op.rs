//! Costs per operation in every run (issue 44 item 3; papers/000: "each user-initiated
//! operation in KV stores requires several thousands of CPU cycles in the common path"): CPU
//! time split by thread group, context switches, storage bytes, and cycles and instructions
//! where counters exist — each the phase's own figure over the same measured window divided by
//! its operations, but the storage bytes: the kernel counts them over the whole phase, so they
//! are divided by the warm-up's operations as well. No flag and no new sampling: telemetry, `storage_io` and `--counters` already
//! measured the numerators.
//!
//! A figure that cannot be had is absent from its map or null, with `unavailable` saying why.

use super::storage_io::StorageIo;
use crate::telemetry::PhaseTelemetry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A phase's costs per operation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct PerOp {
    /// CPU µs of kvmeter's process per operation (an embedded store's threads included), and
    /// the same split by thread group (`kvm-worker`, `rocksdb:low`, …): they add up to it.
    pub cpu_us: Option<f64>,
    pub cpu_us_by_thread_group: BTreeMap<String, f64>,
    /// CPU µs of a managed server's process per operation, and by its thread groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpu_us: Option<f64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub server_cpu_us_by_thread_group: BTreeMap<String, f64>,
    /// Voluntary and involuntary context switches of kvmeter's process (and of the server's).
    pub context_switches: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_context_switches: Option<f64>,
    /// Bytes the store made the kernel write to storage (less those deleted before writeback)
    /// and read from it (`storage_io`), over every operation of the phase, warm-up included,
    /// as the kernel's bytes are.
    pub storage_write_bytes: Option<f64>,
    pub storage_read_bytes: Option<f64>,
    /// Hardware cycles and instructions of kvmeter's process (`--counters`, where a PMU
    /// exists).
    pub cycles: Option<f64>,
    pub instructions: Option<f64>,
    /// The kernel's software counters of kvmeter's process (`--counters`: perf's page faults
    /// and CPU migrations, which every kernel has, PMU or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_migrations: Option<f64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unavailable: BTreeMap<String, String>,
}

/// The phase's costs per operation (`PhaseSummary::per_op`); none for a phase without
/// operations.
pub fn derive(ps: &crate::report::PhaseSummary) -> Option<PerOp> {
    derive_from(
        ps.operations,
        ps.warmup_operations,
        ps.telemetry.as_ref(),
        ps.storage_io.as_ref(),
    )
}

/// As `derive`: telemetry covers the measured window (`ops`), the kernel's storage bytes the
/// whole phase (`ops` and the warm-up's `warmup_ops`).
fn derive_from(
    ops: u64,
    warmup_ops: u64,
    telemetry: Option<&PhaseTelemetry>,
    storage_io: Option<&StorageIo>,
) -> Option<PerOp> {
    if ops == 0 {
        return None;
    }
    let per = |total: f64| total / ops as f64;
    let mut c = PerOp::default();
    match telemetry {
        Some(t) => {
            // cpu_pct is % of one CPU over the telemetry window: CPU seconds = pct / 100 × s.
            let us = |pct: f64| per(pct / 100.0 * t.seconds * 1e6);
            // A window of too few clock ticks has no CPU shares (telemetry's own judgement):
            // nor does it have CPU per operation.
            let too_few = t.unavailable.get("cpu").filter(|_| t.cpu.is_none());
            match (&t.process, too_few) {
                (Some(_), Some(why)) => {
                    c.unavailable.insert("cpu_us".into(), why.clone());
                }
                (Some(p), None) => {
                    c.cpu_us = Some(us(p.cpu_pct));
                    c.cpu_us_by_thread_group = by_group(&p.cpu_pct_by_thread, p.cpu_pct, &us);
                    let cs = p.voluntary_cs_per_s + p.involuntary_cs_per_s;
                    c.context_switches = Some(per(cs * t.seconds));
                }
                (None, _) => {
                    let why = t.unavailable.get("process").cloned();
                    c.unavailable.insert(
                        "cpu_us".into(),
                        why.unwrap_or_else(|| "unavailable: no process figures".into()),
                    );
                }
            }
            if let Some(s) = t.server.as_ref().filter(|_| too_few.is_none()) {
                c.server_cpu_us = Some(us(s.cpu_pct));
                c.server_cpu_us_by_thread_group = by_group(&s.cpu_pct_by_thread, s.cpu_pct, &us);
                c.server_context_switches = Some(per((s.voluntary_cs_per_s
                    + s.involuntary_cs_per_s)
                    * t.seconds));
            }
            counted(t, &mut c, per);
        }
        None => {
            c.unavailable.insert(
                "cpu_us".into(),
                "unavailable: telemetry is off (--telemetry-interval 0)".into(),
            );
        }
    }
    match storage_io {
        Some(io) => {
            let phase_ops = (ops + warmup_ops) as f64;
            c.storage_write_bytes = io.device_write_bytes().map(|b| b as f64 / phase_ops);
            c.storage_read_bytes = io.read_bytes.map(|b| b as f64 / phase_ops);
            if let Some(why) = &io.unavailable {
                c.unavailable.insert("storage_bytes".into(), why.clone());
            }
        }
        None => {
            c.unavailable.insert(
                "storage_bytes".into(),
                "unavailable: the phase has no storage figures".into(),
            );
        }
    }
    Some(c)
}

impl PerOp {
    /// The terminal table's line: "per op   CPU 12.3 µs (kvm-worker 8.1, rocksdb:low 3.0);
    /// 0.80 context switches; storage writes 1,024 B, reads 0 B; cycles …".
    pub fn line(&self) -> String {
        let mut parts = Vec::new();
        if let Some(us) = self.cpu_us {
            let mut groups: Vec<(&String, &f64)> = self.cpu_us_by_thread_group.iter().collect();
            groups.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
            let shown: Vec<String> = groups
                .iter()
                .take(3)
                .map(|(g, v)| format!("{g} {v:.1}"))
                .collect();
            let split = if shown.is_empty() {
                String::new()
            } else {
                format!(
                    " ({}{})",
                    shown.join(", "),
                    if groups.len() > 3 { ", …" } else { "" }
                )
            };
            parts.push(format!("CPU {us:.1} µs{split}"));
        }
        if let Some(us) = self.server_cpu_us {
            parts.push(format!("server CPU {us:.1} µs"));
        }
        if let Some(cs) = self.context_switches {
            parts.push(format!("{} context switches", small(cs)));
        }
        if let (Some(w), Some(r)) = (self.storage_write_bytes, self.storage_read_bytes) {
            parts.push(format!("storage writes {w:.0} B, reads {r:.0} B"));
        }
        if let Some(c) = self.cycles {
            parts.push(format!("{c:.0} cycles"));
        }
        if let Some(i) = self.instructions {
            parts.push(format!("{i:.0} instructions"));
        }
        if let (Some(f), Some(m)) = (self.page_faults, self.cpu_migrations) {
            parts.push(format!(
                "{} page faults, {} CPU migrations",
                small(f),
                small(m)
            ));
        }
        // Asked for with --counters and not had: say so where the cycles would be (the reason
        // up to its advice, which summary.json keeps whole).
        match self.unavailable.get("cycles") {
            Some(why) if self.cycles.is_none() && !why.contains("only with --counters") => {
                let why = why.split(" (").next().unwrap_or(why);
                parts.push(format!("cycles {why}"));
            }
            _ => {}
        }
        if parts.is_empty() {
            return String::new();
        }
        format!("  per op   {}\n", parts.join("; "))
    }
}

/// A count per operation that may be far below one: three significant digits, not 0.000.
fn small(x: f64) -> String {
    if x == 0.0 || x >= 0.1 {
        format!("{x:.3}")
    } else {
        format!("{x:.2e}")
    }
}

/// CPU µs per operation by thread group, with `unattributed` for what the process used beyond
/// its live threads' sum: threads that ended between telemetry's last sample and the window's
/// end (a phase's workers) keep only the time they were last seen with. So the groups add up
/// to the process.
fn by_group(
    pct: &BTreeMap<String, f64>,
    total_pct: f64,
    us: &impl Fn(f64) -> f64,
) -> BTreeMap<String, f64> {
    let mut m: BTreeMap<String, f64> = pct.iter().map(|(g, p)| (g.clone(), us(*p))).collect();
    let rest = total_pct - pct.values().sum::<f64>();
    if rest > 0.0 && !m.is_empty() {
        m.insert("unattributed".into(), us(rest));
    }
    m
}

/// Cycles and instructions from `--counters`, or why not.
fn counted(t: &PhaseTelemetry, c: &mut PerOp, per: impl Fn(f64) -> f64) {
    let Some(k) = &t.counters else {
        c.unavailable.insert(
            "cycles".into(),
            "unavailable: counted only with --counters".into(),
        );
        return;
    };
    c.cycles = k.counts.get("cycles").map(|&n| per(n));
    c.instructions = k.counts.get("instructions").map(|&n| per(n));
    c.page_faults = k.counts.get("page-faults").map(|&n| per(n));
    c.cpu_migrations = k.counts.get("cpu-migrations").map(|&n| per(n));
    if c.cycles.is_none() {
        let why = t
            .unavailable
            .get("counters.cycles")
            .cloned()
            .unwrap_or_else(|| "unavailable: no hardware cycle counter here".into());
        c.unavailable.insert("cycles".into(), why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::ProcessFigures;

    #[test]
    fn the_line_keeps_small_counts_and_says_why_cycles_are_missing() {
        let mut c = PerOp {
            context_switches: Some(1.6e-5),
            page_faults: Some(0.34),
            cpu_migrations: Some(0.0),
            ..Default::default()
        };
        c.unavailable.insert(
            "cycles".into(),
            "unavailable: no hardware counter for it (in a VM, enable the virtual PMU)".into(),
        );
        assert_eq!(
            c.line(),
            "  per op   1.60e-5 context switches; 0.340 page faults, 0.000 CPU migrations; cycles unavailable: no hardware counter for it\n"
        );
        // Without --counters nothing is said of cycles: they were not asked for.
        c.unavailable.insert(
            "cycles".into(),
            "unavailable: counted only with --counters".into(),
        );
        c.page_faults = None;
        assert_eq!(c.line(), "  per op   1.60e-5 context switches\n");
    }

    #[test]
    fn per_operation_figures_divide_the_window_totals() {
        assert_eq!(derive_from(0, 0, None, None), None);
        let t = PhaseTelemetry {
            seconds: 2.0,
            process: Some(ProcessFigures {
                cpu_pct: 50.0,
                cpu_pct_by_thread: [
                    ("kvm-worker".to_string(), 30.0),
                    ("rocksdb:low".into(), 20.0),
                ]
                .into(),
                voluntary_cs_per_s: 400.0,
                involuntary_cs_per_s: 100.0,
                ..Default::default()
            }),
            ..Default::default()
        };
        let c = derive_from(1000, 0, Some(&t), None).unwrap();
        // 50 % of one CPU for 2 s is 1 CPU-second: 1,000 µs per each of 1,000 operations.
        assert_eq!(c.cpu_us, Some(1000.0));
        assert_eq!(c.cpu_us_by_thread_group["kvm-worker"], 600.0);
        assert_eq!(c.cpu_us_by_thread_group["rocksdb:low"], 400.0);
        assert!(!c.cpu_us_by_thread_group.contains_key("unattributed"));
        assert_eq!(c.context_switches, Some(1.0));
        assert_eq!(c.cycles, None);
        assert_eq!(
            c.unavailable["cycles"],
            "unavailable: counted only with --counters"
        );
        assert!(c.unavailable["storage_bytes"].starts_with("unavailable: "));
        // Threads that ended between samples: their rest is `unattributed`, so the groups add
        // up to the process; a window too short for CPU shares has no CPU per operation.
        let mut t2 = t.clone();
        t2.process.as_mut().unwrap().cpu_pct = 55.0;
        let c = derive_from(1000, 0, Some(&t2), None).unwrap();
        assert!((c.cpu_us_by_thread_group["unattributed"] - 100.0).abs() < 1e-9);
        let sum: f64 = c.cpu_us_by_thread_group.values().sum();
        assert!((sum - 1100.0).abs() < 1e-9);
        t2.unavailable
            .insert("cpu".into(), "unavailable: too few samples".into());
        t2.cpu = None;
        let c = derive_from(1000, 0, Some(&t2), None).unwrap();
        assert_eq!(c.cpu_us, None);
        assert_eq!(c.unavailable["cpu_us"], "unavailable: too few samples");
    }
}
