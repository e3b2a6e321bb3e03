//! Runs a `Plan`: `Run::prepare` (checks, calibration, server, run directory, manifest,
//! telemetry), then the phases in order, each with its store opened once, N workers and an
//! interval loop (`phase.rs`), then `Run::finish` (final summary, manifest, report). Results are
//! written after every interval and every phase, so a later failure loses nothing (hyperfine's
//! scheduler does the same per benchmark). Design.md "Data flow".
//!
//! The driver measures and writes; it does not format output (`report::output` does).

mod antagonists;
pub mod arrivals;
mod call;
mod companion;
mod conclude;
mod ctx;
pub mod datadir;
mod engine;
mod faults;
mod feed;
mod intervals;
mod live;
mod measured;
mod open_loop;
mod phase;
mod pressure;
mod progress;
mod replay;
mod reply_wait;
mod setup;
mod signals;
mod silence;
mod storage_io;
mod store_stats;
mod test_panic;
mod worker;

pub use ctx::empty_summary;
pub use progress::store_calls;
pub(crate) use setup::check_user_server;

use crate::antagonist::io::IoAntagonists;
use crate::error::{EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};
use crate::measure::clock::Clock;
use crate::measure::Metric;
use crate::plan::{PhaseKind, Plan};
use crate::report::manifest::Manifest;
use crate::report::rundir::RunDir;
use crate::report::{Outcome, PhaseSummary, RunStatus, Summary};
use crate::store::cluster::Cluster;
use crate::store::{StoreKind, StoreOptions};
use crate::telemetry::Telemetry;
use crate::workload::Op;
use datadir::DataDir;
use progress::Progress;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// Set by SIGINT/SIGTERM (`signals.rs`): signals together are one interruption; a later one
/// exits at once (130) with the run directory marked `interrupted`.
pub fn install_signals() -> Arc<AtomicBool> {
    signals::install()
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Informational lines on stderr; the points of a sweep or capacity search (quiet plans) leave
/// them out. Warnings and errors always print.
fn note(plan: &Plan, line: std::fmt::Arguments) {
    if !plan.quiet {
        errln!("{line}");
    }
}

/// Executes the plan; returns the exit code. Errors are setup failures (bad input: exit 2).
pub fn execute(plan: Plan) -> anyhow::Result<i32> {
    let mut run = Run::prepare(&plan)?;
    let exit = run.phases(None)?;
    run.finish(exit)
}

/// Executes the plan as one agent of a distributed run: `sync` is called around each phase
/// and with each interval (`dist::agent`; the driver knows nothing of the coordinator).
pub fn execute_synced(plan: Plan, sync: &mut (dyn PhaseSync + 'static)) -> anyhow::Result<i32> {
    let mut run = Run::prepare(&plan)?;
    sync.prepared(run.rundir.root());
    let exit = run.phases(Some(sync))?;
    run.finish(exit)
}

/// One closed interval, as an agent reports it.
pub struct IntervalRecord<'a> {
    pub phase: &'a str,
    pub index: usize,
    pub start_s: f64,
    pub end_s: f64,
    pub warmup: bool,
    pub stats: &'a crate::measure::Stats,
}

/// What a distributed run's agent does around the phases (`dist::agent`).
pub trait PhaseSync {
    /// The run directory exists (the manifest is written).
    fn prepared(&mut self, rundir: &std::path::Path);
    /// The store and sessions of phase `index` are open: returns when the phase may start
    /// (the coordinator's start time), or why it cannot.
    fn before_phase(&mut self, index: usize, phase: &crate::plan::PhasePlan) -> anyhow::Result<()>;
    /// An interval was written to the run directory.
    fn interval(&mut self, iv: &IntervalRecord) -> anyhow::Result<()>;
    /// The phase ended with this summary.
    fn after_phase(&mut self, index: usize, ps: &PhaseSummary);
    /// The coordinator asked the agents to stop.
    fn stop_requested(&self) -> bool;
}

/// A run in progress: what `prepare` set up and every phase shares.
struct Run<'p> {
    plan: &'p Plan,
    adapter: &'static StoreKind,
    opts: StoreOptions,
    data: DataDir,
    rundir: RunDir,
    /// A managed server or cluster: started by `prepare`, stopped by `finish` (or by Drop on
    /// an early return).
    server: Option<Arc<std::sync::Mutex<Cluster>>>,
    manifest: Manifest<'p>,
    telemetry: Option<Telemetry>,
    /// Idle power and where it came from, for the "above idle" energy figures.
    idle: Option<(f64, String)>,
    io: Option<IoAntagonists>,
    peak_gbps: Option<f64>,
    clock: Clock,
    interrupted: Arc<AtomicBool>,
    progress: Progress,
    summary: Summary,
    ycsb_texts: Vec<(String, String)>,
    /// `crate::panics::count()` when the run began: a panic since then fails the run.
    panics0: u64,
    /// `finish` wrote the final summary and manifest; otherwise `Drop` marks them failed.
    finished: bool,
    /// The live metrics endpoint's feed (`--metrics-addr`).
    live: Option<live::Live>,
}

