//! The flags of `kvmeter agent` and `kvmeter dist run|merge` (docs/distributed.md); `cli::dist`
//! turns them into `dist`'s settings.

use super::RunArgs;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum DistCommand {
    /// Coordinate a run over N agents: publish the plan and its hash in etcd, wait for the
    /// agents, start each phase on one time T0, merge every interval into one run directory
    /// (intervals.csv with an agents column, HDR logs, summary), delete every key at the end.
    Run(Box<DistRunArgs>),
    /// Merge agents' run directories into one run (when the coordinator died).
    Merge {
        /// The agents' run directories (each has dist/agent.json).
        #[arg(value_name = "DIR", required = true)]
        dirs: Vec<PathBuf>,
        /// The merged run directory (default kvmeter-runs/<time>-dist-merge-<store>).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// This host's copy of the plug-in the run measured (plugin:PATH): a library is
        /// never loaded from a path in an agent's directory.
        #[arg(long, value_name = "plugin:PATH")]
        store: Option<String>,
    },
}

/// Where the coordination service is and which run: shared by `dist run` and `agent`.
#[derive(Args, Debug)]
pub struct CoordArgs {
    /// etcd's client URL(s): http[s]://[USER[:PASSWORD]@]HOST:2379[,http[s]://HOST2:2379,...]
    /// (a password in the URL shows in ps: prefer --coord-user with KVMETER_COORD_PASSWORD).
    #[arg(long, value_name = "URL")]
    pub coord: String,
    /// The run's name: its keys live under /kvmeter/<job>/ (one run per job at a time).
    #[arg(long, value_name = "NAME", default_value = "default")]
    pub job: String,
    /// File holding the key shared by the coordinator and its agents (at least 16 bytes):
    /// everything the run keeps in etcd is authenticated with it (HMAC-SHA256), so write
    /// access to etcd does not steer agents. Else the environment variable KVMETER_PLAN_KEY.
    #[arg(long, value_name = "FILE")]
    pub plan_key_file: Option<PathBuf>,
    /// PEM CA certificate(s) that sign etcd's server certificate (https:// URLs).
    #[arg(long, value_name = "FILE")]
    pub coord_ca: Option<PathBuf>,
    /// PEM client certificate, for an etcd started with --client-cert-auth (with --coord-key).
    #[arg(long, value_name = "FILE")]
    pub coord_cert: Option<PathBuf>,
    /// PEM private key of --coord-cert.
    #[arg(long, value_name = "FILE")]
    pub coord_key: Option<PathBuf>,
    /// The name etcd's certificates must carry (default: the host of each --coord URL).
    #[arg(long, value_name = "NAME")]
    pub coord_server_name: Option<String>,
    /// etcd user (etcd's own authentication); the password from KVMETER_COORD_PASSWORD or
    /// --coord-password-file.
    #[arg(long, value_name = "USER")]
    pub coord_user: Option<String>,
    /// File whose first line is --coord-user's password.
    #[arg(long, value_name = "FILE")]
    pub coord_password_file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct DistRunArgs {
    #[command(flatten)]
    pub coord: CoordArgs,
    /// Agents to wait for (each runs --threads workers: N agents × T threads do what one
    /// host with N·T threads does).
    #[arg(long, value_name = "N")]
    pub agents: usize,
    /// Give up (exit 2, nothing run, nothing left in etcd) unless all agents register by then.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub register_timeout: String,
    /// Lease of the coordinator and of each agent: a dead agent is seen this long after (an
    /// etcd starved of CPU answers slowly: too short a lease loses live agents).
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub lease_ttl: String,
    /// Each phase starts this long after the coordinator publishes its start time.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub start_delay: String,
    /// When an agent dies: degrade (go on with the rest; the run is marked degraded) or abort.
    #[arg(long, value_name = "WHAT", default_value = "degrade", value_parser = ["degrade", "abort"])]
    pub on_agent_loss: String,
    /// Where agents send their interval reports: auto (listen on this host's address toward
    /// etcd, a port the kernel picks), HOST:PORT to listen on, or etcd (every report becomes
    /// an etcd revision: fine for short runs of a few agents). An agent that cannot reach
    /// the address posts through etcd and says so.
    #[arg(long, value_name = "auto|etcd|HOST:PORT", default_value = "auto")]
    pub reports: String,
    /// PEM certificate (chain, leaf first) to serve the report channel in TLS with, with
    /// --reports-tls-key. Agents trust this certificate alone: the sealed plan carries its
    /// SHA-256, so they need no CA file (a self-signed certificate will do).
    #[arg(long, value_name = "FILE")]
    pub reports_tls_cert: Option<PathBuf>,
    /// PEM private key of --reports-tls-cert.
    #[arg(long, value_name = "FILE")]
    pub reports_tls_key: Option<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    #[command(flatten)]
    pub coord: CoordArgs,
    /// This agent's index (else JOB_COMPLETION_INDEX, SLURM_PROCID or OMPI_COMM_WORLD_RANK).
    #[arg(long, value_name = "I")]
    pub index: Option<usize>,
    /// Agents in all (checked against the plan; else SLURM_NTASKS or OMPI_COMM_WORLD_SIZE).
    #[arg(long, value_name = "N")]
    pub count: Option<usize>,
    /// Run only a plan with this SHA-256 hash (what 'kvmeter dist run' prints).
    #[arg(long, value_name = "HASH")]
    pub plan_hash: Option<String>,
    /// This host's own settings: a plan from etcd never names a program, library, file or
    /// secret, so an agent takes them from its own flags (docs/distributed.md "Security").
    #[command(flatten)]
    pub local: AgentLocalArgs,
    /// This agent's run directory (default kvmeter-runs/<time>-agent<I>-<job>-<store>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Directory for an embedded store's data (default: a fresh temporary directory).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// How long to wait for the coordinator's plan and each phase's start.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub wait: String,
}

/// What an agent decides itself (dist::trust).
#[derive(Args, Debug)]
pub struct AgentLocalArgs {
    /// Power meter on this host (auto, rapl, perf, ipmi, redfish, cmd:<program args>,
    /// file:<csv>, estimate or none).
    #[arg(long, value_name = "SOURCE")]
    pub power: Option<String>,
    /// The estimate's model for this host: idle=WATTS,max=WATTS.
    #[arg(long, value_name = "MODEL")]
    pub power_model: Option<String>,
    /// This host's calibration file (kvmeter calibrate).
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
    /// Idle power measured on this host before the run.
    #[arg(long, value_name = "DURATION")]
    pub idle_baseline: Option<String>,
    /// Directory for the I/O antagonist's files on this host.
    #[arg(long, value_name = "DIR")]
    pub io_dir: Option<PathBuf>,
    /// Block device whose statistics telemetry reads on this host.
    #[arg(long, value_name = "DEVICE")]
    pub disk: Option<String>,
    /// Serve this agent's live metrics for Prometheus at HOST:PORT (docs/metrics.md), labelled
    /// with its index (`agent`); loopback unless another address is named.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// After the run, keep serving the final values until one scrape has read them, at most
    /// this long (default 30s; Ctrl-C ends the wait).
    #[arg(long, value_name = "DURATION")]
    pub metrics_linger: Option<String>,
    /// This host's copy of the plug-in the plan measures (plugin:PATH).
    #[arg(long, value_name = "plugin:PATH")]
    pub store: Option<String>,
    /// This host's files and secrets for the store (tls_ca=, tls_cert=, tls_key=, *_file=,
    /// password=...), added to the plan's options.
    #[arg(long = "store-opt", value_name = "KEY=VALUE")]
    pub store_opts: Vec<String>,
}
