//! Runs a `Plan`: phases in order, each with its store opened once, N workers, and an interval
//! loop that closes an interval every `--interval` (and exactly at the end of warm-up), writes
//! it to the run directory at once, and shows progress. Design.md "Data flow".

pub mod arrivals;
pub mod datadir;
mod progress;
mod worker;

use crate::antagonist::io::IoAntagonists;
use crate::antagonist::schedule;
use crate::error::{EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};
use crate::machine;
use crate::measure::{Collector, Metric, Stats};
use crate::report::rundir::RunDir;
use crate::report::{self, PhaseSummary, Summary};
use crate::spec::Antagonist;
use crate::spec::{ClockChoice, Format, PhaseKind, PhasePlan, Plan};
use crate::store::{self, Store, StoreKind, StoreOptions};
use crate::workload::{CoreWorkload, Op};
use datadir::DataDir;
use progress::Progress;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

#[derive(Serialize)]
struct StoreManifest {
    name: String,
    version: String,
    options: std::collections::BTreeMap<String, String>,
    capabilities: store::Capabilities,
    /// Server stores: the server measured, started by kvmeter (managed) or the user's.
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<ServerManifest>,
}

#[derive(Serialize)]
struct ServerManifest {
    managed: bool,
    addr: String,
    /// The version the server itself reports.
    version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    command: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    log: Option<String>,
}

