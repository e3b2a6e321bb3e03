//! A window's figures from two snapshots of the raw counters (start and end), so they are
//! exact whatever the sampling interval; what only the samples can give (peaks, threads that
//! came and went) arrives as `Observed`. The sampler uses the same function for each row of
//! telemetry.csv, with consecutive snapshots as the window.

use super::procfs::*;
use super::sources::{Snapshot, Sources};
use super::{counters, PhaseTelemetry, PowerFigures, Pressure, ProcessFigures};
use std::collections::{BTreeMap, HashMap};

/// Threads seen during a window: tid → (group, ticks at window start or 0 if it began later,
/// latest ticks). Threads that exit keep the time they were last seen with.
pub(super) type Seen = HashMap<u32, (String, u64, u64)>;

pub(super) fn seen_from(start: &Snapshot) -> Seen {
    start
        .threads
        .iter()
        .map(|(tid, g, t)| (*tid, (g.clone(), *t, *t)))
        .collect()
}

pub(super) fn observe(seen: &mut Seen, snap: &Snapshot) {
    for (tid, g, t) in &snap.threads {
        seen.entry(*tid)
            .and_modify(|e| e.2 = (*t).max(e.2))
            .or_insert((g.clone(), 0, *t));
    }
}

/// What the samples between the two snapshots saw.
#[derive(Default)]
pub(super) struct Observed<'a> {
    pub rss_peak: u64,
    pub samples: u64,
    /// Threads seen by the samples; `None`: only those in the two snapshots.
    pub seen: Option<&'a Seen>,
    /// Highest power of one sampling interval.
    pub peak_w: f64,
}

impl ProcessFigures {
    /// A process's figures between two samples `secs` apart; its RSS peak is the larger of
    /// `rss_peak` and the last sample's.
    fn between(
        pid: u32,
        x: &ProcSample,
        y: &ProcSample,
        secs: f64,
        ticks_per_s: f64,
        rss_peak: u64,
        cpu_pct_by_thread: BTreeMap<String, f64>,
    ) -> Self {
        let per_s = |p: u64, q: u64| counter_delta(p, q) as f64 / secs;
        ProcessFigures {
            pid,
            processes: None,
            cpu_pct: counter_delta(x.cpu_ticks, y.cpu_ticks) as f64 / ticks_per_s / secs * 100.0,
            cpu_pct_by_thread,
            rss_peak_mb: rss_peak.max(y.rss_bytes) as f64 / 1048576.0,
            // Summed over live threads, so a thread that ends lowers them: never a wrap.
            voluntary_cs_per_s: y.voluntary_cs.saturating_sub(x.voluntary_cs) as f64 / secs,
            involuntary_cs_per_s: y.involuntary_cs.saturating_sub(x.involuntary_cs) as f64 / secs,
            read_mb_per_s: x
                .read_bytes
                .zip(y.read_bytes)
                .map(|(p, q)| per_s(p, q) / 1e6),
            write_mb_per_s: x
                .write_bytes
                .zip(y.write_bytes)
                .map(|(p, q)| per_s(p, q) / 1e6),
        }
    }
}

/// Fewest clock ticks a phase's window must span for its CPU shares: the kernel accounts CPU
/// time in whole ticks (10 ms at the usual CLK_TCK of 100), so a share over n ticks moves in
/// steps of 100/n % and a 3-tick window prints "user 33.3, system 33.3, iowait 33.3". At 50
/// ticks a step is 2 % of one CPU; below, the figures are noise and are not given.
pub const MIN_CPU_TICKS: f64 = 50.0;

/// A phase window too short for CPU shares loses them (machine, per CPU, per thread group)
/// and says why under `unavailable["cpu"]`; the processes' CPU % stays in the data (as
/// measured) but is not printed. Rows of telemetry.csv are not judged: they are the raw
/// series, each as coarse as its interval.
pub fn judge_cpu_resolution(t: &mut PhaseTelemetry, ticks_per_s: f64) {
    let ticks = t.seconds * ticks_per_s;
    if ticks >= MIN_CPU_TICKS {
        return;
    }
    t.cpu = None;
    t.cpu_busy_pct_per_cpu.clear();
    for p in t.process.iter_mut().chain(t.server.iter_mut()) {
        p.cpu_pct_by_thread.clear();
    }
    t.unavailable.insert(
        "cpu".into(),
        format!(
            "unavailable: too few samples ({:.3} s = {:.0} clock tick{} of {:.0} ms; CPU shares need {MIN_CPU_TICKS:.0})",
            t.seconds,
            ticks.floor(),
            if ticks.floor() == 1.0 { "" } else { "s" },
            1000.0 / ticks_per_s
        ),
    );
}

