//! The report of one run directory: the run's facts (from the manifest), the phase table and
//! warnings, per phase the throughput and latency over time (warm-up shaded), the full
//! latency distribution from the HDR logs (percentile spectrum, x = 1/(1−q) on a log scale as
//! HdrHistogram's plotter draws it; intended start next to service time when paced), counters,
//! the pressure scale; then telemetry over time and energy per phase (papers/000 Fig. 1).

use super::{downsample, Cell, Page};
use crate::report::chart::{short, BarChart, LineChart, Scale, Series};
use crate::report::names;
use crate::report::rundata::RunData;
use crate::report::PhaseSummary;
use hdrhistogram::Histogram;
use serde_json::Value;
use std::path::Path;

pub(super) fn page(dir: &Path) -> anyhow::Result<(Page, Option<Value>)> {
    let d = RunData::load(dir)?;
    let m = d.manifest.clone().unwrap_or(Value::Null);
    let title = format!(
        "kvmeter {} on {}",
        m["plan"]["command"].as_str().unwrap_or("run"),
        m["store"]["name"].as_str().unwrap_or("?")
    );
    let mut p = Page::new(&title);
    if let Some(why) = &d.partial {
        p.note("partial", &format!("Partial run: {why}."));
    }
    facts(&mut p, &m);
    if let Some(s) = &d.summary {
        for w in &s.warnings {
            p.note("warn", w);
        }
        if let Some(e) = &s.error {
            p.note("partial", &format!("Error: {e}"));
        }
        if !s.not_run.is_empty() {
            p.note(
                "partial",
                &format!("Phases not run: {}.", s.not_run.join(", ")),
            );
        }
    }
    phase_table(&mut p, &d);
    for name in d.phase_names() {
        phase_section(&mut p, &d, &name);
    }
    super::telemetry::section(&mut p, &d);
    energy(&mut p, &d);
    let data = d
        .summary
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok());
    Ok((p, data))
}

