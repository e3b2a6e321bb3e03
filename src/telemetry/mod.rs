//! Telemetry in every run (design.md "telemetry"): CPU, disk, process, memory and pressure,
//! sampled on a thread of its own every `--telemetry-interval` (100 ms default) into
//! `telemetry.csv` and `threads.csv`, and summarised per phase over the same window as the
//! throughput figures. Sources that do not exist here report `unavailable: <why>` and never
//! fail a run.
//!
//! Per-phase figures come from two snapshots of the raw counters (start and end of the measured
//! window), so they are exact whatever the sampling interval; the samples give the time series
//! and the peaks. `sources` reads the counters, `window` turns two snapshots into figures,
//! `sampler` writes the series.

pub mod counters;
pub mod power;
pub mod procfs;
pub mod profile;
mod sampler;
mod server;
mod sources;
mod window;

pub use sampler::header;

use procfs::*;
use serde::{Deserialize, Serialize};
use sources::{Snapshot, Sources};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use window::{observe, seen_from, window, Observed, Seen};

/// What to sample.
#[derive(Clone, Debug)]
pub struct Config {
    pub interval: Duration,
    /// The block device to watch (`--disk`), else the disk under the data directory.
    pub disk: Option<String>,
    /// The process whose CPU, memory and I/O are the store's (kvmeter itself for embedded stores).
    pub pid: u32,
    /// The processes of a server kvmeter started, measured alongside and summed (their CPU,
    /// memory, switches and I/O): one slot per member, kept current across restarts, 0 while
    /// a member is down (`store::managed::Managed::live_pid`).
    pub server_pids: Vec<Arc<std::sync::atomic::AtomicU32>>,
    pub root: Root,
    pub power: power::Choice,
    pub model: power::Model,
    /// Open performance counters (`--counters`).
    pub counters: bool,
    /// Sample call stacks (`--profile`).
    pub profile: Option<profile::Config>,
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
    /// The process's pid; for a server of several processes, the first member's that was up
    /// at the window's end.
    pub pid: u32,
    /// A server's processes summed into these figures (every member of a cluster, at the
    /// window's end); absent for kvmeter's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u32>,
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
    /// Where the measured processes' CPU went (`--profile`); its absence with `--profile` is
    /// explained in `unavailable["profile"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<profile::ProfileFigures>,
    /// Sources that could not be read, with why.
    pub unavailable: BTreeMap<String, String>,
}

/// The phase window the sampler adds its samples to.
struct PhaseWindow {
    phase: String,
    window_start: Option<Snapshot>,
    seen: Seen,
    rss_peak: u64,
    samples: u64,
    peak_w: f64,
}

impl PhaseWindow {
    /// Starts the measured window at `snap` (phase start, or the end of warm-up).
    fn restart(&mut self, snap: Snapshot) {
        self.seen = seen_from(&snap);
        self.window_start = Some(snap);
        self.rss_peak = 0;
        self.samples = 0;
        self.peak_w = 0.0;
    }
}

/// A new file in the run directory, never opened through a link planted in its place (the
/// run directory's rule, `report::rundir::create_new`, which telemetry does not import).
fn create_new(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// The newest sample's figures (the window since the sample before it), for the live
/// metrics endpoint (`crate::metrics`): read once per interval, written once per sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latest {
    /// Whole-machine CPU busy share (0-1).
    pub cpu_busy: Option<f64>,
    /// The measured process's CPU seconds per second.
    pub process_cores: Option<f64>,
    pub disk_read_bytes_per_s: Option<f64>,
    pub disk_write_bytes_per_s: Option<f64>,
    pub watts: Option<f64>,
    /// The measured process's CPU seconds (user + system) since it started: a counter.
    pub process_cpu_seconds: Option<f64>,
    /// The same for a managed server's processes, summed over its members (`server.rs`).
    pub server_cpu_seconds: Option<f64>,
}

