//! What the command line said, before resolution: the low-level form `build` validates into a
//! `Plan` (ripgrep's LowArgs → HiArgs). The rest of the program never sees it.

use super::{ClockChoice, Format};
use std::path::PathBuf;

/// What the command line said, before resolution.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Request {
    pub command: String,
    pub workload_files: Vec<String>,
    /// Workload files' texts by the name `workload_files` gives them: a distributed run's
    /// coordinator publishes the files it read, so agents never open a path named in etcd.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_texts: Vec<WorkloadText>,
    pub props: Vec<String>,
    pub store: String,
    pub store_opts: Vec<String>,
    pub phase: Option<String>,
    pub threads: Option<i64>,
    /// The event-driven engine: connections in all, requests in flight on each, and what an
    /// open-loop arrival does when its loop's connections are full.
    #[serde(default)]
    pub connections: Option<i64>,
    #[serde(default)]
    pub depth: Option<i64>,
    #[serde(default)]
    pub when_full: Option<String>,
    /// Probe connections: a low-rate open-loop stream measured apart (`--probe-rate`).
    #[serde(default)]
    pub probe_rate: Option<f64>,
    #[serde(default)]
    pub probe_connections: Option<i64>,
    /// Open loop on the engine: each loop wakes at most once per this much to send what is due
    /// (`--send-slack`).
    #[serde(default)]
    pub send_slack: Option<String>,
    pub records: Option<i64>,
    pub ops: Option<i64>,
    pub duration: Option<String>,
    pub target: Option<f64>,
    /// Open loop: `--arrival fixed|poisson`, `--rate R`.
    pub arrival: Option<String>,
    pub rate: Option<f64>,
    pub warmup: Option<String>,
    pub seed: Option<u64>,
    pub data_dir: Option<PathBuf>,
    pub out: Option<PathBuf>,
    pub format: Option<Format>,
    pub interval: Option<String>,
    pub status_interval: Option<String>,
    /// `--give-up-after`, as given.
    #[serde(default)]
    pub give_up_after: Option<String>,
    pub clock: Option<ClockChoice>,
    pub telemetry_interval: Option<String>,
    pub store_stats: Option<super::StoreStatsChoice>,
    pub disk: Option<String>,
    pub power: Option<String>,
    pub power_model: Option<String>,
    pub idle_baseline: Option<String>,
    pub counters: bool,
    /// `--profile`, and `--profile-frequency` as given.
    #[serde(default)]
    pub profile: bool,
    #[serde(default)]
    pub profile_frequency: Option<String>,
    pub calibration: Option<PathBuf>,
    pub antagonists: Vec<String>,
    /// `--fault` specifications and the `--timeline` bucket.
    pub faults: Vec<String>,
    pub timeline: Option<String>,
    pub io_dir: Option<PathBuf>,
    pub io_file_size: Option<String>,
    pub random_ratio: Option<f64>,
    /// `kvmeter pressure`: block sizes in KiB ("4,512") and the step length.
    pub block_sizes: Option<String>,
    pub step: Option<String>,
    /// No final report on stdout (points of sweep and capacity).
    pub quiet: bool,
    /// `--metrics-addr`, `--metrics-linger`: the live Prometheus endpoint (`crate::metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_addr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_linger: Option<String>,
}

/// A workload file's text, carried in the request instead of its path.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkloadText {
    pub name: String,
    pub text: String,
}