/// Store options as the manifest shows them: secrets replaced.
fn shown_options(
    o: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    o.iter()
        .map(|(k, v)| {
            let v = if k == "password" && !v.is_empty() {
                "(set, not shown)".to_string()
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect()
}

#[derive(Serialize)]
struct DataManifest {
    path: String,
    temporary: bool,
    reused: bool,
    placement: machine::Placement,
}

#[derive(Serialize)]
struct Measurement {
    clock: String,
    histogram_unit: &'static str,
    significant_digits: u8,
    highest_trackable_ns: u64,
    interval_s: f64,
    warmup: &'static str,
    values: &'static str,
}

#[derive(Serialize)]
struct Manifest<'a> {
    schema: &'static str,
    kvmeter_version: &'static str,
    git_revision: &'static str,
    command_line: Vec<String>,
    started_at: String,
    finished_at: Option<String>,
    status: String,
    seed: u64,
    store: StoreManifest,
    data_dir: DataManifest,
    machine: machine::Machine,
    measurement: Measurement,
    /// The calibration this run used, or null with why not.
    calibration: Option<crate::calibrate::Calibration>,
    calibration_note: String,
    plan: &'a Plan,
}

/// Set by SIGINT/SIGTERM; a second SIGINT exits at once (130). Installed once per process:
/// `kvmeter sweep` and `capacity` run many plans, and a Ctrl-C ends them all.
pub fn install_signals() -> Arc<AtomicBool> {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let _ = signal_hook::flag::register_conditional_shutdown(
                sig,
                EXIT_INTERRUPTED,
                flag.clone(),
            );
            let _ = signal_hook::flag::register(sig, flag.clone());
        }
        flag
    })
    .clone()
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Executes the plan; returns the exit code. Errors are setup failures (bad input: exit 2).
pub fn execute(plan: Plan) -> anyhow::Result<i32> {
    // Informational lines on stderr; the points of a sweep or capacity search (quiet plans)
    // leave them out. Warnings and errors always print.
    macro_rules! note {
        ($($arg:tt)*) => {
            if !plan.quiet {
                eprintln!($($arg)*);
            }
        };
    }
    let kind = store::find(&plan.store).expect("validated store");
    let mut opts = StoreOptions::parse(
        kind.name,
        kind.options,
        &plan
            .store_options
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>(),
    )?;
    (kind.check)(&opts)?;
    for w in &plan.warnings {
        eprintln!("warning: {w}");
    }
    // Input checks first: nothing is created before the input is accepted.
    let needs_peak = plan
        .antagonists
        .iter()
        .any(|a| matches!(a, Antagonist::Membw { share: Some(_), .. }));
    let machine_facts = machine::machine();
    let cal_path = plan
        .calibration
        .clone()
        .unwrap_or_else(crate::calibrate::default_path);
    let (calibration, calibration_note) = match crate::calibrate::load(&cal_path, &machine_facts) {
        Ok(c) => (Some(c), format!("loaded {}", cal_path.display())),
        Err(why) => {
            if plan.calibration.is_some() {
                return Err(crate::error::UsageError::new(format!("--calibration: {why}")).into());
            }
            (None, format!("none: {why}"))
        }
    };
    let peak_gbps = peak_bandwidth(calibration.as_ref());
    if needs_peak && peak_gbps.is_none() {
        return Err(crate::error::UsageError::new(format!(
            "--antagonist membw:share=… needs the calibrated memory bandwidth; run 'kvmeter calibrate' first ({calibration_note})"
        ))
        .into());
    }
    // A user's own server must answer before anything is created.
    let user_server_version = match kind.server {
        Some(spec) if !opts.str("addr").is_empty() => {
            let addr = opts.str("addr").to_string();
            Some((spec.ping)(&opts, &addr).map_err(|why| {
                crate::error::UsageError::new(format!(
                    "--store-opt addr={addr}: no {} answers there: {why} (is it running? leave addr out and kvmeter starts one)",
                    kind.name
                ))
            })?)
        }
        _ => None,
    };
    let data = DataDir::prepare(plan.data_dir.as_deref())?;
    // Antagonist files are laid out (and free space checked) before the run directory exists,
    // so a refusal leaves nothing behind.
    let io = prepare_io(&plan, &data)?;
    let mut rundir = RunDir::create(&plan.out)?;
    // A managed server: started now, stopped at the end (or by Drop on any early return).
    let mut server: Option<store::managed::Managed> = None;
    let mut server_manifest = None;
    if let Some(spec) = kind.server {
        if let Some(version) = user_server_version {
            server_manifest = Some(ServerManifest {
                managed: false,
                addr: opts.str("addr").to_string(),
                version,
                pid: None,
                command: vec![],
                log: None,
            });
        } else {
            let log = rundir.root().join("server.log");
            let m = store::managed::Managed::start(
                kind.name,
                spec,
                &opts,
                &data.store_dir()?,
                &log,
                Duration::from_secs(30),
            )?;
            note!(
                "server: started {} {} (pid {}) on {}; its output goes to {}",
                spec.binary,
                m.version,
                m.pid,
                m.addr,
                log.display()
            );
            opts.set("addr", &m.addr);
            server_manifest = Some(ServerManifest {
                managed: true,
                addr: m.addr.clone(),
                version: m.version.clone(),
                pid: Some(m.pid),
                command: m.command.clone(),
                log: Some("server.log".into()),
            });
            server = Some(m);
        }
    }
    if plan
        .phases
        .first()
        .map(|p| p.kind == PhaseKind::Run)
        .unwrap_or(false)
        && !data.has_store_data()
        && kind.capabilities.persistent
        && kind.server.is_none()
    {
        eprintln!(
            "warning: the data directory holds no data and the plan has no load phase: reads will return NOT_FOUND (run --phase load first, with the same --data-dir)"
        );
    }
    let (clock, clock_description) =
        crate::measure::clock::Clock::auto(plan.clock == ClockChoice::Auto);
    let interrupted = install_signals();
    let started_at = now_rfc3339();
    let mut manifest = Manifest {
        schema: report::MANIFEST_SCHEMA,
        kvmeter_version: env!("CARGO_PKG_VERSION"),
        git_revision: env!("KVMETER_GIT_REV"),
        command_line: std::env::args().collect(),
        started_at,
        finished_at: None,
        status: "running".into(),
        seed: plan.seed,
        store: StoreManifest {
            name: kind.name.into(),
            version: (kind.version)(),
            options: shown_options(opts.resolved()),
            capabilities: kind.capabilities,
            server: server_manifest,
        },
        data_dir: DataManifest {
            path: data.root().display().to_string(),
            temporary: data.is_temporary(),
            reused: data.reused,
            placement: machine::placement(data.root()),
        },
        machine: machine_facts,
        calibration: calibration.clone(),
        calibration_note,
        measurement: Measurement {
            clock: clock_description,
            histogram_unit: "ns",
            significant_digits: crate::measure::SIGFIG,
            highest_trackable_ns: crate::measure::HIGHEST_NS,
            interval_s: plan.interval.as_secs_f64(),
            warmup: "excluded from summary.json, kept in intervals.csv (warmup=1) and the HDR logs",
            values: "generated before the timer starts (YCSB generates them inside the timed call)",
        },
        plan: &plan,
    };
    rundir.write_json("manifest.json", &manifest)?;

    let telemetry = if plan.telemetry_interval.is_zero() {
        None
    } else {
        let device = manifest
            .data_dir
            .placement
            .block_device
            .clone()
            .or_else(|| Some(manifest.data_dir.placement.device.clone()));
        let cfg = crate::telemetry::Config {
            interval: plan.telemetry_interval,
            disk: plan.disk.clone(),
            pid: std::process::id(),
            server_pid: server.as_ref().map(|m| m.pid),
            root: crate::telemetry::procfs::Root::system(),
            power: plan.power.clone(),
            // A calibrated model replaces the default one; --power-model wins over both.
            model: match calibration.as_ref().and_then(|c| c.model.clone()) {
                Some(m) if !plan.power_model_given => m,
                _ => plan.power_model.clone(),
            },
            counters: plan.counters,
        };
        Some(crate::telemetry::Telemetry::start(
            cfg,
            device.as_deref(),
            rundir.root(),
        )?)
    };
    let mut idle: Option<(f64, String)> = None;
    if let Some(t) = &telemetry {
        for (what, why) in t.unavailable() {
            note!("telemetry: {what}: {why}");
        }
        if let Some(info) = t.power_info() {
            note!(
                "power: {}{} ({}): {}",
                if info.estimate { "ESTIMATE from " } else { "" },
                info.source,
                info.scope,
                info.detail
            );
            // A calibration measured with the same source gives the idle baseline.
            if let Some(c) = calibration
                .as_ref()
                .filter(|c| c.power_source.starts_with(&info.source))
            {
                if let Some(w) = c.idle_w {
                    idle = Some((
                        w,
                        format!("calibration of {} ({})", c.created_at, c.power_source),
                    ));
                }
            }
            if let Some(d) = plan.idle_baseline {
                eprintln!(
                    "power: measuring idle power for {:.1} s before the first phase",
                    d.as_secs_f64()
                );
                if let Some(w) = t.idle_watts(d) {
                    idle = Some((
                        w,
                        format!("--idle-baseline {:.1} s, {}", d.as_secs_f64(), info.source),
                    ));
                }
            }
        }
    }

    let mut summary = Summary {
        schema: report::SUMMARY_SCHEMA.into(),
        kvmeter_version: env!("CARGO_PKG_VERSION").into(),
        status: "running".into(),
        error: None,
        seed: plan.seed,
        warnings: plan.warnings.clone(),
        phases: vec![],
    };
    let mut progress = Progress::new(plan.status_interval);
    let mut ycsb_texts = Vec::new();
    let mut exit = EXIT_OK;
    let n = plan.phases.len();
    for (i, phase) in plan.phases.iter().enumerate() {
        if interrupted.load(Ordering::Relaxed) {
            break;
        }
        let result = run_phase(
            &plan,
            kind,
            &opts,
            &data,
            &mut rundir,
            phase,
            i,
            n,
            &interrupted,
            &mut progress,
            &clock,
            telemetry.as_ref(),
            idle.clone(),
            io.as_ref(),
            peak_gbps,
        );
        let (ps, ycsb) = match result {
            Ok(r) => r,
            Err(e) => {
                let ps = failed_phase(phase, format!("{e:#}"));
                (ps, None)
            }
        };
        let mut ps = ps;
        if ps.outcome == "failed" {
            if let Some(m) = server.as_mut() {
                let why = match m.exited() {
                    Some(status) => format!("the {} server exited ({status})", kind.name),
                    None => format!("the {} server is still running", kind.name),
                };
                let lines = m.last_lines(10);
                eprintln!(
                    "server: {why}; its last output ({}):\n{lines}",
                    m.log.display()
                );
                if let Some(e) = ps.error.as_mut() {
                    e.push_str(&format!("; {why}"));
                }
            }
        }
        if let Some(w) = ps.open_loop.as_ref().and_then(|o| o.warning.as_ref()) {
            eprintln!("WARNING: phase {}: {w}", ps.name);
            summary.warnings.push(format!("phase {}: {w}", ps.name));
        }
        let outcome = ps.outcome.clone();
        if let Some(e) = &ps.error {
            eprintln!("error: phase {}: {e}", ps.name);
            summary
                .error
                .get_or_insert_with(|| format!("phase {}: {e}", ps.name));
        }
        summary.phases.push(ps);
        if let Some(t) = ycsb {
            rundir.write_file(&format!("ycsb/{}.txt", phase.name), t.as_bytes())?;
            ycsb_texts.push((phase.name.clone(), t));
        }
        rundir.write_json("summary.json", &summary)?;
        match outcome.as_str() {
            "failed" => {
                exit = EXIT_FAILED;
                break;
            }
            "interrupted" => {
                exit = EXIT_INTERRUPTED;
                break;
            }
            _ => {}
        }
    }
    if interrupted.load(Ordering::Relaxed) && exit == EXIT_OK {
        exit = EXIT_INTERRUPTED;
    }
    progress.finish();
    if let Some(t) = telemetry {
        t.stop();
    }
    if let Some(mut m) = server.take() {
        match m.stop() {
            Ok(how) => note!("server: {} {how}", kind.name),
            Err(e) => eprintln!("server: stopping {} (pid {}): {e}", kind.name, m.pid),
        }
    }
    summary.status = match exit {
        EXIT_OK => "completed",
        EXIT_INTERRUPTED => "interrupted",
        _ => "failed",
    }
    .into();
    rundir.write_json("summary.json", &summary)?;
    manifest.status = summary.status.clone();
    manifest.finished_at = Some(now_rfc3339());
    rundir.write_json("manifest.json", &manifest)?;

    match plan.format {
        _ if plan.quiet => {}
        Format::Table => {
            let bold = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            print!("{}", report::table::render(&summary.phases, bold));
        }
        Format::Ycsb => {
            for (name, t) in &ycsb_texts {
                println!("# kvmeter phase {name}");
                print!("{t}");
            }
        }
        Format::Json => println!("{}", serde_json::to_string_pretty(&summary)?),
    }
    note!("results: {}", rundir.root().display());
    if exit == EXIT_INTERRUPTED {
        eprintln!("interrupted: completed phases and intervals are saved");
    }
    Ok(exit)
}

