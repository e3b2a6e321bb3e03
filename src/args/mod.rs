//! The command line's definition (clap): every command, flag and help text, and nothing
//! else. A leaf that imports only clap and `plan` (whose `Request` the flags become), so that
//! dispatch (`cli`) and experiment files (`experiment::file`, whose steps are commands parsed by
//! this same definition) share it without importing each other — hyperfine's `cli.rs`.
//! `experiment::job::Job::from_command` makes a measuring command a `Job`; `cli` dispatches
//! the rest. One file per concern: `dist` (agent and dist), `compare`; the rest here.

use crate::plan::{Format, Request};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

mod compare;
mod dist;
mod replay;
mod table;
mod trace;

pub use compare::CompareArgs;
pub use dist::{AgentArgs, AgentLocalArgs, CoordArgs, DistCommand, DistRunArgs};
pub use replay::ReplayArgs;
pub use table::TableArgs;
pub use trace::{TraceCommand, TraceStatsArgs};

#[derive(Parser, Debug)]
#[command(
    name = "kvmeter",
    version,
    about = "Measures key-value stores: YCSB-exact workloads, tail latency, and a run directory that loses nothing",
    after_help = "Examples:\n  kvmeter suite                                   the YCSB suite on RocksDB\n  kvmeter run -P workloada --records 100000 --ops 1000000 --threads 2\n  kvmeter run -P workloadc --store null --ops 10000000\n  kvmeter run -P workloadb --target 20000 --duration 60s   paced; latency from intended start\n  kvmeter stores                                  stores and their options\n\nExit codes: 0 ok, 1 the run failed, 2 bad input, 130 interrupted."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run YCSB workload phases (load, run, or both) against a store.
    Run(RunArgs),
    /// Replay a production trace (Twitter's cache traces, ...) against a store, open loop at
    /// its recorded times × --speed (or evenly at --rate), every request timed from its
    /// intended start and from its send (docs/replay.md).
    Replay(ReplayArgs),
    /// Run the YCSB suite in the papers' order: load A, run A, B, C, F, D; clear; load E, run E.
    Suite(CommonArgs),
    /// The pressure scale (papers/004): run a workload while four O_DIRECT I/O antagonists on
    /// the same device step through w0..w25, for each block size; throughput per step and the
    /// normalized pressure.
    Pressure(PressureArgs),
    /// The highest offered load (open loop) whose latency meets an SLO, by step search then
    /// bisection; saves the latency-against-offered-load curve (papers/003).
    Capacity(CapacityArgs),
    /// Run the same experiment over parameter values (threads, connections, threads-per-cpu,
    /// rate, value-size, store-opt.<key>, p.<property>), each point repeated, with mean,
    /// stddev and a 95 % confidence interval per metric.
    Sweep(SweepArgs),
    /// Write report.html (and figures/*.svg) for a run or experiment directory: one offline
    /// file with the papers' figures. Runs and experiments write it themselves at the end; this
    /// makes it again, or for a directory from an older or interrupted run.
    Report {
        /// The run or experiment directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// A cost model (TOML, docs/report.md): nodes, energy, TCO, $ per billion operations
        /// and the break-even price per machine; printed, saved as cost.json and shown in the
        /// report.
        #[arg(long, value_name = "FILE")]
        cost: Option<PathBuf>,
    },
    /// Compare a baseline (A) with a candidate (B) without running anything: each one run or a
    /// set of repeated runs. Checks like with like (manifests), then per phase and metric the
    /// medians, ratio B/A with its 95 % interval, a test (Mann-Whitney with 4+ runs a side),
    /// Holm's correction, and better/worse only when significant and outside the noise band.
    Compare(CompareArgs),
    /// Every run below the DIRs as one tidy table for pandas or R: one row per run, phase and
    /// operation, the manifest's variables (store, options, threads, workload, machine) as
    /// columns beside throughput, latency percentiles, errors, telemetry and energy, as in
    /// summary.json. CSV (default), JSON lines or Parquet (docs/table.md).
    Table(TableArgs),
    /// Production traces (Twitter, RocksDB trace_analyzer, cachebench, Redis MONITOR):
    /// 'trace stats' shows what a trace holds before it is replayed (docs/replay.md).
    Trace {
        #[command(subcommand)]
        command: TraceCommand,
    },
    /// Run an experiment file (TOML): steps (suite, run, sweep, capacity, pressure, fault runs)
    /// with shared settings and a scale, into one directory with every step's run directories,
    /// report.html with the paper's figures, and findings.md (the paper's value against this
    /// run's). The presets in experiments/ reproduce the five papers; --resume finishes one.
    Experiment(ExperimentArgs),
    /// Do acknowledged writes survive a crash? Unique keys written and logged (ok, failed,
    /// indeterminate), then read back: servers while --fault breaks the cluster kvmeter
    /// started; embedded stores by SIGKILLing a writer process --kills times (process-crash
    /// durability: not power loss). Writes manifest.json, durability.json and report.html;
    /// exit 1 when the check could not read back, or with --fail-on-loss when writes were lost.
    Durability(DurabilityArgs),
    /// A run directory's guard (internal): after kvmeter ends, marks the directory `failed` if
    /// it still says `running` (report::current).
    #[command(name = "__seal-run-dir", hide = true)]
    SealRunDir { dir: PathBuf },
    /// The writer process of `kvmeter durability` on an embedded store (internal).
    #[command(name = "__durability-writer", hide = true)]
    DurabilityWriter {
        #[arg(long)]
        store: String,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        start: u64,
        #[arg(long = "store-opt")]
        store_opt: Vec<String>,
    },
    /// One load generator of a distributed run (docs/distributed.md): its index from --index
    /// or the engine that placed it (Kubernetes Indexed Job, Slurm, MPI); the plan, the start
    /// time and the merge from 'kvmeter dist run' through etcd.
    Agent(AgentArgs),
    /// Distributed runs through etcd: 'dist run' coordinates N agents and merges their
    /// histograms exactly; 'dist merge' rebuilds the result from the agents' run directories.
    Dist {
        #[command(subcommand)]
        command: DistCommand,
    },
    /// List the stores, whether each works here, and their options; with plug-ins named
    /// (plugin:/path/libfoo.so), what each library says of itself.
    Stores {
        /// Store plug-ins to list (plugin:PATH).
        #[arg(value_name = "PLUGIN")]
        plugins: Vec<String>,
    },
    /// Every measurement source (clock, CPU, disk, process, pressure, power, counters): does
    /// it work here, why not, how to enable it.
    Doctor {
        /// The data directory whose disk telemetry would watch.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Measure idle and busy power (where a measured source exists) and memory bandwidth
    /// (STREAM triad, 1 and all threads); later runs on this machine load the result.
    Calibrate {
        /// Where to save it (default: $XDG_CONFIG_HOME/kvmeter/calibration.json).
        #[arg(long, value_name = "FILE")]
        calibration: Option<PathBuf>,
        /// Seconds for each power measurement (idle, then all CPUs busy).
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Power source (as for run; default auto, estimate excluded).
        #[arg(long, value_name = "SOURCE")]
        power: Option<String>,
    },
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// YCSB workload property file; built-in names workloada..workloadf work anywhere.
    #[arg(short = 'P', value_name = "FILE")]
    pub workload: Vec<String>,
    /// Which phase: load (insert records), run (the operation mix) or both.
    #[arg(long, value_name = "PHASE", default_value = "both", value_parser = ["load", "run", "both"])]
    pub phase: String,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Args, Debug)]
