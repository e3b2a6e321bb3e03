//! A phase's faults in report.html (papers/002 Fig. 8 and §5: throughput through a crash and
//! recovery, and what other clients saw): the recovery timeline's throughput and p99 per
//! class with each fault marked and its recovery window shaded, then a table per fault and
//! the event list. Read back from timeline.csv (the buckets) and summary.json (each fault's
//! analysis and its events): the summary is written after every phase, so a phase cut short
//! has no fault tables; its events.csv, written the moment each event happens, is for the
//! reader of a run killed mid-phase, not for the page.

use super::{downsample, Cell, Page};
use crate::report::chart::{LineChart, Series};
use crate::report::rundata::RunData;
use crate::report::PhaseSummary;

/// timeline.csv rows of `phase`: (start, end, class, ok/s, p99 µs).
fn timeline(d: &RunData, phase: &str) -> Vec<(f64, f64, String, f64, Option<f64>)> {
    d.timeline
        .rows_where("phase", phase)
        .filter_map(|r| {
            Some((
                r.num("t_start_s")?,
                r.num("t_end_s")?,
                r.get("class").to_string(),
                r.num("ok_per_s")?,
                r.num("p99_us"),
            ))
        })
        .collect()
}

pub(super) fn section(p: &mut Page, d: &RunData, ph: &PhaseSummary) {
    let rows = timeline(d, &ph.name);
    if rows.is_empty() && ph.faults.is_empty() {
        return;
    }
    let name = &ph.name;
    let mut classes: Vec<String> = rows.iter().map(|r| r.2.clone()).collect();
    classes.sort();
    classes.dedup();
    let mark = |c: &mut LineChart| {
        for f in &ph.faults {
            c.vlines
                .push((f.at_s, format!("fault {}: {}", f.fault, f.member)));
            let end = f.recovered_after_s.map(|r| f.at_s + r);
            if let Some(e) = end {
                c.shaded.push((f.at_s, e, "recovering".into()));
            }
        }
    };
    if !rows.is_empty() {
        let mut t = LineChart::new(
            &format!("{name}-timeline"),
            &format!("{name}: successful operations per timeline bucket"),
            "time since the phase started (s)",
            &crate::report::names::name("ok_per_s"),
        );
        for c in &classes {
            let pts = rows
                .iter()
                .filter(|r| &r.2 == c)
                .map(|r| ((r.0 + r.1) / 2.0, r.3))
                .collect();
            t.series.push(Series::new(c, downsample(pts)));
        }
        mark(&mut t);
        p.figure(
            &t.id.clone(),
            t.svg(),
            "The recovery timeline (timeline.csv): successful operations per second in each bucket; faults marked, recovery shaded. 'affected' are keys of the faulted master's slots, 'rest' the others; 'all' where the cluster cannot tell them apart.",
        );
        let mut l = LineChart::new(
            &format!("{name}-timeline-p99"),
            &format!("{name}: p99 latency per timeline bucket"),
            "time since the phase started (s)",
            "p99 latency (log scale)",
        )
        .latency_y();
        for c in &classes {
            let pts = rows
                .iter()
                .filter(|r| &r.2 == c)
                .filter_map(|r| Some(((r.0 + r.1) / 2.0, r.4?)))
                .collect();
            let step = rows.first().map(|r| r.1 - r.0).unwrap_or(0.0);
            l.series.push(super::gapped(c, pts, step));
        }
        mark(&mut l);
        p.figure(
            &l.id.clone(),
            l.svg(),
            "p99 of successful operations per bucket (log-linear bins, within 7 %); empty buckets have no point.",
        );
    }
    if !ph.faults.is_empty() {
        fault_tables(p, ph);
    }
}

/// The per-fault figures (unavailability, recovery, latency before and during, errors,
/// energy) and the fault events, as tables.
fn fault_tables(p: &mut Page, ph: &PhaseSummary) {
    let name = &ph.name;
    let opt = |v: Option<f64>| v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "—".into());
    let us = |v: Option<f64>| v.map(|x| format!("{x:.0}")).unwrap_or_else(|| "—".into());
    let rows: Vec<Vec<Cell>> = ph
        .faults
        .iter()
        .map(|f| {
            vec![
                Cell::text(f.spec.clone()),
                Cell::text(f.member.clone()),
                Cell::num("at_s", f.at_s, format!("{:.2}", f.at_s)),
                Cell::num(
                    "unavailable_s",
                    f.unavailable_s,
                    format!("{:.3}", f.unavailable_s),
                ),
                Cell::text(match f.recovered_after_s {
                    Some(r) => format!("{r:.2}"),
                    None => "not recovered".into(),
                }),
                Cell::text(opt(f.cluster_reported_after_s)),
                Cell::text(format!(
                    "{} / {}",
                    us(f.latency_before.p50_us),
                    us(f.latency_before.p99_us)
                )),
                Cell::text(format!(
                    "{} / {}",
                    us(f.latency_during_recovery.p50_us),
                    us(f.latency_during_recovery.p99_us)
                )),
                Cell::text(
                    f.errors
                        .iter()
                        .map(|(k, n)| format!("{k}={n}"))
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                Cell::text(f.energy.clone()),
            ]
        })
        .collect();
    p.table(
        &format!("{name}-faults"),
        &[
            "fault",
            "member",
            "at (s)",
            "unavailable (s)",
            "recovered after (s)",
            "new leader/primary after (s)",
            "p50/p99 before (µs)",
            "p50/p99 during recovery (µs)",
            "errors",
            "energy",
        ],
        &rows,
    );
    if let Some(f) = ph.faults.first() {
        p.note("na", &format!("Latency columns: {}.", f.latency_of));
    }
    let events: Vec<Vec<Cell>> = ph
        .fault_events
        .iter()
        .map(|e| {
            vec![
                Cell::num("t_s", e.t_s, format!("{:.3}", e.t_s)),
                Cell::text(e.event.clone()),
                Cell::text(e.member.clone()),
                Cell::text(e.pid.map(|x| x.to_string()).unwrap_or_default()),
                Cell::text(e.cluster.clone()),
            ]
        })
        .collect();
    p.table(
        &format!("{name}-events"),
        &[
            "t (s)",
            "event",
            "member",
            "pid",
            "what the cluster reported",
        ],
        &events,
    );
}
