//! Power and energy (papers/000 §III-D measured PSU-side power, papers/002 wall meters and
//! PDUs, papers/003 a Yokogawa meter at the wall). Every meter answers one question — joules
//! since it started — so a phase's energy is the difference between two readings and a
//! sample's power is the difference over its interval.
//!
//! Sources, in the order `--power auto` tries them: RAPL through powercap sysfs (never double
//! counting: psys alone if present, else packages plus DRAM; core/uncore are inside the
//! package; mmio zones duplicate packages), the perf `power` PMU, and finally the CPU-
//! utilisation estimate, which is labelled `estimate` wherever it appears. IPMI DCMI, Redfish,
//! a command that prints watts and a CSV written by an external meter are chosen explicitly.
//! A source that reads as zero or cannot be read is `unavailable: <why>`, never 0 W.

use super::procfs::{parse_stat, CpuShare, CpuTimes, Root};
use crate::error::UsageError;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// `--power`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    Auto,
    Rapl,
    Perf,
    Ipmi,
    Redfish,
    Cmd(Vec<String>),
    File(PathBuf),
    Estimate,
    None,
}

impl Choice {
    pub fn parse(s: &str) -> Result<Self, UsageError> {
        Ok(match s {
            "auto" => Choice::Auto,
            "rapl" => Choice::Rapl,
            "perf" => Choice::Perf,
            "ipmi" => Choice::Ipmi,
            "redfish" => Choice::Redfish,
            "estimate" => Choice::Estimate,
            "none" => Choice::None,
            _ => {
                if let Some(cmd) = s.strip_prefix("cmd:") {
                    let argv: Vec<String> = cmd.split_whitespace().map(String::from).collect();
                    if argv.is_empty() {
                        return Err(UsageError::new(
                            "--power cmd:<program args>: the command is empty",
                        ));
                    }
                    Choice::Cmd(argv)
                } else if let Some(f) = s.strip_prefix("file:") {
                    Choice::File(PathBuf::from(f))
                } else {
                    return Err(UsageError::new(format!(
                        "--power '{s}': expected auto, rapl, perf, ipmi, redfish, cmd:<program args>, file:<csv>, estimate or none"
                    )));
                }
            }
        })
    }
}

/// The estimate model P = idle + (max − idle)·u, with where its constants came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub idle_w: f64,
    pub max_w: f64,
    pub origin: String,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            idle_w: 92.0,
            max_w: 127.0,
            origin: "default: one RAMCloud server node at the wall, 92 W lightly loaded and 127 W under 30 clients (papers/002 §III-A); almost certainly wrong for this machine: run 'kvmeter calibrate' with a power source or give --power-model idle=W,max=W".into(),
        }
    }
}

impl Model {
    pub fn parse(s: &str) -> Result<Self, UsageError> {
        let mut idle = None;
        let mut max = None;
        for part in s.split(',') {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let v: Option<f64> = v.parse().ok().filter(|x: &f64| x.is_finite() && *x >= 0.0);
            match (k, v) {
                ("idle", Some(v)) => idle = Some(v),
                ("max", Some(v)) => max = Some(v),
                _ => {
                    return Err(UsageError::new(format!(
                        "--power-model '{s}': expected idle=WATTS,max=WATTS (for example idle=60,max=180)"
                    )))
                }
            }
        }
        match (idle, max) {
            (Some(i), Some(m)) if m >= i => Ok(Model {
                idle_w: i,
                max_w: m,
                origin: "--power-model".into(),
            }),
            _ => Err(UsageError::new(format!(
                "--power-model '{s}': expected idle=WATTS,max=WATTS with max ≥ idle"
            ))),
        }
    }

    pub fn watts(&self, busy_fraction: f64) -> f64 {
        self.idle_w + (self.max_w - self.idle_w) * busy_fraction.clamp(0.0, 1.0)
    }
}

