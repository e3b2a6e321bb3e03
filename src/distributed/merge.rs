//! The merged run directory of a distributed run, written the same way live (the coordinator,
//! interval by interval as the agents post them) and offline (`kvmeter dist merge`, from the
//! agents' run directories): histograms are added, never percentiles averaged; counts and
//! bytes summed; intervals sit on one grid from each phase's T0 and say how many agents they
//! merge. The result is an ordinary run directory (summary.json, intervals.csv with an
//! `agents` column, latency/*.hlog, ycsb/, report.html) plus dist.json: the agents, their
//! start lateness, losses, the clock state and the bytes sent to etcd.

use super::{Host, IntervalPost, PhaseDone};
use crate::measure::Stats;
use crate::plan::Plan;
use crate::report::manifest::{shown_options, DataManifest, Manifest, Measurement, StoreManifest};
use crate::report::rundir::RunDir;
use crate::report::storage_io::StorageIo;
use crate::report::{Outcome, RunStatus, Summary};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod decode;
mod figures;
pub mod sum;
pub use figures::{MergeSummary, Spread};

/// dist.json.
#[derive(Serialize, Debug, Default)]
pub struct DistInfo {
    pub job: String,
    /// Agents the run was planned with.
    pub agents: usize,
    pub plan_hash: String,
    /// "coordinator" (live) or "dist merge" (offline, from the agents' directories).
    pub merged_by: String,
    pub coordinator: Option<Host>,
    /// Each agent: host, pid, clock, where its own run directory is.
    pub agent_hosts: BTreeMap<usize, AgentInfo>,
    pub phases: Vec<PhaseDist>,
    pub lost: Vec<Loss>,
    pub degraded: bool,
    /// Warnings about start times (clock synchronisation, lateness).
    pub warnings: Vec<String>,
    /// Mean bytes of one agent's interval report (JSON, compressed histograms).
    pub bytes_per_interval_report: Option<f64>,
    /// Where the agents' reports went: "direct to IP:PORT" (the coordinator's channel) or
    /// "etcd".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reports: Option<String>,
    /// Agents that could not reach the coordinator's address, or whose channel to it failed,
    /// and posted (the rest) through etcd.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reports_via_etcd: Vec<usize>,
    /// What merging cost (the live coordinator only): rows of dist/merge.csv, summarised.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge: Option<MergeSummary>,
}

#[derive(Serialize, Debug, Clone)]
pub struct AgentInfo {
    pub host: Host,
    pub placed_by: String,
    pub threads: usize,
    pub run_dir: Option<String>,
}

#[derive(Serialize, Debug, Clone)]
pub struct PhaseDist {
    pub phase: String,
    pub t0: String,
    /// How late each agent's workers started after T0 (ms).
    pub late_ms: BTreeMap<usize, f64>,
    /// Latest start minus earliest (ms).
    pub start_skew_ms: f64,
    pub intervals: usize,
}

#[derive(Serialize, Debug, Clone)]
pub struct Loss {
    pub agent: usize,
    pub phase: String,
    /// Seconds after the phase's T0 when its lease was seen gone.
    pub at_s: f64,
    /// Its last interval merged (none: it reported none in this phase).
    pub last_interval: Option<usize>,
}

struct PhaseState {
    index: usize,
    name: String,
    t0_unix_ns: u64,
    measured: Stats,
    intervals: usize,
    /// Store calls of the warm-up's merged intervals (the storage bytes per operation count
    /// them: the kernel's bytes cover the whole phase).
    warmup_ops: u64,
}

/// The `agent` label of the coordinator's merged series.
pub const MERGED: &str = "merged";

pub struct Merger {
    rundir: RunDir,
    pub(super) plan: Plan,
    summary: Summary,
    /// The coordinator's live endpoint (`--metrics-addr`): each merged interval, labelled
    /// `agent="merged"` beside the agents' own series.
    live: Option<(std::sync::Arc<crate::metrics::Exporter>, String)>,
    ycsb_texts: Vec<(String, String)>,
    cur: Option<PhaseState>,
    started_at: String,
    /// dist/merge.csv, when the coordinator asked for it (`record_merges`).
    figures: Option<figures::MergeLog>,
    pub info: DistInfo,
}

