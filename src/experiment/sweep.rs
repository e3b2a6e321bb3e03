//! `kvmeter sweep`: runs the same experiment over parameter values — threads, connections,
//! rate, value size, records, any `--store-opt` or YCSB property, or threads per CPU (papers/000
//! Fig. 7 grows application threads per hardware thread 1:1..8:1; Fig. 8 sweeps RocksDB's block
//! cache) — each point repeated, with mean, standard deviation, and the geometric mean with its
//! 95 % confidence interval on logarithms per metric (design.md "Measurement rules":
//! repetitions give mean, stddev and a CI; `stats::Spread` says why logarithms).

use super::{run_point, write_atomic};
use crate::error::{UsageError, EXIT_INTERRUPTED, EXIT_OK};
use crate::plan::Request;
use crate::report::stats::{Spread, CONFIDENCE};
use crate::report::{PhaseSummary, Summary};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// One swept parameter and its values, as given (`--param threads=1,2,4`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Param {
    pub name: String,
    pub values: Vec<String>,
}

pub const PARAMS_HELP: &str = "threads, connections, threads-per-cpu, rate, target, records, ops, value-size, fieldlength, store-opt.<key>, p.<property>";

impl Param {
    pub fn parse(text: &str) -> Result<Self, UsageError> {
        let (name, list) = text.split_once('=').ok_or_else(|| {
            UsageError::new(format!(
                "--param '{text}': expected name=v1,v2,... (names: {PARAMS_HELP})"
            ))
        })?;
        let values: Vec<String> = list
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        if values.is_empty() {
            return Err(UsageError::new(format!(
                "--param '{text}': no values; expected name=v1,v2,..."
            )));
        }
        let p = Param {
            name: name.trim().to_string(),
            values,
        };
        // Each value is checked by applying it to an empty request.
        for v in &p.values {
            apply(&mut Request::default(), &p.name, v)?;
        }
        Ok(p)
    }
}

fn whole(name: &str, v: &str) -> Result<i64, UsageError> {
    v.parse::<i64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| UsageError::new(format!("--param {name}={v}: expected a whole number ≥ 1")))
}

fn rate(name: &str, v: &str) -> Result<f64, UsageError> {
    v.parse::<f64>()
        .ok()
        .filter(|r| r.is_finite() && *r > 0.0)
        .ok_or_else(|| {
            UsageError::new(format!(
                "--param {name}={v}: expected a positive rate in operations per second"
            ))
        })
}

/// Sets one parameter's value on a request. Later settings win over the base command line's
/// (`--store-opt` and `-p` are applied in order).
pub fn apply(req: &mut Request, name: &str, v: &str) -> Result<(), UsageError> {
    match name {
        "threads" => req.threads = Some(whole(name, v)?),
        // The event-driven engine's connections in all (memcached, redis) and requests in
        // flight on each.
        "connections" => req.connections = Some(whole(name, v)?),
        "depth" => req.depth = Some(whole(name, v)?),
        "threads-per-cpu" => {
            req.threads = Some(whole(name, v)? * crate::machine::cpu_count() as i64)
        }
        "rate" => req.rate = Some(rate(name, v)?),
        "target" => req.target = Some(rate(name, v)?),
        "records" => req.records = Some(whole(name, v)?),
        "ops" => req.ops = Some(whole(name, v)?),
        // One field of this many bytes per record, as memtier's -d and db_bench's --value_size.
        "value-size" => {
            whole(name, v)?;
            req.props.push("fieldcount=1".into());
            req.props.push(format!("fieldlength={v}"));
        }
        "fieldlength" => {
            whole(name, v)?;
            req.props.push(format!("fieldlength={v}"));
        }
        _ => {
            if let Some(key) = name.strip_prefix("store-opt.").filter(|k| !k.is_empty()) {
                // The point's value replaces the command's own `--store-opt` of that name.
                let prefix = format!("{key}=");
                req.store_opts.retain(|o| !o.starts_with(&prefix));
                req.store_opts.push(format!("{key}={v}"));
            } else if let Some(key) = name.strip_prefix("p.").filter(|k| !k.is_empty()) {
                req.props.push(format!("{key}={v}"));
            } else {
                return Err(UsageError::new(format!(
                    "--param '{name}': unknown parameter; expected one of {PARAMS_HELP}"
                )));
            }
        }
    }
    Ok(())
}

