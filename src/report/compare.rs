//! `kvmeter compare A... --vs B...`: a baseline against a candidate, each one run or a set of
//! repeated runs, without running anything. First like with like: the manifests are compared
//! (store and version, options, workload, threads, machine, clock) and every difference is
//! named. Then per phase and metric: medians, the ratio B/A with a bootstrap 95 % interval, a
//! test (Mann–Whitney with ≥ 4 runs a side; Welch's t, labelled, with 2–3; none from single
//! runs — interval rows are autocorrelated and are not samples), Holm's correction over all
//! rows, and a verdict only when significant and outside the noise band (benchstat's rule).

use super::chart::{escape, short};
use super::stats;
use super::Summary;
use crate::error::UsageError;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The metrics compared, with whether higher is better.
pub const METRICS: [(&str, bool); 7] = [
    ("ops_per_s", true),
    ("p50_us", false),
    ("p99_us", false),
    ("p99_9_us", false),
    ("error_rate", false),
    ("ops_per_joule", true),
    ("cpu_s_per_op", false),
];

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub phase: String,
    pub metric: String,
    pub higher_is_better: bool,
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    pub median_a: f64,
    pub median_b: f64,
    /// median B / median A.
    pub ratio: f64,
    pub ratio_ci95: Option<(f64, f64)>,
    pub test: String,
    pub p: Option<f64>,
    /// Holm-adjusted over every tested row.
    pub p_adjusted: Option<f64>,
    /// better, worse, no difference, or why there is no verdict.
    pub verdict: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub schema: &'static str,
    pub a_runs: Vec<String>,
    pub b_runs: Vec<String>,
    pub noise_band: f64,
    /// Manifest fields that differ between the runs, as "field: values".
    pub mismatches: Vec<String>,
    pub rows: Vec<Row>,
}

/// Run directories named by the arguments: a run directory itself, or each run directory
/// directly inside a directory (the points of a sweep, a folder of repetitions).
pub fn collect(args: &[PathBuf], side: &str) -> Result<Vec<PathBuf>, UsageError> {
    let mut out = vec![];
    for a in args {
        if a.join("summary.json").is_file() {
            out.push(a.clone());
            continue;
        }
        let entries = std::fs::read_dir(a).map_err(|e| {
            UsageError::new(format!("{side} {}: {e}; give run directories", a.display()))
        })?;
        let mut inner: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("summary.json").is_file())
            .collect();
        inner.sort();
        if inner.is_empty() {
            return Err(UsageError::new(format!(
                "{side} {}: not a run directory (no summary.json in it or in its subdirectories)",
                a.display()
            )));
        }
        out.extend(inner);
    }
    Ok(out)
}

fn load(dir: &Path) -> Result<(Summary, Value), UsageError> {
    let read = |f: &str| -> Result<String, UsageError> {
        std::fs::read_to_string(dir.join(f)).map_err(|e| {
            UsageError::new(format!(
                "{}: {e}; a finished run directory holds manifest.json and summary.json",
                dir.join(f).display()
            ))
        })
    };
    let s: Summary = serde_json::from_str(&read("summary.json")?)
        .map_err(|e| UsageError::new(format!("{}: {e}", dir.join("summary.json").display())))?;
    let m: Value = serde_json::from_str(&read("manifest.json")?)
        .map_err(|e| UsageError::new(format!("{}: {e}", dir.join("manifest.json").display())))?;
    Ok((s, m))
}

/// A metric of a phase, where the phase has it.
fn metric(p: &super::PhaseSummary, name: &str) -> Option<f64> {
    let all = p.all_ops.as_ref();
    match name {
        "ops_per_s" => Some(p.throughput_ops_per_s),
        "p50_us" => all.map(|a| a.latency_us.p50),
        "p99_us" => all.map(|a| a.latency_us.p99),
        "p99_9_us" => all.map(|a| a.latency_us.p99_9),
        "error_rate" => (p.operations > 0).then(|| p.errors as f64 / p.operations as f64),
        "ops_per_joule" => p.energy.as_ref().map(|e| e.ops_per_joule),
        "cpu_s_per_op" => {
            let cpu = p.telemetry.as_ref()?.process.as_ref()?.cpu_pct;
            (p.operations > 0).then(|| cpu / 100.0 * p.measured_seconds / p.operations as f64)
        }
        _ => None,
    }
}

