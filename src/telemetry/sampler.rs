//! The sampling thread: a snapshot every `--telemetry-interval`, one row of telemetry.csv per
//! sample (the window between consecutive snapshots) and the per-thread-group CPU in
//! threads.csv, flushed at once. The columns are one table — name and how to write it — from
//! which both the header and every row are made, so they cannot drift apart.

use super::procfs::DiskRates;
use super::sources::{Snapshot, Sources};
use super::window::{observe, window, Observed};
use super::{PhaseTelemetry, PhaseWindow};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What one row of telemetry.csv is made from.
struct Row<'a> {
    time_s: f64,
    phase: &'a str,
    watts: Option<f64>,
    src: &'a Sources,
    /// The window since the previous sample.
    t: &'a PhaseTelemetry,
    /// The sample itself (for levels rather than rates: RSS).
    cur: &'a Snapshot,
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.3}")).unwrap_or_default()
}

fn cpu(r: &Row, f: fn(&super::procfs::CpuShare) -> f64) -> String {
    r.t.cpu
        .as_ref()
        .map(|c| format!("{:.2}", f(c)))
        .unwrap_or_default()
}

fn disk(r: &Row, f: fn(&DiskRates) -> f64) -> String {
    r.t.disk
        .as_ref()
        .map(|d| format!("{:.3}", f(d)))
        .unwrap_or_default()
}

fn process(r: &Row, f: fn(&super::ProcessFigures) -> Option<f64>) -> String {
    fmt_opt(r.t.process.as_ref().and_then(f))
}

const MB: f64 = 1048576.0;

type Column = (&'static str, fn(&Row) -> String);

/// telemetry.csv's columns, in order (docs/telemetry.md).
const COLUMNS: &[Column] = &[
    ("time_s", |r| format!("{:.3}", r.time_s)),
    ("phase", |r| r.phase.to_string()),
    ("power_w", |r| fmt_opt(r.watts)),
    ("power_source", |r| {
        r.src
            .power
            .as_ref()
            .map(|p| p.source.clone())
            .unwrap_or_default()
    }),
    ("cpu_busy_pct", |r| cpu(r, |c| c.busy)),
    ("cpu_user_pct", |r| cpu(r, |c| c.user)),
    ("cpu_nice_pct", |r| cpu(r, |c| c.nice)),
    ("cpu_system_pct", |r| cpu(r, |c| c.system)),
    ("cpu_iowait_pct", |r| cpu(r, |c| c.iowait)),
    ("cpu_irq_pct", |r| cpu(r, |c| c.irq)),
    ("cpu_softirq_pct", |r| cpu(r, |c| c.softirq)),
    ("cpu_steal_pct", |r| cpu(r, |c| c.steal)),
    ("cpu_idle_pct", |r| cpu(r, |c| c.idle)),
    ("disk", |r| r.src.disk.clone().unwrap_or_default()),
    ("disk_read_iops", |r| disk(r, |d| d.read_iops)),
    ("disk_write_iops", |r| disk(r, |d| d.write_iops)),
    ("disk_read_mb_per_s", |r| disk(r, |d| d.read_mb_per_s)),
    ("disk_write_mb_per_s", |r| disk(r, |d| d.write_mb_per_s)),
    ("disk_util_pct", |r| disk(r, |d| d.util_pct)),
    ("disk_queue_depth", |r| disk(r, |d| d.queue_depth)),
    ("disk_await_ms", |r| {
        fmt_opt(r.t.disk.as_ref().and_then(|d| d.await_ms))
    }),
    ("proc_cpu_pct", |r| process(r, |p| Some(p.cpu_pct))),
    ("proc_rss_mb", |r| {
        fmt_opt(r.cur.process.as_ref().map(|p| p.rss_bytes as f64 / MB))
    }),
    ("proc_voluntary_cs_per_s", |r| {
        process(r, |p| Some(p.voluntary_cs_per_s))
    }),
    ("proc_involuntary_cs_per_s", |r| {
        process(r, |p| Some(p.involuntary_cs_per_s))
    }),
    ("proc_read_mb_per_s", |r| process(r, |p| p.read_mb_per_s)),
    ("proc_write_mb_per_s", |r| process(r, |p| p.write_mb_per_s)),
    ("mem_used_mb", |r| fmt_opt(r.t.memory.map(|m| m.used_mb))),
    ("mem_available_mb", |r| {
        fmt_opt(r.t.memory.map(|m| m.available_mb))
    }),
    ("mem_dirty_mb", |r| fmt_opt(r.t.memory.map(|m| m.dirty_mb))),
    ("psi_cpu_some_pct", |r| fmt_opt(r.t.pressure.cpu_some_pct)),
    ("psi_io_some_pct", |r| fmt_opt(r.t.pressure.io_some_pct)),
    ("psi_io_full_pct", |r| fmt_opt(r.t.pressure.io_full_pct)),
    ("psi_memory_some_pct", |r| {
        fmt_opt(r.t.pressure.memory_some_pct)
    }),
    ("psi_memory_full_pct", |r| {
        fmt_opt(r.t.pressure.memory_full_pct)
    }),
    ("server_cpu_pct", |r| {
        fmt_opt(r.t.server.as_ref().map(|p| p.cpu_pct))
    }),
    ("server_rss_mb", |r| {
        fmt_opt(r.cur.server.as_ref().map(|p| p.rss_bytes as f64 / MB))
    }),
];

/// telemetry.csv's header line.
pub fn header() -> String {
    COLUMNS.iter().map(|c| c.0).collect::<Vec<_>>().join(",")
}

fn row(r: &Row) -> String {
    COLUMNS
        .iter()
        .map(|c| (c.1)(r))
        .collect::<Vec<_>>()
        .join(",")
}

/// Where each sample goes: the two files, and the newest figures for the metrics endpoint.
pub(super) struct Files<'a> {
    pub csv: &'a mut BufWriter<File>,
    pub threads_csv: &'a mut BufWriter<File>,
    pub latest: &'a Mutex<super::Latest>,
}

