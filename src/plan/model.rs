//! The plan model: what `build` produces and the driver executes — every phase fully
//! resolved, every default explicit. Serialized whole into manifest.json.

use crate::store::StoreOptions;
use crate::workload::WorkloadConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use super::antagonist::Antagonist;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseKind {
    Load,
    Run,
    /// Deletes the store's data (the suite's "clear the database").
    Clear,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Table,
    Ycsb,
    Json,
}

/// `--clock`: `auto` reads the TSC where the kernel keeps time with it, else the monotonic
/// clock; `monotonic` always uses `CLOCK_MONOTONIC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum ClockChoice {
    #[default]
    Auto,
    Monotonic,
}

/// `--store-stats`: whether the store's own statistics and events are sampled (on, the
/// default: `store_stats.csv`, `store_events.csv`, summary.json's `store_stats`) or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum StoreStatsChoice {
    #[default]
    On,
    Off,
}

/// A pressure-scale phase: the schedule of papers/004 at one block size.
#[derive(Clone, Debug, Serialize)]
pub struct PressurePhase {
    pub block_size: usize,
    #[serde(serialize_with = "ser_secs")]
    pub step: Duration,
}

#[derive(Clone, Debug, Serialize)]
pub struct PhasePlan {
    pub name: String,
    pub kind: PhaseKind,
    /// The `-P` files, as given.
    pub workload_files: Vec<String>,
    pub threads: usize,
    /// Operations for the whole phase, all threads together; 0 = until `duration`.
    pub operations: u64,
    #[serde(serialize_with = "ser_opt_secs")]
    pub duration: Option<Duration>,
    /// Total ops/s across threads (`--target`), paced per YCSB §8.4.
    pub target: Option<f64>,
    /// Open loop (`--arrival`, `--rate`; run phases only): a schedule of intended starts
    /// independent of replies, served by `threads` workers.
    pub open_loop: Option<OpenLoop>,
    #[serde(serialize_with = "ser_secs")]
    pub warmup: Duration,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pressure: Option<PressurePhase>,
    /// Every property as resolved, with where its value came from.
    pub properties: BTreeMap<String, PropValue>,
    /// `kvmeter replay`: the operations come from this trace (`plan::replay`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<super::replay::ReplayPlan>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PropValue {
    pub value: String,
    pub source: String,
}