fn facts(p: &mut Page, m: &Value) {
    if m.is_null() {
        return;
    }
    p.h2("Run");
    let s = |v: &Value| match v {
        Value::String(t) => t.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let options: Vec<String> = m["store"]["options"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| format!("{k}={}", s(v))).collect())
        .unwrap_or_default();
    let mach = &m["machine"];
    let rows = vec![
        ("status", s(&m["status"])),
        (
            "store",
            format!("{} {}", s(&m["store"]["name"]), s(&m["store"]["version"])),
        ),
        ("store options", options.join(", ")),
        (
            "server",
            if m["store"]["server"].is_null() {
                "-".into()
            } else {
                format!(
                    "{} {} at {} ({})",
                    s(&m["store"]["server"]["version"]),
                    if m["store"]["server"]["managed"] == true {
                        "managed"
                    } else {
                        "user's"
                    },
                    s(&m["store"]["server"]["addr"]),
                    s(&m["store"]["server"]["pid"])
                )
            },
        ),
        (
            "machine",
            format!(
                "{}: {}, {} CPUs (affinity {}), {} GiB, {}, {}",
                s(&mach["hostname"]),
                s(&mach["cpu_model"]),
                s(&mach["logical_cpus"]),
                s(&mach["cpu_affinity"]),
                mach["memory_bytes"]
                    .as_f64()
                    .map(|b| format!("{:.1}", b / 1073741824.0))
                    .unwrap_or_default(),
                s(&mach["kernel"]),
                s(&mach["virtualization"])
            ),
        ),
        (
            "data directory",
            format!(
                "{} ({} on {})",
                s(&m["data_dir"]["path"]),
                s(&m["data_dir"]["placement"]["filesystem"]),
                s(&m["data_dir"]["placement"]["device"])
            ),
        ),
        ("clock", s(&m["measurement"]["clock"])),
        ("seed", s(&m["seed"])),
        (
            "started, finished",
            format!("{}, {}", s(&m["started_at"]), s(&m["finished_at"])),
        ),
        (
            "kvmeter",
            format!("{} ({})", s(&m["kvmeter_version"]), s(&m["git_revision"])),
        ),
        (
            "command line",
            m["command_line"]
                .as_array()
                .map(|a| a.iter().map(s).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
        ),
    ];
    let rows: Vec<Vec<Cell>> = rows
        .into_iter()
        .map(|(k, v)| vec![Cell::text(k), Cell::text(v)])
        .collect();
    p.table("run", &["", ""], &rows);
}

fn phase_table(p: &mut Page, d: &RunData) {
    let Some(s) = &d.summary else {
        return;
    };
    p.h2("Phases");
    let rows: Vec<Vec<Cell>> = s
        .phases
        .iter()
        .map(|ph| {
            let k = |f: &str| format!("{}.{f}", ph.name);
            vec![
                Cell::text(ph.name.clone()),
                Cell::text(format!("{:?}", ph.kind).to_lowercase()),
                Cell::text(ph.outcome.name()),
                Cell::num(&k("threads"), ph.threads as f64, ph.threads.to_string()),
                Cell::num(
                    &k("measured_seconds"),
                    ph.measured_seconds,
                    format!("{:.1}", ph.measured_seconds),
                ),
                Cell::num(
                    &k("operations"),
                    ph.operations as f64,
                    ph.operations.to_string(),
                ),
                Cell::num(
                    &k("throughput_ops_per_s"),
                    ph.throughput_ops_per_s,
                    format!("{:.0}", ph.throughput_ops_per_s),
                ),
                Cell::num(
                    &k("throughput_mb_per_s"),
                    ph.throughput_mb_per_s,
                    format!("{:.2}", ph.throughput_mb_per_s),
                ),
                Cell::num(&k("errors"), ph.errors as f64, ph.errors.to_string()),
            ]
        })
        .collect();
    p.table(
        "phases",
        &[
            "phase",
            "kind",
            "outcome",
            "threads",
            "measured s",
            "operations",
            "ops/s",
            "MB/s",
            "errors",
        ],
        &rows,
    );
}

fn phase_section(p: &mut Page, d: &RunData, name: &str) {
    let ph = d.phase(name);
    let metrics = d.metrics(name);
    if metrics.is_empty() && ph.is_none_or(|x| x.ops.is_empty()) {
        return;
    }
    p.h2(&format!("Phase {name}"));
    if let Some(ph) = ph {
        ops_table(p, ph);
        if let Some(o) = &ph.open_loop {
            let line = format!(
                "Open loop ({}): offered {:.0} ops/s, achieved {:.0} ({:.1} %), {} {}; sends late by p99 {} µs, max {} µs; {}",
                o.arrival,
                o.offered_ops_per_s,
                o.achieved_ops_per_s,
                o.achieved_ratio * 100.0,
                o.workers,
                if ph.engine.is_some() { "event loops" } else { "workers" },
                o.send_lag_us.p99.map_or("—".into(), short),
                o.send_lag_us.max.map_or("—".into(), short),
                if o.kept_up {
                    "schedule kept".to_string()
                } else {
                    format!(
                        "SCHEDULE NOT KEPT ({})",
                        o.not_kept_because(&short).join("; ")
                    )
                }
            );
            p.note(if o.kept_up { "na" } else { "warn" }, &line);
        }
    }
    let warmup = ph.map(|x| x.warmup_seconds).unwrap_or(0.0);
    over_time(p, d, name, &metrics, warmup);
    spectrum(p, d, name, &metrics, warmup);
    if let Some(ph) = ph {
        super::faults::section(p, d, ph);
        counters(p, ph);
        super::profile::section(p, d, ph);
        super::pressure::section(p, ph);
    }
}

/// One row per operation: its latency ("—" where nothing was measured, never 0); a paced
/// phase (open loop, --target) has its latency from each operation's intended start beside
/// the service time from its send (issue 40 item 8); errors (misses left out: for a cache a
/// miss is an answer), hits, misses and the hit ratio, and the misses' own latency.
fn ops_table(p: &mut Page, ph: &PhaseSummary) {
    let paced = ph.ops.values().any(|o| o.intended_latency_us.is_some());
    let mut rows = vec![];
    for (op, o) in &ph.ops {
        let k = |f: &str| format!("{}.{op}.{f}", ph.name);
        let l = &o.latency_us;
        let lat = |f: &str, v: Option<f64>| {
            Cell::num(&k(f), v.unwrap_or(f64::NAN), v.map_or("—".into(), short))
        };
        let mut row = vec![
            Cell::text(op.clone()),
            Cell::num(&k("count"), o.count as f64, o.count.to_string()),
            Cell::num(&k("ops_per_s"), o.ops_per_s, format!("{:.0}", o.ops_per_s)),
            lat("latency_us.avg", l.avg),
            lat("latency_us.p50", l.p50),
            lat("latency_us.p99", l.p99),
            lat("latency_us.p99_9", l.p99_9),
            lat("latency_us.max", l.max),
        ];
        if paced {
            let i = o.intended_latency_us.as_ref().filter(|i| i.count > 0);
            type Get = fn(&crate::report::Latency) -> Option<f64>;
            let parts: [(&str, Get); 4] = [
                ("p50", |l| l.p50),
                ("p99", |l| l.p99),
                ("p99_9", |l| l.p99_9),
                ("max", |l| l.max),
            ];
            for (f, get) in parts {
                row.push(lat(&format!("intended_latency_us.{f}"), i.and_then(get)));
            }
        }
        let errors = o.count - o.ok - o.misses;
        let missed = o.missed_latency_us.as_ref();
        row.extend([
            Cell::num(&k("errors"), errors as f64, errors.to_string()),
            Cell::num(&k("hits"), o.hits as f64, o.hits.to_string()),
            Cell::num(&k("misses"), o.misses as f64, o.misses.to_string()),
            Cell::num(
                &k("hit_ratio"),
                o.hit_ratio.unwrap_or(f64::NAN),
                o.hit_ratio
                    .map_or("—".into(), |r| format!("{:.1} %", r * 100.0)),
            ),
            lat("missed_latency_us.p50", missed.and_then(|m| m.p50)),
            lat("missed_latency_us.p99", missed.and_then(|m| m.p99)),
        ]);
        rows.push(row);
    }
    let mut head = vec!["operation", "count", "ops/s"];
    if paced {
        head.extend([
            "avg µs from send",
            "p50 µs from send",
            "p99 µs from send",
            "p99.9 µs from send",
            "max µs from send",
            "p50 µs from intended",
            "p99 µs from intended",
            "p99.9 µs from intended",
            "max µs from intended",
        ]);
    } else {
        head.extend(["avg µs", "p50 µs", "p99 µs", "p99.9 µs", "max µs"]);
    }
    head.extend([
        "errors",
        "hits",
        "misses",
        "hit ratio",
        "miss p50 µs",
        "miss p99 µs",
    ]);
    p.table(&format!("ops-{}", ph.name), &head, &rows);
}

fn mid(a: f64, b: f64) -> f64 {
    (a + b) / 2.0
}

/// The measurement interval of the run (manifest), 1 s when the manifest does not say.
fn interval_s(d: &RunData) -> f64 {
    d.manifest
        .as_ref()
        .and_then(|m| m["measurement"]["interval_s"].as_f64())
        .filter(|x| *x > 0.0)
        .unwrap_or(1.0)
}

/// A phase that fits in one interval has one row per operation: a figure over time would be a
/// lone dot on an empty axis, so the page says so instead (the phase's table has its figures).
fn shorter_than_an_interval(p: &mut Page, d: &RunData, name: &str, metrics: &[String]) -> bool {
    let mut intervals: Vec<(u64, u64)> = metrics
        .iter()
        .flat_map(|m| d.series(name, m))
        .map(|r| (r.start_s.to_bits(), r.end_s.to_bits()))
        .collect();
    intervals.sort();
    intervals.dedup();
    if intervals.len() >= 2 {
        return false;
    }
    let secs = metrics
        .iter()
        .flat_map(|m| d.series(name, m))
        .map(|r| r.end_s)
        .fold(0.0, f64::max);
    p.note(
        "na short-phase",
        &format!(
            "{name}: phase shorter than one interval ({secs:.3} s measured, intervals of {} s): no series over time; the table above has its figures.",
            short(interval_s(d))
        ),
    );
    true
}

fn over_time(p: &mut Page, d: &RunData, name: &str, metrics: &[String], warmup: f64) {
    if metrics.is_empty() || shorter_than_an_interval(p, d, name, metrics) {
        return;
    }
    // On the run's clock, as the telemetry figures are (issue 40 item 9); a run directory
    // without the phase's start time keeps phase time and says so.
    let (t0, x_label) = match d.phase_start_s(name) {
        Some(t0) => (t0, "time since the run started (s)"),
        None => (0.0, "time since the phase started (s)"),
    };
    let mid = |a: f64, b: f64| t0 + mid(a, b);
    let bands = store_bands(d, name, t0);
    // The axis spans the intervals, not only their midpoints, so the last one's events show.
    let (first, last) = d
        .intervals
        .iter()
        .filter(|r| r.phase == name)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), r| {
            (a.min(r.start_s), b.max(r.end_s))
        });
    let x_span = (first <= last).then_some((t0 + first, t0 + last));
    let tinted = if bands.is_empty() {
        ""
    } else {
        " Under the series, what the store did (its own log and counters): intervals in which writes stalled tinted red, the time a latency spike the server recorded can have covered (its length and the second its clock rounds to) tinted violet; along the bottom, compactions (orange), background saves (green) or AOF rewrites (teal) in the upper lane and flushes (blue) in the lower; hover over one for its job, duration and bytes."
    };
    let mut t = LineChart::new(
        &format!("{name}-throughput"),
        &format!("{name}: throughput per interval"),
        x_label,
        &names::name("ops_per_s"),
    );
    if warmup > 0.0 {
        t.shaded.push((t0, t0 + warmup, "warm-up".into()));
    }
    t.bands = bands.clone();
    t.x_span = x_span;
    for m in metrics {
        let pts = d
            .series(name, m)
            .iter()
            .map(|r| (mid(r.start_s, r.end_s), r.ops_per_s))
            .collect();
        t.series.push(Series::new(m, downsample(pts)));
    }
    p.figure(&t.id.clone(), t.svg(), &format!("Operations completed per second in each interval; warm-up shaded (excluded from the summary).{tinted}"));
    for m in metrics {
        let rows = d.series(name, m);
        let mut l = LineChart::new(
            &format!("{name}-{}-latency", m.to_lowercase()),
            &format!("{name}: {m} latency per interval"),
            x_label,
            "latency (log scale)",
        )
        .latency_y();
        if warmup > 0.0 {
            l.shaded.push((t0, t0 + warmup, "warm-up".into()));
        }
        l.bands = bands.clone();
        l.x_span = x_span;
        type Get = fn(&crate::report::rundata::IntervalRow) -> f64;
        let parts: [(&str, Get); 3] = [
            ("p50", |r| r.p50_us),
            ("p99", |r| r.p99_us),
            ("p99.9", |r| r.p99_9_us),
        ];
        for (label, get) in parts {
            let pts = rows
                .iter()
                .filter(|r| r.count > 0)
                .map(|r| (mid(r.start_s, r.end_s), get(r)))
                .collect();
            l.series.push(super::gapped(label, pts, interval_s(d)));
        }
        if rows.iter().any(|r| r.intended_p99_us.is_some()) {
            let pts = rows
                .iter()
                .filter_map(|r| Some((mid(r.start_s, r.end_s), r.intended_p99_us?)))
                .collect();
            let mut s = super::gapped("p99 from intended start", pts, interval_s(d));
            s.dashed = true;
            l.series.push(s);
        }
        p.figure(
            &l.id.clone(),
            l.svg(),
            &format!("Service time of successful operations per interval (HdrHistogram percentiles).{tinted}"),
        );
    }
}

