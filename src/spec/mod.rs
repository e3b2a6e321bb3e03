//! From flags and YCSB property files to a `Plan`: every phase fully resolved, every default
//! explicit, every value validated with a message that names its source (file and line, `-p`,
//! or flag), the value, and what was expected. Nothing here touches stores or threads.
//!
//! Precedence, lowest first: YCSB's code defaults < `-P` files (in order) < the command's own
//! defaults (the suite sizes its phases) < `-p key=value` < first-class flags.

pub mod props;

use crate::error::UsageError;
use crate::workload::generators::HistogramLengths;
use crate::workload::{Distribution, FieldLengthDistribution, WorkloadConfig};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The workload files shipped with kvmeter (YCSB's values), usable as `-P workloada` anywhere.
pub const BUILTIN_WORKLOADS: [(&str, &str); 6] = [
    ("workloada", include_str!("../../workloads/workloada")),
    ("workloadb", include_str!("../../workloads/workloadb")),
    ("workloadc", include_str!("../../workloads/workloadc")),
    ("workloadd", include_str!("../../workloads/workloadd")),
    ("workloade", include_str!("../../workloads/workloade")),
    ("workloadf", include_str!("../../workloads/workloadf")),
];

/// Property names kvmeter honours.
const HONOURED: &[&str] = &[
    "workload",
    "threadcount",
    "target",
    // kvmeter's own: open-loop arrivals (`--arrival`, `--rate`), settable per phase in -P files.
    "arrival",
    "rate",
    "recordcount",
    "operationcount",
    "insertcount",
    "maxexecutiontime",
    "table",
    "fieldcount",
    "fieldnameprefix",
    "fieldlength",
    "minfieldlength",
    "fieldlengthdistribution",
    "fieldlengthhistogram",
    "readallfields",
    "readallfieldsbyname",
    "writeallfields",
    "dataintegrity",
    "readproportion",
    "updateproportion",
    "insertproportion",
    "scanproportion",
    "readmodifywriteproportion",
    "requestdistribution",
    "minscanlength",
    "maxscanlength",
    "scanlengthdistribution",
    "insertorder",
    "insertstart",
    "zeropadding",
    "hotspotdatafraction",
    "hotspotopnfraction",
    "exponential.percentile",
    "exponential.frac",
    "core_workload_insertion_retry_limit",
    "core_workload_insertion_retry_interval",
    "hdrhistogram.percentiles",
    "dotransactions",
];

/// YCSB properties kvmeter accepts but does not use (it has its own way), with the reason.
const IGNORED: &[(&str, &str)] = &[
    ("db", "use --store"),
    ("exporter", "use --format; summary.json is always written"),
    ("exportfile", "results go to the run directory (--out)"),
    ("measurementtype", "kvmeter always records HdrHistograms"),
    (
        "measurement.interval",
        "with --target both service and intended latencies are kept",
    ),
    ("measurement.trackjvm", "there is no JVM"),
    (
        "measurement.histogram.verbose",
        "the HDR logs in latency/ hold every bucket",
    ),
    ("histogram.buckets", "kvmeter always records HdrHistograms"),
    (
        "timeseries.granularity",
        "use --interval; intervals.csv is the time series",
    ),
    (
        "hdrhistogram.fileoutput",
        "HDR logs are always written to latency/",
    ),
    (
        "hdrhistogram.output.path",
        "HDR logs are always written to latency/",
    ),
    (
        "measurement.raw.output_file",
        "kvmeter records HdrHistograms",
    ),
    (
        "measurement.raw.no_summary",
        "kvmeter records HdrHistograms",
    ),
    (
        "reportlatencyforeacherror",
        "failed operations always get their own latency histogram",
    ),
    (
        "latencytrackederrors",
        "failed operations always get their own latency histogram",
    ),
    ("spin.sleep", "pacing sleeps with 1 ns timer slack"),
    ("status", "progress is always shown on stderr"),
    ("status.interval", "use --status-interval"),
    ("label", "use --out to name the run"),
    (
        "core_workload_insertion_keep_going_on_error",
        "kvmeter always keeps going and counts the error",
    ),
    ("basicdb.verbose", "use --store null"),
    ("basicdb.simulatedelay", "use --store null"),
    ("basicdb.randomizedelay", "use --store null"),
    ("basicdb.count", "use --store null"),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseKind {
    Load,
    Run,
    /// Deletes the store's data (the suite's "clear the database").
    Clear,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Table,
    Ycsb,
    Json,
}

/// `--clock`: `auto` reads the TSC where the kernel keeps time with it, else the monotonic
/// clock; `monotonic` always uses `CLOCK_MONOTONIC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum ClockChoice {
    #[default]
    Auto,
    Monotonic,
}

/// A co-located antagonist (`--antagonist`), running during every run phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Antagonist {
    /// `io:bs=4k,wr=0.3,rr=0.5,n=2`: n O_DIRECT instances.
    Io {
        block_size: usize,
        write_ratio: f64,
        random_ratio: f64,
        instances: usize,
    },
    /// `membw:threads=2,gbps=5` (or `share=0.5` of the calibrated peak, `cpus=0-1` to pin):
    /// memory streaming, throttled when a rate is given.
    Membw {
        threads: usize,
        gb_per_s: Option<f64>,
        share: Option<f64>,
        cpus: Vec<usize>,
    },
    /// `cpu:threads=1,duty=0.5,cpus=1`: busy threads at a duty cycle.
    Cpu {
        threads: usize,
        duty: f64,
        cpus: Vec<usize>,
    },
}