/// Every combination of the parameters' values, first parameter slowest.
pub fn points(params: &[Param]) -> Vec<Vec<(String, String)>> {
    let mut out: Vec<Vec<(String, String)>> = vec![vec![]];
    for p in params {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                p.values.iter().map(move |v| {
                    let mut x = prefix.clone();
                    x.push((p.name.clone(), v.clone()));
                    x
                })
            })
            .collect();
    }
    out
}

/// The figures of a phase the sweep aggregates (those the phase has).
pub fn metrics_of(p: &PhaseSummary) -> Vec<(String, f64)> {
    let mut m = vec![
        ("throughput_ops_per_s".to_string(), p.throughput_ops_per_s),
        ("throughput_mb_per_s".to_string(), p.throughput_mb_per_s),
    ];
    if let Some(a) = &p.all_ops {
        // A latency with no samples is no figure (null), not a 0 to average.
        let mut put = |name: &str, v: Option<f64>| {
            if let Some(v) = v {
                m.push((name.to_string(), v));
            }
        };
        let l = &a.latency_us;
        put("latency_avg_us", l.avg);
        put("latency_p50_us", l.p50);
        put("latency_p99_us", l.p99);
        put("latency_p99_9_us", l.p99_9);
        if let Some(i) = &a.intended_latency_us {
            put("intended_avg_us", i.avg);
            put("intended_p99_us", i.p99);
            put("intended_p99_9_us", i.p99_9);
        }
    }
    if let Some(o) = &p.open_loop {
        m.push(("achieved_ops_per_s".to_string(), o.achieved_ops_per_s));
    }
    inside_the_store(p, &mut m);
    costs(p, &mut m);
    if let Some(e) = &p.energy {
        let tag = if e.estimate { "_estimate" } else { "" };
        m.push((format!("ops_per_joule{tag}"), e.ops_per_joule));
    }
    if let Some(t) = &p.telemetry {
        // A window too short for CPU shares has no process CPU % either.
        let cpu_resolved = !t.unavailable.contains_key("cpu");
        if let Some(c) = t
            .process
            .as_ref()
            .map(|p| p.cpu_pct)
            .filter(|_| cpu_resolved)
        {
            m.push(("kvmeter_cpu_pct".to_string(), c));
        }
        if let Some(c) = t
            .server
            .as_ref()
            .map(|p| p.cpu_pct)
            .filter(|_| cpu_resolved)
        {
            m.push(("server_cpu_pct".to_string(), c));
        }
        if let Some(c) = &t.cpu {
            m.push(("cpu_busy_pct".to_string(), c.busy));
            m.push(("cpu_iowait_pct".to_string(), c.iowait));
        }
        if let Some(d) = &t.disk {
            m.push(("disk_util_pct".to_string(), d.util_pct));
            m.push(("disk_write_mb_per_s".to_string(), d.write_mb_per_s));
        }
        if let Some(c) = &t.counters {
            for (k, v) in [
                ("ipc", c.ipc),
                ("branch_miss_ratio", c.branch_miss_ratio),
                ("llc_miss_ratio", c.llc_miss_ratio),
            ] {
                if let Some(v) = v {
                    m.push((k.to_string(), v));
                }
            }
        }
    }
    m
}