pub(super) fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}
pub(super) fn ser_opt_secs<S: serde::Serializer>(
    d: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub command: String,
    pub store: String,
    /// Every option of the store, defaults filled in, values checked by the adapter (with the
    /// user's own server, those that only set up a managed one are not recorded).
    pub store_options: StoreOptions,
    /// `None`: a fresh temporary directory, removed at the end.
    pub data_dir: Option<PathBuf>,
    pub out: PathBuf,
    pub seed: u64,
    #[serde(serialize_with = "ser_secs")]
    pub interval: Duration,
    #[serde(serialize_with = "ser_secs")]
    pub status_interval: Duration,
    /// `--give-up-after`: a phase whose store answers nothing this long, its calls timing out,
    /// ends (`driver::silence`); zero never. Not applied where faults are scheduled.
    #[serde(serialize_with = "ser_secs")]
    pub give_up_after: Duration,
    pub format: Format,
    pub clock: ClockChoice,
    /// `--store-stats`: sample the store's own statistics and events.
    pub store_stats: StoreStatsChoice,
    /// Telemetry sampling interval; zero turns telemetry off.
    #[serde(serialize_with = "ser_secs")]
    pub telemetry_interval: Duration,
    /// Block device to watch (`--disk`), else the one under the data directory.
    pub disk: Option<String>,
    pub power: crate::telemetry::power::Choice,
    pub power_model: crate::telemetry::power::Model,
    /// Count hardware and software events (`--counters`).
    pub counters: bool,
    /// `--profile`: call stacks sampled at this many Hz.
    pub profile_hz: Option<u32>,
    /// The calibration file runs load (`--calibration`, else the default path if present).
    pub calibration: Option<PathBuf>,
    /// Whether `--power-model` was given (it then wins over a calibration's model).
    pub power_model_given: bool,
    pub antagonists: Vec<Antagonist>,
    /// Faults fired during every run phase (`--fault`), on servers kvmeter started.
    pub faults: Vec<super::Fault>,
    /// The recovery timeline's bucket (`--timeline`; 100 ms by default with faults).
    #[serde(serialize_with = "ser_opt_secs")]
    pub timeline: Option<Duration>,
    /// Where antagonist files go (default: inside the data directory, on the same device).
    pub io_dir: Option<PathBuf>,
    pub io_file_size: u64,
    pub random_ratio: f64,
    /// Measure idle power this long before the first phase (`--idle-baseline`).
    #[serde(serialize_with = "ser_opt_secs")]
    pub idle_baseline: Option<Duration>,
    /// Percentiles printed in `--format ycsb` (YCSB's `hdrhistogram.percentiles`).
    pub ycsb_percentiles: Vec<f64>,
    pub phases: Vec<PhasePlan>,
    pub warnings: Vec<String>,
    /// Print no final report (a point of `kvmeter sweep` or `capacity`, which print their own).
    #[serde(skip)]
    pub quiet: bool,
    /// This process's share of a distributed run (`kvmeter agent`; `plan::share`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<Share>,
    /// The event-driven engine (`--connections`): network stores only; `None`: worker threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<Engine>,
    /// The live Prometheus endpoint (`--metrics-addr`); recorded, served by the caller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsPlan>,
}

/// `--metrics-addr` and `--metrics-linger`, checked.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct MetricsPlan {
    pub addr: String,
    /// How long the final values are served waiting for a scrape.
    #[serde(serialize_with = "ser_secs")]
    pub linger: Duration,
}

impl MetricsPlan {
    /// The flags of `req`, checked (the address is bound later, by whoever serves it).
    pub fn from_request(req: &super::Request) -> Result<Option<Self>, crate::error::UsageError> {
        let linger = match req.metrics_linger.as_deref() {
            Some(s) => crate::values::parse_duration("--metrics-linger", s)?,
            None => Duration::from_secs(30),
        };
        let Some(addr) = req.metrics_addr.clone() else {
            if req.metrics_linger.is_some() {
                return Err(crate::error::UsageError::new(
                    "--metrics-linger: expected with --metrics-addr",
                ));
            }
            return Ok(None);
        };
        Ok(Some(MetricsPlan { addr, linger }))
    }
}

/// Agent `index` of `count` in a distributed run (docs/distributed.md): its load slice, its
/// part of the operations and the rate, its worker streams `index·threads ..`.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct Share {
    pub index: usize,
    pub count: usize,
}

/// How open-loop arrivals are spaced.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    /// Every 1/rate seconds exactly.
    Fixed,
    /// Exponential gaps of mean 1/rate (a Poisson process), from the phase's seed.
    Poisson,
    /// Facebook ETC's inter-arrival gaps (`workload::fb::IA_GPD`): generalized Pareto of
    /// shape 0.154971, scaled to mean 1/rate (as mutilate's `fb_ia`).
    #[serde(rename = "fb_ia")]
    FbIa,
}