pub struct CapacityArgs {
    /// YCSB workload property file (papers/003 measures GETs: workloadc).
    #[arg(short = 'P', value_name = "FILE")]
    pub workload: Vec<String>,
    /// The SLO on latency from intended start over all store calls, repeatable (all must
    /// hold): mean, p50, p90, p99 or p99.9 under a bound, e.g. p99<5ms. Default mean<1ms.
    #[arg(long, value_name = "STAT<BOUND")]
    pub slo: Vec<String>,
    /// Also require the schedule to be served: achieved ≥ 99 % of offered.
    #[arg(long)]
    pub require_achieved: bool,
    /// First offered load (ops/s).
    #[arg(long, value_name = "OPS_PER_S", default_value_t = 1000.0)]
    pub start_rate: f64,
    /// Highest offered load to try (ops/s).
    #[arg(long, value_name = "OPS_PER_S", default_value_t = 10_000_000.0)]
    pub max_rate: f64,
    /// Factor between rates while stepping up (before bisection).
    #[arg(long, value_name = "F", default_value_t = 2.0)]
    pub step_factor: f64,
    /// Stop bisecting when (lowest failing − highest passing) / highest passing ≤ this.
    #[arg(long, value_name = "SHARE", default_value_t = 0.05)]
    pub precision: f64,
    /// Runs of a rate whose figure lands within 10 % of a bound (judged on the median).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeat: usize,
    /// Most runs in all.
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub max_points: usize,
    /// A point passes only if, besides the SLO, the store had no write stall and its backlog
    /// (RocksDB's L0 files and pending compaction bytes) did not grow over the run phase's
    /// second half; the latency-only capacity is printed beside it.
    #[arg(long)]
    pub sustainable: bool,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// YCSB workload property file.
    #[arg(short = 'P', value_name = "FILE")]
    pub workload: Vec<String>,
    /// Which phase each point runs: load, run (on a loaded --data-dir) or both.
    #[arg(long, value_name = "PHASE", default_value = "both", value_parser = ["load", "run", "both"])]
    pub phase: String,
    /// A parameter and its values, repeatable (points are every combination): threads,
    /// connections, threads-per-cpu, rate, target, records, ops, value-size, fieldlength,
    /// store-opt.<key>, p.<property>. E.g. --param threads-per-cpu=1,2,4,8.
    #[arg(long, value_name = "NAME=V1,V2,...")]
    pub param: Vec<String>,
    /// Runs per point.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeat: usize,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Args, Debug)]
pub struct ExperimentArgs {
    /// The experiment file (experiments/*.toml; docs/experiments.md).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// quick (minutes on a small machine), paper (the published sizes and durations), or
    /// smoke (seconds: proves the file runs, figures not meaningful).
    #[arg(long, default_value = "quick", value_parser = ["quick", "paper", "smoke"])]
    pub scale: String,
    /// Experiment directory (default kvmeter-runs/<time>-experiment-<name>); new or empty.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Finish an interrupted experiment in DIR: completed steps are kept, the rest run, then
    /// the report and findings are made from all of them.
    #[arg(long, value_name = "DIR", conflicts_with = "out")]
    pub resume: Option<PathBuf>,
    /// A data directory on a device to measure, repeatable: steps marked per_device run once
    /// on each (papers/001 compares devices). kvmeter works in a new subdirectory of it.
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dir: Vec<PathBuf>,
    /// Check the file and print each step's command line; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Serve live Prometheus metrics of every step on HOST:PORT (one endpoint for the whole
    /// experiment; each run its `run` label; docs/metrics.md).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// With --metrics-addr: after the last step, serve the final values until one scrape has
    /// read them, at most this long (default 30s).
    #[arg(long, value_name = "DURATION")]
    pub metrics_linger: Option<String>,
}

#[derive(Args, Debug)]
pub struct PressureArgs {
    /// YCSB workload property file (the paper uses workloada and workloadb).
    #[arg(short = 'P', value_name = "FILE")]
    pub workload: Vec<String>,
    /// both: load the store, then the pressure phases (default); run: use a loaded --data-dir.
    #[arg(long, value_name = "PHASE", default_value = "both", value_parser = ["both", "run"])]
    pub phase: String,
    /// Antagonist block sizes in KiB (paper: 4,8,16,32,64,128,256,512; default 4,512).
    #[arg(long, value_name = "KIB,...")]
    pub block_sizes: Option<String>,
    /// Length of each of the 26 steps (paper: 2m; default 10s), a whole number of --interval.
    #[arg(long, value_name = "DURATION")]
    pub step: Option<String>,
    /// Share of random offsets in the antagonists' I/O (paper: 0.5).
    #[arg(long, value_name = "SHARE")]
    pub random_ratio: Option<f64>,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Args, Debug)]