impl Merger {
    /// Creates the merged run directory (refuses one that exists with anything in it).
    pub fn create(plan: Plan, info: DistInfo) -> Result<Merger, crate::error::UsageError> {
        let rundir = RunDir::create_merged(&plan.out)?;
        let summary = Summary::running(&plan);
        let live = crate::metrics::current().map(|e| (e, crate::metrics::run_label(rundir.root())));
        let m = Merger {
            rundir,
            plan,
            summary,
            live,
            ycsb_texts: vec![],
            cur: None,
            started_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            figures: None,
            info,
        };
        m.write_manifest(RunStatus::Running, None)
            .map_err(|e| crate::error::UsageError::new(format!("{e:#}")))?;
        Ok(m)
    }

    pub fn root(&self) -> &std::path::Path {
        self.rundir.root()
    }

    /// From now on every merged interval is timed and written to dist/merge.csv (the live
    /// coordinator: see `figures`).
    pub fn record_merges(&mut self) -> anyhow::Result<()> {
        self.rundir
            .write_file(figures::FILE, figures::MergeLog::header().as_bytes())?;
        self.figures = Some(figures::MergeLog::open(self.rundir.root())?);
        Ok(())
    }

    fn write_manifest(&self, status: RunStatus, finished: Option<String>) -> anyhow::Result<()> {
        let adapter = crate::store::find(&self.plan.store).expect("validated store");
        let m = Manifest {
            schema: crate::report::MANIFEST_SCHEMA,
            kvmeter_version: env!("CARGO_PKG_VERSION"),
            git_revision: env!("KVMETER_GIT_REV"),
            command_line: std::env::args().collect(),
            started_at: self.started_at.clone(),
            finished_at: finished,
            status,
            seed: self.plan.seed,
            store: StoreManifest {
                name: adapter.name.into(),
                version: crate::store::version_of(adapter),
                options: shown_options(&self.plan.store_options.applied()),
                capabilities: adapter.capabilities,
                server: None,
            },
            data_dir: DataManifest {
                path: "each agent's own (dist.json names the agents' run directories)".into(),
                temporary: self.plan.data_dir.is_none(),
                reused: false,
                placement: crate::machine::placement(self.rundir.root()),
            },
            machine: crate::machine::machine(),
            calibration: None,
            calibration_note: "a distributed run: each agent's manifest has its own".into(),
            measurement: Measurement::new(
                "each agent's own (see the agents' manifests); intervals merged on one grid from each phase's start time".into(),
                self.plan.interval.as_secs_f64(),
            ),
            plan: &self.plan,
        };
        self.rundir.write_json("manifest.json", &m)
    }

    /// Starts phase `index` (T0 in Unix ns).
    pub fn begin_phase(&mut self, index: usize, t0_unix_ns: u64) {
        let name = self.plan.phases[index].name.clone();
        self.cur = Some(PhaseState {
            index,
            name,
            t0_unix_ns,
            measured: Stats::new(&[], false),
            intervals: 0,
            warmup_ops: 0,
        });
    }

    /// Merges interval `posts[..].index` of the current phase, one post per agent that has it;
    /// timed into dist/merge.csv when `record_merges` asked for it.
    pub fn interval(&mut self, posts: &[&IntervalPost]) -> anyhow::Result<()> {
        let began = Instant::now();
        let Some(end_s) = self.merge_interval(posts)? else {
            return Ok(());
        };
        let merge_ms = began.elapsed().as_secs_f64() * 1e3;
        let (Some(log), Some(st)) = (self.figures.as_mut(), self.cur.as_ref()) else {
            return Ok(());
        };
        let due_ns = st.t0_unix_ns as f64 + end_s * 1e9;
        log.row(&figures::Row {
            phase: &st.name,
            interval: posts[0].index,
            reports: posts.len(),
            merge_ms,
            lateness_ms: (super::unix_ns() as f64 - due_ns) / 1e6,
        })?;
        Ok(())
    }

