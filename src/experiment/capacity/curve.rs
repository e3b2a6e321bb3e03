//! How a capacity search is shown: the curve as a table on the terminal, as capacity.csv and
//! as curve.svg (latency against offered load with the SLO lines, papers/003 Fig. 6(d)).
//! Runs where no operation completed have no latency: they are listed, and left out of the
//! plotted lines.

use super::{fmt_num, Point, Term};
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

/// Text for inside an SVG element: `<`, `>` and `&` escaped (an SLO label holds a `<`).
fn xml_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
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

/// Mean and p99 latency (log scale) against offered load, with the SLO bounds: a
/// self-contained SVG.
pub(super) fn curve_svg(points: &[Point], slo: &[Term]) -> String {
    let (w, h, ml, mr, mt, mb) = (720.0, 420.0, 70.0, 20.0, 30.0, 50.0);
    let mut v: Vec<&Point> = points.iter().filter(|p| p.mean_us.is_finite()).collect();
    v.sort_by(|a, b| {
        a.offered_ops_per_s
            .partial_cmp(&b.offered_ops_per_s)
            .unwrap()
    });
    let xmax = v.iter().map(|p| p.offered_ops_per_s).fold(1.0, f64::max) * 1.05;
    let ys: Vec<f64> = v
        .iter()
        .flat_map(|p| [p.mean_us, p.p99_us])
        .chain(slo.iter().map(|t| t.bound_us))
        .filter(|y| *y > 0.0)
        .collect();
    let ymin = ys.iter().cloned().fold(f64::INFINITY, f64::min).max(0.1) / 1.5;
    let ymax = ys.iter().cloned().fold(1.0, f64::max) * 1.5;
    let (l0, l1) = (ymin.log10(), ymax.log10());
    let x = |r: f64| ml + (w - ml - mr) * r / xmax;
    let y = |us: f64| mt + (h - mt - mb) * (1.0 - (us.max(ymin).log10() - l0) / (l1 - l0));
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="18" text-anchor="middle">latency from intended start against offered load</text>
<line x1="{ml}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{ml}" y1="{mt}" x2="{ml}" y2="{}" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">offered load (ops/s)</text>
<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">latency (µs, log)</text>
"#,
        w / 2.0,
        h - mb,
        w - mr,
        h - mb,
        h - mb,
        (ml + w - mr) / 2.0,
        h - 12.0,
        h / 2.0,
        h / 2.0
    );
    for i in 0..=4 {
        let r = xmax * i as f64 / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{:.0}</text>"#,
            x(r),
            h - mb + 16.0,
            r
        );
    }
    let mut d = l0.ceil() as i32;
    while (d as f64) <= l1 {
        let us = 10f64.powi(d);
        let _ = writeln!(
            s,
            r#"<line x1="{ml}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="lightgrey"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            y(us),
            w - mr,
            y(us),
            ml - 4.0,
            y(us) + 4.0,
            fmt_num(us)
        );
        d += 1;
    }
    for t in slo {
        let _ = writeln!(
            s,
            r#"<line x1="{ml}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="red" stroke-dasharray="6 4"/><text x="{}" y="{:.1}" fill="red" text-anchor="end">SLO {}</text>"#,
            y(t.bound_us),
            w - mr,
            y(t.bound_us),
            w - mr - 4.0,
            y(t.bound_us) - 4.0,
            xml_text(&t.label())
        );
    }
    for (name, color, get) in [
        (
            "mean",
            "steelblue",
            (|p: &Point| p.mean_us) as fn(&Point) -> f64,
        ),
        ("p99", "darkorange", |p: &Point| p.p99_us),
    ] {
        let path: Vec<String> = v
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.offered_ops_per_s), y(get(p))))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for p in &v {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                x(p.offered_ops_per_s),
                y(get(p))
            );
        }
        let ly = if name == "mean" { 40.0 } else { 56.0 };
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{ly}" fill="{color}">{name}</text>"#,
            ml + 10.0
        );
    }
    s.push_str("</svg>\n");
    s
}