pub struct CommonArgs {
    /// Serve live Prometheus metrics on HOST:PORT (e.g. 127.0.0.1:9464): per-phase,
    /// per-operation counts, errors, latency histograms, telemetry. Loopback unless you name
    /// another address (docs/metrics.md).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// With --metrics-addr: after the last interval, keep serving the final values until one
    /// scrape has read them, at most this long (default 30s; 0 = do not wait).
    #[arg(long, value_name = "DURATION")]
    pub metrics_linger: Option<String>,
    /// Set a YCSB property (overrides -P files), e.g. -p requestdistribution=uniform.
    #[arg(short = 'p', value_name = "NAME=VALUE")]
    pub props: Vec<String>,
    /// Store to measure ('kvmeter stores' lists them).
    #[arg(long, default_value = "rocksdb")]
    pub store: String,
    /// Store option, repeatable (e.g. --store-opt block_cache_mb=256).
    #[arg(long = "store-opt", value_name = "KEY=VALUE")]
    pub store_opt: Vec<String>,
    /// Worker threads (YCSB threadcount), each with its own session (connection). In open loop
    /// (--rate) they are the pool serving the schedule: at most this many requests in flight
    /// (default 16). With --connections: the event loops (default: one per CPU).
    #[arg(long, allow_negative_numbers = true)]
    pub threads: Option<i64>,
    /// memcached, redis and etcd: the event-driven engine, with this many connections in all spread
    /// over --threads event loops (memtier's clients × threads).
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub connections: Option<i64>,
    /// With --connections: requests in flight on each connection, refilled as replies arrive
    /// (memtier's --pipeline; default 1).
    #[arg(long, allow_negative_numbers = true, value_name = "D")]
    pub depth: Option<i64>,
    /// With --connections and --rate: an arrival that finds every connection of its loop
    /// full waits in a counted backlog (queue, default) or is skipped and counted (skip).
    #[arg(long, value_name = "POLICY", value_parser = ["queue", "skip"])]
    pub when_full: Option<String>,
    /// With --connections: a low-rate open-loop stream (Poisson, this many ops/s) on separate
    /// connections, its latency reported apart from the load's (mutilate's measurement client).
    #[arg(long, value_name = "OPS_PER_S", allow_negative_numbers = true)]
    pub probe_rate: Option<f64>,
    /// Connections of the --probe-rate stream (default 1).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub probe_connections: Option<i64>,
    /// With --connections and --rate: each event loop wakes at most once per this much (e.g.
    /// 1ms) and sends every arrival due, instead of waking at each arrival's nanosecond
    /// (default 0): fewer wake-ups and less client CPU, each arrival sent up to this late (its
    /// from-intended latency and the send lag show it). At most 100ms.
    #[arg(long, value_name = "DURATION")]
    pub send_slack: Option<String>,
    /// Records in the table (YCSB recordcount).
    #[arg(long, allow_negative_numbers = true)]
    pub records: Option<i64>,
    /// Operations in each run phase, all threads together (YCSB operationcount; 0 = until --duration).
    #[arg(long, allow_negative_numbers = true)]
    pub ops: Option<i64>,
    /// Stop each phase after this long (e.g. 30s, 2m), warm-up included; with --ops, whichever
    /// comes first.
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Total ops/s across threads. Each thread follows a fixed schedule and latency is also
    /// measured from each operation's intended start, so queueing behind a slow operation is
    /// counted (coordinated omission corrected) next to the plain service time.
    #[arg(long, value_name = "OPS_PER_S", allow_negative_numbers = true)]
    pub target: Option<f64>,
    /// Open loop: offer this many operations per second on a schedule independent of replies,
    /// served by --threads workers; latency is measured from each intended start (coordinated
    /// omission corrected) and as service time. Run phases only.
    #[arg(long, value_name = "OPS_PER_S", allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// Open-loop arrivals: poisson (exponential gaps, seeded; default), fixed (every 1/rate) or
    /// fb_ia (Facebook ETC's generalized-Pareto gaps, mean 1/rate).
    #[arg(long, value_name = "KIND", value_parser = ["fixed", "poisson", "fb_ia"])]
    pub arrival: Option<String>,
    /// Time at the start of each run phase excluded from the summary (kept in intervals.csv);
    /// part of --duration.
    #[arg(long, value_name = "DURATION")]
    pub warmup: Option<String>,
    /// Base seed of the per-thread random streams (recorded in the manifest; default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Directory for the store's data (default: a fresh temporary directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Run directory for results (default: kvmeter-runs/<time>-<command>-<store>); must be new or empty.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Final report on stdout: a table, YCSB's text report, or the summary JSON.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Length of a measurement interval (intervals.csv, HDR logs).
    #[arg(long, value_name = "DURATION")]
    pub interval: Option<String>,
    /// How often to print a progress line when stderr is not a terminal.
    #[arg(long, value_name = "DURATION")]
    pub status_interval: Option<String>,
    /// End a phase once the store has answered nothing for this long while its calls time out
    /// (a hung or silent server; default 30s; 0 never gives up). Not with --fault.
    #[arg(long, value_name = "DURATION")]
    pub give_up_after: Option<String>,
    /// Latency clock: auto reads the TSC where the kernel's own clocksource is tsc (cheaper,
    /// same time base), else CLOCK_MONOTONIC; monotonic always uses CLOCK_MONOTONIC.
    #[arg(long, value_enum)]
    pub clock: Option<crate::plan::ClockChoice>,
    /// The store's own statistics and events at every interval (store_stats.csv,
    /// store_events.csv, summary.json's store_stats): on (the default) or off.
    #[arg(long, value_enum, value_name = "ON|OFF")]
    pub store_stats: Option<crate::plan::StoreStatsChoice>,
    /// How often telemetry (CPU, disk, process, memory, pressure) is sampled; 0 turns it off.
    #[arg(long, value_name = "DURATION")]
    pub telemetry_interval: Option<String>,
    /// Block device whose I/O telemetry reports (default: the disk under --data-dir).
    #[arg(long, value_name = "DEV")]
    pub disk: Option<String>,
    /// Power source: auto (RAPL, then the perf power PMU, then a labelled estimate), rapl, perf,
    /// ipmi, redfish (KVMETER_REDFISH_URL/_USER/_PASSWORD), cmd:<program args> (prints watts),
    /// file:<csv> (timestamp,watts from an external meter), estimate, none.
    #[arg(long, value_name = "SOURCE")]
    pub power: Option<String>,
    /// Constants of the estimate model P = idle + (max − idle)·CPU busy, e.g. idle=60,max=180.
    #[arg(long, value_name = "idle=W,max=W")]
    pub power_model: Option<String>,
    /// Measure idle power this long before the first phase, for figures above idle.
    #[arg(long, value_name = "DURATION")]
    pub idle_baseline: Option<String>,
    /// Count cycles, instructions, branches, LLC references/misses (IPC and miss ratios per
    /// phase) and software events; unavailable counters say why and how to enable them.
    #[arg(long)]
    pub counters: bool,
    /// Sample the measured processes' call stacks (kvmeter, and a managed server) with perf:
    /// per phase, flame graphs and each group's top functions under profile/ in the run
    /// directory. Where perf is not permitted, one line says why and the run goes on.
    #[arg(long)]
    pub profile: bool,
    /// With --profile: samples per second and thread (default 99).
    #[arg(long, value_name = "HZ")]
    pub profile_frequency: Option<String>,
    /// Calibration file to use (default: $XDG_CONFIG_HOME/kvmeter/calibration.json when present).
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
    /// A co-located antagonist during every run phase, repeatable: io:bs=4k,wr=0.3,rr=0.5,n=2
    /// (O_DIRECT I/O), membw:threads=2,gbps=5 (memory streaming), cpu:threads=1,duty=0.5.
    #[arg(long, value_name = "SPEC")]
    pub antagonist: Vec<String>,
    /// A fault during every run phase, repeatable: at=30s,kill=leader,restart_after=5s;
    /// stop=replica:0,for=3s; restart=member:1. Only servers kvmeter starts (needs --duration).
    #[arg(long, value_name = "SPEC")]
    pub fault: Vec<String>,
    /// Recovery timeline bucket (default 100ms with --fault): throughput, errors and latency
    /// finer than --interval, in timeline.csv.
    #[arg(long, value_name = "DURATION")]
    pub timeline: Option<String>,
    /// Directory for antagonist files (default: inside --data-dir, on the device under test).
    #[arg(long, value_name = "DIR")]
    pub io_dir: Option<PathBuf>,
    /// Size of each antagonist file (default 10GiB, as the paper's).
    #[arg(long, value_name = "SIZE")]
    pub io_file_size: Option<String>,
}

