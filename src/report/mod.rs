//! Results: the summary model (summary.json), and its views — the terminal table, YCSB's text
//! report, JSON. Every figure here is computed from the measured histograms and counters; the
//! views never recompute a measurement.

mod atomic;
pub mod chart;
pub mod compare;
mod compare_match;
mod compare_page;
pub mod cost;
pub mod csv;
pub mod current;
pub mod durability_files;
pub mod experiment;
pub mod fault_files;
pub mod html;
pub mod javafmt;
pub mod manifest;
pub mod names;
pub mod on_disk;
pub mod output;
pub mod per_op;
mod phase_notes;
pub mod pressure;
pub mod profile;
pub mod rundata;
pub mod rundir;
pub mod stats;
pub mod storage_io;
pub mod store_events;
pub mod store_stats;
pub mod table;
pub mod tidy;
pub mod trace_stats;
pub mod ycsb;

pub use pressure::{PressureResult, PressureStep, PressureStore};

use crate::measure::{percentile, status_slot_name, Metric, OpStats, Stats, STATUS_SLOTS};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SUMMARY_SCHEMA: &str = "kvmeter-summary/1";
pub const MANIFEST_SCHEMA: &str = "kvmeter-manifest/1";

/// Latency figures in microseconds (from nanosecond histograms, so sub-µs values keep their
/// fraction). With no samples (`count` 0) every figure is `None` (null in summary.json, "—"
/// on the terminal): a latency nothing was measured for has no value, never 0.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub min: Option<f64>,
    pub avg: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub p99_9: Option<f64>,
    pub p99_99: Option<f64>,
    pub max: Option<f64>,
}

