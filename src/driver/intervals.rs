//! A phase's interval loop, on the calling thread while the workers run. Intervals lie on a
//! fixed grid from the phase's start (the first boundary exactly at the end of warm-up, then
//! every `--interval`); an operation belongs to the interval in which it completed
//! (`measure::handoff`). The loop tells the companions of each boundary on time, writes each
//! row (intervals.csv, HDR logs, an agent's post, progress) once every worker has moved past
//! it — in order, each interval its own row, zeros when nothing completed — and stops the
//! workers at the deadline, on Ctrl-C, or when any thread panics. Workers that never stop are
//! abandoned with every row so far written.

use super::arrivals::Arrivals;
use super::companion::Companion;
use super::ctx::{empty_summary, PhaseCtx};
use super::silence::Silence;
use super::{open_loop, test_panic, worker};
use crate::measure::cpu::CpuTime;
use crate::measure::{Collector, Grid, Stats};
use crate::plan::PhasePlan;
use crate::report::{self, Outcome};
use std::collections::VecDeque;
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

/// The interval loop's state: the measured window so far, the rows written, the boundaries
/// the clock has passed, and where the schedule stood at each.
pub(super) struct Intervals<'a> {
    pub(super) phase: &'a PhasePlan,
    arrivals: Option<&'a Arrivals>,
    t0: Instant,
    grid: Grid,
    wall_start: SystemTime,
    pub(super) measured: Stats,
    /// Rows written so far (the next row's index).
    pub(super) index: usize,
    /// Interval boundaries the clock has passed (the companions were told of them).
    passed: u64,
    /// The schedule's figures at each passed boundary whose row is not written yet.
    sched: VecDeque<Option<report::rundir::ScheduleFigures>>,
    total_done: u64,
    /// Store calls of the warm-up's rows: what the phase-long figures (the kernel's storage
    /// bytes) are divided by besides the measured ones.
    pub(super) warmup_done: u64,
    pub(super) max_behind_ms: f64,
    /// Whether Ctrl-C stopped the workers.
    pub(super) interrupted: bool,
    /// `KVMETER_TEST_PANIC=main:MS`: when this loop panics on purpose.
    pub(super) test_panic_at: Option<Instant>,
    /// `crate::panics::count()` when the phase began: a panic since then fails it.
    pub(super) panics0: u64,
    /// The process's CPU time when the measured window began (`kvmeter_cpu`).
    pub(super) cpu_start: CpuTime,
    /// `--give-up-after`: how long the store has answered nothing, and why the phase gives up.
    silence: Silence,
    gave_up: Option<String>,
}

impl<'a> Intervals<'a> {
    /// Panics are counted from `panics0` (the phase's start); a test's planned panic on the
    /// interval loop's thread (`KVMETER_TEST_PANIC`) fires `after` the workers start.
    pub(super) fn watch_panics(
        &mut self,
        panics0: u64,
        test: Option<super::test_panic::TestPanic>,
    ) {
        self.panics0 = panics0;
        self.test_panic_at = test
            .filter(|t| t.at == super::test_panic::Where::Main)
            .map(|t| self.t0 + t.after);
    }

    pub(super) fn new(
        phase: &'a PhasePlan,
        shared: &worker::Shared,
        collector: &Collector,
        wall_start: SystemTime,
        arrivals: Option<&'a Arrivals>,
    ) -> Self {
        Intervals {
            phase,
            arrivals,
            t0: shared.t0,
            grid: shared.grid,
            wall_start,
            measured: collector.empty_stats(),
            index: 0,
            passed: 0,
            sched: VecDeque::new(),
            total_done: 0,
            warmup_done: 0,
            max_behind_ms: 0.0,
            interrupted: false,
            test_panic_at: None,
            panics0: crate::panics::count(),
            cpu_start: CpuTime::now(),
            silence: Silence::new(None),
            gave_up: None,
        }
    }

    /// `--give-up-after`: end the phase once the store has answered nothing this long while
    /// its calls time out (`super::silence`); `None` never.
    pub(super) fn give_up_after(&mut self, limit: Option<Duration>) {
        self.silence = Silence::new(limit);
    }

