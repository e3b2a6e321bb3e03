//! A phase's interval loop, on the calling thread while the workers run: it closes an interval
//! every `--interval` (and exactly at the end of warm-up), writes it to the run directory at
//! once, calls the companions, and stops the workers at the deadline, on Ctrl-C, or when any
//! thread panics. Workers that never stop are abandoned with the results so far written.

use super::arrivals::Arrivals;
use super::companion::Companion;
use super::phase::{empty_summary, PhaseCtx};
use super::{open_loop, test_panic, worker};
use crate::measure::cpu::CpuTime;
use crate::measure::{Collector, Stats};
use crate::plan::PhasePlan;
use crate::report::{self, Outcome};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

/// How long workers may take to stop once told to: a store call in flight finishes well
/// within this, a stuck one never does. Ctrl-C is answered sooner.
pub(super) fn stop_grace(interrupted: bool) -> Duration {
    if interrupted {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(30)
    }
}

/// The interval loop's state: the interval being filled, the measured window so far, and
/// where the schedule stands.
pub(super) struct Intervals<'a> {
    pub(super) phase: &'a PhasePlan,
    arrivals: Option<&'a Arrivals>,
    t0: Instant,
    wall_start: SystemTime,
    pub(super) measured: Stats,
    interval: Stats,
    /// Intervals written so far.
    pub(super) index: usize,
    boundary_start: Instant,
    total_done: u64,
    pub(super) max_behind_ms: f64,
    /// Whether Ctrl-C stopped the workers.
    pub(super) interrupted: bool,
    /// `KVMETER_TEST_PANIC=main:MS`: when this loop panics on purpose.
    pub(super) test_panic_at: Option<Instant>,
    /// `crate::panics::count()` when the phase began: a panic since then fails it.
    pub(super) panics0: u64,
    /// The process's CPU time when the measured window began (`kvmeter_cpu`).
    pub(super) cpu_start: CpuTime,
}

impl<'a> Intervals<'a> {
    pub(super) fn new(
        phase: &'a PhasePlan,
        collector: &Collector,
        t0: Instant,
        wall_start: SystemTime,
        arrivals: Option<&'a Arrivals>,
    ) -> Self {
        Intervals {
            phase,
            arrivals,
            t0,
            wall_start,
            measured: collector.empty_stats(),
            interval: collector.empty_stats(),
            index: 0,
            boundary_start: t0,
            total_done: 0,
            max_behind_ms: 0.0,
            interrupted: false,
            test_panic_at: None,
            panics0: crate::panics::count(),
            cpu_start: CpuTime::now(),
        }
    }

    /// Until every worker has finished: stops them at the deadline, on Ctrl-C or when any
    /// thread panics, and closes an interval at every boundary. Workers that do not stop
    /// within `stop_grace` of being told to end the run from here (`super::abandon`).
    pub(super) fn supervise(
        &mut self,
        ctx: &mut PhaseCtx,
        shared: &worker::Shared,
        collector: &Collector,
        companions: &mut [Box<dyn Companion + '_>],
        threads: usize,
    ) -> anyhow::Result<()> {
        let (t0, phase, interval) = (self.t0, self.phase, ctx.plan.interval);
        // A duration beyond the clock's range (1e19 s from an agent's plan) fails the phase
        // here rather than panicking in `Instant + Duration`.
        let at = |d: Duration, what: &str| {
            t0.checked_add(d).ok_or_else(|| {
                anyhow::anyhow!(
                    "the phase's {what} ({} s) is beyond this clock's range",
                    d.as_secs_f64()
                )
            })
        };
        let warmup_end = match phase.warmup.is_zero() {
            true => None,
            false => Some(at(phase.warmup, "warm-up")?),
        };
        let mut next_boundary = warmup_end.unwrap_or(at(interval, "interval")?);
        let deadline = phase.duration.map(|d| at(d, "duration")).transpose()?;
        let grace = (interval / 10).clamp(Duration::from_millis(5), Duration::from_millis(100));
        let panics0 = self.panics0;
        let mut stopped_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if shared.finished.load(Ordering::Acquire) == threads {
                return Ok(());
            }
            if self.test_panic_at.is_some_and(|at| now >= at) {
                panic!(
                    "{}: a deliberate panic in the interval loop",
                    test_panic::VAR
                );
            }
            if crate::panics::count() != panics0 && shared.fatal_is_none() {
                // A thread beside the workers panicked (a companion, telemetry, an agent's
                // poster): the phase fails with its message. Workers report their own.
                shared.fail(crate::panics::since(panics0).unwrap_or_default());
            }
            let asked = ctx.sync.as_ref().is_some_and(|s| s.stop_requested());
            if (asked || ctx.interrupted.load(Ordering::Relaxed))
                && !shared.stop.load(Ordering::Relaxed)
            {
                self.interrupted = true;
                shared.stop.store(true, Ordering::Relaxed);
            }
            if deadline.is_some_and(|d| now >= d) {
                shared.stop.store(true, Ordering::Relaxed);
            }
            if shared.stop.load(Ordering::Relaxed) {
                let since = *stopped_at.get_or_insert(now);
                if now.duration_since(since) >= stop_grace(self.interrupted) {
                    self.abandon(ctx, shared, threads);
                }
            }
            if now >= next_boundary {
                let ends_warmup = warmup_end == Some(next_boundary);
                let in_warmup = warmup_end.is_some_and(|w| next_boundary <= w);
                for c in companions.iter_mut() {
                    c.boundary(next_boundary - t0);
                }
                if ends_warmup {
                    // Telemetry's measured window starts with the operations'.
                    if let Some(t) = ctx.telemetry {
                        t.restart_window();
                    }
                    self.cpu_start = CpuTime::now();
                }
                collector.close_interval(&mut self.interval, grace);
                let sched = open_loop::schedule_figures(phase, self.arrivals, ctx.clock.now());
                self.write(ctx, companions, next_boundary - t0, in_warmup, sched)?;
                self.boundary_start = next_boundary;
                next_boundary += interval;
                continue;
            }
            let mut wake = next_boundary.min(now + Duration::from_millis(10));
            if let Some(d) = deadline {
                wake = wake.min(d.max(now));
            }
            std::thread::sleep(wake.saturating_duration_since(now));
        }
    }

