//! The schedule's side of a paced phase (docs/open-loop.md): the offered rate and backlog
//! written with every interval, and at the end offered against achieved load, with a loud
//! warning when kvmeter did not deliver the schedule.

use super::arrivals::Arrivals;
use crate::measure::Stats;
use crate::plan::{Arrival, OpenLoop, PhasePlan};
use crate::report::rundir::ScheduleFigures;
use crate::report::{Latency, OpenLoopSummary};
use crate::telemetry::PhaseTelemetry;

/// The schedule's figures at clock time `now`: open loop (rate and backlog) or `--target`
/// (rate only); `None` for an unpaced phase.
pub(super) fn schedule_figures(
    phase: &PhasePlan,
    arrivals: Option<&Arrivals>,
    now: u64,
) -> Option<ScheduleFigures> {
    match (&phase.open_loop, phase.target, arrivals) {
        (Some(o), _, Some(a)) => Some(ScheduleFigures {
            offered_ops_per_s: o.rate,
            behind_ms: Some(a.behind_ns(now) as f64 / 1e6),
        }),
        (None, Some(t), _) => Some(ScheduleFigures {
            offered_ops_per_s: t,
            behind_ms: None,
        }),
        _ => None,
    }
}

/// Offered against achieved load; a schedule kvmeter did not serve gets a loud warning that
/// says what was busy.
pub(super) fn summary(
    o: &OpenLoop,
    workers: usize,
    measured: &Stats,
    seconds: f64,
    max_behind_ms: f64,
    telemetry: Option<&PhaseTelemetry>,
) -> OpenLoopSummary {
    let done = measured.transactions();
    let achieved = if seconds > 0.0 {
        done as f64 / seconds
    } else {
        0.0
    };
    let ratio = achieved / o.rate;
    // A Poisson process's count over the window has stddev √(rate·seconds): 3 sigma of
    // slack, so a schedule that was served is not called short by chance.
    let expected = o.rate * seconds;
    let slack = match o.arrival {
        Arrival::Poisson if expected > 0.0 => 3.0 / expected.sqrt(),
        _ => 0.0,
    };
    let lag = measured
        .lag
        .as_deref()
        .map(Latency::from_ns)
        .unwrap_or_else(|| Latency::from_ns(&crate::measure::new_histogram()));
    let short = ratio < 0.99 - slack;
    let behind = max_behind_ms > 100.0;
    let warning = (short || behind).then(|| {
        let cpu = telemetry
            .and_then(|t| t.process.as_ref())
            .map(|p| format!("; kvmeter itself used {:.0} % of a CPU", p.cpu_pct))
            .unwrap_or_default();
        format!(
            "the open-loop schedule was not served: achieved {:.0} of {:.0} offered ops/s ({:.1} %), the schedule fell up to {:.1} ms behind and sends were up to {:.1} ms late (p99 {:.3} ms); all {workers} workers were busy{cpu}. Latency from intended start includes this queueing, but the offered load was not delivered: lower --rate, or raise --threads if kvmeter (not the store) is the limit",
            achieved,
            o.rate,
            ratio * 100.0,
            max_behind_ms,
            lag.max / 1000.0,
            lag.p99 / 1000.0,
        )
    });
    OpenLoopSummary {
        arrival: o.arrival.name().into(),
        offered_ops_per_s: o.rate,
        achieved_ops_per_s: achieved,
        achieved_ratio: ratio,
        workers,
        send_lag_us: lag,
        max_behind_ms,
        kept_up: !(short || behind),
        warning,
    }
}