/// `cpus=1`, `cpus=0-3` or `cpus=0/2/5`.
fn parse_cpus(v: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in v.split('/') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// A size such as 4k, 512KiB, 10G, 10GiB (binary units) or plain bytes.
pub fn parse_size(flag: &str, s: &str) -> Result<u64, UsageError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => 0,
    };
    match num.parse::<f64>() {
        Ok(n) if mult > 0 && n > 0.0 => Ok((n * mult as f64) as u64),
        _ => Err(UsageError::new(format!(
            "{flag} '{s}': expected a size such as 4k, 512KiB or 10GiB"
        ))),
    }
}

impl Antagonist {
    pub fn parse(s: &str) -> Result<Self, UsageError> {
        let bad = |why: &str| UsageError::new(format!("--antagonist '{s}': {why}"));
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        let mut kv = std::collections::HashMap::new();
        for part in rest.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad("expected key=value pairs"))?;
            kv.insert(k.to_string(), v.to_string());
        }
        let num = |k: &str, d: f64, lo: f64, hi: f64| -> Result<f64, UsageError> {
            match kv.get(k) {
                None => Ok(d),
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|x| (lo..=hi).contains(x))
                    .ok_or_else(|| bad(&format!("{k}={v}: expected a number from {lo} to {hi}"))),
            }
        };
        let cpus =
            |kv: &std::collections::HashMap<String, String>| -> Result<Vec<usize>, UsageError> {
                match kv.get("cpus") {
                    None => Ok(vec![]),
                    Some(v) => parse_cpus(v)
                        .ok_or_else(|| bad(&format!("cpus={v}: expected 1, 0-3 or 0/2/5"))),
                }
            };
        let known = |keys: &[&str]| -> Result<(), UsageError> {
            match kv.keys().find(|k| !keys.contains(&k.as_str())) {
                Some(k) => Err(bad(&format!(
                    "unknown key '{k}'; expected {}",
                    keys.join(", ")
                ))),
                None => Ok(()),
            }
        };
        match kind {
            "io" => {
                known(&["bs", "wr", "rr", "n"])?;
                let bs = match kv.get("bs") {
                    Some(v) => parse_size("--antagonist io:bs", v)? as usize,
                    None => 4096,
                };
                if bs % 512 != 0 || bs > crate::antagonist::io::MAX_BLOCK {
                    return Err(bad("bs: expected a multiple of 512 bytes up to 4 MiB"));
                }
                Ok(Antagonist::Io {
                    block_size: bs,
                    write_ratio: num("wr", 0.0, 0.0, 1.0)?,
                    random_ratio: num("rr", 0.5, 0.0, 1.0)?,
                    instances: num("n", 1.0, 1.0, 64.0)? as usize,
                })
            }
            "membw" => {
                known(&["threads", "gbps", "share", "cpus"])?;
                if kv.contains_key("gbps") && kv.contains_key("share") {
                    return Err(bad("give gbps or share, not both"));
                }
                Ok(Antagonist::Membw {
                    threads: num("threads", 1.0, 1.0, 1024.0)? as usize,
                    gb_per_s: match kv.get("gbps") {
                        Some(_) => Some(num("gbps", 1.0, 0.001, 10000.0)?),
                        None => None,
                    },
                    share: match kv.get("share") {
                        Some(_) => Some(num("share", 1.0, 0.001, 1.0)?),
                        None => None,
                    },
                    cpus: cpus(&kv)?,
                })
            }
            "cpu" => {
                known(&["threads", "duty", "cpus"])?;
                Ok(Antagonist::Cpu {
                    threads: num("threads", 1.0, 1.0, 1024.0)? as usize,
                    duty: num("duty", 1.0, 0.0, 1.0)?,
                    cpus: cpus(&kv)?,
                })
            }
            _ => Err(bad("expected io:..., membw:... or cpu:...")),
        }
    }
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
}

#[derive(Clone, Debug, Serialize)]
pub struct PropValue {
    pub value: String,
    pub source: String,
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}
fn ser_opt_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub command: String,
    pub store: String,
    pub store_options: BTreeMap<String, String>,
    /// `None`: a fresh temporary directory, removed at the end.
    pub data_dir: Option<PathBuf>,
    pub out: PathBuf,
    pub seed: u64,
    #[serde(serialize_with = "ser_secs")]
    pub interval: Duration,
    #[serde(serialize_with = "ser_secs")]
    pub status_interval: Duration,
    pub format: Format,
    pub clock: ClockChoice,
    /// Telemetry sampling interval; zero turns telemetry off.
    #[serde(serialize_with = "ser_secs")]
    pub telemetry_interval: Duration,
    /// Block device to watch (`--disk`), else the one under the data directory.
    pub disk: Option<String>,
    pub power: crate::telemetry::power::Choice,
    pub power_model: crate::telemetry::power::Model,
    /// Count hardware and software events (`--counters`).
    pub counters: bool,
    /// The calibration file runs load (`--calibration`, else the default path if present).
    pub calibration: Option<PathBuf>,
    /// Whether `--power-model` was given (it then wins over a calibration's model).
    pub power_model_given: bool,
    pub antagonists: Vec<Antagonist>,
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
}