    /// Some worker did not stop (a store call that never returns): the scope holding the
    /// workers cannot be left, so the run's results so far are written from here and the
    /// process exits (130 after Ctrl-C, else 1).
    fn abandon(&mut self, ctx: &mut PhaseCtx, shared: &worker::Shared, threads: usize) -> ! {
        let stuck = threads - shared.finished.load(Ordering::Acquire);
        let mut ps = empty_summary(self.phase);
        ps.started_at = humantime::format_rfc3339_millis(self.wall_start).to_string();
        ps.wall_seconds = self.t0.elapsed().as_secs_f64();
        ps.intervals = self.index;
        ps.measured_seconds = self
            .t0
            .elapsed()
            .saturating_sub(self.phase.warmup)
            .as_secs_f64();
        ps.fill(&self.measured);
        let why = format!(
            "{stuck} of {threads} workers did not stop within {:.0} s of being asked (a store call that does not return); the intervals so far are saved",
            stop_grace(self.interrupted).as_secs_f64()
        );
        let fatal = shared
            .fatal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        ps.error = Some(match fatal {
            Some(f) => format!("{f}; {why}"),
            None => why,
        });
        let code = if self.interrupted {
            ps.outcome = Outcome::Interrupted;
            crate::error::EXIT_INTERRUPTED
        } else {
            ps.outcome = Outcome::Failed;
            crate::error::EXIT_FAILED
        };
        if let Some(io) = ctx.io {
            // Its Drop will not run: the antagonists' files go now (the promise of
            // docs/interference.md; open files are unlinked safely).
            let _ = std::fs::remove_dir_all(&io.dir);
        }
        super::abandon(ctx.rundir, ctx.summary, ctx.manifest, ps, code)
    }

    /// Writes the interval that ends `end` after the start (intervals.csv, HDR logs,
    /// progress), adds it to the measured window after warm-up, and starts the next one.
    fn write(
        &mut self,
        ctx: &mut PhaseCtx,
        companions: &mut [Box<dyn Companion + '_>],
        end: Duration,
        in_warmup: bool,
        sched: Option<report::rundir::ScheduleFigures>,
    ) -> anyhow::Result<()> {
        let name = &self.phase.name;
        let from = self.boundary_start - self.t0;
        let (a, b) = (from.as_secs_f64(), end.as_secs_f64());
        if let Some(behind) = sched.and_then(|f| f.behind_ms) {
            self.max_behind_ms = self.max_behind_ms.max(behind);
        }
        ctx.rundir
            .append_interval(name, self.index, a, b, in_warmup, &self.interval, sched)?;
        ctx.rundir
            .log_histograms(name, self.wall_start, a, b, &self.interval)?;
        if let Some(s) = ctx.sync.as_deref_mut() {
            s.interval(&super::IntervalRecord {
                phase: name,
                index: self.index,
                start_s: a,
                end_s: b,
                warmup: in_warmup,
                stats: &self.interval,
            })?;
        }
        self.total_done += self.interval.total_ops();
        ctx.progress.interval(
            ctx.index,
            ctx.phases,
            self.phase,
            &self.interval,
            b - a,
            self.total_done,
            self.t0.elapsed(),
        );
        if !in_warmup {
            self.measure(companions, from);
        }
        self.interval.reset();
        self.index += 1;
        Ok(())
    }

    fn measure(&mut self, companions: &mut [Box<dyn Companion + '_>], from: Duration) {
        self.measured.add(&self.interval);
        for c in companions.iter_mut() {
            c.measured(from, &self.interval);
        }
    }

    /// The last, partial interval (written when it holds operations, or when it is the only
    /// one). Returns whether the phase ended inside its warm-up.
    pub(super) fn close_last(
        &mut self,
        ctx: &mut PhaseCtx,
        collector: &Collector,
        companions: &mut [Box<dyn Companion + '_>],
        end: Duration,
    ) -> anyhow::Result<bool> {
        collector.drain(&mut self.interval);
        let warmup = self.phase.warmup;
        let in_warmup = !warmup.is_zero() && end <= warmup;
        if self.interval.total_ops() > 0 || self.index == 0 {
            let name = &self.phase.name;
            let from = (self.boundary_start - self.t0).as_secs_f64();
            // The backlog when the phase ended, not after the workers were joined.
            let at = self
                .arrivals
                .map(|a| a.start() + end.as_nanos() as u64)
                .unwrap_or(0);
            let sched = open_loop::schedule_figures(self.phase, self.arrivals, at);
            let to = end.as_secs_f64();
            ctx.rundir.append_interval(
                name,
                self.index,
                from,
                to,
                in_warmup,
                &self.interval,
                sched,
            )?;
            ctx.rundir
                .log_histograms(name, self.wall_start, from, to, &self.interval)?;
            if let Some(s) = ctx.sync.as_deref_mut() {
                s.interval(&super::IntervalRecord {
                    phase: name,
                    index: self.index,
                    start_s: from,
                    end_s: to,
                    warmup: in_warmup,
                    stats: &self.interval,
                })?;
            }
            self.index += 1;
        }
        if !in_warmup {
            let from = self.boundary_start - self.t0;
            self.measure(companions, from);
        }
        Ok(in_warmup)
    }
}
