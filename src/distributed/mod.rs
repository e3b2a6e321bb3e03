//! Past one machine (design.md "dist"; docs/distributed.md): agents placed by an existing
//! engine (Kubernetes Indexed Job, Slurm, MPI, pdsh), coordinated through etcd v3, merged
//! exactly.
//!
//! kvmeter does not launch remote processes and has no protocol or server of its own: the
//! coordinator (`kvmeter dist run`) and the agents (`kvmeter agent`) only read and write keys
//! under `/kvmeter/<job>/` in an etcd the user already runs, through its JSON gateway:
//!
//! | key | written by | lease | what |
//! |---|---|---|---|
//! | `plan` | coordinator | coordinator's | the run's request, its resolved plan's hash, N, the lease TTL |
//! | `agent/<i>` | agent i (create-if-absent) | agent's own | host, pid, clock state: liveness |
//! | `refused/<i>` | agent i | coordinator's | why it cannot run the plan |
//! | `start/<p>` | coordinator | coordinator's | phase p's start time T0 (Unix ns) |
//! | `iv/<p>/<k>/<i>` | agent i | coordinator's | interval k of phase p: histograms, counts (†) |
//! | `done/<p>/<i>` | agent i | coordinator's | phase p ended: outcome, lateness, time (†) |
//! | `abort` | coordinator | coordinator's | stop now (Ctrl-C, `--on-agent-loss abort`) |
//!
//! (†) Only with `--reports etcd`, or from an agent that cannot reach the coordinator: by
//! default agents push these reports, sealed the same way under the same key names, straight
//! to the coordinator (`relay`), so etcd's footprint does not grow with the run's length.
//!
//! An agent's death shows as its `agent/<i>` key expiring with its lease; a coordinator's as
//! `plan` expiring with its lease, after which agents finish on their own and
//! `kvmeter dist merge` rebuilds the result from their run directories (each agent keeps the
//! same interval records in `dist/`). Everything is under a lease, and the coordinator deletes
//! the prefix at the end, so nothing stays registered.
//!
//! Data never goes through etcd while an operation is measured: agents post each interval from
//! their own thread after the interval is written locally, so a slow or leaderless etcd delays
//! the merged view, not the measurement.

pub mod agent;
pub mod coordinator;
pub mod keys;
pub mod merge;
pub mod offline;
pub mod placement;
pub mod relay;
pub mod seal;
pub mod trust;

use crate::measure::wire::WireStats;
use serde::{Deserialize, Serialize};

/// What the coordinator publishes under `plan`.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Published {
    pub kvmeter_version: String,
    pub agents: usize,
    /// `plan::plan_hash` (SHA-256) of the plan `request` resolves to on one host.
    pub hash: String,
    /// This run's nonce: every value under the run's prefix other than the plan is sealed
    /// with it (`seal`), so nothing from another run verifies.
    #[serde(default)]
    pub nonce: String,
    pub request: crate::plan::Request,
    /// The coordinator's lease: agents attach their reports to it.
    pub lease: i64,
    pub lease_ttl_s: i64,
    pub coordinator: Host,
    /// Where agents push their reports (`relay`), IP:PORT; none: through etcd.
    #[serde(default)]
    pub reports: Option<String>,
    /// SHA-256 (hex) of the certificate the coordinator serves the report channel with, when
    /// it is TLS (`dist run --reports-tls-cert`): agents trust that certificate alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reports_tls_sha256: Option<String>,
}

/// Where a process runs, and how good its clock is.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Host {
    pub host: String,
    pub pid: u32,
    pub clock: ClockSync,
}

impl Host {
    pub fn here() -> Host {
        Host {
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            pid: std::process::id(),
            clock: ClockSync::read(),
        }
    }
}

/// The kernel's view of clock synchronisation (adjtimex): start times are wall-clock times, so
/// agents on different hosts start together only as well as their clocks agree.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ClockSync {
    /// `false` when the kernel says the clock is not synchronised (STA_UNSYNC); `None` when
    /// it cannot be asked.
    pub synchronized: Option<bool>,
    /// The kernel's maximum and estimated error, µs (as NTP/chrony set them).
    pub max_error_us: Option<i64>,
    pub est_error_us: Option<i64>,
}

