//! The pressure scale in a run's report (papers/004): the steps sorted by normalized
//! pressure, the throughput per step, and what the store did inside each step — its own
//! storage writes beside the antagonists' I/O, and its write stalls — so a reader sees whether
//! a step's loss came with the store stalling itself.

use super::Page;
use crate::report::chart::{BarChart, LineChart, Series};
use crate::report::names;
use crate::report::{PhaseSummary, PressureResult, PressureStore};

pub(super) fn section(p: &mut Page, ph: &PhaseSummary) {
    let Some(r) = &ph.pressure else {
        return;
    };
    let bars = r
        .steps
        .iter()
        .map(|s| {
            (
                s.step.clone(),
                s.normalized_pressure,
                format!("{:.0} ops/s", s.ops_per_s),
            )
        })
        .collect();
    let b = BarChart {
        id: format!("{}-pressure-scale", ph.name),
        title: format!(
            "{}: normalized pressure by step, sorted ({} KiB blocks)",
            ph.name, r.block_size_kib
        ),
        y_label: "normalized pressure (ρ(w0) − ρ(w)) / ρ(w0)".into(),
        bars,
        sorted: true,
    };
    p.figure(
        &b.id.clone(),
        b.svg(),
        "The pressure scale (papers/004): steps sorted by how much they slowed the store.",
    );
    let mut c = LineChart::new(
        &format!("{}-pressure-steps", ph.name),
        &format!("{}: throughput per step", ph.name),
        "step (w0..w25)",
        &names::name("ops_per_s"),
    );
    let mut s = Series::new(
        "ops/s",
        r.steps
            .iter()
            .enumerate()
            .map(|(i, s)| (i as f64, s.ops_per_s))
            .collect(),
    );
    s.markers = true;
    c.series.push(s);
    p.figure(
        &c.id.clone(),
        c.svg(),
        "The store's throughput in each step of the antagonists' schedule.",
    );
    store(p, ph, r);
}

/// What the store wrote to storage per step beside what the antagonists moved (both MB/s),
/// and how long its writers stalled, from its own statistics (issue 43): absent without them.
fn store(p: &mut Page, ph: &PhaseSummary, r: &PressureResult) {
    let per_step = |f: fn(&PressureStore) -> Option<f64>| -> Vec<(f64, f64)> {
        r.steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i as f64, s.store.as_ref().and_then(f)?)))
            .collect()
    };
    let written = per_step(|s| s.storage_write_mb_per_s);
    if written.is_empty() {
        return;
    }
    let mut c = LineChart::new(
        &format!("{}-pressure-store", ph.name),
        &format!(
            "{}: the store's storage writes and the antagonists' I/O per step",
            ph.name
        ),
        "step (w0..w25)",
        "MB/s",
    );
    let antagonists = r
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (i as f64, s.antagonist_mb_per_s))
        .collect();
    for (name, pts) in [
        ("the store's own storage writes", written),
        ("the antagonists' reads and writes", antagonists),
    ] {
        let mut s = Series::new(name, pts);
        s.markers = true;
        c.series.push(s);
    }
    p.figure(
        &c.id.clone(),
        c.svg(),
        "The store's storage-write counters (WAL, flush, compaction) per second of each step, from its own statistics, beside the antagonists' I/O.",
    );
    let stalled = per_step(|s| s.stall_s_per_s);
    if stalled.iter().all(|(_, v)| *v == 0.0) {
        if !stalled.is_empty() {
            p.note("info", "The store stalled no writer in any step.");
        }
        return;
    }
    let mut c = LineChart::new(
        &format!("{}-pressure-stall", ph.name),
        &format!("{}: write stalls per step", ph.name),
        "step (w0..w25)",
        "writer-seconds stalled per second",
    );
    let mut s = Series::new("stalled", stalled);
    s.markers = true;
    c.series.push(s);
    p.figure(
        &c.id.clone(),
        c.svg(),
        "Time the store held its writers back in each step (summed over writers), from its own stall counter.",
    );
}
