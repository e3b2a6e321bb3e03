//! How a capacity search is shown: the curve as a table on the terminal and as capacity.csv
//! (curve.svg is the report's figure, `report::html::capacity_curve`).
//! Runs where no operation completed have no latency: they are listed, and left out of the
//! plotted lines.

use super::{fmt_num, Point};
use std::fmt::Write as _;

pub(super) const CSV_HEADER: &str = "offered_ops_per_s,repetition,achieved_ops_per_s,achieved_ratio,kept_up,mean_us,p50_us,p90_us,p99_us,p99_9_us,service_mean_us,service_p99_us,run_dir";

/// One row of capacity.csv (latencies empty where no operation completed).
pub(super) fn csv_row(p: &Point) -> String {
    let f = |x: f64| {
        if x.is_finite() {
            format!("{x:.3}")
        } else {
            String::new()
        }
    };
    format!(
        "{},{},{:.1},{:.4},{},{},{},{},{},{},{},{},{}",
        p.offered_ops_per_s,
        p.repetition,
        p.achieved_ops_per_s,
        p.achieved_ratio,
        p.kept_up,
        f(p.mean_us),
        f(p.p50_us),
        f(p.p90_us),
        f(p.p99_us),
        f(p.p99_9_us),
        f(p.service_mean_us),
        f(p.service_p99_us),
        p.run_dir
    )
}

/// The curve as a table, sorted by offered load.
pub(super) fn render(points: &[Point], note: &str, status: &str) -> String {
    let mut v: Vec<&Point> = points.iter().collect();
    v.sort_by(|a, b| {
        a.offered_ops_per_s
            .partial_cmp(&b.offered_ops_per_s)
            .unwrap()
            .then(a.repetition.cmp(&b.repetition))
    });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "latency from intended start (µs) against offered load, all store calls"
    );
    let _ = writeln!(
        out,
        "  {:>12} {:>12} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}  service p99",
        "offered/s", "achieved/s", "kept", "mean", "p50", "p90", "p99", "p99.9"
    );
    for p in v {
        let _ = writeln!(
            out,
            "  {:>12} {:>12.0} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}  {}",
            p.offered_ops_per_s,
            p.achieved_ops_per_s,
            if p.kept_up { "yes" } else { "NO" },
            fmt_num(p.mean_us),
            fmt_num(p.p50_us),
            fmt_num(p.p90_us),
            fmt_num(p.p99_us),
            fmt_num(p.p99_9_us),
            fmt_num(p.service_p99_us)
        );
    }
    if status != "completed" {
        let _ = writeln!(out, "search {status}");
    }
    let _ = writeln!(out, "{note}");
    out
}
