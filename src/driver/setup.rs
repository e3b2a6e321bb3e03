//! `Run::prepare`: everything a run needs before its first phase, in the order that keeps
//! the promise "nothing is created before the input is accepted": checks first (calibration,
//! a user's server answering), then the data directory, antagonist files, the run directory,
//! a managed server, the manifest and telemetry.

use super::{note, DataDir, Run};
use crate::calibrate::Calibration;
use crate::error::UsageError;
use crate::machine;
use crate::measure::clock::Clock;
use crate::plan::{Antagonist, ClockChoice, PhaseKind, Plan};
use crate::report::manifest::{
    shown_options, DataManifest, Manifest, Measurement, ServerManifest, StoreManifest,
};
use crate::report::rundir::RunDir;
use crate::report::{self, RunStatus, Summary};
use crate::store::cluster::{Cluster, StartCtx};
use crate::store::{self, StoreKind, StoreOptions};
use crate::telemetry::Telemetry;
use std::sync::Arc;
use std::time::Duration;

impl<'p> Run<'p> {
    pub(super) fn prepare(plan: &'p Plan) -> anyhow::Result<Self> {
        let adapter = store::find(&plan.store).expect("validated store");
        crate::panics::install();
        let panics0 = crate::panics::count();
        let mut opts = plan.store_options.clone();
        for w in &plan.warnings {
            errln!("warning: {w}");
        }
        // Input checks first: nothing is created before the input is accepted.
        let machine_facts = machine::machine();
        let (calibration, calibration_note) = load_calibration(plan, &machine_facts)?;
        let peak_gbps = peak_bandwidth(calibration.as_ref());
        check_peak_known(plan, peak_gbps, &calibration_note)?;
        let user_server = check_user_server(adapter, &opts)?;
        let data = DataDir::prepare(plan.data_dir.as_deref())?;
        // Antagonist files are laid out (and free space checked) before the run directory
        // exists, so a refusal leaves nothing behind.
        let io = super::antagonists::prepare_io(plan, &data)?;
        let rundir = RunDir::create(&plan.out)?;
        if store::plugin::is_plugin(adapter.name) {
            store::plugin::crash::arm(rundir.root(), adapter.name);
        }
        let held_files = data.holds_files();
        let (server, server_manifest) = match user_server {
            Some(m) => (None, Some(m)),
            None => start_server(plan, adapter, &mut opts, &data, &rundir)?,
        };
        warn_if_nothing_loaded(plan, adapter, &data);
        if server.is_some() && !held_files {
            warn_if_server_starts_empty(plan, adapter, &opts);
        }
        let managed_pid = server.as_ref().map(|c| c.main().pid);
        if let Some(why) = super::reply_wait::resolve(&mut opts, managed_pid) {
            note(plan, format_args!("{why}"));
        }
        let (clock, clock_description) = Clock::auto(plan.clock == ClockChoice::Auto);
        let interrupted = super::install_signals();
        // The run's clock: telemetry's time_s counts from here, and the manifest's started_at
        // is this instant on the wall clock (report.html draws phases on it).
        let (run_t0, run_wall) = (std::time::Instant::now(), std::time::SystemTime::now());
        let manifest = Manifest {
            schema: report::MANIFEST_SCHEMA,
            kvmeter_version: env!("CARGO_PKG_VERSION"),
            git_revision: env!("KVMETER_GIT_REV"),
            command_line: std::env::args().collect(),
            started_at: humantime::format_rfc3339_millis(run_wall).to_string(),
            finished_at: None,
            status: RunStatus::Running,
            seed: plan.seed,
            store: StoreManifest {
                name: adapter.name.into(),
                version: store::version_of(adapter),
                options: shown_options(&opts.applied()),
                capabilities: adapter.capabilities,
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
            measurement: Measurement::new(clock_description, plan.interval.as_secs_f64()),
            plan,
        };
        rundir.write_json("manifest.json", &manifest)?;
        // Both status files from the start, so that every ending (a second Ctrl-C in the first
        // phase, SIGKILL) has a summary.json to mark, not only a manifest.
        let mut summary = Summary::running(plan);
        if let Some(c) = server.as_ref().filter(|c| c.members.len() > 1) {
            // Telemetry sums every member (`telemetry::server`); a profile follows one.
            if plan.profile_hz.is_some() {
                let line = format!(
                    "--profile follows one server process, pid {} ({}), of the {} that kvmeter started; telemetry's server CPU, RSS and switches sum them all",
                    c.main().pid,
                    c.members[0].label(),
                    c.members.len()
                );
                errln!("WARNING: {line}");
                summary.warnings.push(line);
            }
        }
        rundir.write_json("summary.json", &summary)?;
        let config = plan
            .telemetry_config(
                server.as_ref().map(|c| c.live_pids()).unwrap_or_default(),
                calibration.as_ref(),
                adapter.profile_symbols,
            )
            .map(|c| profile_user_server(c, adapter, &opts));
        let telemetry = start_telemetry(config, &rundir, &manifest, run_t0)?;
        let idle = telemetry
            .as_ref()
            .and_then(|t| idle_power(plan, t, calibration.as_ref()));
        let live = super::live::Live::new(rundir.root(), plan);
        Ok(Run {
            plan,
            adapter,
            opts,
            data,
            rundir,
            server: server.map(|c| Arc::new(std::sync::Mutex::new(c))),
            manifest,
            telemetry,
            idle,
            io,
            peak_gbps,
            clock,
            interrupted,
            progress: super::Progress::new(plan.status_interval),
            summary,
            ycsb_texts: Vec::new(),
            panics0,
            finished: false,
            live,
        })
    }
}

/// `--antagonist membw:share=…` is a share of the calibrated memory bandwidth: refused
/// without a calibration that measured it.
fn check_peak_known(
    plan: &Plan,
    peak_gbps: Option<f64>,
    calibration_note: &str,
) -> Result<(), UsageError> {
    let needs_peak = plan
        .antagonists
        .iter()
        .any(|a| matches!(a, Antagonist::Membw { share: Some(_), .. }));
    if needs_peak && peak_gbps.is_none() {
        return Err(UsageError::new(format!(
            "--antagonist membw:share=… needs the calibrated memory bandwidth; run 'kvmeter calibrate' first ({calibration_note})"
        )));
    }
    Ok(())
}

/// Telemetry's samplers, started on the run's clock (`run_t0`), the data directory's block
/// device named for its disk figures. A failure ends the run: its manifest, already written,
/// then says "failed", never "running".
fn start_telemetry(
    config: Option<crate::telemetry::Config>,
    rundir: &RunDir,
    manifest: &Manifest,
    run_t0: std::time::Instant,
) -> anyhow::Result<Option<Telemetry>> {
    let Some(cfg) = config else {
        return Ok(None);
    };
    let placement = &manifest.data_dir.placement;
    let device = placement
        .block_device
        .clone()
        .unwrap_or_else(|| placement.device.clone());
    match Telemetry::start(cfg, Some(&device), rundir.root(), run_t0) {
        Ok(t) => Ok(Some(t)),
        Err(e) => {
            super::write_final_manifest(rundir, manifest, RunStatus::Failed);
            Err(e)
        }
    }
}

/// The calibration this run uses: `--calibration` (which must load), else the default file
/// when it exists and matches this machine. Returns it with a note saying which, or why none.
fn load_calibration(
    plan: &Plan,
    machine_facts: &machine::Machine,
) -> Result<(Option<Calibration>, String), UsageError> {
    let path = plan
        .calibration
        .clone()
        .unwrap_or_else(crate::calibrate::default_path);
    match crate::calibrate::load(&path, machine_facts) {
        Ok(c) => Ok((Some(c), format!("loaded {}", path.display()))),
        Err(why) if plan.calibration.is_some() => {
            Err(UsageError::new(format!("--calibration: {why}")))
        }
        Err(why) => Ok((None, format!("none: {why}"))),
    }
}

/// The calibrated memory bandwidth with all threads (for `membw:share=`).
fn peak_bandwidth(c: Option<&Calibration>) -> Option<f64> {
    c?.memory_bandwidth
        .iter()
        .map(|b| b.gb_per_s)
        .reduce(f64::max)
}

/// With `--profile`, a user's own server on this host (`--store-opt addr=` on loopback) is
/// profiled as the `server` group where its process can be found (the kernel's socket tables;
/// another user's process needs root); otherwise one line says why it is not. Only the profile
/// follows it: telemetry's `server` figures stay those of a server kvmeter started.
fn profile_user_server(
    mut cfg: crate::telemetry::Config,
    adapter: &StoreKind,
    opts: &StoreOptions,
) -> crate::telemetry::Config {
    let Some(p) = cfg.profile.as_mut() else {
        return cfg;
    };
    let addr = opts.str("addr");
    if p.roles.server_pid.is_some() || adapter.server.is_none() || addr.is_empty() {
        return cfg;
    }
    match super::reply_wait::local_port(addr) {
        Ok(port) => match crate::telemetry::procfs::listening_pid(
            &crate::telemetry::procfs::Root::system(),
            port,
        ) {
            Ok(pid) => p.roles.server_pid = Some(pid),
            Err(why) => {
                errln!("kvmeter: --profile: the server at addr={addr} is not profiled: {why}")
            }
        },
        Err(why) => {
            errln!("kvmeter: --profile: the server at addr={addr} is not profiled: {why}")
        }
    }
    cfg
}

/// A user's own server (`--store-opt addr=`) must answer before anything is created.
pub(crate) fn check_user_server(
    adapter: &StoreKind,
    opts: &StoreOptions,
) -> Result<Option<ServerManifest>, UsageError> {
    let Some(spec) = adapter.server else {
        return Ok(None);
    };
    let addr = opts.str("addr");
    if addr.is_empty() {
        return Ok(None);
    }
    let version = (spec.ping)(opts, addr).map_err(|why| {
        UsageError::new(format!(
            "--store-opt addr={addr}: no {} answers there: {why} (is it running? leave addr out and kvmeter starts one)",
            adapter.name
        ))
    })?;
    Ok(Some(ServerManifest {
        managed: false,
        addr: addr.to_string(),
        version,
        pid: None,
        command: vec![],
        log: None,
        members: vec![],
        replication: Default::default(),
    }))
}

/// Starts the server (or the cluster) of a server store on loopback (a single server's output
/// in the run directory's server.log, a cluster's in members/) and points the options at it.
fn start_server(
    plan: &Plan,
    adapter: &'static StoreKind,
    opts: &mut StoreOptions,
    data: &DataDir,
    rundir: &RunDir,
) -> anyhow::Result<(Option<Cluster>, Option<ServerManifest>)> {
    let Some(spec) = adapter.server else {
        return Ok((None, None));
    };
    let topology = (spec.topology)(opts);
    let ctx = StartCtx {
        name: adapter.name,
        spec,
        opts,
        dir: &data.store_dir()?,
        rundir: rundir.root(),
        timeout: Duration::from_secs(30),
    };
    let c = topology.start(&ctx)?;
    for m in &c.members {
        note(
            plan,
            format_args!(
                "server: started {} {} {} (pid {}) on {}; its output goes to {}",
                m.label(),
                m.server.command[0].rsplit('/').next().unwrap_or(""),
                m.server.version,
                m.server.pid,
                m.server.addr,
                m.server.log.display()
            ),
        );
    }
    if c.members.len() > 1 {
        note(
            plan,
            format_args!(
                "cluster: {} members on this machine's CPUs (they share them with kvmeter); {}",
                c.members.len(),
                c.status()
            ),
        );
    }
    *opts = c.opts.clone();
    let main = c.main();
    let manifest = ServerManifest {
        managed: true,
        addr: c.client_addrs(),
        version: main.version.clone(),
        pid: Some(main.pid),
        command: main.command.clone(),
        log: main
            .log
            .strip_prefix(rundir.root())
            .ok()
            .map(|p| p.display().to_string()),
        members: c.manifest(),
        replication: topology.settings(opts).into_iter().collect(),
    };
    Ok((Some(c), Some(manifest)))
}

fn warn_if_nothing_loaded(plan: &Plan, adapter: &StoreKind, data: &DataDir) {
    // A replay writes what its trace writes: reads of keys it has not written are the trace's.
    let starts_with_run = plan
        .phases
        .first()
        .is_some_and(|p| p.kind == PhaseKind::Run && p.replay.is_none());
    if starts_with_run
        && !data.has_store_data()
        && adapter.capabilities.persistent
        && adapter.server.is_none()
    {
        errln!(
            "warning: the data directory holds no data and the plan has no load phase: reads will return NOT_FOUND (run --phase load first, with the same --data-dir)"
        );
    }
    // Data loaded by another store, or under other key names: the reads would miss silently.
    let run_keys = plan
        .phases
        .first()
        .filter(|_| starts_with_run && data.reused);
    if let Some(w) = run_keys.and_then(|p| p.workload.as_ref()) {
        let now = super::datadir::load_description(adapter.name, w);
        if let Some(then) = data.last_load().filter(|t| *t != now) {
            errln!(
                "warning: --data-dir {} was loaded with {then}; this run has {now}: reads of keys it did not load answer NOT_FOUND",
                data.root().display()
            );
        }
    }
}

/// A server kvmeter starts in a data directory with nothing in it holds no records: a plan that
/// begins with a run phase reads keys no one loaded (a split load and run against a server that
/// kept nothing, as memcached never does and Redis does only with `persistence`).
fn warn_if_server_starts_empty(
    plan: &Plan,
    adapter: &StoreKind,
    opts: &crate::store::StoreOptions,
) {
    let starts_with_run = plan
        .phases
        .first()
        .is_some_and(|p| p.kind == PhaseKind::Run && p.replay.is_none());
    if !starts_with_run {
        return;
    }
    let persists = adapter.options.iter().any(|o| o.name == "persistence");
    let keep = if persists && opts.str("persistence") == "none" {
        "; --store-opt persistence=rdb or aof keeps them for a later run with the same --data-dir"
    } else {
        ""
    };
    errln!(
        "warning: the {} server kvmeter starts holds no records and the plan has no load phase: reads will return NOT_FOUND (load and run in one command{keep})",
        adapter.name
    );
}

/// Says which telemetry sources are missing and which power source is used, and finds the
/// idle power the "above idle" figures subtract: `--idle-baseline` measured now, else a
/// calibration made with the same source.
fn idle_power(
    plan: &Plan,
    t: &Telemetry,
    calibration: Option<&Calibration>,
) -> Option<(f64, String)> {
    for (what, why) in t.unavailable() {
        note(plan, format_args!("telemetry: {what}: {why}"));
    }
    let info = t.power_info()?;
    if info.estimate {
        // One line: the model and its provenance are in the manifest; why there is no meter
        // and how to give one is what 'kvmeter doctor' is for.
        let model = match calibration.and_then(|c| c.model.as_ref()) {
            Some(m) if !plan.power_model_given => m,
            _ => &plan.power_model,
        };
        note(
            plan,
            format_args!(
                "power: ESTIMATE, not a measurement: no meter found; a {:.0}-{:.0} W utilisation model from {} ('kvmeter doctor' says why and how to give a meter)",
                model.idle_w,
                model.max_w,
                model.origin_name()
            ),
        );
    } else {
        note(
            plan,
            format_args!("power: {} ({}): {}", info.source, info.scope, info.detail),
        );
    }
    let mut idle = calibration
        .filter(|c| c.power_source.starts_with(&info.source))
        .and_then(|c| {
            let w = c.idle_w?;
            Some((
                w,
                format!("calibration of {} ({})", c.created_at, c.power_source),
            ))
        });
    if let Some(d) = plan.idle_baseline {
        errln!(
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
    idle
}