impl Arrival {
    pub fn name(self) -> &'static str {
        match self {
            Arrival::Fixed => "fixed",
            Arrival::Poisson => "poisson",
            Arrival::FbIa => "fb_ia",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct OpenLoop {
    pub arrival: Arrival,
    /// Offered load, operations (transactions) per second over all workers.
    pub rate: f64,
    /// Fixed arrivals of agent i of N: its schedule starts i/N of its own gap late, so the N
    /// schedules interleave evenly into one (`plan::share`). 0 on one host.
    #[serde(skip_serializing_if = "is_zero")]
    pub offset_gaps: f64,
    /// A time-varying rate (mixgraph's `sine_mix_rate`): rate(t) = a·sin(b·t + c) + d, and
    /// `rate` is d, its mean over whole periods. None: the rate is constant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sine: Option<crate::workload::mixgraph::SineRate>,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// Workers serving an open-loop schedule when --threads is not given: up to this many
/// requests in flight.
pub const OPEN_LOOP_WORKERS: i64 = 16;

impl Plan {
    /// The shard the faults hit, where the cluster shards data by master (a Redis Cluster's
    /// `master:i`): the first such target. Elsewhere every operation is on affected data.
    pub fn affected_shard(&self) -> Option<u16> {
        if self.store_options.u64("cluster").unwrap_or(0) == 0 {
            return None;
        }
        self.faults.iter().find_map(|f| {
            f.target
                .strip_prefix("master:")
                .and_then(|i| i.parse().ok())
        })
    }

    /// What telemetry samples in this run (`None`: turned off with --telemetry-interval 0).
    /// A calibrated power model replaces the default one; `--power-model` wins over both.
    /// `store_symbols`: the store's `StoreKind::profile_symbols` (`--profile`). `server_pids`:
    /// a managed server's members (`Cluster::live_pids`); a profile follows the first.
    pub fn telemetry_config(
        &self,
        server_pids: Vec<std::sync::Arc<std::sync::atomic::AtomicU32>>,
        calibration: Option<&crate::calibrate::Calibration>,
        store_symbols: &[&str],
    ) -> Option<crate::telemetry::Config> {
        if self.telemetry_interval.is_zero() {
            return None;
        }
        let server_pid = server_pids
            .first()
            .map(|p| p.load(std::sync::atomic::Ordering::Relaxed))
            .filter(|&p| p != 0);
        Some(crate::telemetry::Config {
            interval: self.telemetry_interval,
            disk: self.disk.clone(),
            pid: std::process::id(),
            server_pids,
            root: crate::telemetry::procfs::Root::system(),
            power: self.power.clone(),
            model: match calibration.and_then(|c| c.model.clone()) {
                Some(m) if !self.power_model_given => m,
                _ => self.power_model.clone(),
            },
            counters: self.counters,
            profile: self.profile_hz.map(|hz| crate::telemetry::profile::Config {
                frequency_hz: hz,
                slice: self.interval,
                roles: crate::telemetry::profile::Roles {
                    own_pid: std::process::id(),
                    server_pid,
                    exe: std::env::current_exe()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    store_symbols: store_symbols.iter().map(|s| s.to_string()).collect(),
                },
            }),
        })
    }
}
/// The event-driven engine's settings, resolved by `engine.rs` (`--connections`, `--depth`,
/// `--when-full`, the probe).
/// What an open-loop arrival does when every connection of its event loop has `depth`
/// requests in flight.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WhenFull {
    /// Waits in the loop's backlog (counted) and is sent when a slot frees: its from-intended
    /// latency includes the wait.
    Queue,
    /// Is not sent (counted as skipped).
    Skip,
}

#[derive(Clone, Debug, Serialize)]
pub struct Engine {
    pub connections: usize,
    pub depth: usize,
    pub when_full: WhenFull,
    /// File descriptors the run needs (connections + headroom): the soft limit is raised to
    /// it at the start (up to the hard limit, checked here).
    pub fds_needed: u64,
    /// Probe connections (`--probe-rate`): a Poisson stream at `rate` on `connections` of
    /// their own, run phases only, measured apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<Probe>,
    /// Open loop: each loop wakes at most once per this many ns to send the arrivals due
    /// (`--send-slack`; 0: at each arrival).
    pub send_slack_ns: u64,
    /// A distributed run's agent: the number (across the run) of its first connection, which
    /// is also that connection's stream (`plan::share`); 0 on one host.
    #[serde(skip)]
    pub first_conn: u64,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Probe {
    pub rate: f64,
    pub connections: usize,
}