    /// Until every worker has finished: stops them at the deadline, on Ctrl-C or when any
    /// thread panics, tells the companions of every boundary on time, and writes each row once
    /// every worker has moved past it (`measure::handoff`): on time normally, late but exact
    /// while a worker sits in one call. Workers that do not stop within `stop_grace` of being
    /// told to end the run from here (`super::abandon`).
    pub(super) fn supervise(
        &mut self,
        ctx: &mut PhaseCtx,
        shared: &worker::Shared,
        collector: &Collector,
        companions: &mut [Box<dyn Companion + '_>],
        threads: usize,
    ) -> anyhow::Result<()> {
        let (grid, clock) = (self.grid, ctx.clock.clone());
        let deadline = shared.deadline_ns;
        let panics0 = self.panics0;
        let mut stopped_at: Option<Instant> = None;
        loop {
            let now = clock.now();
            if shared.finished.load(Ordering::Acquire) == threads {
                return Ok(());
            }
            if self.test_panic_at.is_some_and(|at| Instant::now() >= at) {
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
            if now >= deadline {
                // Workers stop on their own clock; this reaches those asleep or stuck.
                shared.stop.store(true, Ordering::Relaxed);
            }
            if shared.stop.load(Ordering::Relaxed) {
                let since = *stopped_at.get_or_insert_with(Instant::now);
                if since.elapsed() >= stop_grace(self.interrupted) {
                    self.abandon(ctx, shared, collector, companions, threads);
                }
            }
            self.pass_boundaries(ctx, companions, now);
            while let Some((k, stats)) = collector.next_row(self.passed) {
                let end = grid.end(k);
                self.write(ctx, companions, k, stats, end)?;
            }
            if let Some(why) = self.gave_up.take() {
                shared.fail(why);
            }
            // Wake at the next boundary, the deadline, or soon: sooner while a passed row
            // waits for a worker's next completion (microseconds, unless it is stalled).
            let poll = if (self.index as u64) < self.passed {
                2_000_000
            } else {
                10_000_000
            };
            // Past the deadline only the poll remains: a worker still in its call (a silent
            // server, up to its timeout) is waited for at the poll's pace, not by spinning.
            let mut wake = self.next_boundary().min(now + poll);
            if deadline > now {
                wake = wake.min(deadline);
            }
            std::thread::sleep(Duration::from_nanos(wake.saturating_sub(now)));
        }
    }

    /// The next boundary the clock will pass (clock ns); none after the deadline's.
    fn next_boundary(&self) -> u64 {
        let g = self.grid;
        if g.start(self.passed) >= g.deadline {
            return u64::MAX;
        }
        g.origin.saturating_add(g.end(self.passed))
    }

    /// Tells the companions of every boundary the clock `now` has passed (on time, whether or
    /// not its row can be written yet), starts the measured window at the end of warm-up, and
    /// notes the schedule's figures at each.
    fn pass_boundaries(
        &mut self,
        ctx: &mut PhaseCtx,
        companions: &mut [Box<dyn Companion + '_>],
        now: u64,
    ) {
        while now >= self.next_boundary() {
            let g = self.grid;
            let at = Duration::from_nanos(g.end(self.passed));
            for c in companions.iter_mut() {
                c.boundary(at);
            }
            if self.passed == 0 && !self.phase.warmup.is_zero() {
                // Telemetry's measured window starts with the operations'.
                if let Some(t) = ctx.telemetry {
                    t.restart_window();
                }
                self.cpu_start = CpuTime::now();
            }
            let sched = open_loop::schedule_figures(self.phase, self.arrivals, now);
            self.sched.push_back(sched);
            self.passed += 1;
        }
    }

    /// Some worker did not stop (a store call that never returns): the scope holding the
    /// workers cannot be left, so every row so far is written (each interval its own; the
    /// stuck workers' operations of the interval they stuck in are with them) with the run's
    /// results, and the process exits (130 after Ctrl-C, else 1).
    fn abandon(
        &mut self,
        ctx: &mut PhaseCtx,
        shared: &worker::Shared,
        collector: &Collector,
        companions: &mut [Box<dyn Companion + '_>],
        threads: usize,
    ) -> ! {
        let stuck = threads - shared.finished.load(Ordering::Acquire);
        let now = ctx.clock.now().saturating_sub(self.grid.origin);
        let now = Duration::from_nanos(now.min(self.grid.deadline));
        // Rows the clock has passed, then the interval it is in, up to now.
        let _ = self.write_rest(ctx, collector, companions, now);
        let mut ps = empty_summary(self.phase);
        ps.started_at = humantime::format_rfc3339_millis(self.wall_start).to_string();
        ps.wall_seconds = self.t0.elapsed().as_secs_f64();
        ps.intervals = self.index;
        ps.measured_seconds = now.saturating_sub(self.phase.warmup).as_secs_f64();
        ps.fill(&self.measured);
        ps.warmup_operations = self.warmup_done;
        let why = format!(
            "{stuck} of {threads} workers did not stop within {:.0} s of being asked (a store call that does not return); the intervals so far are saved",
            stop_grace(self.interrupted).as_secs_f64()
        );
        ps.window_note = Some(format!(
            "abandoned: {stuck} of {threads} workers did not stop (a store call that does not return)"
        ));
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

    /// Writes row `k`, which ends `end` ns after the start (intervals.csv, HDR logs, an
    /// agent's post, progress), and adds it to the measured window after warm-up.
    fn write(
        &mut self,
        ctx: &mut PhaseCtx,
        companions: &mut [Box<dyn Companion + '_>],
        k: u64,
        stats: Stats,
        end: u64,
    ) -> anyhow::Result<()> {
        let name = &self.phase.name;
        let from = Duration::from_nanos(self.grid.start(k));
        let end = Duration::from_nanos(end).max(from);
        let warmup = self.phase.warmup;
        let in_warmup = !warmup.is_zero() && end <= warmup;
        // The schedule at this row's boundary, or (a row the loop never saw close: the phase
        // ended in it) at its end.
        let sched = match self.sched.pop_front() {
            Some(s) => s,
            None => {
                let at = self
                    .arrivals
                    .map(|a| a.start() + end.as_nanos() as u64)
                    .unwrap_or(0);
                open_loop::schedule_figures(self.phase, self.arrivals, at)
            }
        };
        let (a, b) = (from.as_secs_f64(), end.as_secs_f64());
        if let Some(why) = self.silence.row(&stats, end) {
            self.gave_up = Some(why);
        }
        if let Some(behind) = sched.and_then(|f| f.behind_ms) {
            self.max_behind_ms = self.max_behind_ms.max(behind);
        }
        let index = k as usize;
        ctx.rundir
            .append_interval(name, index, a, b, in_warmup, &stats, sched)?;
        ctx.rundir
            .log_histograms(name, self.wall_start, a, b, &stats)?;
        if let Some(s) = ctx.sync.as_deref_mut() {
            s.interval(&super::IntervalRecord {
                phase: name,
                index,
                start_s: a,
                end_s: b,
                warmup: in_warmup,
                stats: &stats,
            })?;
        }
        if let Some(l) = ctx.live {
            let row = super::live::Row {
                phase: name,
                stats: &stats,
                seconds: b - a,
                warmup: in_warmup,
                sched,
            };
            l.interval(&row, ctx.telemetry);
        }
        let calls = super::progress::store_calls(&stats);
        self.total_done += calls;
        if in_warmup {
            self.warmup_done += calls;
        }
        ctx.progress.interval(
            ctx.index,
            ctx.phases,
            self.phase,
            &stats,
            b - a,
            self.total_done,
            self.t0.elapsed(),
        );
        if !in_warmup {
            self.measured.add(&stats);
            for c in companions.iter_mut() {
                c.measured(from, &stats);
            }
        }
        self.index = index + 1;
        Ok(())
    }

    /// Every row not written yet, each interval its own, the last one ending at `end` (the
    /// phase's last completion): the phase's end, Ctrl-C, a panic, or workers abandoned.
    fn write_rest(
        &mut self,
        ctx: &mut PhaseCtx,
        collector: &Collector,
        companions: &mut [Box<dyn Companion + '_>],
        end: Duration,
    ) -> anyhow::Result<()> {
        let g = self.grid;
        let end_ns = end.as_nanos() as u64;
        let last = g
            .index_at(end_ns)
            .max(collector.last_with_data().unwrap_or(0));
        while let Some((k, stats)) = collector.next_row_at_end(last) {
            let row_end = if k == last { end_ns } else { g.end(k) };
            // The phase ended exactly on a boundary: no empty row of no length after it.
            if k == last && k > 0 && row_end <= g.start(k) && stats.is_empty() {
                break;
            }
            self.write(ctx, companions, k, stats, row_end)?;
        }
        Ok(())
    }

    /// The rows left when the workers have stopped. Returns whether the phase ended inside its
    /// warm-up.
    pub(super) fn close_last(
        &mut self,
        ctx: &mut PhaseCtx,
        collector: &Collector,
        companions: &mut [Box<dyn Companion + '_>],
        end: Duration,
    ) -> anyhow::Result<bool> {
        self.write_rest(ctx, collector, companions, end)?;
        let warmup = self.phase.warmup;
        Ok(!warmup.is_zero() && end <= warmup)
    }
}