/// The manifest fields that must match for a fair comparison.
fn identity(m: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut put = |k: &str, v: &Value| {
        out.insert(k.to_string(), v.to_string());
    };
    put("store", &m["store"]["name"]);
    put("store version", &m["store"]["version"]);
    if let Some(o) = m["store"]["options"].as_object() {
        for (k, v) in o {
            if k != "addr" {
                put(&format!("store option {k}"), v);
            }
        }
    }
    put("server version", &m["store"]["server"]["version"]);
    put("machine cpu", &m["machine"]["cpu_model"]);
    put("machine cpus", &m["machine"]["logical_cpus"]);
    put("machine kernel", &m["machine"]["kernel"]);
    put("clock", &m["measurement"]["clock"]);
    put("kvmeter", &m["kvmeter_version"]);
    for ph in m["plan"]["phases"].as_array().cloned().unwrap_or_default() {
        let name = ph["name"].as_str().unwrap_or("?").to_string();
        put(&format!("phase {name} threads"), &ph["threads"]);
        put(&format!("phase {name} operations"), &ph["operations"]);
        put(&format!("phase {name} duration"), &ph["duration"]);
        put(&format!("phase {name} target"), &ph["target"]);
        if let Some(w) = ph["workload"].as_object() {
            for (k, v) in w {
                put(&format!("phase {name} workload {k}"), v);
            }
        }
    }
    out
}