impl CommonArgs {
    /// The flags as the planner's `Request` for `command` (its -P files and --phase given
    /// apart: each command declares them itself).
    pub fn into_request(
        self,
        command: &str,
        workload: Vec<String>,
        phase: Option<String>,
    ) -> Request {
        Request {
            command: command.into(),
            workload_files: workload,
            workload_texts: vec![],
            props: self.props,
            store: self.store,
            store_opts: self.store_opt,
            phase,
            threads: self.threads,
            connections: self.connections,
            depth: self.depth,
            when_full: self.when_full,
            probe_rate: self.probe_rate,
            probe_connections: self.probe_connections,
            send_slack: self.send_slack,
            records: self.records,
            ops: self.ops,
            duration: self.duration,
            target: self.target,
            arrival: self.arrival,
            rate: self.rate,
            warmup: self.warmup,
            seed: self.seed,
            data_dir: self.data_dir,
            out: self.out,
            format: self.format,
            interval: self.interval,
            status_interval: self.status_interval,
            give_up_after: self.give_up_after,
            clock: self.clock,
            telemetry_interval: self.telemetry_interval,
            store_stats: self.store_stats,
            disk: self.disk,
            power: self.power,
            power_model: self.power_model,
            idle_baseline: self.idle_baseline,
            counters: self.counters,
            profile: self.profile,
            profile_frequency: self.profile_frequency,
            calibration: self.calibration,
            antagonists: self.antagonist,
            faults: self.fault,
            timeline: self.timeline,
            io_dir: self.io_dir,
            io_file_size: self.io_file_size,
            random_ratio: None,
            block_sizes: None,
            step: None,
            quiet: false,
            metrics_addr: self.metrics_addr,
            metrics_linger: self.metrics_linger,
        }
    }
}

#[derive(Args, Debug)]
pub struct DurabilityArgs {
    /// The store (server stores: kvmeter starts them unless --store-opt addr= is given).
    #[arg(long, default_value = "rocksdb")]
    pub store: String,
    /// A store option, repeatable: --store-opt wal=false, --store-opt replicas=1.
    #[arg(long = "store-opt", value_name = "KEY=VALUE")]
    pub store_opt: Vec<String>,
    /// Servers: how long the writers write (default 10s).
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Servers: a fault during the writes, repeatable (as for run).
    #[arg(long, value_name = "SPEC")]
    pub fault: Vec<String>,
    /// Embedded stores: how many times the writer process is SIGKILLed (default 5).
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    pub kills: u32,
    /// Servers: concurrent writers.
    #[arg(long, default_value_t = 2)]
    pub writers: usize,
    /// Seed for the kill points.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output directory (new or empty).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Exit 1 when any acknowledged write was lost (for CI). Without it the exit is 0 whatever
    /// was lost; a check that could not read the writes back (unavailable) exits 1 always.
    #[arg(long)]
    pub fail_on_loss: bool,
}