/// What the store did and wrote (issue 43): the kernel's write and read amplification as the
/// phase reports them, the same write figure over kvmeter's own bytes (one base for every
/// store: what a comparison of stores divides), the store's own write amplification and
/// cache hit ratio, the size on disk, and each counter of the store's work, storage writes
/// and stalls (`store_<name>`: its increase over the phase) and event (`store_event_<name>`).
fn inside_the_store(p: &PhaseSummary, m: &mut Vec<(String, f64)>) {
    let mut put = |name: String, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            m.push((name, v));
        }
    };
    if let Some(io) = &p.storage_io {
        put("write_amplification".into(), io.write_amplification);
        put("read_amplification".into(), io.read_amplification);
        put(
            "write_amplification_over_kvmeter_bytes".into(),
            io.kvmeter_write_amplification,
        );
        put(
            "on_disk_mb".into(),
            io.on_disk_bytes.map(|b| b as f64 / 1e6),
        );
        let mb = |b: Option<u64>| b.map(|b| b as f64 / 1e6);
        put("storage_write_mb".into(), mb(io.write_bytes));
        put("kvmeter_write_mb".into(), mb(io.kvmeter_write_bytes));
        put("kernel_over_store".into(), io.kernel_over_store);
        put("space_amplification".into(), io.space_amplification);
    }
    if let Some(s) = &p.store_stats {
        put("store_write_amplification".into(), s.write_amplification);
        put("cache_hit_ratio".into(), s.cache_hit_ratio);
        for (name, f) in &s.stats {
            let counted = matches!(f.role.as_deref(), Some("work" | "storage_write" | "stall"));
            if counted {
                put(format!("store_{name}"), f.increase.map(|v| v as f64));
            }
        }
        for (name, n) in &s.events {
            put(format!("store_event_{name}"), Some(*n as f64));
        }
    }
}

/// Where the CPU went (issue 44): costs per operation (`cpu_us_per_op`, `cycles_per_op`, …)
/// and, with `--profile`, each group's share of the samples (`profile_store_foreground_pct`;
/// a group with too few samples has none).
fn costs(p: &PhaseSummary, m: &mut Vec<(String, f64)>) {
    let mut put = |name: &str, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            m.push((name.to_string(), v));
        }
    };
    if let Some(c) = &p.per_op {
        put("cpu_us_per_op", c.cpu_us);
        put("server_cpu_us_per_op", c.server_cpu_us);
        put("context_switches_per_op", c.context_switches);
        put("storage_write_bytes_per_op", c.storage_write_bytes);
        put("cycles_per_op", c.cycles);
        put("instructions_per_op", c.instructions);
    }
    if let Some(f) = p.telemetry.as_ref().and_then(|t| t.profile.as_ref()) {
        for (group, g) in &f.groups {
            put(
                &format!("profile_{}_pct", group.replace('-', "_")),
                g.share_pct,
            );
        }
    }
}

#[derive(Serialize)]
struct PointResult {
    point: usize,
    params: BTreeMap<String, String>,
    runs: Vec<String>,
    statuses: Vec<String>,
    /// phase → metric → spread over the repetitions.
    phases: BTreeMap<String, BTreeMap<String, Spread>>,
}

#[derive(Serialize)]
struct SweepResult<'a> {
    schema: &'static str,
    status: &'a str,
    store: &'a str,
    params: &'a [Param],
    repeat: usize,
    confidence: &'static str,
    points: &'a [PointResult],
}

/// Aggregates completed runs' summaries: phase → metric → spread.
pub fn aggregate(summaries: &[Summary]) -> BTreeMap<String, BTreeMap<String, Spread>> {
    let mut values: BTreeMap<String, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    for s in summaries {
        for p in s
            .phases
            .iter()
            .filter(|p| p.kind != crate::plan::PhaseKind::Clear)
        {
            for (k, v) in metrics_of(p) {
                values
                    .entry(p.name.clone())
                    .or_default()
                    .entry(k)
                    .or_default()
                    .push(v);
            }
        }
    }
    values
        .into_iter()
        .map(|(ph, m)| {
            (
                ph,
                m.into_iter().map(|(k, v)| (k, Spread::of(&v))).collect(),
            )
        })
        .collect()
}

fn label(params: &[(String, String)]) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=.,-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Checks every point's plan without running or creating anything.
pub fn check(base: &Request, params: &[Param], repeat: usize) -> Result<(), UsageError> {
    if repeat == 0 {
        return Err(UsageError::new("--repeat 0: expected at least 1"));
    }
    if params.is_empty() {
        return Err(UsageError::new(format!(
            "--param: give at least one, e.g. --param threads=1,2,4 (names: {PARAMS_HELP})"
        )));
    }
    for p in &points(params) {
        let mut r = base.clone();
        for (k, v) in p {
            apply(&mut r, k, v)?;
        }
        crate::plan::build(&r)
            .map_err(|e| UsageError::new(format!("sweep point {}: {}", label(p), e.0)))?;
    }
    Ok(())
}