/// How open-loop arrivals are spaced.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    /// Every 1/rate seconds exactly.
    Fixed,
    /// Exponential gaps of mean 1/rate (a Poisson process), from the phase's seed.
    Poisson,
}

impl Arrival {
    pub fn name(self) -> &'static str {
        match self {
            Arrival::Fixed => "fixed",
            Arrival::Poisson => "poisson",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct OpenLoop {
    pub arrival: Arrival,
    /// Offered load, operations (transactions) per second over all workers.
    pub rate: f64,
}

/// Workers serving an open-loop schedule when --threads is not given: up to this many
/// requests in flight.
pub const OPEN_LOOP_WORKERS: i64 = 16;

/// What the command line said, before resolution.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub command: String,
    pub workload_files: Vec<String>,
    pub props: Vec<String>,
    pub store: String,
    pub store_opts: Vec<String>,
    pub phase: Option<String>,
    pub threads: Option<i64>,
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
    pub clock: Option<ClockChoice>,
    pub telemetry_interval: Option<String>,
    pub disk: Option<String>,
    pub power: Option<String>,
    pub power_model: Option<String>,
    pub idle_baseline: Option<String>,
    pub counters: bool,
    pub calibration: Option<PathBuf>,
    pub antagonists: Vec<String>,
    pub io_dir: Option<PathBuf>,
    pub io_file_size: Option<String>,
    pub random_ratio: Option<f64>,
    /// `kvmeter pressure`: block sizes in KiB ("4,512") and the step length.
    pub block_sizes: Option<String>,
    pub step: Option<String>,
    /// No final report on stdout (points of sweep and capacity).
    pub quiet: bool,
}

/// Pressure defaults: the paper's steps last 2 minutes and it sweeps 4..512 KiB; kvmeter's
/// defaults are shorter so one run fits in about 10 minutes, and say so in the manifest.
pub const PRESSURE_STEP: Duration = Duration::from_secs(10);
pub const PRESSURE_BLOCK_SIZES: &str = "4,512";
#[derive(Clone, Default)]
struct Props(BTreeMap<String, PropValue>);

impl Props {
    fn set(&mut self, k: &str, v: impl Into<String>, source: impl Into<String>) {
        self.0.insert(
            k.to_string(),
            PropValue {
                value: v.into(),
                source: source.into(),
            },
        );
    }
    fn get(&self, k: &str) -> Option<&PropValue> {
        self.0.get(k)
    }
    fn has(&self, k: &str) -> bool {
        self.0.contains_key(k)
    }

    fn bad(&self, k: &str, expected: &str) -> UsageError {
        let p = &self.0[k];
        UsageError::new(format!(
            "{}: property '{k}'='{}': expected {expected}",
            p.source, p.value
        ))
    }

    /// Java `Long.parseLong`: optional sign and digits only.
    fn int(&self, k: &str, default: i64) -> Result<i64, UsageError> {
        match self.get(k) {
            None => Ok(default),
            Some(p) => {
                let v = &p.value;
                let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(self.bad(k, "a whole number (digits only, no spaces)"));
                }
                v.parse()
                    .map_err(|_| self.bad(k, "a whole number in range"))
            }
        }
    }

    fn int32(&self, k: &str, default: i32) -> Result<i32, UsageError> {
        let v = self.int(k, default as i64)?;
        i32::try_from(v).map_err(|_| self.bad(k, "a 32-bit whole number"))
    }

    /// Java `Double.parseDouble` (trims whitespace).
    fn float(&self, k: &str, default: f64) -> Result<f64, UsageError> {
        match self.get(k) {
            None => Ok(default),
            Some(p) => {
                let t = p.value.trim();
                let t = t.strip_suffix(['d', 'D', 'f', 'F']).unwrap_or(t);
                t.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| self.bad(k, "a finite number (for example 0.5)"))
            }
        }
    }

    /// Java's rule: true only for "true" ignoring case; kvmeter warns about anything but
    /// true/false instead of silently reading it as false.
    fn boolean(&self, k: &str, default: bool, warnings: &mut Vec<String>) -> bool {
        match self.get(k) {
            None => default,
            Some(p) => {
                let t = p.value.eq_ignore_ascii_case("true");
                if !t && !p.value.eq_ignore_ascii_case("false") {
                    warnings.push(format!(
                        "{}: property '{k}'='{}' is read as false (YCSB accepts only true/false)",
                        p.source, p.value
                    ));
                }
                t
            }
        }
    }

    fn string(&self, k: &str, default: &str) -> String {
        self.get(k)
            .map(|p| p.value.clone())
            .unwrap_or_else(|| default.to_string())
    }
}

fn load_workload_file(
    name: &str,
    props: &mut Props,
    warnings: &mut Vec<String>,
) -> Result<(), UsageError> {
    let path = Path::new(name);
    let (text, source) = match std::fs::read(path) {
        Ok(bytes) => (props::latin1(&bytes), name.to_string()),
        Err(e) => {
            let base = path.file_name().and_then(|f| f.to_str()).unwrap_or(name);
            match BUILTIN_WORKLOADS.iter().find(|(n, _)| *n == base) {
                Some((n, t)) if !path.exists() => (t.to_string(), format!("{n} (built-in)")),
                _ => {
                    return Err(UsageError::new(format!(
                        "-P {name}: cannot read the workload file: {e}; give a readable YCSB property file or a built-in one (workloada .. workloadf)"
                    )))
                }
            }
        }
    };
    let entries = props::parse(&text).map_err(|e| UsageError::new(format!("-P {name}: {e}")))?;
    for (k, v, line) in entries {
        check_known(&k, &format!("{source}:{line}"), warnings)?;
        props.set(&k, v, format!("{source}:{line}"));
    }
    Ok(())
}

