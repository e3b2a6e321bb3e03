//! Telemetry in every run (issue: telemetry and energy): CPU, disk, process, memory and
//! pressure, sampled on a thread of its own every `--telemetry-interval` (100 ms default) into
//! `telemetry.csv` and `threads.csv`, and summarised per phase over the same window as the
//! throughput figures. Sources that do not exist here report `unavailable: <why>` and never
//! fail a run (design.md "telemetry").
//!
//! Per-phase figures come from two snapshots of the raw counters (start and end of the measured
//! window), so they are exact whatever the sampling interval; the samples give the time series
//! and the peaks.

pub mod counters;
pub mod power;
pub mod procfs;

use procfs::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TELEMETRY_HEADER: &str = "time_s,phase,power_w,power_source,cpu_busy_pct,cpu_user_pct,cpu_nice_pct,cpu_system_pct,cpu_iowait_pct,cpu_irq_pct,cpu_softirq_pct,cpu_steal_pct,cpu_idle_pct,disk,disk_read_iops,disk_write_iops,disk_read_mb_per_s,disk_write_mb_per_s,disk_util_pct,disk_queue_depth,disk_await_ms,proc_cpu_pct,proc_rss_mb,proc_voluntary_cs_per_s,proc_involuntary_cs_per_s,proc_read_mb_per_s,proc_write_mb_per_s,mem_used_mb,mem_available_mb,mem_dirty_mb,psi_cpu_some_pct,psi_io_some_pct,psi_io_full_pct,psi_memory_some_pct,psi_memory_full_pct,server_cpu_pct,server_rss_mb";

/// What to sample.
#[derive(Clone, Debug)]
pub struct Config {
    pub interval: Duration,
    /// The block device to watch (`--disk`), else the disk under the data directory.
    pub disk: Option<String>,
    /// The process whose CPU, memory and I/O are the store's (kvmeter itself for embedded stores).
    pub pid: u32,
    /// A managed or local server process measured alongside (its CPU and memory).
    pub server_pid: Option<u32>,
    pub root: Root,
    pub power: power::Choice,
    pub model: power::Model,
    /// Open performance counters (`--counters`).
    pub counters: bool,
}

/// Raw counters at one instant.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    at: Option<Instant>,
    cpu: Option<(CpuTimes, Vec<CpuTimes>)>,
    disk: Option<DiskCounters>,
    process: Option<ProcSample>,
    server: Option<ProcSample>,
    threads: Vec<(u32, String, u64)>,
    psi: [(Option<u64>, Option<u64>); 3],
    energy_j: Option<f64>,
    counters: Option<counters::Reading>,
}

const PSI: [&str; 3] = ["cpu", "io", "memory"];

struct Sources {
    root: Root,
    disk: Option<String>,
    pid: u32,
    server_pid: Option<u32>,
    page_size: u64,
    ticks_per_s: f64,
    unavailable: BTreeMap<String, String>,
    meter: Mutex<Option<Box<dyn power::Meter>>>,
    power: Option<power::PowerInfo>,
    counters: Option<Mutex<counters::Counters>>,
    counters_kernel: bool,
}