    /// The merge itself; the interval's end on the phase's grid (s), `None` when no post.
    fn merge_interval(&mut self, posts: &[&IntervalPost]) -> anyhow::Result<Option<f64>> {
        let st = self.cur.as_mut().expect("begin_phase first");
        let Some(first) = posts.first() else {
            return Ok(None);
        };
        let acc = sum::stats(posts, sum::threads())?;
        let start = posts
            .iter()
            .map(|p| p.start_s)
            .fold(f64::INFINITY, f64::min);
        let end = posts.iter().map(|p| p.end_s).fold(0.0, f64::max);
        self.rundir.set_agents(posts.len());
        self.rundir
            .append_interval(&st.name, first.index, start, end, first.warmup, &acc, None)?;
        let t0 = UNIX_EPOCH + Duration::from_nanos(st.t0_unix_ns);
        self.rundir.log_histograms(&st.name, t0, start, end, &acc)?;
        if let Some((e, run)) = &self.live {
            let key = crate::metrics::SeriesKey {
                run: run.clone(),
                phase: st.name.clone(),
                store: self.plan.store.clone(),
                agent: MERGED.into(),
            };
            let iv = crate::metrics::Interval {
                stats: &acc,
                seconds: end - start,
                warmup: first.warmup,
                offered_ops_per_s: None,
                behind_s: None,
            };
            e.interval(&key, &iv);
        }
        if first.warmup {
            st.warmup_ops += crate::driver::store_calls(&acc);
        } else {
            st.measured.add(&acc);
        }
        st.intervals += 1;
        Ok(Some(end))
    }

    /// Ends the current phase with the agents' own ends (a lost agent has none); writes
    /// summary.json.
    pub fn end_phase(&mut self, dones: &[PhaseDone]) -> anyhow::Result<Outcome> {
        let st = self.cur.take().expect("begin_phase first");
        let phase = &self.plan.phases[st.index];
        let mut ps = crate::driver::empty_summary(phase);
        ps.threads = dones.iter().map(|d| d.threads).sum();
        ps.started_at = super::rfc3339_of_unix_ns(st.t0_unix_ns);
        ps.wall_seconds = dones.iter().map(|d| d.wall_seconds).fold(0.0, f64::max);
        ps.measured_seconds = dones.iter().map(|d| d.measured_seconds).fold(0.0, f64::max);
        ps.intervals = st.intervals;
        ps.fill(&st.measured);
        // A server every agent samples is one store: its figures are one agent's, not a sum.
        let shared = crate::store::registry::find_built_in(&self.plan.store)
            .is_some_and(|k| k.server.is_some());
        let each: Vec<(usize, &crate::report::store_stats::StoreStats)> = dones
            .iter()
            .filter_map(|d| Some((d.agent, d.store_stats.as_ref()?)))
            .collect();
        ps.store_stats = crate::report::store_stats::StoreStats::merged(&each, shared);
        let io: Vec<_> = dones
            .iter()
            .filter_map(|d| Some((d.agent, d.storage_io.as_ref()?)))
            .collect();
        let merged = StorageIo::merged(&io, shared, ps.store_stats.as_ref());
        ps.storage_io = merged;
        ps.warmup_operations = st.warmup_ops;
        ps.per_op = crate::report::per_op::derive(&ps).map(|mut c| {
            // The agents' telemetry is not merged (each agent's run directory has its own):
            // the storage bytes per operation are the merged phase's, the CPU is not here.
            c.unavailable.insert(
                "cpu_us".into(),
                "unavailable: a merged phase has no telemetry; each agent's run directory has its own".into(),
            );
            c
        });
        let failed = dones.iter().find(|d| d.outcome == "failed");
        let interrupted = dones.iter().any(|d| d.outcome == "interrupted");
        if let Some(f) = failed {
            ps.outcome = Outcome::Failed;
            ps.error = Some(format!(
                "agent {}: {}",
                f.agent,
                f.error.clone().unwrap_or_default()
            ));
        } else if interrupted {
            ps.outcome = Outcome::Interrupted;
        }
        for d in dones {
            if let (Some(a), Some(dir)) = (self.info.agent_hosts.get_mut(&d.agent), &d.run_dir) {
                a.run_dir.get_or_insert_with(|| dir.clone());
            }
        }
        let late: BTreeMap<usize, f64> = dones.iter().map(|d| (d.agent, d.late_ms)).collect();
        let skew = if late.is_empty() {
            0.0
        } else {
            late.values().cloned().fold(f64::MIN, f64::max)
                - late.values().cloned().fold(f64::MAX, f64::min)
        };
        self.info.phases.push(PhaseDist {
            phase: st.name.clone(),
            t0: super::rfc3339_of_unix_ns(st.t0_unix_ns),
            late_ms: late,
            start_skew_ms: skew,
            intervals: st.intervals,
        });
        let text = crate::report::ycsb::report(
            &st.measured,
            (ps.measured_seconds * 1000.0) as u64,
            st.measured.transactions(),
            &self.plan.ycsb_percentiles,
        );
        self.rundir
            .write_file(&format!("ycsb/{}.txt", st.name), text.as_bytes())?;
        self.ycsb_texts.push((st.name.clone(), text));
        if let Some(e) = &ps.error {
            self.summary
                .error
                .get_or_insert_with(|| format!("phase {}: {e}", st.name));
        }
        let outcome = ps.outcome;
        self.summary.phases.push(ps);
        self.rundir.write_json("summary.json", &self.summary)?;
        self.info.merge = self.figures.as_ref().map(|f| f.summary());
        self.rundir.write_json("dist.json", &self.info)?;
        Ok(outcome)
    }