fn check_known(k: &str, source: &str, warnings: &mut Vec<String>) -> Result<(), UsageError> {
    if HONOURED.contains(&k) {
        return Ok(());
    }
    if let Some((_, why)) = IGNORED.iter().find(|(n, _)| *n == k) {
        warnings.push(format!("{source}: property '{k}' is ignored: {why}"));
        return Ok(());
    }
    Err(UsageError::new(format!(
        "{source}: unknown property '{k}'; kvmeter takes YCSB's core properties (docs/workloads.md); store settings go in --store-opt (see 'kvmeter stores')"
    )))
}

pub fn parse_duration(flag: &str, s: &str) -> Result<Duration, UsageError> {
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(s).map_err(|_| {
        UsageError::new(format!(
            "{flag} '{s}': expected a duration such as 30s, 2m or 1m30s (a plain number means seconds)"
        ))
    })
}

/// Where results go without --out: kvmeter-runs/<time>-<command>-<store>.
pub fn default_out(command: &str, store: &str) -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(':', "")
        .trim_end_matches('Z')
        .to_string();
    PathBuf::from("kvmeter-runs").join(format!("{stamp}-{command}-{store}"))
}

/// The seed when none is given: from the clock, recorded in the manifest so the run replays.
fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64) ^ ((std::process::id() as u64) << 32)
}

/// Suite defaults: sized so the default job takes about 2–3 minutes on 2 cores.
pub const SUITE_RECORDS: i64 = 100_000;
pub const SUITE_DURATION: Duration = Duration::from_secs(20);
pub const SUITE_WARMUP: Duration = Duration::from_secs(2);