/// Workers that never stop (`intervals::Intervals::abandon`): writes summary.json with the phase
/// so far and the manifest with its final status, then exits the process with `code`. Managed
/// servers die with kvmeter (their parent-death signal) and the temporary data directory's
/// guard removes it.
fn abandon(
    rundir: &RunDir,
    summary: &Summary,
    manifest: &Manifest,
    ps: PhaseSummary,
    code: i32,
) -> ! {
    let mut summary = summary.clone();
    if let Some(e) = &ps.error {
        errln!("error: phase {}: {e}", ps.name);
        summary
            .error
            .get_or_insert_with(|| format!("phase {}: {e}", ps.name));
    }
    summary.phases.push(ps);
    summary.status = match code {
        EXIT_INTERRUPTED => RunStatus::Interrupted,
        _ => RunStatus::Failed,
    };
    let _ = rundir.write_json("summary.json", &summary);
    write_final_manifest(rundir, manifest, summary.status);
    errln!("results: {}", rundir.root().display());
    std::process::exit(code)
}

/// The manifest with its final status, written from a copy (the caller may be unwinding or
/// about to exit, and must not fail here).
fn write_final_manifest(rundir: &RunDir, manifest: &Manifest, status: RunStatus) {
    if let Ok(mut v) = serde_json::to_value(manifest) {
        v["status"] = serde_json::to_value(status).unwrap_or_default();
        v["finished_at"] = serde_json::Value::String(now_rfc3339());
        let _ = rundir.write_json("manifest.json", &v);
    }
}

impl Drop for Run<'_> {
    /// A run that did not reach the end of `finish` (an error returned early, or a panic on
    /// the main thread) still leaves summary.json and manifest.json saying it failed, never
    /// "running".
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if self.summary.error.is_none() {
            let why = crate::panics::since(self.panics0)
                .unwrap_or_else(|| "the run ended before its results were complete".into());
            self.summary.error = Some(why);
        }
        self.summary.status = RunStatus::Failed;
        let _ = self.rundir.write_json("summary.json", &self.summary);
        write_final_manifest(&self.rundir, &self.manifest, RunStatus::Failed);
    }
}

