//! From flags and YCSB property files to a `Plan`: every phase fully resolved, every default
//! explicit, every value validated with a message that names its source (file and line, `-p`,
//! or flag), the value, and what was expected. Nothing here touches stores or threads.
//!
//! Precedence, lowest first: YCSB's code defaults < `-P` files (in order) < the command's own
//! defaults (the suite sizes its phases) < `-p key=value` < first-class flags.
//!
//! `build` only orchestrates; one module per concern: `flags` (the command's own values),
//! `layout` (which phases), `phase` (one phase's resolution), `workload` (YCSB's core
//! properties), `props` (property sources and Java parsing rules), `antagonist` and `fault`
//! (the `--antagonist` and `--fault` specs), `share` (a distributed agent's part). The value
//! syntax (durations, sizes, CPU lists) is `crate::values`, a leaf the store layer shares.

mod antagonist;
pub mod engine;
pub mod fault;
mod flags;
mod javaprops;
mod layout;
mod max_reply;
mod model;
mod models;
mod phase;
pub mod props;
pub mod replay;
mod request;
mod share;
mod workload;

pub use crate::values::{parse_cpus, parse_duration, parse_size};
pub use fault::Fault;
pub use javaprops::latin1;
pub use model::*;
pub use props::BUILTIN_WORKLOADS;
pub use request::{Request, WorkloadText};
pub use share::{
    apply_share, is_host_own_option, plan_hash, portable_store_name, slice, split_ops,
};