fn mismatches(a: &[Value], b: &[Value]) -> Vec<String> {
    let ids_a: Vec<_> = a.iter().map(identity).collect();
    let ids_b: Vec<_> = b.iter().map(identity).collect();
    let mut keys: Vec<&String> = ids_a.iter().chain(&ids_b).flat_map(|m| m.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = vec![];
    for k in keys {
        let vals = |ids: &[BTreeMap<String, String>]| -> Vec<String> {
            let mut v: Vec<String> = ids
                .iter()
                .map(|m| m.get(k).cloned().unwrap_or_else(|| "(absent)".into()))
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let (va, vb) = (vals(&ids_a), vals(&ids_b));
        if va != vb || va.len() > 1 {
            out.push(format!("{k}: A {} — B {}", va.join(" | "), vb.join(" | ")));
        }
    }
    out
}

/// Compares the runs; `only` keeps the named metrics (all when empty).
pub fn compare(
    a: &[PathBuf],
    b: &[PathBuf],
    noise_band: f64,
    only: &[String],
) -> Result<Comparison, UsageError> {
    for m in only {
        if !METRICS.iter().any(|(n, _)| n == m) {
            return Err(UsageError::new(format!(
                "--metric {m}: unknown metric; expected one of {}",
                METRICS.map(|m| m.0).join(", ")
            )));
        }
    }
    let la = a.iter().map(|d| load(d)).collect::<Result<Vec<_>, _>>()?;
    let lb = b.iter().map(|d| load(d)).collect::<Result<Vec<_>, _>>()?;
    let phases: Vec<String> = la[0]
        .0
        .phases
        .iter()
        .filter(|p| p.kind != crate::plan::PhaseKind::Clear)
        .map(|p| p.name.clone())
        .collect();
    let mut rows = vec![];
    for phase in &phases {
        for (name, higher) in METRICS {
            if !only.is_empty() && !only.iter().any(|o| o == name) {
                continue;
            }
            let values = |side: &[(Summary, Value)]| -> Vec<f64> {
                side.iter()
                    .filter_map(|(s, _)| s.phases.iter().find(|p| &p.name == phase))
                    .filter_map(|p| metric(p, name))
                    .filter(|v| v.is_finite())
                    .collect()
            };
            let (va, vb) = (values(&la), values(&lb));
            if va.is_empty() || vb.is_empty() {
                continue;
            }
            rows.push(row(phase, name, higher, va, vb));
        }
    }
    let tested: Vec<usize> = (0..rows.len()).filter(|i| rows[*i].p.is_some()).collect();
    let adjusted = stats::holm(
        &tested
            .iter()
            .map(|i| rows[*i].p.unwrap())
            .collect::<Vec<_>>(),
    );
    for (k, i) in tested.iter().enumerate() {
        let r = &mut rows[*i];
        r.p_adjusted = Some(adjusted[k]);
        r.verdict = verdict(r, noise_band);
    }
    Ok(Comparison {
        schema: "kvmeter-compare/1",
        a_runs: a.iter().map(|p| p.display().to_string()).collect(),
        b_runs: b.iter().map(|p| p.display().to_string()).collect(),
        noise_band,
        mismatches: mismatches(
            &la.iter().map(|x| x.1.clone()).collect::<Vec<_>>(),
            &lb.iter().map(|x| x.1.clone()).collect::<Vec<_>>(),
        ),
        rows,
    })
}

fn row(phase: &str, name: &str, higher: bool, a: Vec<f64>, b: Vec<f64>) -> Row {
    let (ma, mb) = (stats::median(&a), stats::median(&b));
    let n = a.len().min(b.len());
    let (test, p, verdict) = if n >= 4 {
        (
            "Mann-Whitney U",
            Some(stats::mann_whitney(&a, &b)),
            String::new(),
        )
    } else if n >= 2 {
        (
            "Welch t (2-3 runs: assumes normal; rank test needs 4)",
            Some(stats::welch(&a, &b)),
            String::new(),
        )
    } else {
        (
            "none",
            None,
            "no verdict: single run on a side (repeat the runs)".to_string(),
        )
    };
    Row {
        phase: phase.to_string(),
        metric: name.to_string(),
        higher_is_better: higher,
        ratio: if ma != 0.0 { mb / ma } else { f64::NAN },
        ratio_ci95: stats::ratio_ci(&a, &b),
        a,
        b,
        median_a: ma,
        median_b: mb,
        test: test.to_string(),
        p,
        p_adjusted: None,
        verdict,
    }
}

fn verdict(r: &Row, band: f64) -> String {
    let p = r.p_adjusted.unwrap_or(1.0);
    let change = r.ratio - 1.0;
    if p.is_nan() || p >= 0.05 {
        return "no difference".into();
    }
    if change.abs() <= band || !change.is_finite() {
        return format!(
            "no difference (significant, within the ±{:.0} % noise band)",
            band * 100.0
        );
    }
    let up = change > 0.0;
    if up == r.higher_is_better {
        "better"
    } else {
        "worse"
    }
    .into()
}

impl Comparison {
    pub fn regressed(&self) -> bool {
        self.rows.iter().any(|r| r.verdict == "worse")
    }

    /// The terminal table.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "A: {} run(s), B: {} run(s); verdicts need p < 0.05 after Holm's correction and a change beyond ±{:.0} %",
            self.a_runs.len(),
            self.b_runs.len(),
            self.noise_band * 100.0
        );
        let _ = writeln!(
            out,
            "  {:<10} {:<14} {:>12} {:>12} {:>8} {:>17} {:>9}  verdict",
            "phase", "metric", "median A", "median B", "B/A", "95 % CI", "p (adj)"
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "  {:<10} {:<14} {:>12} {:>12} {:>8} {:>17} {:>9}  {}",
                r.phase,
                r.metric,
                short(r.median_a),
                short(r.median_b),
                format!("{:.3}", r.ratio),
                r.ratio_ci95
                    .map(|(l, h)| format!("{l:.3}–{h:.3}"))
                    .unwrap_or_else(|| "-".into()),
                r.p_adjusted
                    .map(|p| format!("{p:.3}"))
                    .unwrap_or_else(|| "-".into()),
                r.verdict
            );
        }
        out
    }

    /// compare.html (the report's page, so the same policy and style): the verdict table,
    /// a forest plot of the ratios, and the first run of each side overlaid (throughput per
    /// interval, latency by percentile).
    pub fn html(&self) -> String {
        use super::html::{Cell, Page};
        let mut p = Page::new("kvmeter compare");
        p.note(
            "na",
            &format!(
                "A: {} run(s); B: {} run(s).",
                self.a_runs.len(),
                self.b_runs.len()
            ),
        );
        match self.mismatches.as_slice() {
            [] => p.note(
                "na",
                "The manifests match (store, version, options, workload, threads, machine, clock).",
            ),
            [one] => p.note(
                "na",
                &format!("The one difference (the variable under test): {one}"),
            ),
            many => {
                for m in many {
                    p.note("warn", &format!("Not like with like: {m}"));
                }
            }
        }
        let rows: Vec<Vec<Cell>> = self
            .rows
            .iter()
            .map(|r| {
                let key = format!("{}.{}", r.phase, r.metric);
                vec![
                    Cell::text(r.phase.clone()),
                    Cell::text(r.metric.clone()),
                    Cell::text(short(r.median_a)),
                    Cell::text(short(r.median_b)),
                    Cell::num(&key, r.ratio, format!("{:.3}", r.ratio)),
                    Cell::text(
                        r.p_adjusted
                            .map(|p| format!("{p:.3}"))
                            .unwrap_or_else(|| "-".into()),
                    ),
                    Cell::text(r.verdict.clone()),
                ]
            })
            .collect();
        p.table(
            "compare",
            &[
                "phase", "metric", "median A", "median B", "B/A", "p (Holm)", "verdict",
            ],
            &rows,
        );
        p.figure(
            "compare-forest",
            self.forest(),
            "B/A with its 95 % bootstrap interval; green better, red worse.",
        );
        for (id, svg) in self.overlays() {
            p.figure(&id, svg, "The first run of each side; B dashed.");
        }
        p.html(None)
    }

    /// The first run of each side overlaid, per phase: throughput per interval and latency by
    /// percentile (measured window).
    fn overlays(&self) -> Vec<(String, String)> {
        use super::chart::{LineChart, Scale, Series};
        use super::rundata::RunData;
        let (Some(a), Some(b)) = (self.a_runs.first(), self.b_runs.first()) else {
            return vec![];
        };
        let (Ok(a), Ok(b)) = (RunData::load(Path::new(a)), RunData::load(Path::new(b))) else {
            return vec![];
        };
        let mut out = vec![];
        for phase in a.phase_names() {
            let mut t = LineChart::new(
                &format!("compare-{phase}-throughput"),
                &format!("{phase}: throughput per interval, first run of each side"),
                "time since the phase started (s)",
                "operations/s",
            );
            let mut sp = LineChart::new(
                &format!("compare-{phase}-spectrum"),
                &format!("{phase}: latency by percentile, first run of each side"),
                "percentile",
                "latency (log scale)",
            )
            .latency_y();
            sp.x_scale = Scale::Percentile;
            for (side, d) in [("A", &a), ("B", &b)] {
                let warmup = d.phase(&phase).map(|p| p.warmup_seconds).unwrap_or(0.0);
                let mut per: BTreeMap<i64, (f64, f64)> = BTreeMap::new();
                for m in d.metrics(&phase) {
                    for r in d.series(&phase, &m) {
                        let e = per
                            .entry((r.start_s * 1000.0) as i64)
                            .or_insert(((r.start_s + r.end_s) / 2.0, 0.0));
                        e.1 += r.ops_per_s;
                    }
                    if let Some(h) = d.histogram(&phase, &m, warmup) {
                        let mut s =
                            Series::new(&format!("{side} {m}"), super::html::spectrum_points(&h));
                        s.dashed = side == "B";
                        sp.series.push(s);
                    }
                }
                let mut s = Series::new(side, super::html::downsample(per.into_values().collect()));
                s.dashed = side == "B";
                t.series.push(s);
            }
            out.push((t.id.clone(), t.svg()));
            if !sp.series.is_empty() {
                out.push((sp.id.clone(), sp.svg()));
            }
        }
        out
    }

    /// Ratios with their intervals, one line per row, around 1.
    fn forest(&self) -> String {
        let n = self.rows.len().max(1) as f64;
        let (w, h, ml, mr) = (760.0, 30.0 + 18.0 * n, 220.0, 40.0);
        let lo = self
            .rows
            .iter()
            .filter_map(|r| r.ratio_ci95.map(|c| c.0).or(Some(r.ratio)))
            .filter(|x| x.is_finite())
            .fold(0.9f64, f64::min);
        let hi = self
            .rows
            .iter()
            .filter_map(|r| r.ratio_ci95.map(|c| c.1).or(Some(r.ratio)))
            .filter(|x| x.is_finite())
            .fold(1.1f64, f64::max);
        let x = |v: f64| ml + (w - ml - mr) * (v - lo) / (hi - lo);
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-figure=\"compare-forest\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\"><title>B/A with 95 % intervals</title><line x1=\"{:.1}\" y1=\"10\" x2=\"{:.1}\" y2=\"{h}\" stroke=\"#888\"/>",
            x(1.0),
            x(1.0)
        );
        for (i, r) in self.rows.iter().enumerate() {
            let y = 24.0 + 18.0 * i as f64;
            let color = match r.verdict.as_str() {
                "better" => "#2ca02c",
                "worse" => "#d62728",
                _ => "#555",
            };
            let _ = write!(
                s,
                "<g class=\"series\" data-series=\"{} {}\"><text x=\"4\" y=\"{:.1}\">{} {}</text>",
                escape(&r.phase),
                escape(&r.metric),
                y + 4.0,
                escape(&r.phase),
                escape(&r.metric)
            );
            if let Some((l, h2)) = r.ratio_ci95 {
                let _ = write!(
                    s,
                    "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{color}\"/>",
                    x(l),
                    x(h2)
                );
            }
            if r.ratio.is_finite() {
                let _ = write!(
                    s,
                    "<circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"{color}\"><title>{}: B/A {:.3}, {}</title></circle>",
                    x(r.ratio),
                    escape(&r.metric),
                    r.ratio,
                    escape(&r.verdict)
                );
            }
            s.push_str("</g>");
        }
        s.push_str("</svg>");
        s
    }
}
