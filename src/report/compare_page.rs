//! compare.html: the verdict table, a forest plot of B/A on a log axis, and the first run
//! of each side overlaid (split from report::compare, which does the statistics).

use super::chart::{escape, short};
use super::compare::{interval_text, ratio_text, Comparison};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

impl Comparison {
    /// compare.html (the report's page, so the same policy and style): the verdict table,
    /// a forest plot of the ratios, and the first run of each side overlaid (throughput per
    /// interval, latency by percentile).
    pub fn html(&self) -> String {
        use super::html::{Cell, Page};
        let mut p = Page::new("kvmeter compare");
        for line in self.render().lines().take(2) {
            p.note("na", line);
        }
        if let Some(line) = self.estimate_note() {
            p.note("warn", &line);
        }
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
                    Cell::text(r.metric_label()),
                    Cell::text(short(r.median_a)),
                    Cell::text(short(r.median_b)),
                    Cell::num(&key, r.ratio, ratio_text(r.ratio)),
                    Cell::text(interval_text(r)),
                    Cell::text(r.p.map(|p| format!("{p:.4}")).unwrap_or_else(|| "-".into())),
                    Cell::text(r.verdict.clone()),
                ]
            })
            .collect();
        p.table(
            "compare",
            &[
                "phase", "metric", "median A", "median B", "B/A", "interval", "p", "verdict",
            ],
            &rows,
        );
        p.figure(
            "compare-forest",
            self.forest(),
            "B/A (Hodges–Lehmann) with its exact interval, on a log axis; green better, red worse, grey no verdict (the rows not asked about are descriptive).",
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

    /// Ratios with their intervals, one line per row, around 1 on a log axis (a 65× change
    /// and a 2 % one on the same figure), ticks at 1-2-5 steps labelled as ratios.
    fn forest(&self) -> String {
        let n = self.rows.len().max(1) as f64;
        let (w, ml, mr, top) = (760.0, 220.0, 30.0, 14.0);
        let h = top + 18.0 * n + 42.0;
        let ends = self.rows.iter().flat_map(|r| {
            let (l, hi) = r.ratio_ci.unwrap_or((r.ratio, r.ratio));
            [l, hi, r.ratio]
        });
        let ends: Vec<f64> = ends.filter(|x| x.is_finite() && *x > 0.0).collect();
        // 1 ± 10 % at least, 5 % of the span on each side.
        let lo = ends.iter().fold(1.0 / 1.1f64, |a, b| a.min(*b)).log10();
        let hi = ends.iter().fold(1.1f64, |a, b| a.max(*b)).log10();
        let (lo, hi) = (lo - (hi - lo) * 0.05, hi + (hi - lo) * 0.05);
        let x = |v: f64| ml + (w - ml - mr) * (v.log10() - lo) / (hi - lo);
        let axis_y = top + 18.0 * n + 4.0;
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-figure=\"compare-forest\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\"><title>B/A with its interval (log axis)</title><line x1=\"{ml}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" stroke=\"#888\"/>",
            w - mr
        );
        for t in log_ticks(10f64.powf(lo), 10f64.powf(hi)) {
            let (tx, major) = (x(t), (t - 1.0).abs() < 1e-9);
            let _ = write!(
                s,
                "<g class=\"tick\"><line x1=\"{tx:.1}\" y1=\"{top}\" x2=\"{tx:.1}\" y2=\"{:.1}\" stroke=\"{}\"/><text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}x</text></g>",
                axis_y + 4.0,
                if major { "#888" } else { "#e4e4e4" },
                axis_y + 16.0,
                tick_label(t)
            );
        }
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">B/A (log scale)</text>",
            (ml + w - mr) / 2.0,
            axis_y + 29.0
        );
        for (i, r) in self.rows.iter().enumerate() {
            let y = top + 9.0 + 18.0 * i as f64;
            let color = match r.verdict.as_str() {
                "better" => "#2ca02c",
                "worse" => "#d62728",
                _ if r.tested => "#555",
                _ => "#aaa",
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
            if let Some((l, h2)) = r.ratio_ci.filter(|c| c.0 > 0.0 && c.1.is_finite()) {
                let _ = write!(
                    s,
                    "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" stroke-width=\"2\"/>",
                    x(l),
                    x(h2)
                );
            }
            if r.ratio.is_finite() && r.ratio > 0.0 {
                let _ = write!(
                    s,
                    "<circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"{color}\"><title>{}: B/A {}, interval {}, {}</title></circle>",
                    x(r.ratio),
                    escape(&r.metric),
                    ratio_text(r.ratio),
                    escape(&interval_text(r)),
                    escape(&r.verdict)
                );
            }
            s.push_str("</g>");
        }
        s.push_str("</svg>");
        s
    }
}

/// Ticks between `lo` and `hi` (ratios, lo < 1 < hi): 1-2-5 × 10^k when the span is a decade
/// or more (powers of ten alone past five decades), else a round step around 1.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let inside = |t: &f64| *t >= lo * 0.9999 && *t <= hi * 1.0001;
    if hi / lo >= 10.0 {
        let steps: &[f64] = if hi / lo > 1e5 {
            &[1.0]
        } else {
            &[1.0, 2.0, 5.0]
        };
        let (e0, e1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        return (e0..=e1)
            .flat_map(|e| steps.iter().map(move |m| m * 10f64.powi(e)))
            .filter(inside)
            .collect();
    }
    let step = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0]
        .into_iter()
        .find(|s| (hi - lo) / s <= 8.0)
        .unwrap_or(2.0);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last)
        .map(|k| k as f64 * step)
        .filter(|t| *t > 0.0)
        .collect()
}

/// 0.5, 0.95, 1, 2, 10, 100, 0.01: a ratio as people write it (three significant digits).
fn tick_label(t: f64) -> String {
    let digits = (2 - t.log10().floor() as i32).max(0) as usize;
    let s = format!("{t:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_are_ratios_people_read() {
        let labels =
            |lo, hi| -> Vec<String> { log_ticks(lo, hi).iter().map(|t| tick_label(*t)).collect() };
        assert_eq!(
            labels(0.1, 100.0),
            ["0.1", "0.2", "0.5", "1", "2", "5", "10", "20", "50", "100"]
        );
        assert_eq!(labels(0.91, 1.12), ["0.95", "1", "1.05", "1.1"]);
        assert_eq!(labels(0.5, 80.0)[..3], ["0.5", "1", "2"]);
        assert_eq!(log_ticks(1e-3, 1e3).len(), 7);
    }
}