impl Run<'_> {
    /// Runs the phases in order, writing summary.json after each; stops at the first failed
    /// or interrupted phase. Returns the exit code so far.
    fn phases(&mut self, mut sync: Option<&mut (dyn PhaseSync + 'static)>) -> anyhow::Result<i32> {
        let n = self.plan.phases.len();
        // A truncated load's line: the run phases after it read a partly loaded table.
        let mut partly_loaded: Option<String> = None;
        for (i, phase) in self.plan.phases.iter().enumerate() {
            if self.interrupted.load(Ordering::Relaxed) {
                break;
            }
            match phase.kind {
                PhaseKind::Run => {
                    if let Some(t) = &partly_loaded {
                        self.warn(format!(
                            "phase {}: reads a partly loaded table ({t}); reads of the keys not inserted answer not_found",
                            phase.name
                        ));
                    }
                }
                PhaseKind::Load | PhaseKind::Clear => partly_loaded = None,
            }
            if crate::panics::count() != self.panics0 {
                // A thread panicked between phases: `finish` fails the run with its message.
                break;
            }
            let mut ctx = ctx::PhaseCtx {
                plan: self.plan,
                adapter: self.adapter,
                opts: &self.opts,
                data: &self.data,
                rundir: &mut self.rundir,
                progress: &mut self.progress,
                clock: &self.clock,
                interrupted: &self.interrupted,
                telemetry: self.telemetry.as_ref(),
                idle: self.idle.as_ref(),
                io: self.io.as_ref(),
                peak_gbps: self.peak_gbps,
                cluster: self.server.as_ref(),
                index: i,
                phases: n,
                sync: sync.as_deref_mut(),
                summary: &self.summary,
                manifest: &self.manifest,
                live: self.live.as_ref(),
            };
            // A panic on this thread (opening the store, closing the phase) fails the phase;
            // the workers are joined by then (`phase::run_workers` catches its own).
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                phase::run(&mut ctx, phase)
            }))
            .unwrap_or_else(|p| Err(anyhow::anyhow!("{}", crate::panics::message_of(p.as_ref()))));
            let (mut ps, ycsb) = match ran {
                Ok(r) => r,
                Err(e) => (ctx::failed(phase, format!("{e:#}")), None),
            };
            if let Some(s) = sync.as_deref_mut() {
                s.after_phase(i, &ps);
            }
            if ps.outcome == Outcome::Failed {
                self.explain_server(&mut ps);
            }
            let outcome = ps.outcome;
            match phase.kind {
                PhaseKind::Load => {
                    let done = (outcome == Outcome::Completed).then_some(phase.workload.as_ref());
                    let what = done
                        .flatten()
                        .map(|w| datadir::load_description(self.adapter.name, w));
                    self.data.note_load(what.as_deref());
                }
                PhaseKind::Clear => self.data.note_load(None),
                PhaseKind::Run => {}
            }
            if let Some(t) = &ps.truncated {
                let line = format!("{}: {t}", ps.name);
                self.warn(format!("phase {}: truncated: {t}", ps.name));
                partly_loaded = Some(line);
            }
            self.record_phase(ps);
            if let Some(t) = ycsb {
                let file = format!("ycsb/{}.txt", phase.name);
                self.rundir.write_file(&file, t.as_bytes())?;
                self.ycsb_texts.push((phase.name.clone(), t));
            }
            self.rundir.write_json("summary.json", &self.summary)?;
            match outcome {
                Outcome::Failed => return Ok(EXIT_FAILED),
                Outcome::Interrupted => return Ok(EXIT_INTERRUPTED),
                Outcome::Completed | Outcome::Truncated => {}
            }
        }
        Ok(EXIT_OK)
    }

    /// A failed phase of a managed server: whether the server died, and its last output.
    fn explain_server(&mut self, ps: &mut PhaseSummary) {
        let Some(c) = self.server.as_ref() else {
            return;
        };
        let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
        let m = &mut c.members[0].server;
        let name = self.adapter.name;
        let why = match m.exited() {
            Some(status) => format!("the {name} server exited ({status})"),
            None => format!("the {name} server is still running"),
        };
        let lines = m.last_lines(10);
        errln!(
            "server: {why}; its last output ({}):\n{lines}",
            m.log.display()
        );
        if let Some(e) = ps.error.as_mut() {
            e.push_str(&format!("; {why}"));
        }
    }

    /// A warning: on stderr and in the summary's warnings.
    fn warn(&mut self, line: String) {
        errln!("WARNING: {line}");
        self.summary.warnings.push(line);
    }

    /// Adds a phase to the summary, its warning and error repeated on stderr.
    fn record_phase(&mut self, ps: PhaseSummary) {
        if let Some(w) = ps.open_loop.as_ref().and_then(|o| o.warning.as_ref()) {
            errln!("WARNING: phase {}: {w}", ps.name);
            self.summary
                .warnings
                .push(format!("phase {}: {w}", ps.name));
        }
        if let Some(w) = ps.failure_warning() {
            self.warn(w);
        }
        if let Some(e) = &ps.error {
            errln!("error: phase {}: {e}", ps.name);
            self.summary
                .error
                .get_or_insert_with(|| format!("phase {}: {e}", ps.name));
        }
        self.summary.phases.push(ps);
    }

    /// Energy around each fault, from the power samples telemetry.csv now holds in full.
    fn fault_energy(&mut self) {
        use crate::report::rundata::{power_samples, Table};
        let Ok(Some(t)) = Table::read(&self.rundir.root().join("telemetry.csv")) else {
            return;
        };
        let interval = self.plan.telemetry_interval.as_secs_f64();
        for ps in self
            .summary
            .phases
            .iter_mut()
            .filter(|p| !p.faults.is_empty())
        {
            let samples = power_samples(&t, &ps.name);
            crate::fault::recovery::fill_energy(&mut ps.faults, &samples, interval);
        }
    }

    /// Stops telemetry and the server, writes the final summary and manifest, and shows the
    /// report. Returns the exit code.
    fn finish(mut self, mut exit: i32) -> anyhow::Result<i32> {
        let plan = self.plan;
        test_panic::here(test_panic::Where::Finish);
        if self.interrupted.load(Ordering::Relaxed) && exit == EXIT_OK {
            exit = EXIT_INTERRUPTED;
        }
        self.progress.finish();
        if let Some(t) = self.telemetry.take() {
            t.stop();
            self.fault_energy();
        }
        if let Some(c) = self.server.take() {
            let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
            // CPU seconds per member, read before they stop.
            if let Some(s) = self.manifest.store.server.as_mut() {
                s.members = c.manifest();
            }
            let name = self.adapter.name;
            for (member, how) in c.stop() {
                note(plan, format_args!("server: {name} {member} {how}"));
            }
        }
        if let Some(p) = crate::panics::since(self.panics0) {
            // A thread panicked outside any phase's watch (between phases, while stopping
            // telemetry): the run did not go as planned.
            if exit == EXIT_OK {
                exit = EXIT_FAILED;
            }
            self.summary.error.get_or_insert(p);
        }
        self.summary.note_not_run(plan);
        self.summary.status = match exit {
            EXIT_OK => RunStatus::Completed,
            EXIT_INTERRUPTED => RunStatus::Interrupted,
            _ => RunStatus::Failed,
        };
        self.rundir.write_json("summary.json", &self.summary)?;
        self.manifest.status = self.summary.status;
        self.manifest.finished_at = Some(now_rfc3339());
        self.rundir.write_json("manifest.json", &self.manifest)?;
        self.finished = true;
        crate::store::plugin::crash::disarm();
        // The report is a view of the files just written; failing to make it fails nothing.
        if let Err(e) = crate::report::html::write(self.rundir.root()) {
            errln!("warning: report.html was not written: {e:#}");
        }
        if !plan.quiet {
            let text = crate::report::output::render(plan.format, &self.summary, &self.ycsb_texts)?;
            out!("{text}");
        }
        note(
            plan,
            format_args!("results: {}", self.rundir.root().display()),
        );
        if exit == EXIT_INTERRUPTED {
            errln!("interrupted: completed phases and intervals are saved");
        }
        Ok(exit)
    }
}

/// Metrics a phase records, so their histograms exist before the first operation.
fn metrics_for(load: bool, ops: &[Op], verify: bool) -> Vec<Metric> {
    let mut m = vec![Metric::Cleanup];
    if load {
        m.push(Metric::Insert);
    }
    for op in ops {
        match op {
            Op::Read => m.push(Metric::Read),
            Op::Update => m.push(Metric::Update),
            Op::Insert => m.push(Metric::Insert),
            Op::Scan => m.push(Metric::Scan),
            Op::ReadModifyWrite => {
                m.extend([Metric::Read, Metric::Update, Metric::ReadModifyWrite])
            }
        }
    }
    if verify {
        m.push(Metric::Verify);
    }
    m.sort();
    m.dedup();
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sets() {
        let m = metrics_for(false, &[Op::Read, Op::ReadModifyWrite], true);
        assert_eq!(
            m,
            [
                Metric::Read,
                Metric::Update,
                Metric::ReadModifyWrite,
                Metric::Verify,
                Metric::Cleanup
            ]
        );
    }
}