impl Latency {
    pub fn from_ns(h: &Histogram<u64>) -> Self {
        let some = !h.is_empty();
        let us = |ns: u64| some.then_some(ns as f64 / 1000.0);
        Latency {
            count: h.len(),
            min: us(percentile::min(h)),
            avg: some.then(|| percentile::mean(h) / 1000.0),
            p50: us(percentile::value_at(h, 50.0)),
            p90: us(percentile::value_at(h, 90.0)),
            p99: us(percentile::value_at(h, 99.0)),
            p99_9: us(percentile::value_at(h, 99.9)),
            p99_99: us(percentile::value_at(h, 99.99)),
            max: us(percentile::max(h)),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpSummary {
    /// All operations, whatever their status.
    pub count: u64,
    pub ok: u64,
    /// Failed operations by kind (not_found, io, timeout, ...); only kinds that occurred.
    /// A miss (`not_found`) is listed here too, and counted apart in `misses`.
    pub errors: BTreeMap<String, u64>,
    /// Calls answered with the key's value (`ok`) and calls answered "no such key"
    /// (`not_found`): for a cache both are answers. Absent from an older kvmeter's summary.
    #[serde(default)]
    pub hits: u64,
    #[serde(default)]
    pub misses: u64,
    /// hits / (hits + misses): of a lookup (READ, SCAN, READ-MODIFY-WRITE), or of a write
    /// some of whose calls found no key; null otherwise (a write's "hits" are merely its
    /// successes), and when there was neither.
    #[serde(default)]
    pub hit_ratio: Option<f64>,
    pub ops_per_s: f64,
    pub mb_per_s: f64,
    /// Service time of successful operations (hits).
    pub latency_us: Latency,
    /// Service time of misses, on their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed_latency_us: Option<Latency>,
    /// Service time of the calls that failed for any reason but a miss.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_latency_us: Option<Latency>,
    /// From the intended start time (coordinated omission corrected); paced runs only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intended_latency_us: Option<Latency>,
}

/// Slot of `not_found` in `OpStats::statuses`.
const MISS_SLOT: usize = 1;

impl OpSummary {
    /// The summary of operation `name`: its hit ratio only where one means something
    /// (`measure::has_hit_ratio`).
    pub fn of(name: &str, o: &OpStats, seconds: f64) -> Self {
        let mut s = OpSummary::from_stats(o, seconds);
        if !crate::measure::has_hit_ratio(name, s.misses) {
            s.hit_ratio = None;
        }
        s
    }

    pub fn from_stats(o: &OpStats, seconds: f64) -> Self {
        let errors = (1..STATUS_SLOTS)
            .filter(|&i| o.statuses[i] > 0)
            .map(|i| (status_slot_name(i).to_string(), o.statuses[i]))
            .collect();
        let per_s = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
        let (hits, misses) = (o.statuses[0], o.statuses[MISS_SLOT]);
        let missed = o.missed.as_ref().filter(|h| !h.is_empty());
        // The failures other than misses: `failed` holds both (YCSB's NAME-FAILED).
        let failed = o.failed.as_ref().filter(|h| !h.is_empty()).and_then(|f| {
            let mut f = f.clone();
            if let Some(m) = missed {
                f.subtract(m).expect("misses are among the failures");
            }
            (!f.is_empty()).then_some(f)
        });
        OpSummary {
            count: o.count(),
            ok: o.statuses[0],
            errors,
            hits,
            misses,
            hit_ratio: (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
            ops_per_s: per_s(o.count() as f64),
            mb_per_s: per_s(o.bytes as f64) / 1e6,
            latency_us: Latency::from_ns(&o.ok),
            missed_latency_us: missed.map(Latency::from_ns),
            failed_latency_us: failed.as_ref().map(Latency::from_ns),
            intended_latency_us: o.intended.as_ref().map(Latency::from_ns),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorSample {
    pub metric: String,
    pub kind: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseSummary {
    pub name: String,
    pub kind: crate::plan::PhaseKind,
    pub workload_files: Vec<String>,
    pub threads: usize,
    pub outcome: Outcome,
    pub error: Option<String>,
    pub started_at: String,
    pub wall_seconds: f64,
    pub warmup_seconds: f64,
    /// The window the figures below cover: from the end of warm-up to the last operation.
    pub measured_seconds: f64,
    /// Store operations of the warm-up (not in `operations`): the store's counters and the
    /// kernel's storage bytes cover the whole phase, so their figures per operation divide by
    /// `operations + warmup_operations`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warmup_operations: u64,
    /// Why `measured_seconds` is not the plan's window (`--duration` less warm-up): stopped
    /// early, workers abandoned, or a call in flight at the deadline returned late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_note: Option<String>,
    /// A truncated load (outcome `truncated`): how many records it inserted of how many, and
    /// what stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<String>,
    pub target_ops_per_s: Option<f64>,
    /// Store operations issued (READ, UPDATE, INSERT, SCAN, DELETE; an RMW counts as its
    /// read and its update), measured window only.
    pub operations: u64,
    pub errors: u64,
    pub throughput_ops_per_s: f64,
    pub throughput_mb_per_s: f64,
    pub intervals: usize,
    pub ops: BTreeMap<String, OpSummary>,
    /// Operations the workload asks for that this store cannot do (shown as N/A).
    pub not_applicable: Vec<String>,
    pub error_samples: Vec<ErrorSample>,
    /// CPU, disk, process, memory and pressure over the measured window (null when off).
    pub telemetry: Option<crate::telemetry::PhaseTelemetry>,
    /// Energy figures of the measured window, with their source (null when no source).
    pub energy: Option<Energy>,
    /// The pressure scale at this phase's block size (`kvmeter pressure` only).
    pub pressure: Option<PressureResult>,
    /// Antagonists that ran during the phase (`--antagonist`), with the load they achieved.
    pub antagonists: Vec<AntagonistReport>,
    /// All store calls together (READ, UPDATE, INSERT, SCAN, DELETE; N/A ones left out): the
    /// latency an SLO over the whole mix is judged on (`kvmeter capacity`).
    #[serde(default)]
    pub all_ops: Option<AllOps>,
    /// Open-loop phases (`--rate`): offered against achieved load and the sender's lag.
    #[serde(default)]
    pub open_loop: Option<OpenLoopSummary>,
    /// What each `--fault` did and what clients lived through around it (papers/002).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<crate::fault::recovery::FaultReport>,
    /// Every fault event (also in events.csv).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fault_events: Vec<crate::fault::schedule::Event>,
    /// Requests sent by member of a cluster (the leader etcd clients followed, the primary
    /// after a failover, each Redis Cluster master).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sent_to: std::collections::BTreeMap<String, u64>,
    /// CPU time of kvmeter's own process (all its threads, an embedded store's included) over
    /// the measured window, per operation: what the harness costs next to the store.
    #[serde(default)]
    pub kvmeter_cpu: Option<crate::measure::cpu::KvmeterCpu>,
    /// The event-driven engine's phase (`--connections`): its shape and what it counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineSummary>,
    /// What the store said about itself over the phase (its own statistics; issue 43).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_stats: Option<store_stats::StoreStats>,
    /// The phase's storage I/O and amplification: the kernel's bytes over the store's user
    /// bytes (issue 43 item 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_io: Option<storage_io::StorageIo>,
    /// Costs per operation: CPU by thread group, context switches, storage bytes, cycles
    /// (issue 44 item 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_op: Option<per_op::PerOp>,
}

/// What the event-driven engine did in one phase.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct EngineSummary {
    pub connections: usize,
    /// Requests in flight per connection (`--depth`).
    pub depth: usize,
    pub event_loops: usize,
    /// Open loop: what an arrival does when its loop's connections are full.
    pub when_full: String,
    /// The open-file limit the run had (raised to what it needs, up to the hard limit).
    pub fd_limit: u64,
    /// Connections opened again after an error, a close by the server or a timeout.
    pub reconnects: u64,
    /// Redis Cluster: requests sent again where a MOVED reply said, and (after ASKING) where
    /// an ASK reply said; each counted once, as an operation, with its whole time.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub moved: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub asked: u64,
    /// Open-loop arrivals that waited for a free slot, that were skipped, and the longest wait
    /// line (arrivals) in any loop.
    pub queued: u64,
    pub skipped: u64,
    pub max_backlog: u64,
    /// Requests in flight when the phase was stopped (Ctrl-C, a failure): not counted.
    pub abandoned: u64,
    /// How each connection's operation stream is seeded.
    pub streams: String,
    /// The probe stream (`--probe-rate`), measured apart from the load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeSummary>,
}

/// A low-rate open-loop stream on connections of its own, beside the load (mutilate's
/// measurement client): the latency a light client sees while the load runs.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct ProbeSummary {
    /// Its Poisson rate, ops/s.
    pub rate: f64,
    pub connections: usize,
    pub ops: BTreeMap<String, OpSummary>,
}

/// How a phase ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Completed,
    /// A load that inserted fewer records than planned without being interrupted or failing:
    /// stopped by the bound the user gave it, or inserts that failed. The run goes on (its
    /// run phases read a partly loaded table, and say so); `PhaseSummary::truncated` says why.
    Truncated,
    Interrupted,
    Failed,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Truncated => "truncated",
            Outcome::Interrupted => "interrupted",
            Outcome::Failed => "failed",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a run stands: `running` until it ends (a run directory left `running` was cut short
/// by a crash or SIGKILL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Completed,
    /// A distributed run that lost an agent and went on without it (docs/distributed.md).
    Degraded,
    Interrupted,
    Failed,
}

impl RunStatus {
    pub fn name(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Degraded => "degraded",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Failed => "failed",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An `--antagonist` that ran during a phase, with the load it achieved.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum AntagonistReport {
    Io(IoAntagonistReport),
    Membw {
        report: crate::antagonist::MemBwReport,
    },
    Cpu {
        report: crate::antagonist::CpuReport,
    },
}

/// Compact JSON with its keys in alphabetical order (through `serde_json::Value`), as the
/// terminal table shows it.
impl std::fmt::Display for AntagonistReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = serde_json::to_value(self).unwrap_or_default();
        f.write_str(&v.to_string())
    }
}

/// What a group of I/O antagonist instances achieved over a phase.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IoAntagonistReport {
    pub achieved_mb_per_s: f64,
    pub achieved_read_iops: f64,
    pub achieved_write_iops: f64,
    pub avg_latency_us: f64,
    pub block_size: usize,
    pub error: Option<String>,
    pub instances: usize,
    pub random_ratio: f64,
    pub write_ratio: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AllOps {
    pub count: u64,
    /// Service time of successful store calls.
    pub latency_us: Latency,
    /// From the intended start (paced and open-loop phases).
    pub intended_latency_us: Option<Latency>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenLoopSummary {
    /// fixed or poisson.
    pub arrival: String,
    /// The schedule's rate (Poisson: its mean rate).
    pub offered_ops_per_s: f64,
    /// Transactions completed per second in the measured window (an RMW counts once, as a
    /// schedule arrival does).
    pub achieved_ops_per_s: f64,
    /// achieved / offered.
    pub achieved_ratio: f64,
    /// Workers serving the schedule: at most this many requests in flight.
    pub workers: usize,
    /// How late operations were sent after their intended start (0: on time): how far the
    /// schedule was behind, per send — the one measure of "behind" the verdict, the warning,
    /// the table and report.html use (issue 40 item 8).
    pub send_lag_us: Latency,
    /// The largest backlog at an interval boundary: how late the oldest due, unsent arrival
    /// already was (its send lag so far; intervals.csv's `behind_ms`). At most the send lag's
    /// max; the verdict reads the send lag.
    pub max_behind_ms: f64,
    /// Whether the schedule was served: achieved ≥ 99 % of offered (Poisson: less the
    /// process's own 3-sigma spread) and sends late by at most `LATE_SENDS_P99_US` at p99
    /// (and, with the event-driven engine, sends that followed the arrival process).
    pub kept_up: bool,
    /// Why not, loudly (also in the summary's warnings and on stderr).
    pub warning: Option<String>,
    /// The event-driven engine's check of the process its sends made (Poisson, or evenly
    /// spaced); `None` without the engine or with too short a window to judge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrivals_check: Option<ArrivalsCheck>,
}

/// Sends later than this at p99 (µs) mean an open-loop schedule fell behind: one bound for the
/// worker pool and the event-driven engine.
pub const LATE_SENDS_P99_US: f64 = 100_000.0;

impl OpenLoopSummary {
    /// Why the schedule was not kept, short, with the numbers the verdict used (`fmt_us`
    /// writes a µs figure as the line around it does); empty when it was kept.
    pub fn not_kept_because(&self, fmt_us: &dyn Fn(f64) -> String) -> Vec<String> {
        if self.kept_up {
            return vec![];
        }
        let mut why = vec![];
        if let Some(lag) = self.send_lag_us.p99.filter(|l| *l > LATE_SENDS_P99_US) {
            why.push(format!(
                "sends late by p99 {} µs, over {} µs",
                fmt_us(lag),
                fmt_us(LATE_SENDS_P99_US)
            ));
        }
        if self.arrivals_check.as_ref().is_some_and(|c| !c.passed) {
            why.push(format!("sends did not follow the {} process", self.arrival));
        }
        if why.is_empty() || self.achieved_ratio < 0.99 {
            why.push(format!(
                "achieved {:.1} % of offered",
                self.achieved_ratio * 100.0
            ));
        }
        why
    }
}

/// Whether the sends followed the arrival process asked for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArrivalsCheck {
    pub statistic: String,
    pub window_ms: f64,
    pub windows: usize,
    pub dispersion: f64,
    /// What the process asked for gives (1: Poisson; 0: fixed), and how far off still passes.
    pub expected: f64,
    pub tolerance: f64,
    pub passed: bool,
}

/// Energy of a phase's measured window. `estimate` true means the utilisation model: these
/// are then estimates, never measurements.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Energy {
    pub source: String,
    pub scope: String,
    pub estimate: bool,
    pub energy_j: f64,
    pub avg_w: f64,
    pub peak_w: f64,
    pub ops_per_joule: f64,
    pub joules_per_op: f64,
    /// Idle power the "above idle" figures subtract, and where it came from.
    pub idle_w: Option<f64>,
    pub idle_source: Option<String>,
    pub energy_above_idle_j: Option<f64>,
    pub ops_per_joule_above_idle: Option<f64>,
    pub joules_per_op_above_idle: Option<f64>,
}

impl Energy {
    pub fn derive(
        p: &crate::telemetry::PowerFigures,
        ops: u64,
        seconds: f64,
        idle: Option<(f64, String)>,
    ) -> Self {
        let per = |j: f64| if j > 0.0 { ops as f64 / j } else { 0.0 };
        let jpo = |j: f64| if ops > 0 { j / ops as f64 } else { 0.0 };
        let above = idle
            .as_ref()
            .map(|(w, _)| (p.energy_j - w * seconds).max(0.0));
        Energy {
            source: p.source.clone(),
            scope: p.scope.clone(),
            estimate: p.estimate,
            energy_j: p.energy_j,
            avg_w: p.avg_w,
            peak_w: p.peak_w,
            ops_per_joule: per(p.energy_j),
            joules_per_op: jpo(p.energy_j),
            idle_w: idle.as_ref().map(|x| x.0),
            idle_source: idle.map(|x| x.1),
            energy_above_idle_j: above,
            ops_per_joule_above_idle: above.map(per),
            joules_per_op_above_idle: above.map(jpo),
        }
    }
}

/// Metrics that are store calls (an RMW is its read plus its update; VERIFY and CLEANUP are
/// bookkeeping), so `operations` counts each store call once.
pub fn is_store_call(m: Metric) -> bool {
    matches!(
        m,
        Metric::Read | Metric::Update | Metric::Insert | Metric::Scan | Metric::Delete
    )
}

impl PhaseSummary {
    /// Fills the op table and totals from the measured stats.
    pub fn fill(&mut self, stats: &Stats) {
        let secs = self.measured_seconds;
        self.ops.clear();
        let (mut ops, mut errs, mut bytes) = (0u64, 0u64, 0u64);
        for (m, o) in stats.metrics() {
            self.ops
                .insert(m.name().to_string(), OpSummary::of(m.name(), o, secs));
            // Operations the store cannot do (N/A) stay listed with their count but are left
            // out of the phase's totals: they reached no store.
            if is_store_call(m) && !self.not_applicable.iter().any(|n| n == m.name()) {
                ops += o.count();
                errs += o.errors();
                bytes += o.bytes;
            }
        }
        self.operations = ops;
        self.errors = errs;
        let mut all: Option<(Histogram<u64>, Option<Histogram<u64>>, u64)> = None;
        for (m, o) in stats.metrics() {
            if !is_store_call(m) || self.not_applicable.iter().any(|n| n == m.name()) {
                continue;
            }
            let (h, i, c) = all.get_or_insert_with(|| {
                (
                    crate::measure::new_histogram(),
                    o.intended.as_ref().map(|_| crate::measure::new_histogram()),
                    0,
                )
            });
            h.add(&o.ok).expect("same bounds");
            if let (Some(i), Some(oi)) = (i.as_mut(), o.intended.as_ref()) {
                i.add(oi).expect("same bounds");
            }
            *c += o.count();
        }
        self.all_ops = all.map(|(h, i, count)| AllOps {
            count,
            latency_us: Latency::from_ns(&h),
            intended_latency_us: i.as_ref().map(Latency::from_ns),
        });
        self.throughput_ops_per_s = if secs > 0.0 { ops as f64 / secs } else { 0.0 };
        self.throughput_mb_per_s = if secs > 0.0 {
            bytes as f64 / secs / 1e6
        } else {
            0.0
        };
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub schema: String,
    pub kvmeter_version: String,
    pub status: RunStatus,
    pub error: Option<String>,
    pub seed: u64,
    pub warnings: Vec<String>,
    pub phases: Vec<PhaseSummary>,
    /// The plan's phases that never started, in order: an earlier phase failed or was
    /// interrupted (absent when every phase ran).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_run: Vec<String>,
}

impl Summary {
    /// The summary of a run that has just started (no phase yet).
    pub fn running(plan: &crate::plan::Plan) -> Summary {
        Summary {
            schema: SUMMARY_SCHEMA.into(),
            kvmeter_version: env!("CARGO_PKG_VERSION").into(),
            status: RunStatus::Running,
            error: None,
            seed: plan.seed,
            warnings: plan.warnings.clone(),
            phases: vec![],
            not_run: vec![],
        }
    }
}

/// serde's `skip_serializing_if` for counts that are absent when nothing happened.
fn is_zero(n: &u64) -> bool {
    *n == 0
}
