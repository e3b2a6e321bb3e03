//! Where telemetry's raw counters come from: /proc/stat, /proc/diskstats, the process's and the
//! server's /proc/PID files, PSI, the power meter and perf counters. A source that is missing
//! here is recorded once with why (`unavailable`), and every snapshot simply leaves it out.

use super::procfs::*;
use super::{counters, power, Config};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

/// Raw counters at one instant.
#[derive(Clone, Debug, Default)]
pub(super) struct Snapshot {
    pub(super) at: Option<Instant>,
    pub(super) cpu: Option<(CpuTimes, Vec<CpuTimes>)>,
    pub(super) disk: Option<DiskCounters>,
    pub(super) process: Option<ProcSample>,
    /// Every server process summed (`server.rs`), and how many there were.
    pub(super) server: Option<ProcSample>,
    pub(super) server_processes: u32,
    pub(super) threads: Vec<(u32, String, u64)>,
    pub(super) psi: [(Option<u64>, Option<u64>); 3],
    /// The meter's cumulative joules and the instant (its own) they run up to.
    pub(super) energy: Option<(f64, Instant)>,
    pub(super) counters: Option<counters::Reading>,
}

pub(super) const PSI: [&str; 3] = ["cpu", "io", "memory"];

pub(super) struct Sources {
    pub(super) root: Root,
    pub(super) disk: Option<String>,
    pub(super) pid: u32,
    pub(super) server: super::server::ServerProcesses,
    pub(super) page_size: u64,
    pub(super) ticks_per_s: f64,
    pub(super) unavailable: BTreeMap<String, String>,
    pub(super) meter: Mutex<Option<Box<dyn power::Meter>>>,
    pub(super) power: Option<power::PowerInfo>,
    pub(super) counters: Option<Mutex<counters::Counters>>,
    pub(super) counters_kernel: bool,
}

impl Sources {
    pub(super) fn new(cfg: &Config, data_device: Option<&str>) -> Self {
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
            server: super::server::ServerProcesses::new(cfg.server_pids.clone()),
            page_size: page_size.max(1) as u64,
            ticks_per_s: ticks.max(1) as f64,
            unavailable,
        }
    }

    /// Every counter, for a window's start or end.
    pub(super) fn snapshot(&self) -> Snapshot {
        self.read(true)
    }

    /// A row of the series: the server's context switches are not summed over its threads
    /// (no column shows them; a cluster's many threads would make each sample cost more).
    pub(super) fn series_snapshot(&self) -> Snapshot {
        self.read(false)
    }

    fn read(&self, all_switches: bool) -> Snapshot {
        let r = &self.root;
        let (server, server_processes) = match self.server.sample(r, self.page_size, all_switches) {
            Some((s, n)) => (Some(s), n),
            None => (None, 0),
        };
        // Energy comes with the meter's own instant: power is energy over the meter's time
        // (`power::watts_between`), never over this snapshot's.
        let energy = self
            .meter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .and_then(|m| m.reading().ok());
        Snapshot {
            at: Some(Instant::now()),
            energy,
            cpu: r.read("proc/stat").ok().and_then(|t| parse_stat(&t)),
            disk: self.disk.as_ref().and_then(|d| {
                r.read("proc/diskstats")
                    .ok()
                    .and_then(|t| parse_diskstats(&t, d))
            }),
            process: read_process(r, self.pid, self.page_size).map(|mut p| {
                // kvmeter's own threads come and go with phases: getrusage keeps the switches
                // of those that ended, where a sum over live threads would fall.
                let own = (r.0 == Root::system().0 && self.pid == std::process::id())
                    .then(own_context_switches)
                    .flatten();
                if let Some((v, i)) = own.or_else(|| thread_switches(r, self.pid)) {
                    (p.voluntary_cs, p.involuntary_cs) = (v, i);
                }
                p
            }),
            server,
            server_processes,
            threads: read_threads(r, self.pid),
            psi: PSI.map(|p| {
                r.read(&format!("proc/pressure/{p}"))
                    .map(|t| parse_pressure(&t))
                    .unwrap_or((None, None))
            }),
            counters: self
                .counters
                .as_ref()
                .map(|c| c.lock().unwrap_or_else(|p| p.into_inner()).read()),
        }
    }
}