/// Instances the pressure scale drives (0..4); `--antagonist io:` instances come after them.
fn pressure_instances(plan: &Plan) -> usize {
    if plan.phases.iter().any(|p| p.pressure.is_some()) {
        schedule::INSTANCES
    } else {
        0
    }
}

fn prepare_io(plan: &Plan, data: &DataDir) -> anyhow::Result<Option<IoAntagonists>> {
    let generic: usize = plan
        .antagonists
        .iter()
        .map(|a| match a {
            Antagonist::Io { instances, .. } => *instances,
            _ => 0,
        })
        .sum();
    let n = pressure_instances(plan) + generic;
    if n == 0 {
        return Ok(None);
    }
    let rr = plan
        .antagonists
        .iter()
        .find_map(|a| match a {
            Antagonist::Io { random_ratio, .. } => Some(*random_ratio),
            _ => None,
        })
        .unwrap_or(plan.random_ratio);
    let parent = plan
        .io_dir
        .clone()
        .unwrap_or_else(|| data.root().to_path_buf());
    eprintln!(
        "antagonists: writing {n} files of {:.1} GiB in {} (O_DIRECT) ...",
        plan.io_file_size as f64 / (1u64 << 30) as f64,
        parent.display()
    );
    Ok(Some(IoAntagonists::prepare(
        &parent,
        n,
        plan.io_file_size,
        rr,
    )?))
}