/// The store's flushes, compactions and stalls in phase `name` (report::store_events), on
/// the figures' clock (`t0` added).
fn store_bands(d: &RunData, name: &str, t0: f64) -> Vec<(f64, f64, &'static str, String)> {
    let stall = d
        .summary
        .as_ref()
        .and_then(|s| s.phases.iter().find(|p| p.name == name))
        .and_then(|p| p.store_stats.as_ref())
        .and_then(|ss| {
            ss.stats
                .iter()
                .find(|(_, f)| f.role.as_deref() == Some("stall"))
                .map(|(n, _)| n.clone())
        });
    let end_s = d
        .intervals
        .iter()
        .filter(|r| r.phase == name)
        .map(|r| r.end_s)
        .fold(0.0, f64::max);
    let events = (!d.store_events.header.is_empty()).then_some(&d.store_events);
    let stats = (!d.store_stats.header.is_empty()).then_some(&d.store_stats);
    crate::report::store_events::bands(events, stats, stall.as_deref(), name, end_s)
        .into_iter()
        .map(|b| (t0 + b.from_s, t0 + b.to_s, b.what, b.title))
        .collect()
}

/// (1/(1−q), value µs) along the distribution, as HdrHistogram's percentile plot.
pub(crate) fn spectrum_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let mut out = vec![];
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        if q >= 1.0 {
            break;
        }
        out.push((1.0 / (1.0 - q), v.value_iterated_to() as f64 / 1000.0));
    }
    out
}

