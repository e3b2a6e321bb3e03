//! A phase's conclusion once its measurements are in: the open-loop figures (and the
//! event-driven engine's own checks and probe), energy, the outcome, why the measured window
//! is not the plan's, and YCSB's text report. Split from `phase.rs`, which starts and runs the
//! phase.

use super::arrivals::Arrivals;
use super::ctx::PhaseCtx;
use super::intervals::Intervals;
use super::open_loop;
use crate::plan::PhasePlan;
use crate::report::{self, Outcome, PhaseSummary};
use std::time::Duration;

/// The engine's phase figures that need the measured window: its open-loop checks and the
/// probe stream's latency.
pub(super) fn engine_figures(
    e: &super::engine::Opened,
    phase: &PhasePlan,
    seed: u64,
    ps: &mut PhaseSummary,
) {
    if let Some(o) = phase.open_loop.as_ref() {
        // The sends are checked against what the schedule expects in each window: rate·t, or
        // a sine's Λ(t) (the same curve and noise the phase's schedule drew from `seed`), so a
        // time-varying rate keeps the dispersion and late-send verdicts.
        let schedule = Arrivals::seeded(o, 0, 0, seed);
        e.judge_open_loop(ps, o.arrival, &|t| schedule.expected_by(t));
    }
    let probe = e.probe_summary(!phase.warmup.is_zero(), ps.measured_seconds);
    if let Some(es) = ps.engine.as_mut() {
        es.probe = probe;
    }
}

/// The phase's verdict and derived figures once its measurements are in: the open-loop
/// figures, energy, the outcome (a fatal error, the store's close, Ctrl-C), why the window is
/// not the plan's, and YCSB's text report.
#[allow(clippy::too_many_arguments)]
pub(super) fn conclude(
    ctx: &PhaseCtx,
    phase: &PhasePlan,
    ps: &mut PhaseSummary,
    iv: &Intervals<'_>,
    threads: usize,
    paced: bool,
    fatal: Option<String>,
    close_result: anyhow::Result<()>,
    late: Duration,
) -> String {
    if let (Some(o), true) = (&phase.open_loop, paced) {
        ps.open_loop = Some(open_loop::summary(
            o,
            threads,
            ctx.plan.engine.as_ref(),
            &iv.measured,
            ps.measured_seconds,
            iv.max_behind_ms,
            ps.telemetry.as_ref(),
        ));
    }
    energy(ps, ctx.idle);
    settle(ps, fatal, close_result, iv.interrupted);
    unanswered(ps);
    truncated(phase, ps);
    ps.window_note = window_note(phase, ps, iv.interrupted, late);
    report::ycsb::report(
        &iv.measured,
        (ps.measured_seconds * 1000.0) as u64,
        iv.measured.transactions(),
        &ctx.plan.ycsb_percentiles,
    )
}

/// Why the measured window is not the plan's (`--duration` less warm-up), when it differs by
/// more than a millisecond (issue 28 item 7). Workers stop on their own clock at the deadline,
/// so the window overruns only by a call in flight then; it ends early when the phase was
/// stopped or ran out of operations.
fn window_note(
    phase: &PhasePlan,
    ps: &PhaseSummary,
    interrupted: bool,
    late: Duration,
) -> Option<String> {
    let planned = phase.duration?.saturating_sub(phase.warmup).as_secs_f64();
    let got = ps.measured_seconds;
    if got < planned - 1e-3 {
        let why = if interrupted {
            "stopped early (Ctrl-C, or the coordinator asked)".to_string()
        } else if ps.outcome == Outcome::Failed {
            "stopped early: the phase failed".into()
        } else if phase.operations > 0 {
            // --ops with --duration: whichever comes first, as planned.
            return None;
        } else {
            "stopped early".into()
        };
        return Some(format!("{got:.3} s, not the planned {planned:.3} s: {why}"));
    }
    // The window is the plan's; say so when calls in flight at the deadline took long to
    // return (a stalled store): their operations are in the last interval.
    (late >= Duration::from_millis(100)).then(|| {
        format!(
            "the planned {planned:.3} s; the calls in flight at the deadline returned up to {:.3} s after it (counted in the last interval)",
            late.as_secs_f64()
        )
    })
}

