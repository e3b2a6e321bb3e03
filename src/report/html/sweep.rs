//! The report of a sweep directory (`kvmeter sweep`): each metric against the swept
//! parameter, one line per phase: the geometric mean of each point's repetitions with its 95 %
//! confidence interval on logarithms as whiskers (positive, as the figures are; `stats::Spread`),
//! and "too few repeats" said, not drawn, where a point has one repetition (papers/000 Fig. 7
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
    if s["repeat"].as_u64().unwrap_or(0) < 2 {
        p.note(
            "na",
            &format!(
                "{} run per point: too few repeats for a confidence interval; no whiskers.",
                s["repeat"]
            ),
        );
    } else {
        p.note(
            "na",
            &format!(
                "{} runs per point; points: the geometric mean of the runs; whiskers: {}.",
                s["repeat"],
                s["confidence"].as_str().unwrap_or("")
            ),
        );
    }
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
        p.figure(&chart.id.clone(), chart.svg(), &format!("Geometric mean over the repetitions of each point, with its 95 % confidence interval computed on logarithms (none drawn where too few repeats); x is {first}."));
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
/// (numeric where it parses, else the point's position), y the geometric mean with its CI
/// whiskers (the arithmetic mean, without whiskers, where a repetition's value was 0).
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
            let Some(mean) = sp["geomean"].as_f64().or(sp["mean"].as_f64()) else {
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
            lines[idx].whiskers.push(whisker(sp));
        }
    }
    lines
}

/// A spread's 95 % interval (on logarithms), where it has one: what the whiskers draw.
pub(super) fn whisker(sp: &Value) -> Option<(f64, f64)> {
    sp["geomean_ci95_low"]
        .as_f64()
        .zip(sp["geomean_ci95_high"].as_f64())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::stats::Spread;

    /// Issue 40 item 6: two repeats 3× apart (t = 12.706205). The whiskers and the y axis stay
    /// positive: every whisker's low end and every y tick is above zero.
    #[test]
    fn two_repeats_draw_no_interval_below_zero() {
        let sp = |v: &[f64]| serde_json::to_value(Spread::of(v)).unwrap();
        let points: Vec<Value> = [(1, [1e6, 3e6]), (2, [2e6, 2.2e6])]
            .iter()
            .map(|(t, v): &(i32, [f64; 2])| {
                serde_json::json!({
                    "params": {"threads": t.to_string()},
                    "phases": {"run": {"throughput_ops_per_s": sp(&v[..])}},
                })
            })
            .collect();
        let lines = sweep_lines(&points, &["threads".to_string()], "throughput_ops_per_s");
        assert_eq!(lines.len(), 1);
        let w: Vec<(f64, f64)> = lines[0].whiskers.iter().flatten().copied().collect();
        assert_eq!(w.len(), 2, "{lines:?}");
        assert!(w.iter().all(|(lo, hi)| *lo > 0.0 && lo < hi), "{w:?}");
        let mut chart = LineChart::new("t", "t", "threads", "ops/s");
        chart.series = lines;
        let svg = chart.svg();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let ticks: Vec<&str> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("y-tick"))
            .filter_map(|n| n.text())
            .collect();
        assert!(!ticks.is_empty(), "{svg}");
        for t in ticks {
            assert!(!t.starts_with('-') && !t.starts_with('−'), "y tick {t}");
        }
    }
}