pub fn build(req: &Request) -> Result<Plan, UsageError> {
    let mut warnings = Vec::new();
    let store_kind = crate::store::find(&req.store).ok_or_else(|| {
        if let Some((_, feature)) = crate::store::not_built()
            .into_iter()
            .find(|(n, _)| *n == req.store)
        {
            return UsageError::new(format!(
                "--store '{}': not in this build; rebuild with 'cargo build --release --features {feature}' (scripts/run-suite.sh builds every store)",
                req.store
            ));
        }
        UsageError::new(format!(
            "--store '{}': unknown store; available here: {} ('kvmeter stores' lists them)",
            req.store,
            crate::store::names().join(", ")
        ))
    })?;
    let store_options =
        crate::store::StoreOptions::parse(store_kind.name, store_kind.options, &req.store_opts)?;

    // Phase layout: (name, kind, workload files).
    let suite = req.command == "suite";
    let pressure = req.command == "pressure";
    let step = parse_duration("--step", req.step.as_deref().unwrap_or("10s"))?;
    let block_sizes: Vec<usize> = if pressure {
        let text = req.block_sizes.as_deref().unwrap_or(PRESSURE_BLOCK_SIZES);
        let list: Result<Vec<usize>, _> =
            text.split(',').map(|x| x.trim().parse::<usize>()).collect();
        match list {
            Ok(l) if !l.is_empty() && l.iter().all(|k| *k >= 1 && k * 1024 <= crate::antagonist::io::MAX_BLOCK) => l,
            _ => {
                return Err(UsageError::new(format!(
                    "--block-sizes '{text}': expected KiB values from 1 to 4096, comma-separated (paper: 4,8,16,32,64,128,256,512)"
                )))
            }
        }
    } else {
        vec![]
    };
    let layout: Vec<(String, PhaseKind, Vec<String>)> = if pressure {
        let files = req.workload_files.clone();
        let mut l = vec![];
        if req.phase.as_deref() != Some("run") {
            l.push(("load".to_string(), PhaseKind::Load, files.clone()));
        }
        for bs in &block_sizes {
            l.push((format!("pressure-{bs}k"), PhaseKind::Run, files.clone()));
        }
        l
    } else if suite {
        let w = |l: &str| vec![format!("workload{l}")];
        vec![
            ("load-a".into(), PhaseKind::Load, w("a")),
            ("run-a".into(), PhaseKind::Run, w("a")),
            ("run-b".into(), PhaseKind::Run, w("b")),
            ("run-c".into(), PhaseKind::Run, w("c")),
            ("run-f".into(), PhaseKind::Run, w("f")),
            ("run-d".into(), PhaseKind::Run, w("d")),
            ("clear".into(), PhaseKind::Clear, vec![]),
            ("load-e".into(), PhaseKind::Load, w("e")),
            ("run-e".into(), PhaseKind::Run, w("e")),
        ]
    } else {
        let files = req.workload_files.clone();
        match req.phase.as_deref().unwrap_or("both") {
            "load" => vec![("load".into(), PhaseKind::Load, files)],
            "run" => vec![("run".into(), PhaseKind::Run, files)],
            "both" => vec![
                ("load".into(), PhaseKind::Load, files.clone()),
                ("run".into(), PhaseKind::Run, files),
            ],
            other => {
                return Err(UsageError::new(format!(
                    "--phase '{other}': expected load, run or both"
                )))
            }
        }
    };

    // -p items, checked once.
    let mut cli_props = Vec::new();
    for item in &req.props {
        let (k, v) = item.split_once('=').ok_or_else(|| {
            UsageError::new(format!(
                "-p '{item}': expected name=value (for example -p recordcount=100000)"
            ))
        })?;
        check_known(k, &format!("-p {k}"), &mut warnings)?;
        cli_props.push((k.to_string(), v.to_string()));
    }
    for (flag, v) in [("--threads", req.threads), ("--records", req.records)] {
        if let Some(v) = v {
            if v < 1 {
                return Err(UsageError::new(format!(
                    "{flag} {v}: expected a whole number ≥ 1"
                )));
            }
        }
    }
    if let Some(v) = req.ops {
        if v < 0 {
            return Err(UsageError::new(format!(
                "--ops {v}: expected a whole number ≥ 0 (0 = run until --duration)"
            )));
        }
    }
    let flag_duration = req
        .duration
        .as_deref()
        .map(|d| parse_duration("--duration", d))
        .transpose()?;
    if flag_duration == Some(Duration::ZERO) {
        return Err(UsageError::new(
            "--duration 0: expected a positive duration such as 30s",
        ));
    }
    if let Some(r) = req.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(UsageError::new(format!(
                "--rate {r}: expected a positive offered load in operations per second"
            )));
        }
        if req.target.is_some() {
            return Err(UsageError::new(
                "--rate and --target: choose one (--rate is an open loop of intended starts served by a pool; --target is YCSB's per-thread pacing)",
            ));
        }
    }
    if let Some(t) = req.target {
        if !(t.is_finite() && t > 0.0) {
            return Err(UsageError::new(format!(
                "--target {t}: expected a positive rate in operations per second"
            )));
        }
    }
    let warmup_flag = req
        .warmup
        .as_deref()
        .map(|d| parse_duration("--warmup", d))
        .transpose()?;
    let interval = parse_duration("--interval", req.interval.as_deref().unwrap_or("1s"))?;
    if interval < Duration::from_millis(10) {
        return Err(UsageError::new(format!(
            "--interval {:?}: expected at least 10ms",
            interval
        )));
    }
    let telemetry_interval = parse_duration(
        "--telemetry-interval",
        req.telemetry_interval.as_deref().unwrap_or("100ms"),
    )?;
    if !telemetry_interval.is_zero() && telemetry_interval < Duration::from_millis(10) {
        return Err(UsageError::new(format!(
            "--telemetry-interval {telemetry_interval:?}: expected 0 (off) or at least 10ms"
        )));
    }
    let status_interval = parse_duration(
        "--status-interval",
        req.status_interval.as_deref().unwrap_or("10s"),
    )?;

    if pressure {
        if step < Duration::from_secs(1) || step.as_millis() % interval.as_millis().max(1) != 0 {
            return Err(UsageError::new(format!(
                "--step {step:?}: expected at least 1s and a whole number of --interval ({interval:?})"
            )));
        }
        if let Some(w) = warmup_flag {
            if w.as_millis() % interval.as_millis().max(1) != 0 {
                return Err(UsageError::new(format!(
                    "--warmup {w:?}: for pressure, a whole number of --interval ({interval:?}) so steps align with intervals"
                )));
            }
        }
    }
    let mut phases = Vec::new();
    let mut ycsb_percentiles = vec![50.0, 95.0, 99.0];
    for (name, kind, files) in layout {
        if kind == PhaseKind::Clear {
            phases.push(PhasePlan {
                name,
                kind,
                workload_files: vec![],
                threads: 1,
                operations: 0,
                duration: None,
                target: None,
                open_loop: None,
                warmup: Duration::ZERO,
                workload: None,
                properties: BTreeMap::new(),
                pressure: None,
            });
            continue;
        }
        let mut flag_duration_for_phase: Option<Duration> = None;
        let mut p = Props::default();
        for f in &files {
            load_workload_file(f, &mut p, &mut warnings)?;
        }
        if suite {
            p.set("recordcount", SUITE_RECORDS.to_string(), "suite default");
            p.set("operationcount", "0", "suite default");
        } else {
            for k in ["recordcount", "operationcount"] {
                if !p.has(k) {
                    p.set(
                        k,
                        "1000",
                        "kvmeter default (YCSB's code default 0 means 'unset')",
                    );
                }
            }
        }
        for (k, v) in &cli_props {
            p.set(k, v.clone(), format!("-p {k}"));
        }
        if let Some(v) = req.threads {
            p.set("threadcount", v.to_string(), "--threads");
        }
        if let Some(v) = req.records {
            p.set("recordcount", v.to_string(), "--records");
        }
        if let Some(v) = req.ops {
            p.set("operationcount", v.to_string(), "--ops");
        }
        if let Some(v) = req.target {
            p.set("target", v.to_string(), "--target");
        }
        if let Some(v) = req.rate {
            p.set("rate", v.to_string(), "--rate");
        }
        if let Some(v) = &req.arrival {
            p.set("arrival", v.clone(), "--arrival");
        }
        if let Some(v) = p.get("workload") {
            if v.value != "site.ycsb.workloads.CoreWorkload"
                && v.value != "com.yahoo.ycsb.workloads.CoreWorkload"
            {
                return Err(p.bad(
                    "workload",
                    "site.ycsb.workloads.CoreWorkload (kvmeter runs YCSB's core workload)",
                ));
            }
        }
        let user_gave_ops =
            req.ops.is_some() || cli_props.iter().any(|(k, _)| k == "operationcount");
        let pressure_phase = (pressure && kind == PhaseKind::Run).then(|| {
            let kib: usize = name
                .trim_start_matches("pressure-")
                .trim_end_matches('k')
                .parse()
                .unwrap_or(4);
            PressurePhase {
                block_size: kib * 1024,
                step,
            }
        });
        if let Some(pp) = &pressure_phase {
            if user_gave_ops {
                return Err(UsageError::new(
                    "kvmeter pressure runs each block size for warm-up + 26 steps; --ops does not apply (use --step)",
                ));
            }
            let w = warmup_flag.unwrap_or(Duration::ZERO);
            p.set(
                "operationcount",
                "0",
                "pressure: the schedule sets the duration",
            );
            flag_duration_for_phase = Some(w + pp.step * crate::antagonist::schedule::STEPS as u32);
        }
        let duration = match flag_duration_for_phase.or(flag_duration) {
            Some(d) => Some(d),
            None => {
                let secs = p.int("maxexecutiontime", 0)?;
                if secs < 0 {
                    return Err(p.bad("maxexecutiontime", "seconds ≥ 0"));
                }
                if secs > 0 {
                    Some(Duration::from_secs(secs as u64))
                } else if suite && kind == PhaseKind::Run && !user_gave_ops {
                    Some(SUITE_DURATION)
                } else {
                    None
                }
            }
        };
        // `--duration` alone means "run this long": the files' operationcount (1000 in
        // YCSB's) would otherwise end the phase first. YCSB's own maxexecutiontime keeps the
        // whichever-comes-first rule.
        if flag_duration.is_some() && !user_gave_ops && kind == PhaseKind::Run {
            p.set(
                "operationcount",
                "0",
                "--duration without --ops: until the duration ends",
            );
        }
        let mut w = workload_config(&p, &mut warnings)?;
        let open_loop = if kind == PhaseKind::Run {
            open_loop(&p)?
        } else {
            None
        };
        if open_loop.is_some() && p.has("target") {
            return Err(UsageError::new(format!(
                "phase '{name}': both 'rate' ({}) and 'target' ({}) are set: choose one (rate: open loop; target: YCSB's per-thread pacing)",
                p.get("rate").map(|v| v.source.as_str()).unwrap_or("?"),
                p.get("target").map(|v| v.source.as_str()).unwrap_or("?")
            )));
        }
        if open_loop.is_some() && !p.has("threadcount") {
            p.set(
                "threadcount",
                OPEN_LOOP_WORKERS.to_string(),
                "kvmeter default for open loop: workers serving the schedule",
            );
        }
        let threads = p.int("threadcount", 1)?;
        if !(1..=4096).contains(&threads) {
            return Err(p.bad("threadcount", "a whole number from 1 to 4096"));
        }
        let target = match p.get("target") {
            None => None,
            Some(_) => {
                let t = p.float("target", 0.0)?;
                if t < 0.0 {
                    return Err(p.bad("target", "a rate ≥ 0 (0 = unthrottled)"));
                }
                (t > 0.0).then_some(t)
            }
        };
        let operations = match kind {
            PhaseKind::Load => {
                if p.has("insertcount") {
                    w.insertcount as u64
                } else {
                    w.recordcount as u64
                }
            }
            _ => w.operationcount as u64,
        };
        if kind == PhaseKind::Run && operations == 0 && duration.is_none() {
            return Err(UsageError::new(format!(
                "phase '{name}': operationcount is 0 and there is no --duration, so the phase would never end; give --ops N or --duration 30s"
            )));
        }
        if let Some(v) = p.get("hdrhistogram.percentiles") {
            let parsed: Result<Vec<f64>, _> = v
                .value
                .split(',')
                .map(|s| s.trim().parse::<f64>())
                .collect();
            match parsed {
                Ok(list) if list.iter().all(|x| (0.0..=100.0).contains(x)) => {
                    ycsb_percentiles = list
                }
                _ => {
                    return Err(p.bad(
                        "hdrhistogram.percentiles",
                        "a comma list of percentiles such as 50,95,99,99.9",
                    ))
                }
            }
        }
        if kind == PhaseKind::Load {
            w.operationcount = operations as i64;
        }
        let warmup = match (kind, warmup_flag) {
            (PhaseKind::Run, Some(d)) => d,
            (PhaseKind::Run, None) if suite && duration.is_some() => SUITE_WARMUP,
            _ => Duration::ZERO,
        };
        if let Some(d) = duration {
            if warmup >= d {
                return Err(UsageError::new(format!(
                    "--warmup {:?} is not shorter than the phase duration {:?}: nothing would be measured",
                    warmup, d
                )));
            }
        }
        phases.push(PhasePlan {
            name,
            kind,
            workload_files: files,
            threads: threads as usize,
            operations,
            duration: if kind == PhaseKind::Load {
                flag_duration
            } else {
                duration
            },
            target,
            open_loop,
            warmup,
            workload: Some(w),
            properties: p.0,
            pressure: pressure_phase,
        });
    }

    let out = req
        .out
        .clone()
        .unwrap_or_else(|| default_out(&req.command, &req.store));
    Ok(Plan {
        command: req.command.clone(),
        store: store_kind.name.to_string(),
        store_options: store_options.resolved().clone(),
        data_dir: req.data_dir.clone(),
        out,
        seed: req.seed.unwrap_or_else(fresh_seed),
        interval,
        status_interval,
        format: req.format.unwrap_or(Format::Table),
        clock: req.clock.unwrap_or_default(),
        telemetry_interval,
        disk: req.disk.clone(),
        power: crate::telemetry::power::Choice::parse(req.power.as_deref().unwrap_or("auto"))?,
        power_model: match &req.power_model {
            Some(m) => crate::telemetry::power::Model::parse(m)?,
            None => crate::telemetry::power::Model::default(),
        },
        counters: req.counters,
        antagonists: req
            .antagonists
            .iter()
            .map(|a| Antagonist::parse(a))
            .collect::<Result<_, _>>()?,
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
    })
}