impl Sources {
    fn new(cfg: &Config, data_device: Option<&str>) -> Self {
        let root = cfg.root.clone();
        let mut unavailable = BTreeMap::new();
        // SAFETY: sysconf has no preconditions.
        let (page_size, ticks) = unsafe {
            (
                libc::sysconf(libc::_SC_PAGESIZE),
                libc::sysconf(libc::_SC_CLK_TCK),
            )
        };
        let disk = match (&cfg.disk, data_device) {
            (Some(d), _) => Some(whole_disk(&root, d)),
            (None, Some(d)) => Some(whole_disk(&root, d)),
            (None, None) => None,
        };
        let diskstats = root.read("proc/diskstats").unwrap_or_default();
        let disk = match disk {
            Some(d) if parse_diskstats(&diskstats, &d).is_some() => Some(d),
            Some(d) => {
                unavailable.insert(
                    "disk".into(),
                    format!("unavailable: device '{d}' is not in /proc/diskstats (tmpfs, overlay or a network filesystem has no block device; give --disk DEV)"),
                );
                None
            }
            None => {
                unavailable.insert(
                    "disk".into(),
                    "unavailable: no block device under the data directory; give --disk DEV".into(),
                );
                None
            }
        };
        if root.read("proc/stat").is_err() {
            unavailable.insert(
                "cpu".into(),
                "unavailable: /proc/stat cannot be read".into(),
            );
        }
        for p in PSI {
            if root.read(&format!("proc/pressure/{p}")).is_err() {
                unavailable.insert(
                    format!("pressure.{p}"),
                    format!("unavailable: /proc/pressure/{p} is missing (kernel without CONFIG_PSI, or psi=0 on its command line)"),
                );
            }
        }
        if root.read(&format!("proc/{}/io", cfg.pid)).is_err() {
            unavailable.insert(
                "process.io".into(),
                format!("unavailable: /proc/{}/io cannot be read (needs the same user or CAP_SYS_PTRACE)", cfg.pid),
            );
        }
        let (meter, power) = match power::open(&cfg.power, &cfg.model, &root, cfg.interval) {
            Ok(Some(m)) => {
                let info = m.info().clone();
                (Some(m), Some(info))
            }
            Ok(None) => {
                unavailable.insert(
                    "power".into(),
                    "unavailable: turned off (--power none)".into(),
                );
                (None, None)
            }
            Err(why) => {
                unavailable.insert("power".into(), format!("unavailable: {why}"));
                (None, None)
            }
        };
        // Opened here, on the main thread before any other thread starts, so `inherit` covers
        // every thread the run creates.
        let counters = cfg.counters.then(counters::Counters::open);
        let counters_kernel = counters.as_ref().map(|c| c.include_kernel).unwrap_or(false);
        if let Some(c) = &counters {
            for (ev, why) in &c.unavailable {
                unavailable.insert(format!("counters.{ev}"), why.clone());
            }
        }
        Sources {
            counters: counters.map(Mutex::new),
            counters_kernel,
            meter: Mutex::new(meter),
            power,
            root,
            disk,
            pid: cfg.pid,
            server_pid: cfg.server_pid,
            page_size: page_size.max(1) as u64,
            ticks_per_s: ticks.max(1) as f64,
            unavailable,
        }
    }

    fn snapshot(&self) -> Snapshot {
        let r = &self.root;
        Snapshot {
            at: Some(Instant::now()),
            cpu: r.read("proc/stat").ok().and_then(|t| parse_stat(&t)),
            disk: self.disk.as_ref().and_then(|d| {
                r.read("proc/diskstats")
                    .ok()
                    .and_then(|t| parse_diskstats(&t, d))
            }),
            process: read_process(r, self.pid, self.page_size),
            server: self
                .server_pid
                .and_then(|p| read_process(r, p, self.page_size)),
            threads: read_threads(r, self.pid),
            psi: PSI.map(|p| {
                r.read(&format!("proc/pressure/{p}"))
                    .map(|t| parse_pressure(&t))
                    .unwrap_or((None, None))
            }),
            energy_j: self
                .meter
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
                .and_then(|m| m.joules().ok()),
            counters: self
                .counters
                .as_ref()
                .map(|c| c.lock().unwrap_or_else(|p| p.into_inner()).read()),
        }
    }
}

/// Power over a window, with the source and scope every figure carries.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PowerFigures {
    /// rapl, perf, ipmi, redfish, command, file or estimate.
    pub source: String,
    pub scope: String,
    /// True when the figures come from the utilisation model: an estimate, not a measurement.
    pub estimate: bool,
    pub detail: String,
    pub energy_j: f64,
    pub avg_w: f64,
    /// Highest power of one sampling interval.
    pub peak_w: f64,
}

/// Process figures over a window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessFigures {
    pub pid: u32,
    /// CPU time of the process as % of one CPU (200 = two CPUs busy).
    pub cpu_pct: f64,
    /// The same, split by thread group (the harness's workers against the store's threads).
    pub cpu_pct_by_thread: BTreeMap<String, f64>,
    pub rss_peak_mb: f64,
    pub voluntary_cs_per_s: f64,
    pub involuntary_cs_per_s: f64,
    pub read_mb_per_s: Option<f64>,
    pub write_mb_per_s: Option<f64>,
}