/// Starts the `--antagonist` loads of a run phase.
struct Running {
    membw: Vec<crate::antagonist::MemBw>,
    cpu: Vec<crate::antagonist::Cpu>,
    io_before: Vec<crate::antagonist::io::Sample>,
    started: Instant,
}

/// The calibrated memory bandwidth with all threads (for `membw:share=`).
fn peak_bandwidth(c: Option<&crate::calibrate::Calibration>) -> Option<f64> {
    c?.memory_bandwidth
        .iter()
        .map(|b| b.gb_per_s)
        .reduce(f64::max)
}

fn start_antagonists(plan: &Plan, io: Option<&IoAntagonists>, peak_gbps: Option<f64>) -> Running {
    let mut r = Running {
        membw: vec![],
        cpu: vec![],
        io_before: io.map(|a| a.sample()).unwrap_or_default(),
        started: Instant::now(),
    };
    let mut next = pressure_instances(plan);
    for a in &plan.antagonists {
        match a {
            Antagonist::Io {
                block_size,
                write_ratio,
                instances,
                ..
            } => {
                if let Some(io) = io {
                    for i in next..next + instances {
                        io.set(i, Some(*write_ratio), *block_size);
                    }
                }
                next += instances;
            }
            Antagonist::Membw {
                threads,
                gb_per_s,
                share,
                cpus,
            } => {
                let target = gb_per_s.or_else(|| share.and_then(|s| peak_gbps.map(|p| s * p)));
                r.membw
                    .push(crate::antagonist::MemBw::start(*threads, target, cpus))
            }
            Antagonist::Cpu {
                threads,
                duty,
                cpus,
            } => r
                .cpu
                .push(crate::antagonist::Cpu::start(*threads, *duty, cpus)),
        }
    }
    r
}

fn stop_antagonists(plan: &Plan, io: Option<&IoAntagonists>, r: Running) -> Vec<serde_json::Value> {
    let secs = r.started.elapsed().as_secs_f64();
    let mut out = vec![];
    let mut next = pressure_instances(plan);
    let after = io.map(|a| a.sample()).unwrap_or_default();
    let (mut membw, mut cpu) = (r.membw.into_iter(), r.cpu.into_iter());
    for a in &plan.antagonists {
        match a {
            Antagonist::Io {
                block_size,
                write_ratio,
                random_ratio,
                instances,
            } => {
                let mut d = crate::antagonist::io::Sample::default();
                for i in next..next + instances {
                    if let (Some(x), Some(y)) = (after.get(i), r.io_before.get(i)) {
                        let m = x.minus(y);
                        d.reads += m.reads;
                        d.writes += m.writes;
                        d.bytes += m.bytes;
                        d.latency_ns += m.latency_ns;
                    }
                    if let Some(io) = io {
                        io.set(i, None, *block_size);
                    }
                }
                next += instances;
                out.push(serde_json::json!({
                    "kind": "io", "block_size": block_size, "write_ratio": write_ratio,
                    "random_ratio": random_ratio, "instances": instances,
                    "achieved_read_iops": d.reads as f64 / secs,
                    "achieved_write_iops": d.writes as f64 / secs,
                    "achieved_mb_per_s": d.bytes as f64 / secs / 1e6,
                    "avg_latency_us": if d.ops() > 0 { d.latency_ns as f64 / d.ops() as f64 / 1000.0 } else { 0.0 },
                    "error": io.and_then(|x| x.error()),
                }));
            }
            Antagonist::Membw { .. } => {
                if let Some(m) = membw.next() {
                    out.push(
                        serde_json::to_value(
                            serde_json::json!({"kind": "membw", "report": m.stop()}),
                        )
                        .unwrap_or_default(),
                    );
                }
            }
            Antagonist::Cpu { .. } => {
                if let Some(c) = cpu.next() {
                    out.push(serde_json::json!({"kind": "cpu", "report": c.stop()}));
                }
            }
        }
    }
    out
}

fn failed_phase(phase: &PhasePlan, error: String) -> PhaseSummary {
    let mut ps = empty_summary(phase);
    ps.outcome = "failed".into();
    ps.error = Some(error);
    ps
}

