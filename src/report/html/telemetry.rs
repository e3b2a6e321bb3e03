//! Telemetry over time in the report: CPU (machine, kvmeter's process, a managed server, and
//! kvmeter's threads by group — the harness's workers against an embedded store's own
//! threads), disk throughput, IOPS, utilization and queue, memory and power (its source named;
//! an estimate says so), one figure per group with the phase starts marked.

use super::{downsample, Page};
use crate::report::chart::{LineChart, Series};
use crate::report::rundata::{RunData, Table};
use std::collections::BTreeMap;

/// Telemetry series over time, one figure per group, phase starts marked.
pub(super) fn section(p: &mut Page, d: &RunData) {
    let t = &d.telemetry;
    let Some(time) = t.column("time_s") else {
        return;
    };
    if time.is_empty() {
        return;
    }
    p.h2("Telemetry");
    let samples = time.iter().flatten().count();
    if samples < 2 {
        // One sample is a lone dot on an empty axis: say why there is no figure instead.
        p.note(
            "na short-phase",
            &format!("Telemetry: {samples} sample over the run (shorter than one --telemetry-interval): no series over time; each phase's telemetry line has its figures."),
        );
        return;
    }
    let starts = phase_starts(d, t, &time);
    let power = power_label(t);
    for g in groups(&power) {
        group_figure(p, t, &time, &starts, &g);
    }
    thread_groups(p, d, &starts);
}

/// One figure of telemetry: its id, title, unit and (column, label) series.
struct Group<'a> {
    id: &'a str,
    title: &'a str,
    unit: &'a str,
    cols: &'a [(&'a str, &'a str)],
}

/// The figures, in order; `power` is the power figure's unit (its source named).
fn groups(power: &str) -> [Group<'_>; 6] {
    let g = |id, title, unit, cols| Group {
        id,
        title,
        unit,
        cols,
    };
    [
        g(
            "cpu",
            "CPU over time",
            "% (machine: of all CPUs; processes: of one CPU)",
            &[
                ("cpu_busy_pct", "machine busy"),
                ("proc_cpu_pct", "kvmeter process"),
                ("server_cpu_pct", "server processes"),
            ],
        ),
        g(
            "disk-mb",
            "disk throughput",
            "MB/s",
            &[
                ("disk_read_mb_per_s", "read"),
                ("disk_write_mb_per_s", "write"),
            ],
        ),
        g(
            "disk-iops",
            "disk IOPS",
            "operations/s",
            &[("disk_read_iops", "read"), ("disk_write_iops", "write")],
        ),
        g(
            "disk-util",
            "disk utilization and queue",
            "% busy / requests",
            &[
                ("disk_util_pct", "util %"),
                ("disk_queue_depth", "queue depth"),
            ],
        ),
        g(
            "memory",
            "memory",
            "MiB",
            &[
                ("mem_used_mb", "used"),
                ("mem_dirty_mb", "dirty"),
                ("proc_rss_mb", "kvmeter RSS"),
                ("server_rss_mb", "server RSS"),
            ],
        ),
        g("power", "power", power, &[("power_w", "power")]),
    ]
}

/// Where each phase starts on the run's clock: from the summary (the x the phase's own
/// figures start at), else its first sample's time.
fn phase_starts(d: &RunData, t: &Table, time: &[Option<f64>]) -> Vec<(f64, String)> {
    let from_summary: Option<Vec<(f64, String)>> = d
        .phase_names()
        .into_iter()
        .map(|n| Some((d.phase_start_s(&n)?, n)))
        .collect();
    if let Some(s) = from_summary.filter(|s| !s.is_empty()) {
        return s;
    }
    let phases = t.text("phase").unwrap_or_default();
    let mut starts = vec![];
    for (i, ph) in phases.iter().enumerate() {
        if !ph.is_empty() && (i == 0 || phases[i - 1] != *ph) {
            if let Some(Some(x)) = time.get(i) {
                starts.push((*x, ph.to_string()));
            }
        }
    }
    starts
}

/// The power figure's unit, its source named; an estimate says so.
fn power_label(t: &Table) -> String {
    let power_src = t
        .text("power_source")
        .and_then(|v| v.into_iter().find(|s| !s.is_empty()).map(str::to_string))
        .unwrap_or_default();
    if power_src == "estimate" {
        "power (W) — ESTIMATE, not measured".to_string()
    } else {
        format!("power (W, {power_src})")
    }
}

/// One group's figure, or a note that this machine had none of its series.
fn group_figure(
    p: &mut Page,
    t: &Table,
    time: &[Option<f64>],
    starts: &[(f64, String)],
    g: &Group,
) {
    let title = g.title;
    let mut c = LineChart::new(
        &format!("telemetry-{}", g.id),
        title,
        "time since the run started (s)",
        g.unit,
    );
    c.vlines = starts.to_vec();
    for (col, label) in g.cols {
        let Some(v) = t.column(col) else { continue };
        let pts: Vec<(f64, f64)> = time
            .iter()
            .zip(v)
            .filter_map(|(x, y)| Some(((*x)?, y?)))
            .collect();
        if !pts.is_empty() {
            c.series.push(Series::new(label, downsample(pts)));
        }
    }
    if c.series.is_empty() {
        p.note(
            "na",
            &format!(
                "{title}: unavailable on this machine (see manifest and telemetry 'unavailable')"
            ),
        );
        return;
    }
    p.figure(
        &c.id.clone(),
        c.svg(),
        &format!("{title}, sampled every --telemetry-interval; dashed lines mark phase starts."),
    );
}

/// CPU of kvmeter's threads by group (threads.csv): kvm-worker against, for an embedded store,
/// the store's own threads (rocksdb:low, …). A group absent from a sample used no CPU in it.
pub(super) fn thread_groups(p: &mut Page, d: &RunData, starts: &[(f64, String)]) {
    let t = &d.threads;
    let (Some(time), Some(group), Some(cpu)) = (
        t.column("time_s"),
        t.text("thread_group"),
        t.column("cpu_pct"),
    ) else {
        return;
    };
    let mut times: Vec<f64> = time.iter().flatten().copied().collect();
    times.dedup();
    if times.len() < 2 {
        return;
    }
    let mut by_group: BTreeMap<&str, BTreeMap<u64, f64>> = BTreeMap::new();
    for ((x, g), v) in time.iter().zip(group).zip(cpu) {
        if let (Some(x), Some(v)) = (x, v) {
            by_group.entry(g).or_default().insert(x.to_bits(), v);
        }
    }
    let mut c = LineChart::new(
        "telemetry-cpu-threads",
        "CPU by thread group (kvmeter's process)",
        "time since the run started (s)",
        "% of one CPU",
    );
    c.vlines = starts.to_vec();
    for (g, vals) in by_group {
        let pts = times
            .iter()
            .map(|x| (*x, vals.get(&x.to_bits()).copied().unwrap_or(0.0)))
            .collect();
        c.series.push(Series::new(g, downsample(pts)));
    }
    p.figure(
        "telemetry-cpu-threads",
        c.svg(),
        "Where kvmeter's CPU went: its workers against the store's threads (embedded stores) and its own housekeeping.",
    );
}