/// Stall shares from /proc/pressure over a window, in % of time.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Pressure {
    pub cpu_some_pct: Option<f64>,
    pub io_some_pct: Option<f64>,
    pub io_full_pct: Option<f64>,
    pub memory_some_pct: Option<f64>,
    pub memory_full_pct: Option<f64>,
}

/// Telemetry of one phase's measured window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PhaseTelemetry {
    pub seconds: f64,
    pub samples: u64,
    /// All CPUs, % of capacity.
    pub cpu: Option<CpuShare>,
    /// Busy % per CPU.
    pub cpu_busy_pct_per_cpu: Vec<f64>,
    pub disk_device: Option<String>,
    pub disk: Option<DiskRates>,
    pub process: Option<ProcessFigures>,
    /// The server process of a server store (managed, or `--store-opt addr` on this host
    /// is not followed: only a server kvmeter started has a known pid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ProcessFigures>,
    pub memory: Option<Memory>,
    pub pressure: Pressure,
    pub power: Option<PowerFigures>,
    /// Performance counters of the whole process over the window (`--counters`).
    pub counters: Option<counters::CounterFigures>,
    /// Each worker thread's own counters over its whole run (warm-up included), in worker
    /// order; hardware events the machine lacks are absent.
    #[serde(default)]
    pub counters_per_worker: Vec<counters::CounterFigures>,
    /// Sources that could not be read, with why.
    pub unavailable: BTreeMap<String, String>,
}

/// Threads seen during a window: tid → (group, ticks at window start or 0 if it began later,
/// latest ticks). Threads that exit keep the time they were last seen with.
type Seen = HashMap<u32, (String, u64, u64)>;

fn seen_from(start: &Snapshot) -> Seen {
    start
        .threads
        .iter()
        .map(|(tid, g, t)| (*tid, (g.clone(), *t, *t)))
        .collect()
}

fn observe(seen: &mut Seen, snap: &Snapshot) {
    for (tid, g, t) in &snap.threads {
        seen.entry(*tid)
            .and_modify(|e| e.2 = (*t).max(e.2))
            .or_insert((g.clone(), 0, *t));
    }
}