impl ClockSync {
    pub fn read() -> ClockSync {
        #[cfg(target_os = "linux")]
        {
            let mut t: libc::timex = unsafe { std::mem::zeroed() };
            let state = unsafe { libc::ntp_adjtime(&mut t) };
            if state >= 0 {
                const STA_UNSYNC: i32 = 0x0040;
                return ClockSync {
                    synchronized: Some(state != libc::TIME_ERROR && t.status & STA_UNSYNC == 0),
                    max_error_us: Some(t.maxerror as i64),
                    est_error_us: Some(t.esterror as i64),
                };
            }
        }
        ClockSync {
            synchronized: None,
            max_error_us: None,
            est_error_us: None,
        }
    }

    /// Why start times across hosts cannot be trusted to a millisecond, if they cannot.
    pub fn problem(&self) -> Option<String> {
        match (self.synchronized, self.max_error_us) {
            (Some(false), _) => Some("the kernel reports the clock unsynchronised".into()),
            (_, Some(e)) if e > 1_000 => {
                Some(format!("the clock's maximum error is {} ms", e / 1000))
            }
            (None, _) => Some("the clock's synchronisation state cannot be read".into()),
            _ => None,
        }
    }
}

/// An agent's registration under `agent/<i>`.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Registration {
    pub index: usize,
    pub count: usize,
    /// How the index was given: a flag or the placing engine's variable.
    pub placed_by: String,
    pub hash: String,
    pub host: Host,
    pub threads: usize,
    /// How this agent's reports travel: "direct", or "etcd" with why (the coordinator's
    /// address could not be reached, or the plan names none).
    #[serde(default)]
    pub reports: String,
}

/// One closed interval of one agent: what `iv/<p>/<k>/<i>` holds and `dist/intervals.jsonl`
/// keeps, line by line.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct IntervalPost {
    pub agent: usize,
    pub phase_index: usize,
    pub phase: String,
    pub index: usize,
    pub start_s: f64,
    pub end_s: f64,
    pub warmup: bool,
    pub stats: WireStats,
}

/// An agent's phase, ended: `done/<p>/<i>` and `dist/phases.jsonl`.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct PhaseDone {
    pub agent: usize,
    pub phase_index: usize,
    pub phase: String,
    /// Intervals it wrote (the merge waits for no more than these).
    pub intervals: usize,
    pub outcome: String,
    pub error: Option<String>,
    pub threads: usize,
    pub started_at: String,
    pub wall_seconds: f64,
    pub measured_seconds: f64,
    /// How long after T0 its workers started (ms; negative: early, from clock error).
    pub late_ms: f64,
    pub operations: u64,
    /// The agent's own run directory, on its host.
    #[serde(default)]
    pub run_dir: Option<String>,
    /// What the store said about itself over the agent's phase (issue 43), for the merge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_stats: Option<crate::report::store_stats::StoreStats>,
    /// The kernel's storage bytes of the agent's phase and kvmeter's own, for the merge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_io: Option<crate::report::storage_io::StorageIo>,
}

/// An agent's own record in its run directory (`dist/agent.json`): enough for
/// `kvmeter dist merge` to rebuild the merged run without the coordinator.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct AgentRecord {
    pub job: String,
    pub registration: Registration,
    pub published: Published,
    /// T0 of each phase (Unix ns), as the coordinator published it.
    pub starts: Vec<u64>,
    /// Bytes of interval and phase reports sent to etcd.
    pub bytes_to_etcd: u64,
    /// Bytes of reports pushed to the coordinator directly (`relay`).
    #[serde(default)]
    pub bytes_to_coordinator: u64,
    pub posts: u64,
}

pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub fn rfc3339_of_unix_ns(ns: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns))
        .to_string()
}
/// Start times are wall-clock times: agents on other hosts than the coordinator start together
/// only as well as the clocks agree. Here, not in coordinator.rs: `dist run` and `dist merge`
/// (merge.rs) both warn.
pub fn clock_warnings(
    regs: &std::collections::BTreeMap<usize, Registration>,
    coordinator: Option<&Host>,
) -> Vec<String> {
    let hosts: std::collections::BTreeSet<&str> = regs
        .values()
        .map(|r| r.host.host.as_str())
        .chain(coordinator.map(|c| c.host.as_str()))
        .collect();
    if hosts.len() < 2 {
        return vec![];
    }
    regs.values()
        .filter_map(|r| {
            r.host.clock.problem().map(|p| {
                format!(
                    "agent {} on {}: {p}; start skew across hosts is bounded only by clock agreement",
                    r.index, r.host.host
                )
            })
        })
        .collect()
}
