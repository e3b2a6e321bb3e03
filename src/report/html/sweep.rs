//! The report of a sweep directory (`kvmeter sweep`): each metric against the swept
//! parameter, one line per phase, with 95 % confidence-interval whiskers (papers/000 Fig. 7
//! and 8: throughput against threads, tail latency against threads per CPU, the block cache
//! sweep), and each point's run directories, which have their own reports. `sweep_points`
//! reads sweep.json's points for the experiment page and results.json too.

use super::{read, rel, Cell, Page};
use crate::report::chart::{LineChart, Series};
use crate::report::names;
use serde_json::Value;
use std::path::Path;

/// Metrics drawn for a sweep, in this order, where the points have them.
const SWEEP_METRICS: [&str; 6] = [
    "throughput_ops_per_s",
    "latency_avg_us",
    "latency_p99_us",
    "latency_p99_9_us",
    "intended_p99_us",
    "ops_per_joule",
];

pub(super) fn page(dir: &Path) -> anyhow::Result<(Page, Option<Value>)> {
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

/// A sweep.json's points with their labels (`threads=4`, `a=1,b=2`): the `<point>` of a
/// sweep's keys in results.json and of a series figure's `point`.
pub fn sweep_points(sweep: &Value) -> Vec<(String, &Value)> {
    let names: Vec<&str> = sweep["params"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str())
        .collect();
    sweep["points"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let label = names
                .iter()
                .map(|n| format!("{n}={}", p["params"][*n].as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",");
            (label, p)
        })
        .collect()
}
