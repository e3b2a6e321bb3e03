//! Hardware and software performance counters (`--counters`; papers/000 Figs. 2–5: IPC,
//! branch-miss and LLC-miss ratios per workload).
//!
//! One counter per event is opened on the main thread with `inherit` before any worker, store
//! or telemetry thread starts, so it counts every thread of the process (the store's
//! background threads included), user and kernel time where permitted. Counts are scaled by
//! time_enabled/time_running when the kernel multiplexed them. The ratios pair events that
//! were read over the same window. Events `inherit` cannot group, so each ratio's two events
//! are separate counters over identical windows rather than one perf group.
//!
//! Where the CPU or hypervisor exposes no counters (this VM) or perf_event_paranoid forbids
//! them, each event says `unavailable: <why and how to enable>`; software events (context
//! switches, page faults, migrations) work almost everywhere.

use perf_event::events::{Hardware, Software};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Event {
    Cycles,
    Instructions,
    Branches,
    BranchMisses,
    LlcReferences,
    LlcMisses,
    ContextSwitches,
    PageFaults,
    CpuMigrations,
}

impl Event {
    pub const ALL: [Event; 9] = [
        Event::Cycles,
        Event::Instructions,
        Event::Branches,
        Event::BranchMisses,
        Event::LlcReferences,
        Event::LlcMisses,
        Event::ContextSwitches,
        Event::PageFaults,
        Event::CpuMigrations,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Event::Cycles => "cycles",
            Event::Instructions => "instructions",
            Event::Branches => "branches",
            Event::BranchMisses => "branch-misses",
            Event::LlcReferences => "llc-references",
            Event::LlcMisses => "llc-misses",
            Event::ContextSwitches => "context-switches",
            Event::PageFaults => "page-faults",
            Event::CpuMigrations => "cpu-migrations",
        }
    }
    fn hardware(self) -> bool {
        !matches!(
            self,
            Event::ContextSwitches | Event::PageFaults | Event::CpuMigrations
        )
    }
}

/// Why an event cannot be counted, and how to enable it.
pub fn explain(errno: Option<i32>, paranoid: &str, hardware: bool) -> String {
    match errno {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) if hardware => {
            "unavailable: this CPU or hypervisor exposes no hardware counter for it (in a VM, enable the virtual PMU, e.g. QEMU/KVM '-cpu host,pmu=on' or a cloud instance type with PMU access)".into()
        }
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "unavailable: not permitted (perf_event_paranoid is {}); run as root, grant CAP_PERFMON, or 'sysctl kernel.perf_event_paranoid=1'",
            paranoid.trim()
        ),
        Some(libc::ENOSYS) => "unavailable: the kernel has no perf_event support (CONFIG_PERF_EVENTS)".into(),
        Some(e) => format!("unavailable: perf_event_open failed: {}", std::io::Error::from_raw_os_error(e)),
        None => "unavailable: perf_event_open failed".into(),
    }
}

/// perf_event_paranoid, and whether kernel time may be counted (root, or paranoid ≤ 1).
fn permissions() -> (String, bool) {
    let paranoid =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
    let root = unsafe { libc::geteuid() } == 0;
    let low = paranoid
        .trim()
        .parse::<i32>()
        .map(|p| p <= 1)
        .unwrap_or(false);
    (paranoid, root || low)
}

/// A count scaled up by enabled/running time when the kernel multiplexed the counter.
fn scale(
    count: u64,
    enabled: Option<std::time::Duration>,
    running: Option<std::time::Duration>,
) -> f64 {
    match (enabled, running) {
        (Some(en), Some(run)) if !run.is_zero() && run < en => {
            count as f64 * en.as_secs_f64() / run.as_secs_f64()
        }
        _ => count as f64,
    }
}

/// Counts at one instant, scaled for multiplexing.
pub type Reading = BTreeMap<Event, f64>;

/// Whether this machine samples hardware cycles for this process (a PMU, and permission).
pub fn hardware_cycles() -> bool {
    perf_event::Builder::new(Hardware::CPU_CYCLES)
        .observe_self()
        .any_cpu()
        .exclude_kernel(true)
        .build()
        .is_ok()
}

