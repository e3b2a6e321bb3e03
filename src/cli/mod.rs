//! Command-line parsing (clap) and dispatch. Flags map onto a `plan::Request`; everything else
//! lives in the library so tests can call it in-process. One file per concern: `dist` (the
//! distributed commands), `compare`, `stores` (the store listing); the rest here.

use crate::error::{EXIT_OK, EXIT_USAGE};
use crate::experiment::job::Job;
use crate::plan::{Format, Request};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

mod compare;
mod dist;
mod stores;

pub use compare::CompareArgs;
pub use dist::{AgentArgs, CoordArgs, DistCommand, DistRunArgs};
pub use stores::stores_report;

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
    /// (default 16).
    #[arg(long, visible_alias = "connections", allow_negative_numbers = true)]
    pub threads: Option<i64>,
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
    /// Open-loop arrivals: poisson (exponential gaps, seeded; default) or fixed (every 1/rate).
    #[arg(long, value_name = "KIND", value_parser = ["fixed", "poisson"])]
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
    /// Latency clock: auto reads the TSC where the kernel's own clocksource is tsc (cheaper,
    /// same time base), else CLOCK_MONOTONIC; monotonic always uses CLOCK_MONOTONIC.
    #[arg(long, value_enum)]
    pub clock: Option<crate::plan::ClockChoice>,
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

pub(crate) fn request(
    command: &str,
    workload: Vec<String>,
    phase: Option<String>,
    c: CommonArgs,
) -> Request {
    Request {
        command: command.into(),
        workload_files: workload,
        workload_texts: vec![],
        props: c.props,
        store: c.store,
        store_opts: c.store_opt,
        phase,
        threads: c.threads,
        records: c.records,
        ops: c.ops,
        duration: c.duration,
        target: c.target,
        arrival: c.arrival,
        rate: c.rate,
        warmup: c.warmup,
        seed: c.seed,
        data_dir: c.data_dir,
        out: c.out,
        format: c.format,
        interval: c.interval,
        status_interval: c.status_interval,
        clock: c.clock,
        telemetry_interval: c.telemetry_interval,
        disk: c.disk,
        power: c.power,
        power_model: c.power_model,
        idle_baseline: c.idle_baseline,
        counters: c.counters,
        calibration: c.calibration,
        antagonists: c.antagonist,
        faults: c.fault,
        timeline: c.timeline,
        io_dir: c.io_dir,
        io_file_size: c.io_file_size,
        random_ratio: None,
        block_sizes: None,
        step: None,
        quiet: false,
    }
}

/// The measuring commands as a `Job` (checked and run the same way from the command line and
/// from an experiment file's steps); `None` for the others.
pub fn job_of(command: Command) -> Result<Option<Job>, crate::error::UsageError> {
    use crate::experiment::capacity::Settings;
    use crate::experiment::sweep::Param;
    Ok(Some(match command {
        Command::Run(r) => Job::Plan(request("run", r.workload, Some(r.phase), r.common)),
        Command::Suite(c) => Job::Plan(request("suite", vec![], None, c)),
        Command::Pressure(p) => {
            let mut r = request("pressure", p.workload, Some(p.phase), p.common);
            r.block_sizes = p.block_sizes;
            r.step = p.step;
            r.random_ratio = p.random_ratio;
            Job::Plan(r)
        }
        Command::Capacity(a) => {
            let settings = Settings {
                slo: Settings::parse_slo(&a.slo)?,
                require_achieved: a.require_achieved,
                start_rate: a.start_rate,
                max_rate: a.max_rate,
                factor: a.step_factor,
                precision: a.precision,
                repeat: a.repeat,
                max_points: a.max_points,
            };
            let mut r = request("capacity", a.workload, Some("both".into()), a.common);
            r.duration.get_or_insert_with(|| "10s".into());
            r.warmup.get_or_insert_with(|| "2s".into());
            Job::Capacity { base: r, settings }
        }
        Command::Sweep(a) => {
            let params = a
                .param
                .iter()
                .map(|p| Param::parse(p))
                .collect::<Result<Vec<_>, _>>()?;
            Job::Sweep {
                base: request("sweep", a.workload, Some(a.phase), a.common),
                params,
                repeat: a.repeat,
            }
        }
        _ => return Ok(None),
    }))
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

/// `kvmeter report DIR [--cost FILE]`, the same way for every kind of directory: an
/// experiment's results and findings are first made again from its steps' files (nothing is
/// done to other directories), then report draws the page of whatever kind `dir` is.
fn report(dir: &std::path::Path, cost: Option<&std::path::Path>) -> anyhow::Result<i32> {
    if let Some(c) = cost {
        // A bad cost file is refused before anything in the directory is written again.
        crate::report::cost::load(c)?;
    }
    crate::experiment::file::run::refresh(dir)?;
    let w = crate::report::html::write_with_cost(dir, cost)?;
    println!(
        "{} ({} figures, {:.0} KiB)",
        w.path.display(),
        w.figures,
        w.bytes as f64 / 1024.0
    );
    Ok(EXIT_OK)
}

/// Runs the command line; returns the process exit code.
pub fn main_with(args: Vec<std::ffi::OsString>) -> i32 {
    crate::panics::install();
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // Help and version are not errors; usage errors print clap's one-line reason.
            let code = if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
            let _ = e.print();
            return code;
        }
    };
    let result = match cli.command {
        Command::Report { dir, cost } => report(&dir, cost.as_deref()),
        Command::Durability(a) => {
            crate::experiment::durability::run(&crate::experiment::durability::Settings {
                store: a.store,
                store_opts: a.store_opt,
                duration: a.duration,
                faults: a.fault,
                kills: a.kills,
                writers: a.writers,
                out: a.out,
                seed: a.seed,
                fail_on_loss: a.fail_on_loss,
            })
        }
        Command::DurabilityWriter {
            store,
            dir,
            start,
            store_opt,
        } => Ok(crate::experiment::durability::writer_main(
            &store, &dir, start, &store_opt,
        )),
        Command::Stores { plugins } => stores::stores(&plugins),
        Command::Agent(a) => dist::agent(a),
        Command::Dist { command } => dist::run(command),
        Command::Doctor { data_dir } => {
            print!("{}", crate::doctor::report(data_dir.as_deref()));
            Ok(EXIT_OK)
        }
        Command::Calibrate {
            calibration,
            seconds,
            power,
        } => crate::calibrate::run(calibration, seconds, power),
        Command::Experiment(a) => crate::experiment::file::run::main(a),
        Command::Compare(a) => compare::compare(a),
        measuring => match job_of(measuring) {
            Ok(Some(job)) => job.execute(),
            Ok(None) => unreachable!("every other command is matched above"),
            Err(e) => Err(e.into()),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            crate::error::exit_code(&e)
        }
    }
}
