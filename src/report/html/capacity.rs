//! The report of a capacity search's directory (`kvmeter capacity`): latency from intended
//! start against offered load with the SLO and the capacity marked (papers/003 Fig. 6(d)),
//! and each point's run directory, which has its own report. `add_search` is the one drawing
//! of a capacity curve; the experiment page's capacity figures use it too.

use super::{read, rel, Cell, Page};
use crate::report::chart::ticks::micros;
use crate::report::chart::{short, LineChart, Series};
use crate::report::names;
use serde_json::Value;
use std::path::Path;

pub(super) fn page(dir: &Path) -> anyhow::Result<(Page, Option<Value>)> {
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

/// The capacity chart, empty: latency from intended start (log scale) against offered load.
pub(super) fn chart(id: &str, title: &str) -> LineChart {
    LineChart::new(
        id,
        title,
        &names::name("offered_ops_per_s"),
        "latency from intended start (log scale)",
    )
    .latency_y()
}

/// Adds one search (capacity.json's content) to `chart`: its mean, median and p99 against
/// offered load, the SLO bounds it searched under, and the capacity it found. `label` names
/// the search where a chart has several (the experiment page). Points without operations have
/// no latency and are left out. This is the one capacity drawing: the capacity page, the
/// experiment page and capacity's own curve.svg all draw with it.
pub(super) fn add_search(chart: &mut LineChart, label: Option<&str>, c: &Value) {
    let mut sorted = c["points"].as_array().cloned().unwrap_or_default();
    sort_by_offered(&mut sorted);
    let named = |what: &str| match label {
        Some(l) => format!("{l} {what}"),
        None => what.to_string(),
    };
    for (key, name) in [("mean_us", "mean"), ("p50_us", "median"), ("p99_us", "p99")] {
        let pts: Vec<(f64, f64)> = sorted
            .iter()
            .filter_map(|pt| Some((pt["offered_ops_per_s"].as_f64()?, pt[key].as_f64()?)))
            .collect();
        if pts.is_empty() && label.is_some() {
            continue;
        }
        let mut s = Series::new(&named(name), pts);
        s.markers = true;
        chart.series.push(s);
    }
    for t in c["slo"].as_array().cloned().unwrap_or_default() {
        if let Some(b) = t["bound_us"].as_f64() {
            let line = (
                b,
                format!("SLO {} < {}", t["stat"].as_str().unwrap_or(""), micros(b)),
            );
            if !chart.hlines.contains(&line) {
                chart.hlines.push(line);
            }
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
            .push((cap, named(&format!("capacity {ge}{}", short(cap)))));
    }
}

/// The capacity page's figure and capacity's own curve.svg, from capacity.json's content.
pub fn capacity_curve(c: &Value) -> String {
    let mut chart = chart(
        "capacity-curve",
        "latency from intended start against offered load",
    );
    add_search(&mut chart, None, c);
    chart.svg()
}