pub(super) fn sampler(
    interval: Duration,
    t0: Instant,
    src: &Sources,
    state: &Mutex<PhaseWindow>,
    stop: &AtomicBool,
    files: Files,
) {
    let Files {
        csv,
        threads_csv,
        latest,
    } = files;
    let mut prev = src.series_snapshot();
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
        let cur = src.series_snapshot();
        let watts = match (prev.energy, cur.energy) {
            (Some(a), Some(b)) => crate::telemetry::power::watts_between(a, b),
            _ => None,
        };
        let phase = record_sample(state, &cur, watts);
        let t = window(
            src,
            &prev,
            &cur,
            Observed {
                samples: 1,
                ..Default::default()
            },
        );
        let time_s = cur
            .at
            .map(|a| a.duration_since(t0).as_secs_f64())
            .unwrap_or(0.0);
        let r = Row {
            time_s,
            phase: &phase,
            watts,
            src,
            t: &t,
            cur: &cur,
        };
        let _ = writeln!(csv, "{}", row(&r));
        *latest.lock().unwrap_or_else(|p| p.into_inner()) =
            super::Latest::of(&t, watts, &cur, src.ticks_per_s);
        if let Some(p) = &t.process {
            for (g, v) in &p.cpu_pct_by_thread {
                let _ = writeln!(threads_csv, "{time_s:.3},{phase},{g},{v:.2}");
            }
        }
        let _ = csv.flush();
        let _ = threads_csv.flush();
        prev = cur;
    }
}

/// Adds a sample to the phase window's peaks and thread list; returns the phase's name.
fn record_sample(state: &Mutex<PhaseWindow>, cur: &Snapshot, watts: Option<f64>) -> String {
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(w) = watts {
        s.peak_w = s.peak_w.max(w);
    }
    if let Some(p) = &cur.process {
        s.rss_peak = s.rss_peak.max(p.rss_bytes);
    }
    s.samples += 1;
    if s.window_start.is_some() {
        observe(&mut s.seen, cur);
    }
    s.phase.clone()
}

#[cfg(test)]
mod tests {
    /// The header as documented (docs/telemetry.md), column for column.
    #[test]
    fn header_is_the_documented_one() {
        assert_eq!(
            super::header(),
            "time_s,phase,power_w,power_source,cpu_busy_pct,cpu_user_pct,cpu_nice_pct,cpu_system_pct,cpu_iowait_pct,cpu_irq_pct,cpu_softirq_pct,cpu_steal_pct,cpu_idle_pct,disk,disk_read_iops,disk_write_iops,disk_read_mb_per_s,disk_write_mb_per_s,disk_util_pct,disk_queue_depth,disk_await_ms,proc_cpu_pct,proc_rss_mb,proc_voluntary_cs_per_s,proc_involuntary_cs_per_s,proc_read_mb_per_s,proc_write_mb_per_s,mem_used_mb,mem_available_mb,mem_dirty_mb,psi_cpu_some_pct,psi_io_some_pct,psi_io_full_pct,psi_memory_some_pct,psi_memory_full_pct,server_cpu_pct,server_rss_mb"
        );
    }
}