fn empty_summary(phase: &PhasePlan) -> PhaseSummary {
    PhaseSummary {
        name: phase.name.clone(),
        kind: match phase.kind {
            PhaseKind::Load => "load",
            PhaseKind::Run => "run",
            PhaseKind::Clear => "clear",
        }
        .into(),
        workload_files: phase.workload_files.clone(),
        threads: phase.threads,
        outcome: "completed".into(),
        error: None,
        started_at: now_rfc3339(),
        wall_seconds: 0.0,
        warmup_seconds: phase.warmup.as_secs_f64(),
        measured_seconds: 0.0,
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

/// YCSB's split of operations over threads (§8.2): thread i gets n/t, plus one if i < n%t.
pub fn split_ops(total: u64, threads: usize, i: usize) -> u64 {
    if total == 0 {
        return 0;
    }
    let t = threads as u64;
    total / t + u64::from((i as u64) < total % t)
}

#[allow(clippy::too_many_arguments)]
fn run_phase(
    plan: &Plan,
    kind: &StoreKind,
    opts: &StoreOptions,
    data: &DataDir,
    rundir: &mut RunDir,
    phase: &PhasePlan,
    index: usize,
    phases: usize,
    interrupted: &AtomicBool,
    progress: &mut Progress,
    clock: &crate::measure::clock::Clock,
    telemetry: Option<&crate::telemetry::Telemetry>,
    idle: Option<(f64, String)>,
    io: Option<&IoAntagonists>,
    peak_gbps: Option<f64>,
) -> anyhow::Result<(PhaseSummary, Option<String>)> {
    let mut ps = empty_summary(phase);
    let wall0 = Instant::now();
    if phase.kind == PhaseKind::Clear {
        match kind.server {
            Some(spec) => (spec.clear)(opts)?,
            None => data.clear()?,
        }
        ps.wall_seconds = wall0.elapsed().as_secs_f64();
        return Ok((ps, None));
    }
    let cfg = phase
        .workload
        .clone()
        .expect("load/run phases have a workload");
    let load = phase.kind == PhaseKind::Load;
    let store_dir = data.store_dir()?;
    let store: Box<dyn Store> = (kind.open)(&store_dir, opts)?;
    let workload = CoreWorkload::new(cfg);
    let ops = if load {
        vec![Op::Insert]
    } else {
        workload.ops()
    };
    if workload.cfg.dataintegrity && !matches!(opts.str("pipeline"), "" | "1") {
        eprintln!(
            "warning: phase {}: dataintegrity=true checks every read's value, so pipeline={} is not used (each operation waits for its reply)",
            phase.name,
            opts.str("pipeline")
        );
    }
    if !kind.capabilities.scan && ops.contains(&Op::Scan) {
        ps.not_applicable.push("SCAN".into());
    }
    // Threads never outnumber operations (§8.2); the rate is computed after that clamp
    // (quirk 16: YCSB computes it before and undershoots the target).
    let threads = if phase.operations > 0 {
        phase.threads.min(phase.operations as usize)
    } else {
        phase.threads
    };
    ps.threads = threads;
    let paced = phase.target.is_some() || phase.open_loop.is_some();
    let mut collector = Collector::new(&metrics_for(load, &ops, workload.cfg.dataintegrity), paced);
    let mut sessions = Vec::with_capacity(threads);
    for _ in 0..threads {
        sessions.push((store.session()?, collector.worker()));
    }
    let arrivals = phase
        .open_loop
        .as_ref()
        .map(|o| arrivals::Arrivals::new(o, clock.now(), phase.operations));
    let schedule_at = |now: u64| -> Option<report::rundir::ScheduleFigures> {
        match (&phase.open_loop, phase.target, &arrivals) {
            (Some(o), _, Some(a)) => Some(report::rundir::ScheduleFigures {
                offered_ops_per_s: o.rate,
                behind_ms: Some(a.behind_ns(now) as f64 / 1e6),
            }),
            (None, Some(t), _) => Some(report::rundir::ScheduleFigures {
                offered_ops_per_s: t,
                behind_ms: None,
            }),
            _ => None,
        }
    };
    let mut max_behind_ms = 0f64;
    let shared = worker::Shared {
        workload: &workload,
        stop: AtomicBool::new(false),
        fatal: Mutex::new(None),
        finished: AtomicUsize::new(0),
        end_ns: AtomicU64::new(0),
        t0: Instant::now(),
        load,
        tick_ns: phase
            .target
            .map(|t| ((threads as f64) * 1e9 / t).max(1.0) as u64),
        arrivals: arrivals.as_ref(),
        seed: plan.seed,
        clock: clock.clone(),
        counters: plan.counters,
    };
    if let Some(t) = telemetry {
        t.begin(&phase.name);
    }
    let running = (!load).then(|| start_antagonists(plan, io, peak_gbps));
    // The pressure scale: per-step stats, antagonist samples at each step boundary.
    let pressure = phase.pressure.clone().filter(|_| io.is_some());
    let mut steps: Vec<Stats> = match &pressure {
        Some(_) => (0..schedule::STEPS)
            .map(|_| collector.empty_stats())
            .collect(),
        None => vec![],
    };
    let mut step_samples: Vec<Vec<crate::antagonist::io::Sample>> = vec![];
    let mut step_starts: Vec<Duration> = vec![];
    let apply_step = |w: usize,
                      samples: &mut Vec<Vec<crate::antagonist::io::Sample>>,
                      starts: &mut Vec<Duration>,
                      at: Duration| {
        if let (Some(pp), Some(io)) = (&pressure, io) {
            samples.push(io.sample());
            starts.push(at);
            for (i, wr) in schedule::step(w).iter().enumerate() {
                io.set(i, *wr, pp.block_size);
            }
        }
    };
    let phase_wall_start = SystemTime::now();
    ps.started_at = humantime::format_rfc3339_millis(phase_wall_start).to_string();
    let mut measured = collector.empty_stats();
    let mut interval = collector.empty_stats();
    let mut interval_no = 0usize;
    let mut was_interrupted = false;
    let mut total_done = 0u64;
    let mut boundary_start = shared.t0;
    type WorkerEnd = (
        Vec<report::ErrorSample>,
        Vec<crate::telemetry::counters::CounterFigures>,
    );
    let (samples, per_worker) = std::thread::scope(|s| -> anyhow::Result<WorkerEnd> {
        let handles: Vec<_> = sessions
            .into_iter()
            .enumerate()
            .map(|(i, (session, rec))| {
                let sh = &shared;
                // Open loop: the shared schedule counts the phase's operations.
                let my_ops = if phase.open_loop.is_some() {
                    0
                } else {
                    split_ops(phase.operations, threads, i)
                };
                std::thread::Builder::new()
                    .name(format!("kvm-worker-{i}"))
                    .spawn_scoped(s, move || worker::run(sh, i, session, rec, my_ops))
                    .expect("spawn worker")
            })
            .collect();
        let t0 = shared.t0;
        let warmup_end = (!phase.warmup.is_zero()).then(|| t0 + phase.warmup);
        let mut next_boundary = warmup_end.unwrap_or(t0 + plan.interval);
        let deadline = phase.duration.map(|d| t0 + d);
        let grace =
            (plan.interval / 10).clamp(Duration::from_millis(5), Duration::from_millis(100));
        let mut current_step: Option<usize> = None;
        let step_of = |t: Duration| step_index(pressure.as_ref(), phase.warmup, t);
        if let Some(w) = step_of(Duration::ZERO) {
            apply_step(w, &mut step_samples, &mut step_starts, Duration::ZERO);
            current_step = Some(w);
        }
        loop {
            let now = Instant::now();
            let done = shared.finished.load(Ordering::Acquire) == threads;
            if done {
                break;
            }
            if interrupted.load(Ordering::Relaxed) && !shared.stop.load(Ordering::Relaxed) {
                was_interrupted = true;
                shared.stop.store(true, Ordering::Relaxed);
            }
            if let Some(d) = deadline {
                if now >= d {
                    shared.stop.store(true, Ordering::Relaxed);
                }
            }
            if now >= next_boundary {
                let b = next_boundary - t0;
                if let Some(w) = step_of(b) {
                    if current_step != Some(w) {
                        apply_step(w, &mut step_samples, &mut step_starts, b);
                        current_step = Some(w);
                    }
                }
                if warmup_end == Some(next_boundary) {
                    // Telemetry's measured window starts with the operations'.
                    if let Some(t) = telemetry {
                        t.restart_window();
                    }
                }
                collector.close_interval(&mut interval, grace);
                let in_warmup = warmup_end.map(|w| next_boundary <= w).unwrap_or(false);
                let (a, b) = (
                    (boundary_start - t0).as_secs_f64(),
                    (next_boundary - t0).as_secs_f64(),
                );
                let sched = schedule_at(clock.now());
                if let Some(behind) = sched.and_then(|f| f.behind_ms) {
                    max_behind_ms = max_behind_ms.max(behind);
                }
                rundir.append_interval(
                    &phase.name,
                    interval_no,
                    a,
                    b,
                    in_warmup,
                    &interval,
                    sched,
                )?;
                rundir.log_histograms(&phase.name, phase_wall_start, a, b, &interval)?;
                total_done += interval.total_ops();
                progress.interval(
                    index,
                    phases,
                    phase,
                    &interval,
                    b - a,
                    total_done,
                    t0.elapsed(),
                );
                if !in_warmup {
                    measured.add(&interval);
                    if let Some(w) = step_of(boundary_start - t0) {
                        steps[w].add(&interval);
                    }
                }
                interval.reset();
                interval_no += 1;
                boundary_start = next_boundary;
                next_boundary += plan.interval;
                continue;
            }
            let mut wake = next_boundary.min(now + Duration::from_millis(10));
            if let Some(d) = deadline {
                wake = wake.min(d.max(now));
            }
            std::thread::sleep(wake.saturating_duration_since(now));
        }
        let mut samples = Vec::new();
        let mut per_worker = Vec::new();
        for h in handles {
            let (s, c) = h
                .join()
                .map_err(|_| anyhow::anyhow!("a worker thread panicked"))?;
            samples.extend(s);
            per_worker.extend(c);
        }
        Ok((samples, per_worker))
    })?;
    // The last, partial interval.
    collector.drain(&mut interval);
    let end = Duration::from_nanos(shared.end_ns.load(Ordering::Relaxed));
    let t_start = boundary_start - shared.t0;
    let in_warmup = !phase.warmup.is_zero() && end <= phase.warmup;
    if interval.total_ops() > 0 || interval_no == 0 {
        rundir.append_interval(
            &phase.name,
            interval_no,
            t_start.as_secs_f64(),
            end.as_secs_f64(),
            in_warmup,
            &interval,
            // The backlog when the phase ended, not after the workers were joined.
            schedule_at(
                arrivals
                    .as_ref()
                    .map(|a| a.start() + end.as_nanos() as u64)
                    .unwrap_or(0),
            ),
        )?;
        rundir.log_histograms(
            &phase.name,
            phase_wall_start,
            t_start.as_secs_f64(),
            end.as_secs_f64(),
            &interval,
        )?;
        interval_no += 1;
    }
    if !in_warmup {
        measured.add(&interval);
        if let Some(w) = step_index(pressure.as_ref(), phase.warmup, boundary_start - shared.t0) {
            steps[w].add(&interval);
        }
    }
    if let (Some(pp), Some(io)) = (&pressure, io) {
        step_samples.push(io.sample());
        step_starts.push(end);
        io.idle_all();
        ps.pressure = Some(pressure_result(
            pp,
            io,
            &steps,
            &step_samples,
            &step_starts,
            plan.random_ratio,
        ));
        rundir.append_pressure(&phase.name, ps.pressure.as_ref().unwrap())?;
        if let Some(e) = io.error() {
            ps.outcome = "failed".into();
            ps.error = Some(format!("an I/O antagonist failed: {e}"));
        }
    }
    if let Some(r) = running {
        ps.antagonists = stop_antagonists(plan, io, r);
    }
    ps.telemetry = telemetry.map(|t| t.end());
    if let Some(t) = ps.telemetry.as_mut() {
        t.counters_per_worker = per_worker;
    }
    let close_result = store.close();
    ps.intervals = interval_no;
    ps.wall_seconds = wall0.elapsed().as_secs_f64();
    let measured_from = if in_warmup {
        end
    } else {
        phase.warmup.min(end)
    };
    ps.measured_seconds = (end - measured_from).as_secs_f64();
    ps.fill(&measured);
    ps.error_samples = samples;
    if let (Some(o), Some(_)) = (&phase.open_loop, &arrivals) {
        ps.open_loop = Some(open_loop_summary(
            o,
            threads,
            &measured,
            ps.measured_seconds,
            max_behind_ms,
            ps.telemetry.as_ref(),
        ));
    }
    if let Some(p) = ps.telemetry.as_ref().and_then(|t| t.power.as_ref()) {
        ps.energy = Some(report::Energy::derive(
            p,
            ps.operations,
            p_seconds(&ps),
            idle,
        ));
    }
    let fatal = shared
        .fatal
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if let Some(f) = fatal {
        ps.outcome = "failed".into();
        ps.error = Some(f);
    } else if let Err(e) = close_result {
        ps.outcome = "failed".into();
        ps.error = Some(format!("{e:#}"));
    } else if was_interrupted {
        ps.outcome = "interrupted".into();
    }
    let ycsb = report::ycsb::report(
        &measured,
        (ps.measured_seconds * 1000.0) as u64,
        measured.transactions(),
        &plan.ycsb_percentiles,
    );
    Ok((ps, Some(ycsb)))
}

/// Offered against achieved load; a schedule kvmeter did not serve gets a loud warning that
/// says what was busy.
fn open_loop_summary(
    o: &crate::spec::OpenLoop,
    workers: usize,
    measured: &Stats,
    seconds: f64,
    max_behind_ms: f64,
    telemetry: Option<&crate::telemetry::PhaseTelemetry>,
) -> report::OpenLoopSummary {
    let done = measured.transactions();
    let achieved = if seconds > 0.0 {
        done as f64 / seconds
    } else {
        0.0
    };
    let ratio = achieved / o.rate;
    // A Poisson process's count over the window has stddev √(rate·seconds): 3 sigma of
    // slack, so a schedule that was served is not called short by chance.
    let expected = o.rate * seconds;
    let slack = match o.arrival {
        crate::spec::Arrival::Fixed => 0.0,
        crate::spec::Arrival::Poisson if expected > 0.0 => 3.0 / expected.sqrt(),
        _ => 0.0,
    };
    let lag = measured
        .lag
        .as_deref()
        .map(report::Latency::from_ns)
        .unwrap_or_else(|| report::Latency::from_ns(&crate::measure::new_histogram()));
    let short = ratio < 0.99 - slack;
    let behind = max_behind_ms > 100.0;
    let warning = (short || behind).then(|| {
        let cpu = telemetry
            .and_then(|t| t.process.as_ref())
            .map(|p| format!("; kvmeter itself used {:.0} % of a CPU", p.cpu_pct))
            .unwrap_or_default();
        format!(
            "the open-loop schedule was not served: achieved {:.0} of {:.0} offered ops/s ({:.1} %), the schedule fell up to {:.1} ms behind and sends were up to {:.1} ms late (p99 {:.3} ms); all {workers} workers were busy{cpu}. Latency from intended start includes this queueing, but the offered load was not delivered: lower --rate, or raise --threads if kvmeter (not the store) is the limit",
            achieved,
            o.rate,
            ratio * 100.0,
            max_behind_ms,
            lag.max / 1000.0,
            lag.p99 / 1000.0,
        )
    });
    report::OpenLoopSummary {
        arrival: o.arrival.name().into(),
        offered_ops_per_s: o.rate,
        achieved_ops_per_s: achieved,
        achieved_ratio: ratio,
        workers,
        send_lag_us: lag,
        max_behind_ms,
        kept_up: !(short || behind),
        warning,
    }
}

/// The pressure step (w0..w25) in progress `t` after the phase started, if any.
fn step_index(
    pressure: Option<&crate::spec::PressurePhase>,
    warmup: Duration,
    t: Duration,
) -> Option<usize> {
    let pp = pressure?;
    let since = t.checked_sub(warmup)?;
    let w = (since.as_nanos() / pp.step.as_nanos().max(1)) as usize;
    (w < schedule::STEPS).then_some(w)
}

fn pressure_result(
    pp: &crate::spec::PressurePhase,
    io: &IoAntagonists,
    steps: &[Stats],
    samples: &[Vec<crate::antagonist::io::Sample>],
    starts: &[Duration],
    random_ratio: f64,
) -> report::PressureResult {
    let pct = |st: &Stats, p: f64| -> BTreeMap<String, f64> {
        st.metrics()
            .filter(|(m, _)| report::is_store_call(*m))
            .map(|(m, o)| {
                (
                    m.name().to_string(),
                    crate::measure::percentile::value_at(&o.ok, p) as f64 / 1000.0,
                )
            })
            .collect()
    };
    let mut out = Vec::new();
    let n = samples.len().saturating_sub(1).min(steps.len());
    for w in 0..n {
        let secs = (starts[w + 1].saturating_sub(starts[w]))
            .as_secs_f64()
            .max(1e-9);
        let st = &steps[w];
        let ops: u64 = st
            .metrics()
            .filter(|(m, _)| report::is_store_call(*m))
            .map(|(_, o)| o.count())
            .sum();
        let mut d = crate::antagonist::io::Sample::default();
        for (a, b) in samples[w + 1]
            .iter()
            .zip(&samples[w])
            .take(schedule::INSTANCES)
        {
            let m = a.minus(b);
            d.reads += m.reads;
            d.writes += m.writes;
            d.bytes += m.bytes;
            d.latency_ns += m.latency_ns;
        }
        out.push(report::PressureStep {
            step: format!("w{w}"),
            start_s: starts[w].as_secs_f64(),
            seconds: secs,
            write_ratios: schedule::step(w).to_vec(),
            ops_per_s: ops as f64 / secs,
            normalized_pressure: 0.0,
            p50_us: pct(st, 50.0),
            p99_us: pct(st, 99.0),
            p99_9_us: pct(st, 99.9),
            antagonist_read_iops: d.reads as f64 / secs,
            antagonist_write_iops: d.writes as f64 / secs,
            antagonist_mb_per_s: d.bytes as f64 / secs / 1e6,
            antagonist_avg_latency_us: if d.ops() > 0 {
                d.latency_ns as f64 / d.ops() as f64 / 1000.0
            } else {
                0.0
            },
        });
    }
    let rho0 = out.first().map(|s| s.ops_per_s).unwrap_or(0.0);
    for s in &mut out {
        s.normalized_pressure = schedule::normalized_pressure(rho0, s.ops_per_s);
    }
    let pressures: Vec<f64> = out.iter().map(|s| s.normalized_pressure).collect();
    let mean = |r: std::ops::Range<usize>| -> f64 {
        let v: Vec<f64> = r.filter_map(|i| pressures.get(i).copied()).collect();
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    report::PressureResult {
        block_size_kib: pp.block_size / 1024,
        step_seconds: pp.step.as_secs_f64(),
        random_ratio,
        file_size_bytes: io.file_size,
        scale: schedule::scale(&pressures)
            .into_iter()
            .map(|i| format!("w{i}"))
            .collect(),
        read_only_mean_pressure: mean(1..5),
        write_mean_pressure: mean(5..schedule::STEPS),
        steps: out,
    }
}

/// The energy window's length (telemetry's, which matches the measured window).
fn p_seconds(ps: &PhaseSummary) -> f64 {
    ps.telemetry
        .as_ref()
        .map(|t| t.seconds)
        .unwrap_or(ps.measured_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_split_like_ycsb() {
        let v: Vec<u64> = (0..3).map(|i| split_ops(10, 3, i)).collect();
        assert_eq!(v, [4, 3, 3]);
        assert_eq!(split_ops(0, 4, 2), 0);
        assert_eq!(
            (0..4).map(|i| split_ops(1_000_003, 4, i)).sum::<u64>(),
            1_000_003
        );
    }

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
