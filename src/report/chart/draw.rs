//! One series drawn: its line (broken where the data has a gap), CI whiskers, markers with
//! hover values, and its legend entry.

use super::text::{self, Anchor};
use super::{escape, short, Axis, LineChart, Scale, Series, FONT};
use std::fmt::Write as _;

/// The points split where x steps by more than `gap` (each part drawn as its own line).
fn segments<'a>(points: &[&'a (f64, f64)], gap: Option<f64>) -> Vec<Vec<&'a (f64, f64)>> {
    let mut out: Vec<Vec<&(f64, f64)>> = vec![];
    for p in points {
        let joined = match (out.last().and_then(|r| r.last()), gap) {
            (Some(prev), Some(g)) => p.0 - prev.0 <= g,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if joined {
            out.last_mut().expect("a run").push(p);
        } else {
            out.push(vec![p]);
        }
    }
    out
}

/// A stroke's dash attribute ("" for a solid line).
fn dash_attr(dash: &str) -> String {
    if dash.is_empty() {
        String::new()
    } else {
        format!(r#" stroke-dasharray="{dash}""#)
    }
}

/// Draws one series in its (colour, dash pattern); the group carries both as `data-color` and
/// `data-dash` for a reader's tool and the test that no two series share them.
pub(super) fn series(
    out: &mut String,
    s: &Series,
    (color, dash): (&str, &str),
    x: &Axis,
    y: &Axis,
    c: &LineChart,
) {
    let _ = write!(
        out,
        r#"<g class="series" data-series="{}" data-points="{}" data-color="{color}" data-dash="{dash}">"#,
        escape(&s.name),
        s.points.len()
    );
    let visible: Vec<&(f64, f64)> = s
        .points
        .iter()
        .filter(|(a, b)| a.is_finite() && b.is_finite())
        .filter(|(a, b)| {
            (c.x_scale == Scale::Linear || *a > 0.0) && (c.y_scale == Scale::Linear || *b > 0.0)
        })
        .collect();
    for run in segments(&visible, s.gap) {
        let path: Vec<String> = run
            .iter()
            .map(|(a, b)| format!("{:.1},{:.1}", x.px(*a), y.px(*b)))
            .collect();
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.6"{} points="{}"><title>{}</title></polyline>"#,
            dash_attr(dash),
            path.join(" "),
            escape(&s.name)
        );
    }
    for (i, (a, b)) in s.points.iter().enumerate() {
        if let Some(Some((lo, hi))) = s.whiskers.get(i) {
            let px = x.px(*a);
            let _ = write!(
                out,
                r#"<line class="whisker" x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="{color}"><title>{}: 95 % CI {} – {}</title></line>"#,
                y.px(*lo),
                y.px(*hi),
                escape(&s.name),
                y.unit.label(*lo),
                y.unit.label(*hi)
            );
        }
        // Few points (a short phase) would make an invisible line: mark each.
        if (s.markers || s.points.len() <= 30) && a.is_finite() && b.is_finite() {
            let _ = write!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"><title>{}: x {} y {}</title></circle>"#,
                x.px(*a),
                y.px(*b),
                escape(&s.name),
                short(*a),
                y.unit.label(*b)
            );
        }
    }
    out.push_str("</g>");
}

pub(super) fn legend_entry(
    out: &mut String,
    right: f64,
    ly: f64,
    name: &[String],
    (color, dash): (&str, &str),
) {
    let _ = write!(
        out,
        r#"<line class="legend-line" x1="{}" y1="{ly:.1}" x2="{}" y2="{ly:.1}" stroke="{color}" stroke-width="2"{}/>"#,
        right + 10.0,
        right + 28.0,
        dash_attr(dash),
    );
    text::lines(
        out,
        right + 32.0,
        ly + 4.0,
        Anchor::Start,
        FONT,
        r#"class="legend""#,
        name,
    );
}

/// The tint of a band of store activity (`LineChart::bands`), said in the figures' captions.
fn band_fill(kind: &str) -> &'static str {
    match kind {
        "flush" => "#6fa8dc",
        "compaction" => "#f6a04d",
        "stall" => "#f6c6c6",
        "spike" => "#d9c6ef",
        "save" => "#93c47d",
        "rewrite" => "#76a5af",
        _ => "#e6e6e6",
    }
}

/// Ranges of store activity under the series, clipped to the plot, each with its tooltip:
/// a stall or a latency spike tints the whole height (latency rises under it); flushes and
/// compactions (or a server's saves and AOF rewrites) are two lanes along the bottom, the upper
/// for compactions, saves and rewrites, so overlapping jobs stay apart.
pub(super) fn bands(
    out: &mut String,
    bands: &[(f64, f64, &'static str, String)],
    x: &Axis,
    top: f64,
    height: f64,
) {
    for (a, b, kind, title) in bands {
        let (pa, pb) = (x.px(*a).max(x.px0), x.px(*b).min(x.px1));
        if pb < pa {
            continue;
        }
        let (y, h, opacity) = match *kind {
            "compaction" | "save" | "rewrite" => (top + height - 16.0, 7.0, 0.9),
            "flush" => (top + height - 8.0, 7.0, 0.9),
            _ => (top, height, 0.5),
        };
        let _ = write!(
            out,
            r##"<rect class="band {kind}" x="{pa:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{}" fill-opacity="{opacity}"><title>{}</title></rect>"##,
            (pb - pa).max(0.8),
            band_fill(kind),
            escape(title),
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_gap_in_x_breaks_the_line() {
        let pts = [(0.5, 1.0), (1.5, 1.0), (3.5, 2.0), (4.5, 2.0)];
        let refs: Vec<&(f64, f64)> = pts.iter().collect();
        let runs = super::segments(&refs, Some(1.5));
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[1][0].0, 3.5);
        assert_eq!(super::segments(&refs, None).len(), 1);
    }
}