pub struct Counters {
    open: Vec<(Event, perf_event::Counter)>,
    pub unavailable: BTreeMap<String, String>,
    pub include_kernel: bool,
}

impl Counters {
    /// Opens every event for this thread and the threads it will start.
    pub fn open() -> Self {
        let (paranoid, include_kernel) = permissions();
        let mut open = Vec::new();
        let mut unavailable = BTreeMap::new();
        for ev in Event::ALL {
            let built = {
                let mut b = match ev {
                    Event::Cycles => perf_event::Builder::new(Hardware::CPU_CYCLES),
                    Event::Instructions => perf_event::Builder::new(Hardware::INSTRUCTIONS),
                    Event::Branches => perf_event::Builder::new(Hardware::BRANCH_INSTRUCTIONS),
                    Event::BranchMisses => perf_event::Builder::new(Hardware::BRANCH_MISSES),
                    Event::LlcReferences => perf_event::Builder::new(Hardware::CACHE_REFERENCES),
                    Event::LlcMisses => perf_event::Builder::new(Hardware::CACHE_MISSES),
                    Event::ContextSwitches => perf_event::Builder::new(Software::CONTEXT_SWITCHES),
                    Event::PageFaults => perf_event::Builder::new(Software::PAGE_FAULTS),
                    Event::CpuMigrations => perf_event::Builder::new(Software::CPU_MIGRATIONS),
                };
                b.observe_self()
                    .any_cpu()
                    .inherit(true)
                    .exclude_kernel(!include_kernel)
                    .build()
            };
            match built.and_then(|mut c| c.enable().map(|_| c)) {
                Ok(c) => open.push((ev, c)),
                Err(e) => {
                    unavailable.insert(
                        ev.name().to_string(),
                        explain(e.raw_os_error(), &paranoid, ev.hardware()),
                    );
                }
            }
        }
        Counters {
            open,
            unavailable,
            include_kernel,
        }
    }

    pub fn read(&mut self) -> Reading {
        let mut r = Reading::new();
        for (ev, c) in &mut self.open {
            if let Ok(d) = c.read_full() {
                let (en, run) = (d.time_enabled(), d.time_running());
                r.insert(*ev, scale(d.count(), en, run));
            }
        }
        r
    }
}

/// One worker's own counters: a perf group per ratio (cycles+instructions,
/// branches+branch-misses, LLC references+misses), opened by the worker on itself, so each
/// ratio's two counts cover exactly the same time even when the kernel multiplexes.
pub struct WorkerGroups {
    groups: Vec<(perf_event::Group, Vec<(Event, perf_event::Counter)>)>,
    include_kernel: bool,
}

impl WorkerGroups {
    pub fn open() -> Self {
        let (_, include_kernel) = permissions();
        let pairs = [
            [
                (Event::Cycles, Hardware::CPU_CYCLES),
                (Event::Instructions, Hardware::INSTRUCTIONS),
            ],
            [
                (Event::Branches, Hardware::BRANCH_INSTRUCTIONS),
                (Event::BranchMisses, Hardware::BRANCH_MISSES),
            ],
            [
                (Event::LlcReferences, Hardware::CACHE_REFERENCES),
                (Event::LlcMisses, Hardware::CACHE_MISSES),
            ],
        ];
        let mut groups = Vec::new();
        for pair in pairs {
            let opened = (|| -> std::io::Result<_> {
                let mut g = perf_event::Group::builder()
                    .exclude_kernel(!include_kernel)
                    .build_group()?;
                let mut members = Vec::new();
                for (ev, hw) in pair {
                    members.push((
                        ev,
                        g.add(perf_event::Builder::new(hw).exclude_kernel(!include_kernel))?,
                    ));
                }
                g.enable()?;
                Ok((g, members))
            })();
            // An unavailable pair is simply absent: the process-wide counters carry the reason.
            if let Ok(x) = opened {
                groups.push(x);
            }
        }
        WorkerGroups {
            groups,
            include_kernel,
        }
    }