/// What a meter measures, for every figure that carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerInfo {
    /// rapl, perf, ipmi, redfish, command, file or estimate.
    pub source: String,
    /// package, package+dram, psys, wall, ...
    pub scope: String,
    /// True for the utilisation model: never a measurement.
    pub estimate: bool,
    pub detail: String,
}

pub trait Meter: Send {
    fn info(&self) -> &PowerInfo;
    /// Joules since the meter started.
    fn joules(&mut self) -> Result<f64, String>;
}

pub fn permission_hint(path: &Path, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        format!(
            "permission denied (run as root, or grant read on {}: chmod o+r or a udev rule)",
            path.display()
        )
    } else {
        format!("cannot read {}: {e}", path.display())
    }
}

// ---------------------------------------------------------------------------- RAPL

/// Reads a sysfs file (injectable, so tests can simulate a permission error as root).
pub type SysRead = Box<dyn Fn(&Path) -> std::io::Result<String> + Send>;

struct Zone {
    path: PathBuf,
    max_range_uj: u64,
    last_uj: u64,
    total_uj: u128,
}

pub struct Rapl {
    info: PowerInfo,
    zones: Vec<Zone>,
    read: SysRead,
}

impl Rapl {
    pub fn discover(root: &Root) -> Result<Self, String> {
        Self::discover_with(root, Box::new(|p| std::fs::read_to_string(p)))
    }