    /// Writes the final summary, manifest, dist.json and report.html; prints the report as a
    /// run does. Returns the run's status.
    pub fn finish(mut self, mut status: RunStatus, quiet: bool) -> anyhow::Result<RunStatus> {
        if self.info.degraded && status == RunStatus::Completed {
            status = RunStatus::Degraded;
        }
        for w in &self.info.warnings {
            self.summary.warnings.push(w.clone());
        }
        for l in &self.info.lost {
            self.summary.warnings.push(format!(
                "agent {} lost {:.1} s into phase {} (its lease expired); later intervals merge the agents left",
                l.agent, l.at_s, l.phase
            ));
        }
        self.summary.status = status;
        self.summary.note_not_run(&self.plan);
        self.rundir.write_json("summary.json", &self.summary)?;
        self.info.merge = self.figures.as_ref().map(|f| f.summary());
        self.rundir.write_json("dist.json", &self.info)?;
        self.write_manifest(
            status,
            Some(humantime::format_rfc3339_millis(SystemTime::now()).to_string()),
        )?;
        if let Err(e) = crate::report::html::write(self.rundir.root()) {
            errln!("warning: report.html was not written: {e:#}");
        }
        if !quiet {
            let text =
                crate::report::output::render(self.plan.format, &self.summary, &self.ycsb_texts)?;
            out!("{text}");
        }
        Ok(status)
    }
}

impl Merger {
    /// The run's error (an abort), kept when a phase has none of its own.
    pub fn set_error(&mut self, e: String) {
        self.summary.error.get_or_insert(e);
    }
}

/// The run's status when a phase's outcome ends it (as a single-host run stops).
pub fn stopped_by(outcome: Outcome) -> Option<RunStatus> {
    match outcome {
        Outcome::Completed | Outcome::Truncated => None,
        Outcome::Interrupted => Some(RunStatus::Interrupted),
        Outcome::Failed => Some(RunStatus::Failed),
    }
}

/// A merged run's exit code: a degraded run is still a result (0).
pub fn exit_code(status: RunStatus) -> i32 {
    match status {
        RunStatus::Completed | RunStatus::Degraded => crate::error::EXIT_OK,
        RunStatus::Interrupted => crate::error::EXIT_INTERRUPTED,
        _ => crate::error::EXIT_FAILED,
    }
}