pub fn run(
    base: &Request,
    out: Option<&Path>,
    params: Vec<Param>,
    repeat: usize,
) -> anyhow::Result<i32> {
    // Every point's plan is checked before anything runs or any directory exists.
    check(base, &params, repeat)?;
    let pts = points(&params);
    let root = super::experiment_dir(out, "sweep", &base.store)?;
    errln!(
        "sweep: {} point{} × {repeat} run{} on {}; results in {}",
        pts.len(),
        if pts.len() == 1 { "" } else { "s" },
        if repeat == 1 { "" } else { "s" },
        base.store,
        root.display()
    );
    let interrupted = crate::driver::install_signals();
    let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    let mut index = format!("point,repetition,{},status,run_dir\n", names.join(","));
    let mut results: Vec<PointResult> = Vec::new();
    let mut status = "completed".to_string();
    // sweep.json says `running` until the sweep ends; a guard marks it failed if kvmeter does
    // not get to say how it ended.
    write_results(&root, base, &params, repeat, "running", &results)?;
    let _outer = crate::report::current::open_outer(&root);
    'points: for (i, p) in pts.iter().enumerate() {
        let mut summaries = Vec::new();
        let mut pr = PointResult {
            point: i + 1,
            params: p.iter().cloned().collect(),
            runs: vec![],
            statuses: vec![],
            phases: BTreeMap::new(),
        };
        for k in 1..=repeat {
            let dir = root
                .join("points")
                .join(format!("{:02}-{}", i + 1, safe(&label(p))))
                .join(format!("r{k}"));
            let mut r = base.clone();
            r.command = "sweep".into();
            for (name, v) in p {
                apply(&mut r, name, v)?;
            }
            // Repetitions of a seeded sweep get their own streams (seed + repetition − 1).
            r.seed = base.seed.map(|s| s.wrapping_add(k as u64 - 1));
            errln!(
                "sweep: point {}/{} ({}), run {k}/{repeat}",
                i + 1,
                pts.len(),
                label(p)
            );
            let (code, summary) = run_point(&r, &dir)?;
            let _ = writeln!(
                index,
                "{},{k},{},{},{}",
                i + 1,
                p.iter()
                    .map(|(_, v)| v.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                summary.status,
                dir.display()
            );
            write_atomic(&root.join("index.csv"), index.as_bytes())?;
            pr.runs.push(dir.display().to_string());
            pr.statuses.push(summary.status.name().to_string());
            if code == EXIT_OK {
                summaries.push(summary);
            }
            if code == EXIT_INTERRUPTED || interrupted.load(std::sync::atomic::Ordering::Relaxed) {
                status = "interrupted".into();
                pr.phases = aggregate(&summaries);
                results.push(pr);
                break 'points;
            }
        }
        pr.phases = aggregate(&summaries);
        results.push(pr);
        write_results(&root, base, &params, repeat, "running", &results)?;
    }
    write_results(&root, base, &params, repeat, &status, &results)?;
    if let Err(e) = crate::report::html::write(&root) {
        errln!("warning: report.html was not written: {e:#}");
    }
    out!("{}", render(&results, &names));
    errln!("results: {}", root.display());
    let failed = results
        .iter()
        .any(|r| r.statuses.iter().any(|s| s == "failed"));
    Ok(if status == "interrupted" {
        EXIT_INTERRUPTED
    } else if failed {
        crate::error::EXIT_FAILED
    } else {
        EXIT_OK
    })
}

