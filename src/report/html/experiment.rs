//! Reports of experiment directories. A sweep: each metric against the swept parameter, one
//! line per phase, with 95 % confidence-interval whiskers (papers/000 Fig. 7 and 8: throughput
//! against threads, tail latency against threads per CPU, the block cache sweep). A capacity
//! search: latency from intended start against offered load with the SLO and the capacity
//! marked (papers/003 Fig. 6(d)). Both link each point's own run report.

use super::{Cell, Page};
use crate::error::UsageError;
use crate::report::chart::ticks::micros;
use crate::report::chart::{short, LineChart, Series};
use crate::report::names;
use serde_json::Value;
use std::path::Path;

fn read(path: &Path) -> anyhow::Result<Value> {
    let t = std::fs::read_to_string(path)
        .map_err(|e| UsageError::new(format!("{}: cannot read it: {e}", path.display())))?;
    serde_json::from_str(&t)
        .map_err(|e| UsageError::new(format!("{}: not valid JSON ({e})", path.display())).into())
}

/// Metrics drawn for a sweep, in this order, where the points have them.
const SWEEP_METRICS: [&str; 6] = [
    "throughput_ops_per_s",
    "latency_avg_us",
    "latency_p99_us",
    "latency_p99_9_us",
    "intended_p99_us",
    "ops_per_joule",
];