use crate::error::UsageError;
use crate::store::{StoreKind, StoreOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Pressure defaults: the paper's steps last 2 minutes and it sweeps 4..512 KiB; kvmeter's
/// defaults are shorter so one run fits in about 10 minutes, and say so in the manifest.
pub const PRESSURE_STEP: Duration = Duration::from_secs(10);
pub const PRESSURE_BLOCK_SIZES: &str = "4,512";

/// Suite defaults: sized so the default job takes about 2–3 minutes on 2 cores.
pub const SUITE_RECORDS: i64 = 100_000;
pub const SUITE_DURATION: Duration = Duration::from_secs(20);
pub const SUITE_WARMUP: Duration = Duration::from_secs(2);

pub fn build(req: &Request) -> Result<Plan, UsageError> {
    let mut warnings = Vec::new();
    let adapter = find_store(&req.store)?;
    let mut store_options = store_options(adapter, &req.store_opts)?;
    let flags = flags::Flags::parse(req, &mut warnings)?;
    let slots = layout::layout(req)?;
    let mut resolver = phase::Resolver {
        req,
        flags: &flags,
        warnings: &mut warnings,
        ycsb_percentiles: vec![50.0, 95.0, 99.0],
    };
    let mut phases = slots
        .into_iter()
        .map(|slot| resolver.resolve(slot))
        .collect::<Result<Vec<_>, _>>()?;
    let engine = engine::resolve(req, adapter, &mut store_options, &mut phases)?;
    let ycsb_percentiles = resolver.ycsb_percentiles;
    max_reply::fill(&mut store_options, &phases);
    let faults = faults(req, adapter, &store_options, &phases)?;
    let timeline = timeline(req, &faults, flags.interval)?;
    let metrics = MetricsPlan::from_request(req)?;
    // Each phase resolves the same files and -p items: a warning about them is said once.
    let mut seen = std::collections::HashSet::new();
    warnings.retain(|w| seen.insert(w.clone()));
    Ok(Plan {
        metrics,
        command: req.command.clone(),
        store: adapter.name.to_string(),
        store_options,
        data_dir: req.data_dir.clone(),
        out: req
            .out
            .clone()
            .unwrap_or_else(|| default_out(&req.command, &req.store)),
        seed: req.seed.unwrap_or_else(fresh_seed),
        interval: flags.interval,
        status_interval: flags.status_interval,
        give_up_after: flags.give_up_after,
        format: req.format.unwrap_or(Format::Table),
        clock: req.clock.unwrap_or_default(),
        telemetry_interval: flags.telemetry_interval,
        store_stats: req.store_stats.unwrap_or_default(),
        disk: req.disk.clone(),
        power: crate::telemetry::power::Choice::parse(req.power.as_deref().unwrap_or("auto"))?,
        power_model: match &req.power_model {
            Some(m) => crate::telemetry::power::Model::parse(m)?,
            None => crate::telemetry::power::Model::default(),
        },
        counters: req.counters,
        profile_hz: profile_hz(req, &flags)?,
        antagonists: Antagonist::parse_all(&req.antagonists)?,
        faults,
        timeline,
        io_dir: req.io_dir.clone(),
        io_file_size: parse_size(
            "--io-file-size",
            req.io_file_size.as_deref().unwrap_or("10GiB"),
        )?,
        random_ratio: match req.random_ratio {
            Some(r) if (0.0..=1.0).contains(&r) => r,
            Some(r) => {
                return Err(UsageError::new(format!(
                    "--random-ratio {r}: expected a share from 0 to 1"
                )))
            }
            None => 0.5,
        },
        calibration: req.calibration.clone(),
        power_model_given: req.power_model.is_some(),
        idle_baseline: req
            .idle_baseline
            .as_deref()
            .map(|d| parse_duration("--idle-baseline", d))
            .transpose()?,
        ycsb_percentiles,
        phases,
        warnings,
        quiet: req.quiet,
        share: None,
        engine,
    })
}

/// `--fault` items, checked against the cluster the options ask for and the run phases'
/// lengths — before anything starts.
fn faults(
    req: &Request,
    adapter: &StoreKind,
    opts: &StoreOptions,
    phases: &[PhasePlan],
) -> Result<Vec<Fault>, UsageError> {
    if req.faults.is_empty() {
        return Ok(vec![]);
    }
    let faults = req
        .faults
        .iter()
        .map(|f| Fault::parse(f))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(spec) = adapter.server else {
        return Err(UsageError::new(format!(
            "--fault: '{}' is an embedded store, with no server to fault; 'kvmeter durability' kills a writer process of an embedded store",
            adapter.name
        )));
    };
    if !opts.str("addr").is_empty() {
        return Err(UsageError::new(format!(
            "--fault: kvmeter signals only servers it started, not yours at --store-opt addr={}; leave addr out and kvmeter starts them",
            opts.str("addr")
        )));
    }
    let shape = (spec.topology)(opts).shape(opts);
    for f in &faults {
        f.check_target(&shape)?;
        for p in phases.iter().filter(|p| p.kind == PhaseKind::Run) {
            let Some(d) = p.duration else {
                return Err(UsageError::new(format!(
                    "--fault '{}': phase {} runs a count of operations; faults are placed in time, so give --duration",
                    f.spec, p.name
                )));
            };
            if f.at >= d {
                return Err(UsageError::new(format!(
                    "--fault '{}': at={:.3} s is not before the end of phase {} ({:.3} s)",
                    f.spec,
                    f.at.as_secs_f64(),
                    p.name,
                    d.as_secs_f64()
                )));
            }
        }
    }
    Ok(faults)
}

/// `--timeline`: shorter than the interval; 100 ms by default when there are faults.
fn timeline(
    req: &Request,
    faults: &[Fault],
    interval: Duration,
) -> Result<Option<Duration>, UsageError> {
    let t = match (&req.timeline, faults.is_empty()) {
        (Some(t), _) => parse_duration("--timeline", t)?,
        (None, false) => Duration::from_millis(100),
        (None, true) => return Ok(None),
    };
    if t < Duration::from_millis(1) || t > interval {
        return Err(UsageError::new(format!(
            "--timeline {}: expected from 1ms up to the interval ({:.3} s)",
            req.timeline.as_deref().unwrap_or(""),
            interval.as_secs_f64()
        )));
    }
    Ok(Some(t))
}

/// The store adapter named by `--store`, or why it is not here.
fn find_store(name: &str) -> Result<&'static StoreKind, UsageError> {
    if crate::store::plugin::is_plugin(name) {
        return crate::store::plugin::kind(name);
    }
    crate::store::find(name).ok_or_else(|| match crate::store::registry::feature_of(name) {
        Some(feature) => UsageError::new(format!(
            "--store '{name}': not in this build; rebuild with 'cargo build --release --features {feature}' (scripts/run-suite.sh builds every store)"
        )),
        None => UsageError::new(format!(
            "--store '{name}': unknown store; available here: {} ('kvmeter stores' lists them)",
            crate::store::names().join(", ")
        )),
    })
}