    /// Discovery with an injectable reader (tests simulate permission errors with it).
    pub fn discover_with(root: &Root, read: SysRead) -> Result<Self, String> {
        let base = root.path("sys/class/powercap");
        let entries = std::fs::read_dir(&base)
            .map_err(|_| "no powercap RAPL zones (/sys/class/powercap is missing: no RAPL on this CPU or in this VM)".to_string())?;
        let mut tops: Vec<(String, PathBuf)> = Vec::new();
        let mut drams: Vec<(String, PathBuf)> = Vec::new();
        let mut names: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("rapl") && !n.contains("mmio"))
            .collect();
        names.sort();
        for n in names {
            let dir = base.join(&n);
            let zone_name = read(&dir.join("name"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            let depth = n.matches(':').count();
            if depth == 1 && (zone_name.starts_with("package") || zone_name == "psys") {
                tops.push((zone_name, dir));
            } else if depth == 2 && zone_name == "dram" {
                drams.push((format!("dram of {}", n), dir));
            }
        }
        if tops.is_empty() {
            return Err("no RAPL package or psys zone under /sys/class/powercap".into());
        }
        let (chosen, scope): (Vec<(String, PathBuf)>, String) =
            if let Some(psys) = tops.iter().find(|(n, _)| n == "psys") {
                (vec![psys.clone()], "psys (platform)".into())
            } else {
                let pk: Vec<_> = tops
                    .into_iter()
                    .filter(|(n, _)| n.starts_with("package"))
                    .collect();
                let scope = if drams.is_empty() {
                    "package".to_string()
                } else {
                    "package+dram".to_string()
                };
                (pk.into_iter().chain(drams).collect(), scope)
            };
        let mut zones = Vec::new();
        for (_, dir) in &chosen {
            let energy = dir.join("energy_uj");
            let last = read(&energy)
                .map_err(|e| permission_hint(&energy, &e))?
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{} is not a number", energy.display()))?;
            let max_range_uj = read(&dir.join("max_energy_range_uj"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(u64::MAX);
            zones.push(Zone {
                path: energy,
                max_range_uj,
                last_uj: last,
                total_uj: 0,
            });
        }
        let detail = chosen
            .iter()
            .map(|(n, _)| n.clone())
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Rapl {
            info: PowerInfo {
                source: "rapl".into(),
                scope,
                estimate: false,
                detail,
            },
            zones,
            read,
        })
    }
}

impl Meter for Rapl {
    fn info(&self) -> &PowerInfo {
        &self.info
    }
    fn joules(&mut self) -> Result<f64, String> {
        let mut total = 0u128;
        for z in &mut self.zones {
            let cur: u64 = (self.read)(&z.path)
                .map_err(|e| permission_hint(&z.path, &e))?
                .trim()
                .parse()
                .map_err(|_| format!("{} is not a number", z.path.display()))?;
            // energy_uj wraps at max_energy_range_uj.
            let d = if cur >= z.last_uj {
                cur - z.last_uj
            } else {
                cur + (z.max_range_uj - z.last_uj)
            };
            z.total_uj += d as u128;
            z.last_uj = cur;
            total += z.total_uj;
        }
        Ok(total as f64 / 1e6)
    }
}

// ------------------------------------------------------------------ perf power PMU

pub struct PerfPower {
    info: PowerInfo,
    counters: Vec<(perf_event::Counter, f64)>,
}

impl PerfPower {
    pub fn open() -> Result<Self, String> {
        let dir = Path::new("/sys/bus/event_source/devices/power");
        if !dir.exists() {
            return Err(
                "no perf power PMU (/sys/bus/event_source/devices/power is missing)".into(),
            );
        }
        let cpu: usize = std::fs::read_to_string(dir.join("cpumask"))
            .ok()
            .and_then(|s| {
                s.trim()
                    .split([',', '-'])
                    .next()
                    .and_then(|c| c.parse().ok())
            })
            .unwrap_or(0);
        let has = |e: &str| dir.join("events").join(e).exists();
        let events: Vec<&str> = if has("energy-psys") && !has("energy-pkg") {
            vec!["energy-psys"]
        } else {
            ["energy-pkg", "energy-ram"]
                .into_iter()
                .filter(|e| has(e))
                .collect()
        };
        if events.is_empty() {
            return Err(
                "the perf power PMU has no energy-pkg, energy-ram or energy-psys event".into(),
            );
        }
        let mut counters = Vec::new();
        for e in &events {
            let mut b = perf_event::events::Dynamic::builder("power").map_err(|e| e.to_string())?;
            b.event(e).map_err(|err| format!("power/{e}/: {err}"))?;
            let scale = b.scale().ok().flatten().unwrap_or(1.0);
            let ev = b.build().map_err(|err| format!("power/{e}/: {err}"))?;
            // The RAPL PMU rejects exclusion bits, which the builder sets by default.
            let mut c = perf_event::Builder::new(ev)
                .one_cpu(cpu)
                .any_pid()
                .include_kernel()
                .include_hv()
                .build()
                .map_err(|err| match err.raw_os_error() {
                    Some(libc::EACCES) | Some(libc::EPERM) => format!(
                        "power/{e}/: permission denied (system-wide counting needs root or CAP_PERFMON, or perf_event_paranoid ≤ 0; it is {})",
                        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default().trim()
                    ),
                    _ => format!("power/{e}/: {err}"),
                })?;
            c.enable().map_err(|err| format!("power/{e}/: {err}"))?;
            counters.push((c, scale));
        }
        let scope = if events == ["energy-psys"] {
            "psys (platform)"
        } else if events.len() == 2 {
            "package+dram"
        } else {
            "package"
        };
        let mut m = PerfPower {
            info: PowerInfo {
                source: "perf".into(),
                scope: scope.into(),
                estimate: false,
                detail: events
                    .iter()
                    .map(|e| format!("power/{e}/"))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
            counters,
        };
        // A virtualised PMU may exist and count nothing: check before trusting it.
        std::thread::sleep(Duration::from_millis(150));
        if m.joules()? <= 0.0 {
            return Err(format!(
                "the perf power PMU ({}) counts no energy here (virtualised or unsupported); 0 W would be a wrong figure",
                m.info.detail
            ));
        }
        Ok(m)
    }
}

impl Meter for PerfPower {
    fn info(&self) -> &PowerInfo {
        &self.info
    }
    fn joules(&mut self) -> Result<f64, String> {
        let mut j = 0.0;
        for (c, scale) in &mut self.counters {
            j += c.read().map_err(|e| e.to_string())? as f64 * *scale;
        }
        Ok(j)
    }
}

// ------------------------------------------------------- polled watts (cmd, ipmi, redfish)

/// Integrates a watts reading held until the next one (a step function).
#[derive(Default)]
struct Integral {
    joules: f64,
    last: Option<(Instant, f64)>,
    error: Option<String>,
}

impl Integral {
    fn add(&mut self, at: Instant, watts: f64) {
        if let Some((t, w)) = self.last {
            self.joules += w * at.duration_since(t).as_secs_f64();
        }
        self.last = Some((at, watts));
    }
    fn now(&self, at: Instant) -> Option<f64> {
        self.last
            .map(|(t, w)| self.joules + w * at.saturating_duration_since(t).as_secs_f64())
    }
}

/// Runs `argv` without a shell, with a timeout; its stdout.
pub fn run_with_timeout(
    argv: &[String],
    stdin: Option<&str>,
    timeout: Duration,
) -> Result<String, String> {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", argv[0]))?;
    if let (Some(text), Some(mut w)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        let _ = w.write_all(text.as_bytes());
    }
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut out = String::new();
                if let Some(mut o) = child.stdout.take() {
                    let _ = o.read_to_string(&mut out);
                }
                if !status.success() {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    return Err(format!("{} exited with {status}: {}", argv[0], err.trim()));
                }
                return Ok(out);
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{} did not answer within {timeout:?}", argv[0]));
            }
        }
    }
}