fn spectrum(p: &mut Page, d: &RunData, name: &str, metrics: &[String], warmup: f64) {
    let mut c = LineChart::new(
        &format!("{name}-spectrum"),
        &format!("{name}: latency by percentile (measured window)"),
        "percentile",
        "latency (log scale)",
    )
    .latency_y();
    c.x_scale = Scale::Percentile;
    for m in metrics {
        if let Some(h) = d.histogram(name, m, warmup) {
            c.series.push(Series::new(m, spectrum_points(&h)));
        }
        if let Some(h) = d.histogram(name, &format!("Intended-{m}"), warmup) {
            let mut s = Series::new(&format!("{m} from intended start"), spectrum_points(&h));
            s.dashed = true;
            c.series.push(s);
        }
    }
    if !c.series.is_empty() {
        p.figure(&c.id.clone(), c.svg(), "The whole latency distribution from the HDR logs, warm-up excluded; dashed: from each operation's intended start (coordinated omission corrected).");
    }
}

fn counters(p: &mut Page, ph: &PhaseSummary) {
    let Some(t) = &ph.telemetry else {
        return;
    };
    let unavailable: Vec<(&String, &String)> = t
        .unavailable
        .iter()
        .filter(|(k, _)| k.starts_with("counters."))
        .collect();
    match &t.counters {
        Some(c) => {
            let k = |f: &str| format!("{}.counters.{f}", ph.name);
            let cell = |f: &str, v: Option<f64>| match v {
                Some(x) => Cell::num(&k(f), x, format!("{x:.3}")),
                None => Cell::text("unavailable"),
            };
            p.table(
                &format!("counters-{}", ph.name),
                &["scope", "IPC", "branch miss ratio", "LLC miss ratio"],
                &[vec![
                    Cell::text(c.scope.clone()),
                    cell("ipc", c.ipc),
                    cell("branch_miss_ratio", c.branch_miss_ratio),
                    cell("llc_miss_ratio", c.llc_miss_ratio),
                ]],
            );
        }
        None if unavailable.is_empty() => {}
        None => {}
    }
    for (k, why) in unavailable {
        p.note(
            "na",
            &format!("{}: {why}", k.trim_start_matches("counters.")),
        );
    }
}

