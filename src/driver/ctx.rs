//! What a phase needs from its run (`PhaseCtx`), and a phase's summary before it runs: shared
//! by the phase's start (`phase.rs`), its interval loop (`intervals.rs`) and its end
//! (`conclude.rs`), so the three read one way — ctx, loop, conclude — and none imports another
//! backwards.

use super::datadir::DataDir;
use super::now_rfc3339;
use super::progress::Progress;
use crate::antagonist::io::IoAntagonists;
use crate::measure::clock::Clock;
use crate::plan::{PhasePlan, Plan};
use crate::report::rundir::RunDir;
use crate::report::{self, Outcome, PhaseSummary};
use crate::store::{StoreKind, StoreOptions};
use crate::telemetry::Telemetry;
use std::sync::atomic::AtomicBool;

/// What a phase needs from its run.
pub(super) struct PhaseCtx<'a> {
    pub plan: &'a Plan,
    pub adapter: &'static StoreKind,
    pub opts: &'a StoreOptions,
    pub data: &'a DataDir,
    pub rundir: &'a mut RunDir,
    pub progress: &'a mut Progress,
    pub clock: &'a Clock,
    pub interrupted: &'a AtomicBool,
    pub telemetry: Option<&'a Telemetry>,
    pub idle: Option<&'a (f64, String)>,
    pub io: Option<&'a IoAntagonists>,
    pub peak_gbps: Option<f64>,
    /// The managed server or cluster (faults act on it).
    pub cluster: Option<&'a std::sync::Arc<std::sync::Mutex<crate::store::cluster::Cluster>>>,
    /// This phase's position, for progress lines.
    pub index: usize,
    pub phases: usize,
    /// A distributed run's agent: start on the coordinator's time, report each interval.
    pub sync: Option<&'a mut (dyn super::PhaseSync + 'static)>,
    /// The run's summary and manifest so far, for `super::abandon` (workers that never stop).
    pub summary: &'a report::Summary,
    pub manifest: &'a crate::report::manifest::Manifest<'a>,
    /// The live metrics endpoint's feed (`--metrics-addr`).
    pub live: Option<&'a super::live::Live>,
}

/// A phase that ended before it could run, with why.
pub(super) fn failed(phase: &PhasePlan, error: String) -> PhaseSummary {
    let mut ps = empty_summary(phase);
    ps.outcome = Outcome::Failed;
    ps.error = Some(error);
    ps
}

pub fn empty_summary(phase: &PhasePlan) -> PhaseSummary {
    PhaseSummary {
        name: phase.name.clone(),
        kind: phase.kind,
        workload_files: phase.workload_files.clone(),
        threads: phase.threads,
        outcome: Outcome::Completed,
        error: None,
        started_at: now_rfc3339(),
        wall_seconds: 0.0,
        warmup_seconds: phase.warmup.as_secs_f64(),
        warmup_operations: 0,
        measured_seconds: 0.0,
        window_note: None,
        truncated: None,
        target_ops_per_s: phase.target,
        operations: 0,
        errors: 0,
        throughput_ops_per_s: 0.0,
        throughput_mb_per_s: 0.0,
        intervals: 0,
        ops: Default::default(),
        not_applicable: vec![],
        error_samples: vec![],
        telemetry: None,
        energy: None,
        pressure: None,
        antagonists: vec![],
        all_ops: None,
        open_loop: None,
        faults: vec![],
        fault_events: vec![],
        sent_to: Default::default(),
        kvmeter_cpu: None,
        engine: None,
        store_stats: None,
        storage_io: None,
        per_op: None,
    }
}