#[allow(clippy::too_many_arguments)]
fn window(
    s: &Sources,
    a: &Snapshot,
    b: &Snapshot,
    rss_peak: u64,
    samples: u64,
    seen: Option<&Seen>,
    peak_w: f64,
) -> PhaseTelemetry {
    let secs = match (a.at, b.at) {
        (Some(x), Some(y)) => y.duration_since(x).as_secs_f64(),
        _ => 0.0,
    };
    let mut t = PhaseTelemetry {
        seconds: secs,
        samples,
        unavailable: s.unavailable.clone(),
        disk_device: s.disk.clone(),
        ..Default::default()
    };
    if secs <= 0.0 {
        return t;
    }
    if let (Some((ta, ca)), Some((tb, cb))) = (&a.cpu, &b.cpu) {
        t.cpu = CpuShare::between(ta, tb);
        t.cpu_busy_pct_per_cpu = ca
            .iter()
            .zip(cb)
            .map(|(x, y)| CpuShare::between(x, y).map(|c| c.busy).unwrap_or(0.0))
            .collect();
    }
    if let (Some(x), Some(y)) = (&a.disk, &b.disk) {
        t.disk = Some(DiskRates::between(x, y, secs));
    }
    if let (Some(x), Some(y)) = (&a.process, &b.process) {
        let per_s = |p: u64, q: u64| counter_delta(p, q) as f64 / secs;
        let pct = |ticks: u64| ticks as f64 / s.ticks_per_s / secs * 100.0;
        let local;
        let seen = match seen {
            Some(x) => x,
            None => {
                let mut m = seen_from(a);
                observe(&mut m, b);
                local = m;
                &local
            }
        };
        let mut by_thread: BTreeMap<String, f64> = BTreeMap::new();
        for (g, first, last) in seen.values() {
            *by_thread.entry(g.clone()).or_default() += pct(last.saturating_sub(*first));
        }
        by_thread.retain(|_, v| *v > 0.0);
        t.process = Some(ProcessFigures {
            pid: s.pid,
            cpu_pct: pct(counter_delta(x.cpu_ticks, y.cpu_ticks)),
            cpu_pct_by_thread: by_thread,
            rss_peak_mb: rss_peak.max(y.rss_bytes) as f64 / 1048576.0,
            voluntary_cs_per_s: per_s(x.voluntary_cs, y.voluntary_cs),
            involuntary_cs_per_s: per_s(x.involuntary_cs, y.involuntary_cs),
            read_mb_per_s: x
                .read_bytes
                .zip(y.read_bytes)
                .map(|(p, q)| per_s(p, q) / 1e6),
            write_mb_per_s: x
                .write_bytes
                .zip(y.write_bytes)
                .map(|(p, q)| per_s(p, q) / 1e6),
        });
    }
    if let (Some(x), Some(y), Some(pid)) = (&a.server, &b.server, s.server_pid) {
        let per_s = |p: u64, q: u64| counter_delta(p, q) as f64 / secs;
        t.server = Some(ProcessFigures {
            pid,
            cpu_pct: counter_delta(x.cpu_ticks, y.cpu_ticks) as f64 / s.ticks_per_s / secs * 100.0,
            cpu_pct_by_thread: BTreeMap::new(),
            rss_peak_mb: x.rss_bytes.max(y.rss_bytes) as f64 / 1048576.0,
            voluntary_cs_per_s: per_s(x.voluntary_cs, y.voluntary_cs),
            involuntary_cs_per_s: per_s(x.involuntary_cs, y.involuntary_cs),
            read_mb_per_s: x
                .read_bytes
                .zip(y.read_bytes)
                .map(|(p, q)| per_s(p, q) / 1e6),
            write_mb_per_s: x
                .write_bytes
                .zip(y.write_bytes)
                .map(|(p, q)| per_s(p, q) / 1e6),
        });
    }
    if let (Some(ca), Some(cb)) = (&a.counters, &b.counters) {
        t.counters = Some(counters::figures(ca, cb, s.counters_kernel));
    }
    t.memory = s
        .root
        .read("proc/meminfo")
        .ok()
        .and_then(|m| parse_meminfo(&m));
    if let (Some(info), Some(ea), Some(eb)) = (&s.power, a.energy_j, b.energy_j) {
        let energy = (eb - ea).max(0.0);
        t.power = Some(PowerFigures {
            source: info.source.clone(),
            scope: info.scope.clone(),
            estimate: info.estimate,
            detail: info.detail.clone(),
            energy_j: energy,
            avg_w: energy / secs,
            peak_w: peak_w.max(energy / secs),
        });
    } else if s.power.is_some() {
        t.unavailable.insert(
            "power".into(),
            "unavailable: the power source stopped answering during the window".into(),
        );
    }
    let stall = |i: usize, full: bool| -> Option<f64> {
        let (p, q) = if full {
            (a.psi[i].1?, b.psi[i].1?)
        } else {
            (a.psi[i].0?, b.psi[i].0?)
        };
        Some(counter_delta(p, q) as f64 / 1e6 / secs * 100.0)
    };
    t.pressure = Pressure {
        cpu_some_pct: stall(0, false),
        io_some_pct: stall(1, false),
        io_full_pct: stall(1, true),
        memory_some_pct: stall(2, false),
        memory_full_pct: stall(2, true),
    };
    t
}

struct State {
    phase: String,
    window_start: Option<Snapshot>,
    seen: Seen,
    rss_peak: u64,
    samples: u64,
    peak_w: f64,
}

/// The running sampler.
pub struct Telemetry {
    sources: Arc<Sources>,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.3}")).unwrap_or_default()
}