/// `--store-opt` items: names known to the adapter, values checked by it — all before any
/// directory exists (a sweep or capacity search checks every point's plan this way first).
fn store_options(adapter: &StoreKind, given: &[String]) -> Result<StoreOptions, UsageError> {
    crate::store::checked_options(adapter, given)
}

/// Names `default_out` chose in this process: `report::rundir::claim` creates them new and
/// picks another name when one exists, where a given `--out` must be accepted as it is.
static DEFAULT_OUTS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Where results go without --out: kvmeter-runs/<time>-<command>-<store> (with a suffix when
/// that exists, see `report::rundir::claim`).
pub fn default_out(command: &str, store: &str) -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(':', "")
        .trim_end_matches('Z')
        .to_string();
    let p = PathBuf::from("kvmeter-runs").join(format!(
        "{stamp}-{command}-{}",
        crate::store::plugin::short_name(store)
    ));
    DEFAULT_OUTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(p.clone());
    p
}

/// Whether kvmeter chose `p` itself (`default_out`), rather than the user.
pub fn is_default_out(p: &Path) -> bool {
    DEFAULT_OUTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|d| d == p)
}

/// The seed when none is given: from the clock, recorded in the manifest so the run replays.
pub fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64) ^ ((std::process::id() as u64) << 32)
}