impl Latest {
    fn of(t: &PhaseTelemetry, watts: Option<f64>, cur: &Snapshot, ticks_per_s: f64) -> Self {
        const MB: f64 = 1048576.0;
        let secs = |p: &Option<ProcSample>| p.as_ref().map(|p| p.cpu_ticks as f64 / ticks_per_s);
        Latest {
            process_cpu_seconds: secs(&cur.process),
            server_cpu_seconds: secs(&cur.server),
            cpu_busy: t.cpu.as_ref().map(|c| c.busy / 100.0),
            process_cores: t.process.as_ref().map(|p| p.cpu_pct / 100.0),
            disk_read_bytes_per_s: t.disk.as_ref().map(|d| d.read_mb_per_s * MB),
            disk_write_bytes_per_s: t.disk.as_ref().map(|d| d.write_mb_per_s * MB),
            watts,
        }
    }
}

/// The running sampler.
pub struct Telemetry {
    sources: Arc<Sources>,
    state: Arc<Mutex<PhaseWindow>>,
    latest: Arc<Mutex<Latest>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
    profiler: Option<Mutex<profile::Profiler>>,
}

impl Telemetry {
    /// Starts sampling into `dir/telemetry.csv` and `dir/threads.csv`; `time_s` counts from
    /// `t0`, the run's start (the manifest's `started_at`), the clock report.html draws every
    /// figure over time on.
    pub fn start(
        cfg: Config,
        data_device: Option<&str>,
        dir: &Path,
        t0: std::time::Instant,
    ) -> anyhow::Result<Self> {
        let sources = Arc::new(Sources::new(&cfg, data_device));
        let profiler = cfg
            .profile
            .clone()
            .map(|p| Mutex::new(profile::Profiler::new(p, dir, counters::hardware_cycles())));
        let state = Arc::new(Mutex::new(PhaseWindow {
            phase: String::new(),
            window_start: None,
            seen: Seen::new(),
            rss_peak: 0,
            samples: 0,
            peak_w: 0.0,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let mut csv = BufWriter::new(create_new(&dir.join("telemetry.csv"))?);
        writeln!(csv, "{}", header())?;
        csv.flush()?;
        let mut threads_csv = BufWriter::new(create_new(&dir.join("threads.csv"))?);
        writeln!(threads_csv, "time_s,phase,thread_group,cpu_pct")?;
        threads_csv.flush()?;
        let (src, st, stp) = (sources.clone(), state.clone(), stop.clone());
        let latest = Arc::new(Mutex::new(Latest::default()));
        let last = latest.clone();
        let handle = std::thread::Builder::new()
            .name("kvm-telemetry".into())
            .spawn(move || {
                let files = sampler::Files {
                    csv: &mut csv,
                    threads_csv: &mut threads_csv,
                    latest: &last,
                };
                sampler::sampler(cfg.interval, t0, &src, &st, &stp, files)
            })?;
        Ok(Telemetry {
            sources,
            state,
            latest,
            stop,
            handle: Some(handle),
            profiler,
        })
    }

    /// The newest sample's figures (all `None` before the first).
    pub fn latest(&self) -> Latest {
        self.latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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
        power::watts_between(a.energy?, b.energy?)
    }

    /// Starts the next phase's profile (`--profile`) before its clock starts: perf takes a
    /// moment to attach.
    pub fn prepare_phase(&self) {
        if let Some(p) = &self.profiler {
            p.lock().unwrap_or_else(|p| p.into_inner()).prepare();
        }
    }

    fn profile_window_start(&self) {
        if let Some(p) = &self.profiler {
            p.lock().unwrap_or_else(|p| p.into_inner()).window_start();
        }
    }

    /// Names the phase in the series and starts its measured window now; the phase's clock
    /// started at `t0` (a profile's time slices count from it).
    pub fn begin(&self, phase: &str, t0: std::time::Instant) {
        if let Some(p) = &self.profiler {
            p.lock().unwrap_or_else(|p| p.into_inner()).begin(t0);
        }
        let snap = self.sources.snapshot();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.phase = phase.to_string();
        s.restart(snap);
    }

    /// Restarts the measured window (at the end of warm-up).
    pub fn restart_window(&self) {
        self.profile_window_start();
        let snap = self.sources.snapshot();
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .restart(snap);
    }

    /// Ends the phase's window and returns its figures.
    pub fn end(&self) -> PhaseTelemetry {
        let b = self.sources.snapshot();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let a = s.window_start.take().unwrap_or_default();
        let phase = std::mem::take(&mut s.phase);
        let mut seen = std::mem::take(&mut s.seen);
        observe(&mut seen, &b);
        let mut t = window(
            &self.sources,
            &a,
            &b,
            Observed {
                rss_peak: s.rss_peak,
                samples: s.samples,
                seen: Some(&seen),
                peak_w: s.peak_w,
            },
        );
        window::judge_cpu_resolution(&mut t, self.sources.ticks_per_s);
        drop(s);
        if let Some(p) = &self.profiler {
            match p.lock().unwrap_or_else(|p| p.into_inner()).finish(&phase) {
                Ok(f) => t.profile = Some(f),
                Err(why) => {
                    t.unavailable.insert("profile".into(), why);
                }
            }
        }
        t
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

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
            server_pids: vec![],
            root: Root(t.path().to_path_buf()),
            power: power::Choice::None,
            model: power::Model::default(),
            counters: false,
            profile: None,
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
        let w = window(
            &s,
            &a,
            &b,
            Observed {
                samples: 20,
                ..Default::default()
            },
        );
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
        let w = window(
            &s,
            &a,
            &b,
            Observed {
                samples: 20,
                seen: Some(&seen),
                ..Default::default()
            },
        );
        assert_eq!(
            w.process.unwrap().cpu_pct_by_thread["kvm-worker"],
            37.5 + 30.0
        );
    }

    #[test]
    fn a_window_under_fifty_ticks_has_no_cpu_shares() {
        let mut t = PhaseTelemetry {
            seconds: 0.2,
            cpu: Some(CpuShare::default()),
            cpu_busy_pct_per_cpu: vec![66.7],
            process: Some(ProcessFigures {
                cpu_pct_by_thread: [("kvmeter".to_string(), 88.0)].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        window::judge_cpu_resolution(&mut t, 100.0);
        assert!(t.cpu.is_none() && t.cpu_busy_pct_per_cpu.is_empty());
        assert!(t.process.unwrap().cpu_pct_by_thread.is_empty());
        assert_eq!(
            t.unavailable["cpu"],
            "unavailable: too few samples (0.200 s = 20 clock ticks of 10 ms; CPU shares need 50)"
        );
        // 0.5 s is 50 ticks: kept.
        let mut t = PhaseTelemetry {
            seconds: 0.5,
            cpu: Some(CpuShare::default()),
            ..Default::default()
        };
        window::judge_cpu_resolution(&mut t, 100.0);
        assert!(t.cpu.is_some() && t.unavailable.is_empty());
    }

    #[test]
    fn sampler_writes_rows_on_this_machine() {
        let t = tempfile::tempdir().unwrap();
        let cfg = Config {
            interval: Duration::from_millis(20),
            disk: None,
            pid: std::process::id(),
            server_pids: vec![],
            root: Root::system(),
            power: power::Choice::Estimate,
            model: power::Model::default(),
            counters: true,
            profile: None,
        };
        let tel = Telemetry::start(cfg, None, t.path(), std::time::Instant::now()).unwrap();
        tel.begin("p", Instant::now());
        // Over the 50 clock ticks (0.5 s at CLK_TCK 100) a window needs for CPU shares.
        std::thread::sleep(Duration::from_millis(600));
        let w = tel.end();
        tel.stop();
        assert!(w.samples >= 5, "{}", w.samples);
        assert!(w.cpu.is_some());
        assert!(w.process.is_some());
        assert!(w.counters.unwrap().counts.contains_key("page-faults"));
        let p = w.power.unwrap();
        assert!(p.estimate);
        // The model's idle and busy watts, to within the float rounding of a share near 0
        // (a fresh-clone CI saw 91.99999999999997 on an idle window).
        assert!(
            p.avg_w >= 92.0 - 1e-6 && p.avg_w <= 127.0 + 1e-6,
            "{}",
            p.avg_w
        );
        let csv = std::fs::read_to_string(t.path().join("telemetry.csv")).unwrap();
        let width = header().split(',').count();
        let rows: Vec<&str> = csv.lines().skip(1).collect();
        assert!(rows.len() >= 5);
        for r in rows {
            assert_eq!(r.split(',').count(), width, "{r}");
        }
    }
}