/// Watts from `ipmitool dcmi power reading`.
pub fn parse_ipmi(text: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.contains("Instantaneous power reading"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Watts from a Redfish Power resource: PowerControl[0].PowerConsumedWatts.
pub fn parse_redfish(text: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v["PowerControl"][0]["PowerConsumedWatts"].as_f64()
}

/// A first number on the first non-empty line (a command that prints watts).
pub fn parse_watts(text: &str) -> Option<f64> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .and_then(|l| l.split(|c: char| c.is_whitespace() || c == ',').next())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|w| w.is_finite() && *w >= 0.0)
}

pub struct Polled {
    info: PowerInfo,
    state: Arc<Mutex<Integral>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Polled {
    /// Polls `read` every `period` on a thread of its own (a slow BMC never stalls the other
    /// samplers). The first reading must succeed.
    pub fn start(
        info: PowerInfo,
        period: Duration,
        read: Box<dyn Fn() -> Result<f64, String> + Send>,
    ) -> Result<Self, String> {
        let first = read()?;
        let state = Arc::new(Mutex::new(Integral::default()));
        state.lock().unwrap().add(Instant::now(), first);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        std::thread::Builder::new()
            .name("kvm-power".into())
            .spawn(move || {
                while !sp.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(period);
                    let r = read();
                    let mut g = st.lock().unwrap_or_else(|p| p.into_inner());
                    match r {
                        Ok(w) => g.add(Instant::now(), w),
                        Err(e) => g.error = Some(e),
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Polled { info, state, stop })
    }
}

impl Drop for Polled {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Meter for Polled {
    fn info(&self) -> &PowerInfo {
        &self.info
    }
    fn joules(&mut self) -> Result<f64, String> {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((t, _)) = g.last {
            // A reading older than 10 s is not a measurement of now.
            if t.elapsed() > Duration::from_secs(10) {
                return Err(g
                    .error
                    .clone()
                    .unwrap_or_else(|| "no reading for 10 s".into()));
            }
        }
        g.now(Instant::now()).ok_or_else(|| "no reading yet".into())
    }
}

pub fn ipmi() -> Result<Polled, String> {
    let argv: Vec<String> = ["ipmitool", "dcmi", "power", "reading"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    Polled::start(
        PowerInfo {
            source: "ipmi".into(),
            scope: "wall (BMC, DCMI)".into(),
            estimate: false,
            detail: "ipmitool dcmi power reading, about 1 Hz".into(),
        },
        Duration::from_secs(1),
        Box::new(move || {
            let out = run_with_timeout(&argv, None, Duration::from_secs(5))?;
            parse_ipmi(&out)
                .ok_or_else(|| "ipmitool printed no 'Instantaneous power reading'".into())
        }),
    )
}

/// Redfish through curl: the URL from KVMETER_REDFISH_URL, credentials from
/// KVMETER_REDFISH_USER/_PASSWORD, passed on curl's standard input so they never appear in a
/// process list or a log.
pub fn redfish() -> Result<Polled, String> {
    let url = std::env::var("KVMETER_REDFISH_URL").map_err(|_| {
        "set KVMETER_REDFISH_URL to the chassis Power resource (https://BMC/redfish/v1/Chassis/1/Power), and KVMETER_REDFISH_USER / KVMETER_REDFISH_PASSWORD".to_string()
    })?;
    let user = std::env::var("KVMETER_REDFISH_USER").unwrap_or_default();
    let pass = std::env::var("KVMETER_REDFISH_PASSWORD").unwrap_or_default();
    let config =
        format!("url = \"{url}\"\nuser = \"{user}:{pass}\"\nsilent\nshow-error\ninsecure\n");
    let argv: Vec<String> = ["curl", "--config", "-", "--max-time", "5"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    Polled::start(
        PowerInfo {
            source: "redfish".into(),
            scope: "wall (BMC, Redfish PowerConsumedWatts)".into(),
            estimate: false,
            detail: url.clone(),
        },
        Duration::from_secs(1),
        Box::new(move || {
            let out = run_with_timeout(&argv, Some(&config), Duration::from_secs(6))?;
            parse_redfish(&out).ok_or_else(|| {
                "the Redfish answer has no PowerControl[0].PowerConsumedWatts".into()
            })
        }),
    )
}

pub fn command(argv: Vec<String>, period: Duration) -> Result<Polled, String> {
    let detail = argv.join(" ");
    Polled::start(
        PowerInfo {
            source: "command".into(),
            scope: "as the command measures".into(),
            estimate: false,
            detail,
        },
        period,
        Box::new(move || {
            let out = run_with_timeout(&argv, None, Duration::from_secs(2))?;
            parse_watts(&out)
                .ok_or_else(|| format!("'{}' printed no watts on its first line", argv[0]))
        }),
    )
}

// -------------------------------------------------------------- an external meter's CSV

/// `timestamp,watts` rows (Unix seconds, fractions allowed) appended by an external meter,
/// read incrementally and integrated as a step function, aligned to the run by wall time.
pub struct CsvFile {
    info: PowerInfo,
    path: PathBuf,
    offset: u64,
    partial: String,
    start: f64,
    joules: f64,
    last: Option<(f64, f64)>,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl CsvFile {
    pub fn open(path: PathBuf) -> Result<Self, String> {
        std::fs::File::open(&path).map_err(|e| permission_hint(&path, &e))?;
        Ok(CsvFile {
            info: PowerInfo {
                source: "file".into(),
                scope: "as the external meter measures".into(),
                estimate: false,
                detail: path.display().to_string(),
            },
            path,
            offset: 0,
            partial: String::new(),
            start: unix_now(),
            joules: 0.0,
            last: None,
        })
    }

    fn add(&mut self, t: f64, w: f64) {
        if let Some((pt, pw)) = self.last {
            let (a, b) = (pt.max(self.start), t.max(self.start));
            if b > a {
                self.joules += pw * (b - a);
            }
        }
        self.last = Some((t, w));
    }

    /// Joules from the meter's start up to `now` (Unix seconds).
    pub fn joules_at(&mut self, now: f64) -> Result<f64, String> {
        let mut f = std::fs::File::open(&self.path).map_err(|e| permission_hint(&self.path, &e))?;
        f.seek(SeekFrom::Start(self.offset))
            .map_err(|e| e.to_string())?;
        let mut r = std::io::BufReader::new(f);
        let mut line = String::new();
        loop {
            line.clear();
            let n = r.read_line(&mut line).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            self.offset += n as u64;
            if !line.ends_with('\n') {
                self.partial.push_str(&line);
                break;
            }
            let full = std::mem::take(&mut self.partial) + line.trim_end();
            let mut it = full.split(',');
            if let (Some(t), Some(w)) = (it.next(), it.next()) {
                if let (Ok(t), Ok(w)) = (t.trim().parse::<f64>(), w.trim().parse::<f64>()) {
                    self.add(t, w);
                }
            }
        }
        match self.last {
            Some((t, w)) if now - t < 10.0 => {
                Ok(self.joules + w * (now - t.max(self.start)).max(0.0))
            }
            Some(_) => Err(format!(
                "{}: no reading in the last 10 s",
                self.path.display()
            )),
            None => Err(format!(
                "{}: no 'timestamp,watts' rows yet",
                self.path.display()
            )),
        }
    }
}

impl Meter for CsvFile {
    fn info(&self) -> &PowerInfo {
        &self.info
    }
    fn joules(&mut self) -> Result<f64, String> {
        self.joules_at(unix_now())
    }
}

// ----------------------------------------------------------------------- the estimate

pub struct Estimate {
    info: PowerInfo,
    model: Model,
    root: Root,
    last: Option<(Instant, CpuTimes)>,
    joules: f64,
}

impl Estimate {
    pub fn new(model: Model, root: Root) -> Self {
        Estimate {
            info: PowerInfo {
                source: "estimate".into(),
                scope: "whole machine (model, not a measurement)".into(),
                estimate: true,
                detail: format!(
                    "P = {} W + ({} W − {} W) × CPU busy fraction; {}",
                    model.idle_w, model.max_w, model.idle_w, model.origin
                ),
            },
            model,
            root,
            last: None,
            joules: 0.0,
        }
    }
}

impl Meter for Estimate {
    fn info(&self) -> &PowerInfo {
        &self.info
    }
    fn joules(&mut self) -> Result<f64, String> {
        let now = Instant::now();
        let cpu = self
            .root
            .read("proc/stat")
            .ok()
            .and_then(|t| parse_stat(&t))
            .map(|c| c.0);
        let Some(cpu) = cpu else {
            return Err("the estimate needs /proc/stat".into());
        };
        if let Some((t, prev)) = &self.last {
            let busy = CpuShare::between(prev, &cpu)
                .map(|s| s.busy / 100.0)
                .unwrap_or(0.0);
            self.joules += self.model.watts(busy) * now.duration_since(*t).as_secs_f64();
        }
        self.last = Some((now, cpu));
        Ok(self.joules)
    }
}

// ------------------------------------------------------------------------ choosing one

/// Opens the meter `choice` asks for. `Err` carries the reason the source is unavailable
/// (for auto: why each measured source was passed over, before falling back to the estimate).
pub fn open(
    choice: &Choice,
    model: &Model,
    root: &Root,
    period: Duration,
) -> Result<Option<Box<dyn Meter>>, String> {
    let boxed = |m: Result<Box<dyn Meter>, String>| m.map(Some);
    match choice {
        Choice::None => Ok(None),
        Choice::Rapl => boxed(Rapl::discover(root).map(|m| Box::new(m) as Box<dyn Meter>)),
        Choice::Perf => boxed(PerfPower::open().map(|m| Box::new(m) as Box<dyn Meter>)),
        Choice::Ipmi => boxed(ipmi().map(|m| Box::new(m) as Box<dyn Meter>)),
        Choice::Redfish => boxed(redfish().map(|m| Box::new(m) as Box<dyn Meter>)),
        Choice::Cmd(argv) => boxed(
            command(argv.clone(), period.max(Duration::from_millis(200)))
                .map(|m| Box::new(m) as Box<dyn Meter>),
        ),
        Choice::File(p) => boxed(CsvFile::open(p.clone()).map(|m| Box::new(m) as Box<dyn Meter>)),
        Choice::Estimate => Ok(Some(Box::new(Estimate::new(model.clone(), root.clone())))),
        Choice::Auto => {
            let rapl = match Rapl::discover(root) {
                Ok(m) => return Ok(Some(Box::new(m))),
                Err(e) => e,
            };
            let perf = match PerfPower::open() {
                Ok(m) => return Ok(Some(Box::new(m))),
                Err(e) => e,
            };
            let mut est = Estimate::new(model.clone(), root.clone());
            est.info.detail = format!(
                "no measured source (rapl: {rapl}; perf: {perf}); {}",
                est.info.detail
            );
            Ok(Some(Box::new(est)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(root: &Path, dir: &str, name: &str, energy: u64, max: u64) {
        let d = root.join("sys/class/powercap").join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("name"), format!("{name}\n")).unwrap();
        std::fs::write(d.join("energy_uj"), format!("{energy}\n")).unwrap();
        std::fs::write(d.join("max_energy_range_uj"), format!("{max}\n")).unwrap();
    }

    const MAX: u64 = 262_143_328_850;

    fn two_sockets(root: &Path, p0: u64, p1: u64, d0: u64, d1: u64) {
        zone(root, "intel-rapl:0", "package-0", p0, MAX);
        zone(root, "intel-rapl:0:0", "core", 5, MAX);
        zone(root, "intel-rapl:0:1", "dram", d0, 65_712_999_613);
        zone(root, "intel-rapl:1", "package-1", p1, MAX);
        zone(root, "intel-rapl:1:0", "core", 7, MAX);
        zone(root, "intel-rapl:1:1", "dram", d1, 65_712_999_613);
        zone(root, "intel-rapl-mmio:0", "package-0", 123_456, MAX);
    }

    #[test]
    fn rapl_two_sockets_with_dram_and_a_wrap() {
        let t = tempfile::tempdir().unwrap();
        let root = Root(t.path().to_path_buf());
        two_sockets(t.path(), MAX - 1_000_000, 10_000_000, 1_000_000, 2_000_000);
        let mut r = Rapl::discover(&root).unwrap();
        assert_eq!(r.info().scope, "package+dram");
        assert_eq!(
            r.zones.len(),
            4,
            "packages and drams; core and mmio zones are not counted"
        );
        assert_eq!(r.joules().unwrap(), 0.0);
        // package-0 wraps: MAX-1e6 → 4e6 is +5e6 µJ; package-1 +20e6; drams +1e6 and +3e6.
        two_sockets(t.path(), 4_000_000, 30_000_000, 2_000_000, 5_000_000);
        let j = r.joules().unwrap();
        assert!((j - 29.0).abs() < 1e-9, "{j}");
        two_sockets(t.path(), 5_000_000, 30_000_000, 2_000_000, 5_000_000);
        assert!((r.joules().unwrap() - 30.0).abs() < 1e-9);
    }

    #[test]
    fn rapl_psys_alone_and_permission_denied() {
        let t = tempfile::tempdir().unwrap();
        let root = Root(t.path().to_path_buf());
        zone(t.path(), "intel-rapl:0", "package-0", 1, MAX);
        zone(t.path(), "intel-rapl:1", "psys", 1, MAX);
        let r = Rapl::discover(&root).unwrap();
        assert_eq!(r.info().scope, "psys (platform)");
        assert_eq!(r.zones.len(), 1);

        let denied = Box::new(|p: &Path| {
            if p.ends_with("energy_uj") {
                Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
            } else {
                std::fs::read_to_string(p)
            }
        });
        let e = Rapl::discover_with(&root, denied).err().unwrap();
        assert!(
            e.starts_with("permission denied (run as root, or grant read on "),
            "{e}"
        );
        assert!(e.contains("intel-rapl:1/energy_uj"), "{e}");

        let none = tempfile::tempdir().unwrap();
        let e = Rapl::discover(&Root(none.path().to_path_buf()))
            .err()
            .unwrap();
        assert!(e.contains("no powercap RAPL zones"), "{e}");
    }

    #[test]
    fn parsers_for_meters() {
        assert_eq!(parse_ipmi("    Instantaneous power reading:                   145 Watts\n    Minimum during sampling period: 80 Watts\n"), Some(145.0));
        assert_eq!(parse_ipmi("nothing"), None);
        assert_eq!(
            parse_redfish(r#"{"PowerControl":[{"PowerConsumedWatts":231.5}]}"#),
            Some(231.5)
        );
        assert_eq!(parse_watts("\n 87.25 W\n"), Some(87.25));
        assert_eq!(parse_watts("87,1\n"), Some(87.0));
        assert_eq!(parse_watts("watts: 3"), None);
        let m = Model::parse("idle=50,max=150").unwrap();
        assert_eq!(m.watts(0.5), 100.0);
        assert_eq!(m.watts(2.0), 150.0);
        assert!(Model::parse("idle=50").is_err());
        assert!(Model::parse("idle=90,max=50").is_err());
        assert!(Choice::parse("cmd:").is_err());
        assert_eq!(
            Choice::parse("cmd:echo 5").unwrap(),
            Choice::Cmd(vec!["echo".into(), "5".into()])
        );
        assert!(Choice::parse("watts")
            .unwrap_err()
            .0
            .contains("--power 'watts'"));
    }

    #[test]
    fn csv_meter_integrates_by_wall_time() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("meter.csv");
        std::fs::write(&p, "").unwrap();
        let mut m = CsvFile::open(p.clone()).unwrap();
        let s = m.start;
        // 100 W from s-5 (before the run: counted from s), 200 W from s+2; a half line last.
        std::fs::write(
            &p,
            format!("{},100\n{},200\n{},30", s - 5.0, s + 2.0, s + 3.0),
        )
        .unwrap();
        let j = m.joules_at(s + 3.0).unwrap();
        assert!((j - (100.0 * 2.0 + 200.0 * 1.0)).abs() < 1e-6, "{j}");
        // The half line completes: 30 W from s+3.
        std::fs::write(
            &p,
            format!("{},100\n{},200\n{},300\n", s - 5.0, s + 2.0, s + 3.0),
        )
        .unwrap();
        let j = m.joules_at(s + 4.0).unwrap();
        assert!((j - (200.0 + 200.0 + 300.0)).abs() < 1e-6, "{j}");
        assert!(m
            .joules_at(s + 30.0)
            .unwrap_err()
            .contains("no reading in the last 10 s"));
    }

    #[test]
    fn command_meter_runs_without_a_shell_and_times_out() {
        let argv = vec!["echo".to_string(), "42.5".to_string()];
        let mut m = command(argv, Duration::from_millis(20)).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let j = m.joules().unwrap();
        // About 42.5 W × 0.2 s.
        assert!((j - 8.5).abs() < 2.5, "{j}");
        let e = run_with_timeout(
            &["sleep".into(), "5".into()],
            None,
            Duration::from_millis(100),
        )
        .unwrap_err();
        assert!(e.contains("did not answer"), "{e}");
        // '$HOME' reaches echo literally: no shell expands it.
        assert_eq!(
            run_with_timeout(
                &["echo".into(), "$HOME".into()],
                None,
                Duration::from_secs(2)
            )
            .unwrap(),
            "$HOME\n"
        );
        assert!(command(vec!["false".into()], Duration::from_millis(20)).is_err());
    }

    #[test]
    fn estimate_is_labelled_and_follows_the_model() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("proc")).unwrap();
        std::fs::write(t.path().join("proc/stat"), "cpu  0 0 0 100 0 0 0 0 0 0\n").unwrap();
        let model = Model {
            idle_w: 50.0,
            max_w: 150.0,
            origin: "test".into(),
        };
        let mut e = Estimate::new(model, Root(t.path().to_path_buf()));
        assert!(e.info().estimate);
        assert_eq!(e.info().source, "estimate");
        e.joules().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        // Fully busy in between: 150 W.
        std::fs::write(t.path().join("proc/stat"), "cpu  100 0 0 100 0 0 0 0 0 0\n").unwrap();
        let j = e.joules().unwrap();
        assert!((j / 0.1 - 150.0).abs() < 30.0, "{j}");
    }
}