pub(super) fn sweep(dir: &Path) -> anyhow::Result<(Page, Option<Value>)> {
    let s = read(&dir.join("sweep.json"))?;
    let params: Vec<String> = s["params"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut p = Page::new(&format!(
        "kvmeter sweep of {} on {}",
        params.join(" × "),
        s["store"].as_str().unwrap_or("?")
    ));
    if s["status"] != "completed" {
        p.note("partial", &format!("Sweep status: {}", s["status"]));
    }
    p.note(
        "na",
        &format!(
            "{} runs per point; whiskers: {}.",
            s["repeat"],
            s["confidence"].as_str().unwrap_or("")
        ),
    );
    let points = s["points"].as_array().cloned().unwrap_or_default();
    let first = params.first().cloned().unwrap_or_default();
    for metric in SWEEP_METRICS {
        let label = &names::name(metric);
        let lines = sweep_lines(&points, &params, metric);
        if lines.is_empty() {
            continue;
        }
        let mut chart = LineChart::new(
            &format!("sweep-{metric}"),
            &format!("{label} against {}", names::name(&first)),
            &names::name(&first),
            label,
        );
        if metric.starts_with("ops_per_joule")
            && points
                .iter()
                .any(|pt| pt.to_string().contains("ops_per_joule_estimate"))
        {
            chart.title.push_str(" (ESTIMATE)");
        }
        chart.series = lines;
        p.figure(&chart.id.clone(), chart.svg(), &format!("Mean over the repetitions of each point, with the 95 % confidence interval; x is {first}."));
    }
    p.h2("Points");
    let mut rows = vec![];
    for pt in &points {
        let params_text: Vec<String> = params
            .iter()
            .map(|k| format!("{k}={}", pt["params"][k].as_str().unwrap_or("")))
            .collect();
        let runs: Vec<String> = pt["runs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|r| r.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        rows.push(vec![
            Cell::text(pt["point"].to_string()),
            Cell::text(params_text.join(", ")),
            Cell::text(
                runs.iter()
                    .map(|r| rel(dir, r))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        ]);
    }
    p.table(
        "points",
        &[
            "point",
            "parameters",
            "run directories (each has its own report.html)",
        ],
        &rows,
    );
    Ok((p, Some(s)))
}

/// One line per phase and value of the other parameters: x is the first parameter's value
/// (numeric where it parses, else the point's position), y the mean with its CI whiskers.
fn sweep_lines(points: &[Value], params: &[String], metric: &str) -> Vec<Series> {
    let first = params.first().cloned().unwrap_or_default();
    let x_of = |pt: &Value, i: usize| -> f64 {
        pt["params"][&first]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(i as f64)
    };
    let line_of = |pt: &Value, phase: &str| -> String {
        let rest: Vec<String> = params[1.min(params.len())..]
            .iter()
            .map(|k| format!("{k}={}", pt["params"][k].as_str().unwrap_or("")))
            .collect();
        if rest.is_empty() {
            phase.to_string()
        } else {
            format!("{phase} {}", rest.join(","))
        }
    };
    let mut lines: Vec<Series> = vec![];
    for (i, pt) in points.iter().enumerate() {
        let Some(phases) = pt["phases"].as_object() else {
            continue;
        };
        for (phase, m) in phases {
            let key = if m.get(metric).is_some() {
                metric.to_string()
            } else {
                format!("{metric}_estimate")
            };
            let Some(sp) = m.get(&key) else { continue };
            let Some(mean) = sp["mean"].as_f64() else {
                continue;
            };
            let name = line_of(pt, phase);
            let idx = match lines.iter().position(|l| l.name == name) {
                Some(j) => j,
                None => {
                    let mut s = Series::new(&name, vec![]);
                    s.markers = true;
                    lines.push(s);
                    lines.len() - 1
                }
            };
            lines[idx].points.push((x_of(pt, i), mean));
            lines[idx]
                .whiskers
                .push(sp["ci95_low"].as_f64().zip(sp["ci95_high"].as_f64()));
        }
    }
    lines
}

/// A run directory's path relative to the experiment's, as the report shows it.
fn rel(dir: &Path, run: &str) -> String {
    Path::new(run)
        .strip_prefix(dir)
        .map(|r| r.display().to_string())
        .unwrap_or_else(|_| run.to_string())
}

pub(super) fn capacity(dir: &Path) -> anyhow::Result<(Page, Option<Value>)> {
    let c = read(&dir.join("capacity.json"))?;
    let mut p = Page::new(&format!(
        "kvmeter capacity of {} at {}",
        c["store"].as_str().unwrap_or("?"),
        c["slo_text"].as_str().unwrap_or("")
    ));
    p.note(
        // A capacity that is only a bound is flagged like a partial result.
        if c["status"] == "completed"
            && c["capacity_bound"] != "lower"
            && c["capacity_bound"] != "upper"
        {
            "na"
        } else {
            "partial"
        },
        &format!(
            "Search {}: {}",
            c["status"].as_str().unwrap_or("?"),
            c["note"].as_str().unwrap_or("")
        ),
    );
    let mut sorted = c["points"].as_array().cloned().unwrap_or_default();
    sort_by_offered(&mut sorted);
    p.figure("capacity-curve", capacity_curve(&c), "Each point is one run (its own directory); the capacity is the highest offered load that met the SLO (papers/003).");
    let rows: Vec<Vec<Cell>> = sorted
        .iter()
        .map(|pt| {
            let n = |k: &str| pt[k].as_f64().map(short).unwrap_or_else(|| "-".into());
            vec![
                Cell::text(n("offered_ops_per_s")),
                Cell::text(n("achieved_ops_per_s")),
                Cell::text(if pt["kept_up"] == true { "yes" } else { "NO" }),
                Cell::text(n("mean_us")),
                Cell::text(n("p50_us")),
                Cell::text(n("p99_us")),
                Cell::text(rel(dir, pt["run_dir"].as_str().unwrap_or(""))),
            ]
        })
        .collect();
    p.table(
        "points",
        &[
            "offered/s",
            "achieved/s",
            "kept",
            "mean µs",
            "p50 µs",
            "p99 µs",
            "run directory",
        ],
        &rows,
    );
    Ok((p, Some(c)))
}

fn sort_by_offered(points: &mut [Value]) {
    points.sort_by(|a, b| {
        a["offered_ops_per_s"]
            .as_f64()
            .partial_cmp(&b["offered_ops_per_s"].as_f64())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
}

/// Latency from intended start against offered load (log scale) with the SLO bounds and the
/// capacity marked, from capacity.json's content: the report's figure and capacity's own
/// curve.svg are this one drawing. Points without operations have no latency and are left out.
pub fn capacity_curve(c: &Value) -> String {
    let mut sorted = c["points"].as_array().cloned().unwrap_or_default();
    sort_by_offered(&mut sorted);
    let mut chart = LineChart::new(
        "capacity-curve",
        "latency from intended start against offered load",
        &names::name("offered_ops_per_s"),
        "latency from intended start (log scale)",
    )
    .latency_y();
    for (key, name) in [("mean_us", "mean"), ("p50_us", "median"), ("p99_us", "p99")] {
        let pts: Vec<(f64, f64)> = sorted
            .iter()
            .filter_map(|pt| Some((pt["offered_ops_per_s"].as_f64()?, pt[key].as_f64()?)))
            .collect();
        let mut s = Series::new(name, pts);
        s.markers = true;
        chart.series.push(s);
    }
    for t in c["slo"].as_array().cloned().unwrap_or_default() {
        if let Some(b) = t["bound_us"].as_f64() {
            chart.hlines.push((
                b,
                format!("SLO {} < {}", t["stat"].as_str().unwrap_or(""), micros(b)),
            ));
        }
    }
    if let Some(cap) = c["capacity_ops_per_s"].as_f64() {
        // A search that never failed found only a lower bound: the line says so.
        let ge = if c["capacity_bound"].as_str() == Some("lower") {
            "≥ "
        } else {
            ""
        };
        chart
            .vlines
            .push((cap, format!("capacity {ge}{}", short(cap))));
    }
    chart.svg()
}