    /// Counts since `open`, scaled by the group's enabled/running times.
    pub fn figures(&mut self) -> CounterFigures {
        let mut end = Reading::new();
        for (g, members) in &mut self.groups {
            let Ok(data) = g.read() else { continue };
            let (en, run) = (data.time_enabled(), data.time_running());
            for (ev, c) in members.iter() {
                if let Some(v) = data.get(c) {
                    end.insert(*ev, scale(v.value(), en, run));
                }
            }
        }
        let start: Reading = end.keys().map(|k| (*k, 0.0)).collect();
        let mut f = figures(&start, &end, self.include_kernel);
        f.scope = format!(
            "this worker thread only, {}",
            if self.include_kernel {
                "user and kernel"
            } else {
                "user only"
            }
        );
        f
    }
}

/// Counters over a window, with the ratios papers/000 plots.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CounterFigures {
    /// Every event read over the window, by name.
    pub counts: BTreeMap<String, f64>,
    pub ipc: Option<f64>,
    pub branch_miss_ratio: Option<f64>,
    pub llc_miss_ratio: Option<f64>,
    /// What was counted: which threads, user or user+kernel.
    pub scope: String,
}

pub fn figures(a: &Reading, b: &Reading, include_kernel: bool) -> CounterFigures {
    let mut counts = BTreeMap::new();
    for (ev, vb) in b {
        if let Some(va) = a.get(ev) {
            counts.insert(ev.name().to_string(), (vb - va).max(0.0));
        }
    }
    let ratio = |num: Event, den: Event| -> Option<f64> {
        let n = counts.get(num.name())?;
        let d = counts.get(den.name())?;
        (*d > 0.0).then(|| n / d)
    };
    CounterFigures {
        ipc: ratio(Event::Instructions, Event::Cycles),
        branch_miss_ratio: ratio(Event::BranchMisses, Event::Branches),
        llc_miss_ratio: ratio(Event::LlcMisses, Event::LlcReferences),
        counts,
        scope: format!(
            "all threads of the kvmeter process (workers, store threads), {}",
            if include_kernel {
                "user and kernel"
            } else {
                "user only"
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_from_two_readings() {
        let a: Reading = [
            (Event::Cycles, 1000.0),
            (Event::Instructions, 500.0),
            (Event::Branches, 100.0),
            (Event::BranchMisses, 1.0),
        ]
        .into();
        let b: Reading = [
            (Event::Cycles, 3000.0),
            (Event::Instructions, 3500.0),
            (Event::Branches, 600.0),
            (Event::BranchMisses, 11.0),
        ]
        .into();
        let f = figures(&a, &b, true);
        assert_eq!(f.ipc, Some(1.5));
        assert_eq!(f.branch_miss_ratio, Some(0.02));
        assert_eq!(f.llc_miss_ratio, None);
        assert_eq!(f.counts["cycles"], 2000.0);
        assert!(f.scope.contains("user and kernel"));
    }

    #[test]
    fn multiplexed_counts_are_scaled() {
        use std::time::Duration;
        let ms = Duration::from_millis;
        assert_eq!(scale(100, Some(ms(10)), Some(ms(5))), 200.0);
        assert_eq!(scale(100, Some(ms(10)), Some(ms(10))), 100.0);
        assert_eq!(scale(100, Some(ms(10)), Some(Duration::ZERO)), 100.0);
        assert_eq!(scale(100, None, None), 100.0);
    }

    #[test]
    fn reasons_say_how_to_enable() {
        assert!(explain(Some(libc::ENOENT), "2", true).contains("virtual PMU"));
        let e = explain(Some(libc::EACCES), "3\n", true);
        assert!(
            e.contains("perf_event_paranoid is 3") && e.contains("CAP_PERFMON"),
            "{e}"
        );
        assert!(explain(Some(libc::ENOSYS), "", false).contains("CONFIG_PERF_EVENTS"));
    }

    #[test]
    fn software_events_count_on_this_machine() {
        let mut c = Counters::open();
        let a = c.read();
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let f = figures(&a, &c.read(), c.include_kernel);
        // Twenty sleeps are at least twenty context switches.
        assert!(
            f.counts.get("context-switches").copied().unwrap_or(0.0) >= 20.0,
            "{f:?} {:?}",
            c.unavailable
        );
        // Every event is either counted or explained.
        for ev in Event::ALL {
            assert!(
                f.counts.contains_key(ev.name()) || c.unavailable.contains_key(ev.name()),
                "{}",
                ev.name()
            );
        }
    }
}
