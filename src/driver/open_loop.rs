//! The schedule's side of a paced phase (docs/open-loop.md): the offered rate and backlog
//! written with every interval, and at the end offered against achieved load, with a loud
//! warning when kvmeter did not deliver the schedule.

use super::arrivals::Arrivals;
use crate::measure::Stats;
use crate::plan::{Arrival, Engine, OpenLoop, PhasePlan};
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
    engine: Option<&Engine>,
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
    // Behind: sends late against their intended start (issue 40 item 8: one measure, the one
    // the table and report.html print beside the verdict).
    let behind = lag
        .p99
        .is_some_and(|l| l > crate::report::LATE_SENDS_P99_US);
    let warning = (short || behind).then(|| {
        // No CPU figure from a window too short for CPU shares (telemetry's 50-tick rule).
        let cpu_pct = telemetry
            .filter(|t| !t.unavailable.contains_key("cpu"))
            .and_then(|t| t.process.as_ref())
            .map(|p| p.cpu_pct);
        let cpus = crate::machine::cpu_count();
        let cpu = cpu_pct
            .map(|c| format!("; kvmeter itself used {c:.0} % of a CPU"))
            .unwrap_or_default();
        let head = if short {
            format!(
                "the open-loop schedule was not served: achieved {:.0} of {:.0} offered ops/s ({:.1} %)",
                achieved,
                o.rate,
                ratio * 100.0
            )
        } else {
            format!(
                "the open-loop schedule fell behind but was served: {:.1} % of the {:.0} offered ops/s were delivered",
                ratio * 100.0,
                o.rate
            )
        };
        // What held the arrivals back: the worker pool, or on the engine its connections
        // (the event loops take every due arrival and queue what finds no free slot).
        let busy = match engine {
            None => format!("all {workers} workers were busy"),
            Some(e) => format!(
                "all {} connections × depth {} were full",
                e.connections, e.depth
            ),
        };
        format!(
            "{head}; sends were late by p99 {} ms, max {} ms; {busy}{cpu}. Latency from intended start includes this queueing. {}",
            lag.p99.map_or("—".into(), |x| format!("{:.1}", x / 1000.0)),
            lag.max.map_or("—".into(), |x| format!("{:.1}", x / 1000.0)),
            advice(short, cpu_pct, workers, cpus, engine.is_some()),
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
        arrivals_check: None,
    }
}

/// What to do about a schedule that was not kept, by its cause (issue 28 item 9: "lower
/// --rate" was printed when the whole load was delivered and the store had stalled).
/// On the engine (`engine`), --threads are event loops: requests in flight are its connections
/// × depth, so that is what to raise for them.
fn advice(
    short: bool,
    kvmeter_cpu_pct: Option<f64>,
    workers: usize,
    cpus: usize,
    engine: bool,
) -> &'static str {
    // kvmeter is the limit when its process used (nearly) every CPU its workers could use.
    let saturated = kvmeter_cpu_pct.is_some_and(|c| c >= 90.0 * workers.min(cpus) as f64);
    match (short, saturated, engine) {
        (false, _, false) => {
            "The whole offered load was delivered: every worker waited at once (a stall of the store or of this host) and the schedule caught up after; nothing to lower. Raise --threads to keep sending through such stalls."
        }
        (false, _, true) => {
            "The whole offered load was delivered: every connection waited at once (a stall of the store or of this host) and the schedule caught up after; nothing to lower. Raise --connections (or --depth) to keep sending through such stalls."
        }
        (true, true, false) => {
            "kvmeter used its CPUs fully, so it (not the store) was the limit: raise --threads if CPUs are free, or spread the load over more client hosts ('kvmeter dist run')."
        }
        (true, true, true) => {
            "kvmeter used its CPUs fully, so it (not the store) was the limit: raise --threads (event loops) if CPUs are free, or spread the load over more client hosts ('kvmeter dist run')."
        }
        (true, false, false) => {
            "The store did not answer fast enough for this rate with these workers in flight: the rate is above what it sustains ('kvmeter capacity' finds that rate); lower --rate to measure below it, or raise --threads to keep more requests in flight."
        }
        (true, false, true) => {
            "The store did not answer fast enough for this rate with these requests in flight: the rate is above what it sustains ('kvmeter capacity' finds that rate); lower --rate to measure below it, or raise --connections (or --depth) to keep more requests in flight."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::advice;

    #[test]
    fn the_advice_matches_the_cause() {
        // Delivered in full after a stall: never "lower --rate".
        let a = advice(false, Some(20.0), 16, 2, false);
        assert!(a.contains("whole offered load was delivered") && !a.contains("lower --rate"));
        // Short, kvmeter at both CPUs with 16 workers on 2 CPUs: kvmeter is the limit.
        assert!(advice(true, Some(195.0), 16, 2, false).contains("kvmeter used its CPUs fully"));
        // Short, kvmeter mostly idle: the store is the limit.
        let a = advice(true, Some(30.0), 16, 2, false);
        assert!(a.contains("lower --rate") && a.contains("kvmeter capacity"));
        // No telemetry: the store's side is the one said.
        assert!(advice(true, None, 1, 2, false).contains("The store did not answer"));
    }

    #[test]
    fn on_the_engine_the_advice_names_connections_not_threads() {
        // --threads are event loops there: more of them adds no request in flight.
        for (short, cpu) in [(false, Some(20.0)), (true, Some(30.0)), (true, None)] {
            let a = advice(short, cpu, 2, 2, true).to_lowercase();
            assert!(
                a.contains("--connections") && !a.contains("raise --threads"),
                "{a}"
            );
        }
        let a = advice(true, Some(195.0), 2, 2, true);
        assert!(a.contains("--threads (event loops)"), "{a}");
    }
}