impl Telemetry {
    /// Starts sampling into `dir/telemetry.csv` and `dir/threads.csv`.
    pub fn start(cfg: Config, data_device: Option<&str>, dir: &Path) -> anyhow::Result<Self> {
        let sources = Arc::new(Sources::new(&cfg, data_device));
        let state = Arc::new(Mutex::new(State {
            phase: String::new(),
            window_start: None,
            seen: Seen::new(),
            rss_peak: 0,
            samples: 0,
            peak_w: 0.0,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let mut csv = BufWriter::new(File::create(dir.join("telemetry.csv"))?);
        writeln!(csv, "{TELEMETRY_HEADER}")?;
        csv.flush()?;
        let mut threads_csv = BufWriter::new(File::create(dir.join("threads.csv"))?);
        writeln!(threads_csv, "time_s,phase,thread_group,cpu_pct")?;
        threads_csv.flush()?;
        let (src, st, stp) = (sources.clone(), state.clone(), stop.clone());
        let handle = std::thread::Builder::new()
            .name("kvm-telemetry".into())
            .spawn(move || sampler(cfg.interval, &src, &st, &stp, &mut csv, &mut threads_csv))?;
        Ok(Telemetry {
            sources,
            state,
            stop,
            handle: Some(handle),
        })
    }

    pub fn unavailable(&self) -> &BTreeMap<String, String> {
        &self.sources.unavailable
    }

    pub fn power_info(&self) -> Option<&power::PowerInfo> {
        self.sources.power.as_ref()
    }

    /// Average power over `d`, measured now with nothing else started (`--idle-baseline`).
    pub fn idle_watts(&self, d: Duration) -> Option<f64> {
        let a = self.sources.snapshot();
        std::thread::sleep(d);
        let b = self.sources.snapshot();
        let secs = b.at?.duration_since(a.at?).as_secs_f64();
        Some((b.energy_j? - a.energy_j?) / secs)
    }

    /// Names the phase in the series and starts its measured window now.
    pub fn begin(&self, phase: &str) {
        let snap = self.sources.snapshot();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.phase = phase.to_string();
        s.seen = seen_from(&snap);
        s.window_start = Some(snap);
        s.rss_peak = 0;
        s.samples = 0;
        s.peak_w = 0.0;
    }

    /// Restarts the measured window (at the end of warm-up).
    pub fn restart_window(&self) {
        let snap = self.sources.snapshot();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.seen = seen_from(&snap);
        s.window_start = Some(snap);
        s.rss_peak = 0;
        s.samples = 0;
        s.peak_w = 0.0;
    }

    /// Ends the phase's window and returns its figures.
    pub fn end(&self) -> PhaseTelemetry {
        let b = self.sources.snapshot();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let a = s.window_start.take().unwrap_or_default();
        s.phase.clear();
        let mut seen = std::mem::take(&mut s.seen);
        observe(&mut seen, &b);
        window(
            &self.sources,
            &a,
            &b,
            s.rss_peak,
            s.samples,
            Some(&seen),
            s.peak_w,
        )
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn sampler(
    interval: Duration,
    src: &Sources,
    state: &Mutex<State>,
    stop: &AtomicBool,
    csv: &mut BufWriter<File>,
    threads_csv: &mut BufWriter<File>,
) {
    let t0 = Instant::now();
    let mut prev = src.snapshot();
    let mut next = t0 + interval;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        next += interval;
        if next < now {
            next = now + interval; // fell behind (suspended, overloaded): skip, never burst
        }
        let cur = src.snapshot();
        let watts = match (prev.energy_j, cur.energy_j, prev.at, cur.at) {
            (Some(a), Some(b), Some(ta), Some(tb)) if tb > ta => {
                Some((b - a).max(0.0) / tb.duration_since(ta).as_secs_f64())
            }
            _ => None,
        };
        let phase = {
            let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(w) = watts {
                s.peak_w = s.peak_w.max(w);
            }
            if let Some(p) = &cur.process {
                s.rss_peak = s.rss_peak.max(p.rss_bytes);
            }
            s.samples += 1;
            if s.window_start.is_some() {
                observe(&mut s.seen, &cur);
            }
            s.phase.clone()
        };
        let t = window(src, &prev, &cur, 0, 1, None, 0.0);
        let time_s = cur
            .at
            .map(|a| a.duration_since(t0).as_secs_f64())
            .unwrap_or(0.0);
        let c = t.cpu.unwrap_or_default();
        let has_cpu = t.cpu.is_some();
        let cpu = |v: f64| {
            if has_cpu {
                format!("{v:.2}")
            } else {
                String::new()
            }
        };
        let d = t.disk;
        let dd = |f: fn(&DiskRates) -> f64| {
            d.as_ref()
                .map(|x| format!("{:.3}", f(x)))
                .unwrap_or_default()
        };
        let p = t.process.as_ref();
        let m = t.memory;
        let _ = writeln!(
            csv,
            "{time_s:.3},{phase},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            fmt_opt(watts),
            src.power.as_ref().map(|p| p.source.as_str()).unwrap_or(""),
            cpu(c.busy), cpu(c.user), cpu(c.nice), cpu(c.system), cpu(c.iowait), cpu(c.irq),
            cpu(c.softirq), cpu(c.steal), cpu(c.idle),
            src.disk.as_deref().unwrap_or(""),
            dd(|x| x.read_iops), dd(|x| x.write_iops), dd(|x| x.read_mb_per_s),
            dd(|x| x.write_mb_per_s), dd(|x| x.util_pct), dd(|x| x.queue_depth), dd(|x| x.await_ms),
            fmt_opt(p.map(|p| p.cpu_pct)),
            fmt_opt(cur.process.as_ref().map(|p| p.rss_bytes as f64 / 1048576.0)),
            fmt_opt(p.map(|p| p.voluntary_cs_per_s)),
            fmt_opt(p.map(|p| p.involuntary_cs_per_s)),
            fmt_opt(p.and_then(|p| p.read_mb_per_s)),
            fmt_opt(p.and_then(|p| p.write_mb_per_s)),
            fmt_opt(m.map(|m| m.used_mb)),
            fmt_opt(m.map(|m| m.available_mb)),
            fmt_opt(m.map(|m| m.dirty_mb)),
            fmt_opt(t.pressure.cpu_some_pct),
            fmt_opt(t.pressure.io_some_pct),
            fmt_opt(t.pressure.io_full_pct),
            fmt_opt(t.pressure.memory_some_pct),
            fmt_opt(t.pressure.memory_full_pct),
            fmt_opt(t.server.as_ref().map(|p| p.cpu_pct)),
            fmt_opt(cur.server.as_ref().map(|p| p.rss_bytes as f64 / 1048576.0)),
        );
        if let Some(p) = p {
            for (g, v) in &p.cpu_pct_by_thread {
                let _ = writeln!(threads_csv, "{time_s:.3},{phase},{g},{v:.2}");
            }
        }
        let _ = csv.flush();
        let _ = threads_csv.flush();
        prev = cur;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture /proc whose counters the test advances between two snapshots.
    fn write_proc(
        root: &Path,
        user: u64,
        idle: u64,
        reads: u64,
        io_ms: u64,
        ticks: u64,
        psi_io: u64,
    ) {
        let p = root.join("proc");
        std::fs::create_dir_all(p.join("42/task/42")).unwrap();
        std::fs::create_dir_all(p.join("42/task/43")).unwrap();
        std::fs::create_dir_all(p.join("pressure")).unwrap();
        std::fs::write(
            p.join("stat"),
            format!("cpu  {user} 0 0 {idle} 0 0 0 0 0 0\ncpu0 {user} 0 0 {idle} 0 0 0 0 0 0\n"),
        )
        .unwrap();
        std::fs::write(
            p.join("diskstats"),
            format!(
                "   8       0 sda {reads} 0 {} 0 0 0 0 0 0 {io_ms} {io_ms} 0 0 0 0\n",
                reads * 8
            ),
        )
        .unwrap();
        let stat = |comm: &str, t: u64| {
            format!("42 ({comm}) S 1 1 1 0 -1 0 0 0 0 0 {t} 0 0 0 20 0 2 0 1 1000 256 0")
        };
        std::fs::write(p.join("42/stat"), stat("kvmeter", ticks)).unwrap();
        std::fs::write(p.join("42/task/42/stat"), stat("kvmeter", ticks / 4)).unwrap();
        std::fs::write(
            p.join("42/task/43/stat"),
            stat("kvm-worker-0", ticks - ticks / 4),
        )
        .unwrap();
        std::fs::write(
            p.join("42/status"),
            "voluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t2\n",
        )
        .unwrap();
        std::fs::write(
            p.join("meminfo"),
            "MemTotal: 1024000 kB\nMemAvailable: 512000 kB\n",
        )
        .unwrap();
        std::fs::write(
            p.join("pressure/io"),
            format!(
                "some avg10=0 total={psi_io}\nfull avg10=0 total={}\n",
                psi_io / 2
            ),
        )
        .unwrap();
    }

    #[test]
    fn window_figures_from_fixture_counters() {
        let t = tempfile::tempdir().unwrap();
        write_proc(t.path(), 100, 900, 1000, 5000, 40, 0);
        let cfg = Config {
            interval: Duration::from_millis(100),
            disk: Some("sda".into()),
            pid: 42,
            server_pid: None,
            root: Root(t.path().to_path_buf()),
            power: power::Choice::None,
            model: power::Model::default(),
            counters: false,
        };
        let s = Sources::new(&cfg, None);
        assert!(s.unavailable.contains_key("pressure.cpu"));
        assert!(!s.unavailable.contains_key("pressure.io"));
        let mut a = s.snapshot();
        write_proc(t.path(), 160, 940, 1400, 5800, 140, 250_000);
        let mut b = s.snapshot();
        // Pretend exactly 2 s passed.
        let now = Instant::now();
        a.at = Some(now);
        b.at = Some(now + Duration::from_secs(2));
        let w = window(&s, &a, &b, 0, 20, None, 0.0);
        let cpu = w.cpu.unwrap();
        assert_eq!(cpu.busy, 60.0); // +60 user of +100 jiffies
        assert_eq!(w.cpu_busy_pct_per_cpu, vec![60.0]);
        let d = w.disk.unwrap();
        assert_eq!(d.read_iops, 200.0);
        assert_eq!(d.util_pct, 40.0); // 800 ms of 2000
        let p = w.process.unwrap();
        // 100 ticks at 100 Hz over 2 s = 50 % of one CPU; the worker group got 75 of them.
        assert_eq!(p.cpu_pct, 50.0);
        assert_eq!(p.cpu_pct_by_thread["kvm-worker"], 37.5);
        assert_eq!(p.cpu_pct_by_thread["kvmeter"], 12.5);
        assert_eq!(w.pressure.io_some_pct, Some(12.5)); // 0.25 s of 2 s
        assert_eq!(w.pressure.io_full_pct, Some(6.25));
        assert_eq!(w.pressure.cpu_some_pct, None);
        assert_eq!(w.memory.unwrap().used_mb, 500.0);

        // A worker that exits mid-window keeps the time it was last seen with.
        let mut seen = seen_from(&a);
        let mut mid = b.clone();
        mid.threads.push((99, "kvm-worker".into(), 60));
        observe(&mut seen, &mid);
        let w = window(&s, &a, &b, 0, 20, Some(&seen), 0.0);
        assert_eq!(
            w.process.unwrap().cpu_pct_by_thread["kvm-worker"],
            37.5 + 30.0
        );
    }

    #[test]
    fn sampler_writes_rows_on_this_machine() {
        let t = tempfile::tempdir().unwrap();
        let cfg = Config {
            interval: Duration::from_millis(20),
            disk: None,
            pid: std::process::id(),
            server_pid: None,
            root: Root::system(),
            power: power::Choice::Estimate,
            model: power::Model::default(),
            counters: true,
        };
        let tel = Telemetry::start(cfg, None, t.path()).unwrap();
        tel.begin("p");
        std::thread::sleep(Duration::from_millis(250));
        let w = tel.end();
        tel.stop();
        assert!(w.samples >= 5, "{}", w.samples);
        assert!(w.cpu.is_some());
        assert!(w.process.is_some());
        assert!(w.counters.unwrap().counts.contains_key("page-faults"));
        let p = w.power.unwrap();
        assert!(p.estimate);
        assert!(p.avg_w >= 92.0 && p.avg_w <= 127.0, "{}", p.avg_w);
        let csv = std::fs::read_to_string(t.path().join("telemetry.csv")).unwrap();
        let width = TELEMETRY_HEADER.split(',').count();
        let rows: Vec<&str> = csv.lines().skip(1).collect();
        assert!(rows.len() >= 5);
        for r in rows {
            assert_eq!(r.split(',').count(), width, "{r}");
        }
    }
}