/// The open-loop settings of a run phase, from the `rate` and `arrival` properties.
fn open_loop(p: &Props) -> Result<Option<OpenLoop>, UsageError> {
    let arrival = match p
        .get("arrival")
        .map(|v| v.value.trim().to_ascii_lowercase())
    {
        None => None,
        Some(a) if a == "fixed" => Some(Arrival::Fixed),
        Some(a) if a == "poisson" => Some(Arrival::Poisson),
        Some(_) => return Err(p.bad("arrival", "fixed or poisson")),
    };
    let Some(_) = p.get("rate") else {
        if arrival.is_some() {
            let src = &p.get("arrival").expect("checked").source;
            return Err(UsageError::new(format!(
                "{src}: 'arrival' needs an offered load: give --rate R (operations per second)"
            )));
        }
        return Ok(None);
    };
    let rate = p.float("rate", 0.0)?;
    if rate <= 0.0 {
        return Err(p.bad("rate", "a positive offered load in operations per second"));
    }
    if rate > 1e9 {
        return Err(p.bad("rate", "at most 1e9 operations per second"));
    }
    Ok(Some(OpenLoop {
        arrival: arrival.unwrap_or(Arrival::Poisson),
        rate,
    }))
}

fn workload_config(p: &Props, warnings: &mut Vec<String>) -> Result<WorkloadConfig, UsageError> {
    let recordcount = p.int("recordcount", 0)?;
    if recordcount < 1 {
        return Err(p.bad("recordcount", "a whole number ≥ 1"));
    }
    let operationcount = p.int("operationcount", 0)?;
    if operationcount < 0 {
        return Err(p.bad(
            "operationcount",
            "a whole number ≥ 0 (0 = until the duration ends)",
        ));
    }
    let insertstart = p.int("insertstart", 0)?;
    if insertstart < 0 {
        return Err(p.bad("insertstart", "a whole number ≥ 0"));
    }
    let insertcount = p.int("insertcount", recordcount - insertstart)?;
    if insertcount < 1 {
        return Err(p.bad("insertcount", "a whole number ≥ 1"));
    }
    if recordcount < insertstart + insertcount {
        return Err(UsageError::new(format!(
            "recordcount ({recordcount}, {}) must be ≥ insertstart ({insertstart}) + insertcount ({insertcount}); raise recordcount or lower insertcount",
            p.get("recordcount").map(|v| v.source.as_str()).unwrap_or("default")
        )));
    }
    let fieldcount = p.int("fieldcount", 10)?;
    if !(1..=65535).contains(&fieldcount) {
        return Err(p.bad("fieldcount", "a whole number from 1 to 65535"));
    }
    let fieldlength = p.int32("fieldlength", 100)?;
    if fieldlength < 0 {
        return Err(p.bad("fieldlength", "a whole number ≥ 0"));
    }
    let minfieldlength = p.int32("minfieldlength", 1)?;
    let fld = match p.string("fieldlengthdistribution", "constant").as_str() {
        "constant" => FieldLengthDistribution::Constant,
        "uniform" => FieldLengthDistribution::Uniform,
        "zipfian" => FieldLengthDistribution::Zipfian,
        "histogram" => FieldLengthDistribution::Histogram,
        _ => {
            return Err(p.bad(
                "fieldlengthdistribution",
                "constant, uniform, zipfian or histogram",
            ))
        }
    };
    if matches!(
        fld,
        FieldLengthDistribution::Uniform | FieldLengthDistribution::Zipfian
    ) && !(0..=fieldlength).contains(&minfieldlength)
    {
        return Err(p.bad(
            "minfieldlength",
            &format!("a length from 0 to fieldlength ({fieldlength})"),
        ));
    }
    let hist_file = p.string("fieldlengthhistogram", "hist.txt");
    let fieldlength_histogram = if fld == FieldLengthDistribution::Histogram {
        let text = std::fs::read_to_string(&hist_file).map_err(|e| {
            UsageError::new(format!(
                "fieldlengthhistogram '{hist_file}': cannot read it: {e}"
            ))
        })?;
        Some(
            HistogramLengths::parse(&text)
                .map_err(|e| UsageError::new(format!("fieldlengthhistogram '{hist_file}': {e}")))?,
        )
    } else {
        None
    };
    let dataintegrity = p.boolean("dataintegrity", false, warnings);
    if dataintegrity && fld != FieldLengthDistribution::Constant {
        return Err(UsageError::new(
            "dataintegrity=true needs fieldlengthdistribution=constant (values must have a known size to be checked)",
        ));
    }
    let mut props_sum = 0.0;
    let mut proportions = [0.0; 5];
    let names = [
        ("readproportion", 0.95),
        ("updateproportion", 0.05),
        ("insertproportion", 0.0),
        ("scanproportion", 0.0),
        ("readmodifywriteproportion", 0.0),
    ];
    for (i, (k, d)) in names.iter().enumerate() {
        let v = p.float(k, *d)?;
        if v < 0.0 {
            return Err(p.bad(k, "a proportion ≥ 0"));
        }
        proportions[i] = v;
        props_sum += v;
    }
    if (props_sum - 1.0).abs() > 1e-6 {
        return Err(UsageError::new(format!(
            "the operation proportions (read {}, update {}, insert {}, scan {}, readmodifywrite {}) add up to {props_sum}: expected 1; adjust them so they sum to 1",
            proportions[0], proportions[1], proportions[2], proportions[3], proportions[4]
        )));
    }
    let rd_name = p.string("requestdistribution", "uniform");
    let requestdistribution = Distribution::parse(&rd_name).ok_or_else(|| {
        p.bad(
            "requestdistribution",
            "uniform, zipfian, latest, hotspot, sequential or exponential",
        )
    })?;
    let minscanlength = p.int32("minscanlength", 1)?;
    let maxscanlength = p.int32("maxscanlength", 1000)?;
    if proportions[3] > 0.0 && !(minscanlength >= 1 && minscanlength <= maxscanlength) {
        return Err(UsageError::new(format!(
            "minscanlength ({minscanlength}) and maxscanlength ({maxscanlength}): expected 1 ≤ minscanlength ≤ maxscanlength"
        )));
    }
    let scanlengthdistribution = p.string("scanlengthdistribution", "uniform");
    if scanlengthdistribution != "uniform" && scanlengthdistribution != "zipfian" {
        return Err(p.bad("scanlengthdistribution", "uniform or zipfian"));
    }
    let insertorder = p.string("insertorder", "hashed");
    if insertorder != "hashed" && insertorder != "ordered" {
        warnings.push(format!(
            "insertorder '{insertorder}' is read as ordered (YCSB treats anything but 'hashed' as ordered)"
        ));
    }
    let hotspotdatafraction = p.float("hotspotdatafraction", 0.2)?;
    let hotspotopnfraction = p.float("hotspotopnfraction", 0.8)?;
    if requestdistribution == Distribution::Hotspot {
        for k in ["hotspotdatafraction", "hotspotopnfraction"] {
            let v = p.float(k, 0.0)?;
            if p.has(k) && !(0.0..=1.0).contains(&v) {
                return Err(p.bad(k, "a fraction from 0 to 1"));
            }
        }
        let hot = (insertcount as f64 * hotspotdatafraction) as i32 as i64;
        let cold = insertcount - hot;
        if (hot == 0 && hotspotopnfraction > 0.0) || (cold == 0 && hotspotopnfraction < 1.0) {
            return Err(UsageError::new(format!(
                "hotspot: hotspotdatafraction {hotspotdatafraction} of {insertcount} keys leaves an empty {} set that hotspotopnfraction {hotspotopnfraction} still draws from; change one of them",
                if hot == 0 { "hot" } else { "cold" }
            )));
        }
    }
    if requestdistribution == Distribution::Latest && recordcount < 2 {
        return Err(p.bad("recordcount", "at least 2 for requestdistribution=latest"));
    }
    let exponential_percentile = p.float("exponential.percentile", 95.0)?;
    if requestdistribution == Distribution::Exponential
        && !(exponential_percentile > 0.0 && exponential_percentile < 100.0)
    {
        return Err(p.bad("exponential.percentile", "a percentile between 0 and 100"));
    }
    let exponential_frac = p.float("exponential.frac", 0.8571428571)?;
    let retry_limit = p.int32("core_workload_insertion_retry_limit", 0)?;
    let retry_interval = p.int32("core_workload_insertion_retry_interval", 3)?;
    if retry_limit < 0 || retry_interval < 0 {
        return Err(UsageError::new(
            "core_workload_insertion_retry_limit and _interval: expected whole numbers ≥ 0",
        ));
    }
    Ok(WorkloadConfig {
        table: p.string("table", "usertable"),
        fieldcount,
        fieldnameprefix: p.string("fieldnameprefix", "field"),
        fieldlength,
        minfieldlength,
        fieldlengthdistribution: fld,
        fieldlengthhistogram: hist_file,
        fieldlength_histogram,
        readallfields: p.boolean("readallfields", true, warnings),
        readallfieldsbyname: p.boolean("readallfieldsbyname", false, warnings),
        writeallfields: p.boolean("writeallfields", false, warnings),
        dataintegrity,
        readproportion: proportions[0],
        updateproportion: proportions[1],
        insertproportion: proportions[2],
        scanproportion: proportions[3],
        readmodifywriteproportion: proportions[4],
        requestdistribution,
        minscanlength,
        maxscanlength,
        scanlengthdistribution,
        insertorder,
        insertstart,
        insertcount,
        zeropadding: p.int32("zeropadding", 1)?,
        hotspotdatafraction,
        hotspotopnfraction,
        exponential_percentile,
        exponential_frac,
        recordcount,
        operationcount,
        insertion_retry_limit: retry_limit,
        insertion_retry_interval: retry_interval,
    })
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
    }
}