/// `--profile` and `--profile-frequency`: 1 to 10,000 samples a second, and telemetry on (the
/// profile is one of its sources).
fn profile_hz(req: &Request, flags: &flags::Flags) -> Result<Option<u32>, UsageError> {
    let hz = match (req.profile, &req.profile_frequency) {
        (false, None) => return Ok(None),
        (false, Some(_)) => {
            return Err(UsageError::new(
                "--profile-frequency: only with --profile (it sets how often --profile samples)",
            ))
        }
        (true, None) => crate::telemetry::profile::DEFAULT_FREQUENCY_HZ,
        (true, Some(hz)) => match hz.parse::<u32>() {
            Ok(n) if (1..=10_000).contains(&n) => n,
            _ => {
                return Err(UsageError::new(format!(
                    "--profile-frequency {hz}: expected samples per second from 1 to 10000 (default 99)"
                )))
            }
        },
    };
    if flags.telemetry_interval.is_zero() {
        return Err(UsageError::new(
            "--profile: needs telemetry, which --telemetry-interval 0 turns off",
        ));
    }
    Ok(Some(hz))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(cmd: &str) -> Request {
        Request {
            command: cmd.into(),
            store: "null".into(),
            ..Default::default()
        }
    }

    #[test]
    fn suite_has_the_papers_sequence() {
        let plan = build(&req("suite")).unwrap();
        let names: Vec<&str> = plan.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["load-a", "run-a", "run-b", "run-c", "run-f", "run-d", "clear", "load-e", "run-e"]
        );
        assert_eq!(plan.phases[0].operations, SUITE_RECORDS as u64);
        assert_eq!(plan.phases[1].duration, Some(SUITE_DURATION));
        let e = plan.phases[8].workload.as_ref().unwrap();
        assert_eq!(e.scanproportion, 0.95);
        assert_eq!(e.maxscanlength, 100);
    }

    #[test]
    fn precedence_file_then_p_then_flags() {
        let mut r = req("run");
        r.workload_files = vec!["workloadb".into()];
        r.props = vec!["recordcount=500".into(), "operationcount=77".into()];
        r.records = Some(600);
        let plan = build(&r).unwrap();
        let run = &plan.phases[1];
        let w = run.workload.as_ref().unwrap();
        assert_eq!(w.recordcount, 600);
        assert_eq!(run.properties["recordcount"].source, "--records");
        assert_eq!(w.operationcount, 77);
        assert_eq!(w.readproportion, 0.95);
        assert_eq!(
            run.properties["readproportion"].source,
            "workloadb (built-in):15"
        );
        assert_eq!(plan.phases[0].operations, 600);
    }

    fn err(r: Request) -> String {
        build(&r).unwrap_err().to_string()
    }

    #[test]
    fn bad_input_is_named() {
        let mut r = req("run");
        r.props = vec!["nosuchprop=1".into()];
        assert!(err(r).contains("unknown property 'nosuchprop'"));

        let mut r = req("run");
        r.props = vec!["readproportion=0.5".into(), "updateproportion=0.2".into()];
        let e = err(r);
        assert!(e.contains("add up to 0.7"), "{e}");

        let mut r = req("run");
        r.props = vec!["recordcount=0".into()];
        assert!(err(r).contains("'recordcount'='0'"));

        let mut r = req("run");
        r.props = vec!["fieldcount= 5".into()];
        assert!(err(r).contains("digits only"));

        let mut r = req("run");
        r.workload_files = vec!["/nonexistent/wl".into()];
        assert!(err(r).contains("-P /nonexistent/wl: cannot read"));

        // A path whose file name is a built-in's is a typo, not the built-in (issue 28 item 6).
        let mut r = req("run");
        r.workload_files = vec!["/some/typo/dir/workloadb".into()];
        assert!(err(r).contains("-P /some/typo/dir/workloadb: cannot read"));

        let mut r = req("run");
        r.store = "nope".into();
        assert!(err(r).contains("--store 'nope'"));

        let mut r = req("run");
        r.store_opts = vec!["x=1".into()];
        assert!(err(r).contains("unknown option for store 'null'"));

        let mut r = req("run");
        r.props = vec![
            "requestdistribution=hotspot".into(),
            "hotspotdatafraction=0".into(),
        ];
        assert!(err(r).contains("empty hot set"));

        let mut r = req("run");
        r.ops = Some(0);
        assert!(err(r).contains("would never end"));

        let mut r = req("run");
        r.duration = Some("soon".into());
        assert!(err(r).contains("--duration 'soon'"));

        // --duration alone lifts the file's operationcount; with --ops both apply.
        let mut r = req("run");
        r.workload_files = vec!["workloada".into()];
        r.duration = Some("5s".into());
        let plan = build(&r).unwrap();
        assert_eq!(plan.phases[1].operations, 0);
        assert_eq!(plan.phases[0].operations, 1000);
        r.ops = Some(300);
        assert_eq!(build(&r).unwrap().phases[1].operations, 300);
    }

    #[test]
    fn pressure_plan_and_antagonists() {
        let mut r = req("pressure");
        r.workload_files = vec!["workloada".into()];
        r.step = Some("2s".into());
        r.block_sizes = Some("4,512".into());
        let plan = build(&r).unwrap();
        let names: Vec<&str> = plan.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["load", "pressure-4k", "pressure-512k"]);
        assert_eq!(plan.phases[1].duration, Some(Duration::from_secs(52)));
        assert_eq!(
            plan.phases[2].pressure.as_ref().unwrap().block_size,
            512 * 1024
        );
        assert_eq!(plan.io_file_size, 10 << 30);
        r.step = Some("1500ms".into());
        assert!(err(r.clone()).contains("whole number of --interval"));
        r.step = None;
        r.block_sizes = Some("4,x".into());
        assert!(err(r).contains("--block-sizes"));

        assert_eq!(
            Antagonist::parse("io:bs=64k,wr=0.3,n=2").unwrap(),
            Antagonist::Io {
                block_size: 65536,
                write_ratio: 0.3,
                random_ratio: 0.5,
                instances: 2
            }
        );
        assert_eq!(
            Antagonist::parse("cpu:duty=0.25").unwrap(),
            Antagonist::Cpu {
                threads: 1,
                duty: 0.25,
                cpus: vec![]
            }
        );
        assert_eq!(
            Antagonist::parse("membw:threads=2,gbps=3,cpus=0-1").unwrap(),
            Antagonist::Membw {
                threads: 2,
                gb_per_s: Some(3.0),
                share: None,
                cpus: vec![0, 1]
            }
        );
        assert_eq!(
            Antagonist::parse("membw:share=0.5,cpus=1/3").unwrap(),
            Antagonist::Membw {
                threads: 1,
                gb_per_s: None,
                share: Some(0.5),
                cpus: vec![1, 3]
            }
        );
        assert!(Antagonist::parse("membw:share=0.5,gbps=2")
            .unwrap_err()
            .0
            .contains("not both"));
        assert!(Antagonist::parse("cpu:cpus=3-1")
            .unwrap_err()
            .0
            .contains("cpus=3-1"));
        assert!(Antagonist::parse("io:wr=2").unwrap_err().0.contains("wr=2"));
        assert!(Antagonist::parse("io:zz=1")
            .unwrap_err()
            .0
            .contains("unknown key 'zz'"));
        assert!(Antagonist::parse("disk")
            .unwrap_err()
            .0
            .contains("expected io:"));
        assert_eq!(parse_size("x", "10GiB").unwrap(), 10 << 30);
        assert_eq!(parse_size("x", "4k").unwrap(), 4096);
        assert!(parse_size("x", "ten").is_err());
    }

    #[test]
    fn ignored_properties_warn() {
        let mut r = req("run");
        r.props = vec![
            "measurementtype=histogram".into(),
            "readallfields=yes".into(),
        ];
        let plan = build(&r).unwrap();
        assert!(plan
            .warnings
            .iter()
            .any(|w| w.contains("'measurementtype' is ignored")));
        assert!(plan.warnings.iter().any(|w| w.contains("read as false")));
        // Each phase resolves the same -p items: each warning is said once (issue 40 item 11).
        let n = |k: &str| plan.warnings.iter().filter(|w| w.contains(k)).count();
        assert_eq!(n("read as false"), 1, "{:?}", plan.warnings);
        assert_eq!(n("'measurementtype' is ignored"), 1, "{:?}", plan.warnings);
    }

    /// `--duration` is the run phases' length: a load inserts every record unless the user
    /// bounds the load itself (issue 40 item 1).
    #[test]
    fn duration_bounds_a_load_only_when_the_user_bounds_the_load() {
        let second = Some(Duration::from_secs(1));
        let mut r = req("run");
        r.duration = Some("1s".into());
        let plan = build(&r).unwrap();
        assert_eq!(plan.phases[0].kind, PhaseKind::Load);
        assert_eq!(plan.phases[0].duration, None);
        assert_eq!(plan.phases[1].duration, second);
        r.phase = Some("load".into());
        assert_eq!(build(&r).unwrap().phases[0].duration, second);
        r.phase = None;
        r.duration = None;
        r.props = vec!["maxexecutiontime=1".into()];
        let plan = build(&r).unwrap();
        assert_eq!(
            plan.phases[0].duration, second,
            "YCSB's bound on every phase"
        );
        let mut r = req("suite");
        r.duration = Some("5s".into());
        let plan = build(&r).unwrap();
        for p in &plan.phases {
            match p.kind {
                PhaseKind::Load | PhaseKind::Clear => assert_eq!(p.duration, None, "{}", p.name),
                PhaseKind::Run => assert_eq!(p.duration, Some(Duration::from_secs(5))),
            }
        }
        // The suite's default warm-up is named as a default, not as a flag never typed.
        r.duration = Some("1s".into());
        let e = err(r);
        assert!(e.contains("the suite's default warm-up (2s"), "{e}");
        assert!(!e.contains("--warmup 2s"), "{e}");
    }
}