/// The phase's outcome: a worker's fatal error first, then a failed close, then Ctrl-C.
fn settle(
    ps: &mut PhaseSummary,
    fatal: Option<String>,
    close_result: anyhow::Result<()>,
    interrupted: bool,
) {
    if let Some(f) = fatal {
        ps.outcome = Outcome::Failed;
        ps.error = Some(f);
    } else if let Err(e) = close_result {
        ps.outcome = Outcome::Failed;
        ps.error = Some(format!("{e:#}"));
    } else if interrupted {
        ps.outcome = Outcome::Interrupted;
    }
}

/// A phase in which the store answered none of its calls — every one failed, a miss being an
/// answer — measured no store: it is `failed`, not `completed` with a throughput of failures
/// and exit 0 (a server that passes the handshake and then sends garbage, a store refusing
/// every write). The error names how the calls failed.
fn unanswered(ps: &mut PhaseSummary) {
    use crate::measure::Metric;
    if ps.outcome != Outcome::Completed {
        return;
    }
    let mut kinds = std::collections::BTreeMap::<&str, u64>::new();
    let (mut calls, mut answered) = (0u64, 0u64);
    for m in [
        Metric::Read,
        Metric::Update,
        Metric::Insert,
        Metric::Scan,
        Metric::Delete,
    ] {
        if ps.not_applicable.iter().any(|n| n == m.name()) {
            continue;
        }
        let Some(o) = ps.ops.get(m.name()) else {
            continue;
        };
        calls += o.count;
        answered += o.ok + o.misses;
        for (k, n) in &o.errors {
            if k != "not_found" {
                *kinds.entry(k.as_str()).or_default() += n;
            }
        }
    }
    if calls == 0 || answered > 0 {
        return;
    }
    let how: Vec<String> = kinds.iter().map(|(k, n)| format!("{k}={n}")).collect();
    ps.outcome = Outcome::Failed;
    ps.error = Some(format!(
        "the store answered none of the phase's {calls} calls: every one failed ({})",
        how.join(", ")
    ));
}

/// A load that ended as planned yet inserted fewer records than planned is `truncated`
/// (issue 40 item 1): stopped by the bound the user gave it (`--duration` with `--phase load`,
/// YCSB's `maxexecutiontime`) or short of the inserts that failed. Interrupted and failed
/// loads keep their outcome, which already says they stopped early.
fn truncated(phase: &PhasePlan, ps: &mut PhaseSummary) {
    if phase.kind != crate::plan::PhaseKind::Load || ps.outcome != Outcome::Completed {
        return;
    }
    let insert = ps.ops.get(crate::measure::Metric::Insert.name());
    let inserted = insert.map(|o| o.ok).unwrap_or(0);
    if inserted >= phase.operations {
        return;
    }
    let failed = insert.map(|o| o.count - o.ok).unwrap_or(0);
    let why = match phase.duration {
        _ if failed > 0 => format!("{failed} inserts failed"),
        Some(d) => format!(
            "stopped at the load's bound of {}",
            humantime::format_duration(d)
        ),
        None => "the workers stopped early".into(),
    };
    ps.outcome = Outcome::Truncated;
    ps.truncated = Some(format!(
        "{inserted} of {} records inserted: {why}",
        phase.operations
    ));
}

/// Energy of the measured window, where telemetry had a power source.
fn energy(ps: &mut PhaseSummary, idle: Option<&(f64, String)>) {
    let Some(t) = ps.telemetry.as_ref() else {
        return;
    };
    // The model's power is a function of the CPU share: a window too short for a share has
    // no estimate either (the terminal says `ESTIMATE not given`; so does the summary, by
    // its absence beside telemetry's `unavailable.cpu`).
    let no_share = t.cpu.is_none() && t.unavailable.contains_key("cpu");
    if let Some(p) = t.power.as_ref().filter(|p| !(p.estimate && no_share)) {
        // The energy window is telemetry's, which matches the measured window.
        ps.energy = Some(report::Energy::derive(
            p,
            ps.operations,
            t.seconds,
            idle.cloned(),
        ));
    }
}