/// Energy and operations per joule per phase (papers/000 Fig. 1), labelled when estimated.
fn energy(p: &mut Page, d: &RunData) {
    let Some(s) = &d.summary else {
        return;
    };
    let with: Vec<&PhaseSummary> = s.phases.iter().filter(|p| p.energy.is_some()).collect();
    if with.is_empty() {
        return;
    }
    let estimate = with
        .iter()
        .any(|p| p.energy.as_ref().is_some_and(|e| e.estimate));
    p.h2("Energy");
    if estimate {
        p.note("estimate", "ESTIMATE: power comes from the utilisation model, not a meter; ratios between phases may hold, absolute values do not.");
    }
    let bars = with
        .iter()
        .map(|ph| {
            let e = ph.energy.as_ref().expect("filtered");
            (
                ph.name.clone(),
                e.ops_per_joule,
                format!("{:.1} J, {:.1} W avg, {}", e.energy_j, e.avg_w, e.source),
            )
        })
        .collect();
    let b = BarChart {
        id: "energy-ops-per-joule".into(),
        title: format!(
            "operations per joule by phase{}",
            if estimate { " (ESTIMATE)" } else { "" }
        ),
        y_label: "operations/J".into(),
        bars,
        sorted: false,
    };
    p.figure(
        &b.id.clone(),
        b.svg(),
        "Operations per joule over each phase's measured window (papers/000 Fig. 1).",
    );
}