fn write_results(
    root: &Path,
    base: &Request,
    params: &[Param],
    repeat: usize,
    status: &str,
    results: &[PointResult],
) -> anyhow::Result<()> {
    let r = SweepResult {
        schema: "kvmeter-sweep/2",
        status,
        store: &base.store,
        params,
        repeat,
        confidence: CONFIDENCE,
        points: results,
    };
    write_atomic(
        &root.join("sweep.json"),
        (serde_json::to_string_pretty(&r)? + "\n").as_bytes(),
    )?;
    let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    let mut csv = format!(
        "point,{},phase,metric,n,mean,stddev,geomean,geomean_ci95_low,geomean_ci95_high\n",
        names.join(",")
    );
    let opt = |x: Option<f64>| x.map(|v| format!("{v:.6}")).unwrap_or_default();
    for pr in results {
        let vals: Vec<&str> = names
            .iter()
            .map(|n| pr.params.get(*n).map(String::as_str).unwrap_or(""))
            .collect();
        for (ph, m) in &pr.phases {
            for (k, s) in m {
                let _ = writeln!(
                    csv,
                    "{},{},{ph},{k},{},{:.6},{},{},{},{}",
                    pr.point,
                    vals.join(","),
                    s.n,
                    s.mean,
                    opt(s.stddev),
                    opt(s.geomean),
                    opt(s.geomean_ci95_low),
                    opt(s.geomean_ci95_high)
                );
            }
        }
    }
    write_atomic(&root.join("sweep.csv"), csv.as_bytes())
}

/// A figure with 3 or more significant digits.
fn sig(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// Per point: each run phase's throughput and p99: the geometric mean and its 95 % interval
/// (on logarithms, so not symmetric), or the mean and why there is no interval.
fn render(results: &[PointResult], names: &[&str]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<4} {:<28} {:<8} {:>4} {:>28} {:>28}",
        "pt",
        names.join(","),
        "phase",
        "n",
        "ops/s geomean (95 % CI)",
        "p99 µs geomean (95 % CI)"
    );
    let pm = |s: Option<&Spread>| -> String {
        match s {
            Some(s) => match (s.geomean, s.geomean_ci95_low, s.geomean_ci95_high) {
                (Some(g), Some(l), Some(h)) => format!("{} ({}–{})", sig(g), sig(l), sig(h)),
                (Some(g), _, _) if s.n < 2 => format!("{} (too few repeats)", sig(g)),
                _ => format!("mean {} (no CI)", sig(s.mean)),
            },
            None => "-".into(),
        }
    };
    for r in results {
        let vals: Vec<&str> = names
            .iter()
            .map(|n| r.params.get(*n).map(String::as_str).unwrap_or(""))
            .collect();
        for (ph, m) in r.phases.iter().filter(|(ph, _)| !ph.starts_with("load")) {
            let _ = writeln!(
                out,
                "  {:<4} {:<28} {:<8} {:>4} {:>28} {:>28}",
                r.point,
                vals.join(","),
                ph,
                m.get("throughput_ops_per_s").map(|s| s.n).unwrap_or(0),
                pm(m.get("throughput_ops_per_s")),
                pm(m.get("latency_p99_us"))
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_the_cartesian_product_in_order() {
        let a = Param::parse("threads=1,2").unwrap();
        let b = Param::parse("store-opt.block_cache_mb=8,64,512").unwrap();
        let p = points(&[a, b]);
        assert_eq!(p.len(), 6);
        assert_eq!(label(&p[0]), "threads=1,store-opt.block_cache_mb=8");
        assert_eq!(label(&p[5]), "threads=2,store-opt.block_cache_mb=512");
    }

    #[test]
    fn parameters_map_onto_the_request() {
        let mut r = Request::default();
        apply(&mut r, "threads-per-cpu", "4").unwrap();
        assert_eq!(r.threads, Some(4 * crate::machine::cpu_count() as i64));
        apply(&mut r, "connections", "1000").unwrap();
        apply(&mut r, "depth", "4").unwrap();
        assert_eq!((r.connections, r.depth), (Some(1000), Some(4)));
        assert_eq!(r.threads, Some(4 * crate::machine::cpu_count() as i64));
        apply(&mut r, "value-size", "4096").unwrap();
        assert_eq!(r.props, ["fieldcount=1", "fieldlength=4096"]);
        apply(&mut r, "store-opt.block_cache_mb", "64").unwrap();
        assert_eq!(r.store_opts, ["block_cache_mb=64"]);
        apply(&mut r, "rate", "2500").unwrap();
        assert_eq!(r.rate, Some(2500.0));
        for (n, v) in [
            ("threads", "0"),
            ("rate", "-1"),
            ("colour", "red"),
            ("p.", "1"),
        ] {
            assert!(apply(&mut Request::default(), n, v).is_err(), "{n}={v}");
        }
        assert!(Param::parse("threads").is_err());
        assert!(Param::parse("threads=").is_err());
    }
}