/// CPU % of one CPU per thread group (the harness's workers against the store's threads).
fn cpu_by_thread(
    s: &Sources,
    a: &Snapshot,
    b: &Snapshot,
    secs: f64,
    seen: Option<&Seen>,
) -> BTreeMap<String, f64> {
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
        *by_thread.entry(g.clone()).or_default() +=
            last.saturating_sub(*first) as f64 / s.ticks_per_s / secs * 100.0;
    }
    by_thread.retain(|_, v| *v > 0.0);
    by_thread
}

pub(super) fn window(s: &Sources, a: &Snapshot, b: &Snapshot, o: Observed) -> PhaseTelemetry {
    let secs = match (a.at, b.at) {
        (Some(x), Some(y)) => y.duration_since(x).as_secs_f64(),
        _ => 0.0,
    };
    let mut t = PhaseTelemetry {
        seconds: secs,
        samples: o.samples,
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
        let by_thread = cpu_by_thread(s, a, b, secs, o.seen);
        t.process = Some(ProcessFigures::between(
            s.pid,
            x,
            y,
            secs,
            s.ticks_per_s,
            o.rss_peak,
            by_thread,
        ));
    }
    if let (Some(x), Some(y)) = (&a.server, &b.server) {
        let mut f = ProcessFigures::between(
            s.server.first_pid().unwrap_or(0),
            x,
            y,
            secs,
            s.ticks_per_s,
            x.rss_bytes,
            BTreeMap::new(),
        );
        f.processes = Some(b.server_processes);
        t.server = Some(f);
    }
    if let (Some(ca), Some(cb)) = (&a.counters, &b.counters) {
        t.counters = Some(counters::figures(ca, cb, s.counters_kernel));
    }
    t.memory = s
        .root
        .read("proc/meminfo")
        .ok()
        .and_then(|m| parse_meminfo(&m));
    power_figures(s, a, b, secs, o.peak_w, &mut t);
    t.pressure = pressure(a, b, secs);
    t
}

fn power_figures(
    s: &Sources,
    a: &Snapshot,
    b: &Snapshot,
    secs: f64,
    peak_w: f64,
    t: &mut PhaseTelemetry,
) {
    if let (Some(info), Some(ea), Some(eb)) = (&s.power, a.energy, b.energy) {
        let energy = (eb.0 - ea.0).max(0.0);
        // Average power over the meter's own time for the window (within a few µs of `secs`).
        let avg_w = super::power::watts_between(ea, eb).unwrap_or(energy / secs);
        t.power = Some(PowerFigures {
            source: info.source.clone(),
            scope: info.scope.clone(),
            estimate: info.estimate,
            detail: info.detail.clone(),
            energy_j: energy,
            avg_w,
            peak_w: peak_w.max(avg_w),
        });
    } else if s.power.is_some() {
        t.unavailable.insert(
            "power".into(),
            "unavailable: the power source stopped answering during the window".into(),
        );
    }
}

/// Stall shares from PSI's cumulative µs counters.
fn pressure(a: &Snapshot, b: &Snapshot, secs: f64) -> Pressure {
    let stall = |i: usize, full: bool| -> Option<f64> {
        let (p, q) = if full {
            (a.psi[i].1?, b.psi[i].1?)
        } else {
            (a.psi[i].0?, b.psi[i].0?)
        };
        Some(counter_delta(p, q) as f64 / 1e6 / secs * 100.0)
    };
    Pressure {
        cpu_some_pct: stall(0, false),
        io_some_pct: stall(1, false),
        io_full_pct: stall(1, true),
        memory_some_pct: stall(2, false),
        memory_full_pct: stall(2, true),
    }
}
