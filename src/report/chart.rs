//! Figures as self-contained SVG: line charts (linear or log axes, shaded ranges such as
//! warm-up, reference lines such as an SLO, error whiskers for confidence intervals) and bar
//! charts (sorted, as papers/004 draws the pressure scale; grouped values as papers/000
//! Fig. 1). Every figure reads correctly without JavaScript and in print: hover values are SVG
//! `<title>` elements, series and figures carry `data-series` / `data-figure` attributes, and
//! all text is escaped.
//!
//! Written here rather than with plotters' SVG backend because that backend emits neither
//! titles nor attributes per series (so no hover values without script, and nothing a test or
//! a reader's tool can find a series by), and the percentile-spectrum axis (1/(1−q) with
//! percentile labels) needs custom tick labels anyway. The charts are small: axes, ticks,
//! polylines, rectangles.

use std::fmt::Write as _;

/// Text for inside an SVG or HTML element or attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A short number for labels: 1234567 → 1.23M, 0.00123 → 0.00123.
pub fn short(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let a = x.abs();
    let (v, unit) = if a >= 1e9 {
        (x / 1e9, "G")
    } else if a >= 1e6 {
        (x / 1e6, "M")
    } else if a >= 1e4 {
        (x / 1e3, "k")
    } else {
        (x, "")
    };
    let s = if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 0.01 || v == 0.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.2e}")
    };
    format!("{s}{unit}")
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    Linear,
    Log10,
    /// The percentile spectrum's axis: x is 1/(1−q), drawn log; ticks read as percentiles.
    Percentile,
}

const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One line of a chart.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Per point: (low, high) of a confidence interval, drawn as whiskers.
    pub whiskers: Vec<Option<(f64, f64)>>,
    pub dashed: bool,
    /// Draw a marker at each point (few points) rather than a bare line (a time series).
    pub markers: bool,
}

impl Series {
    pub fn new(name: &str, points: Vec<(f64, f64)>) -> Self {
        Series {
            name: name.to_string(),
            points,
            ..Default::default()
        }
    }
}

/// A line chart: one or more series over shared axes.
#[derive(Clone, Debug)]
pub struct LineChart {
    /// The figure's id (its file name under figures/ and its `data-figure`).
    pub id: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_scale: Scale,
    pub y_scale: Scale,
    pub series: Vec<Series>,
    /// x ranges shaded grey, with a label (warm-up).
    pub shaded: Vec<(f64, f64, String)>,
    /// Horizontal reference lines (an SLO bound), with a label.
    pub hlines: Vec<(f64, String)>,
    /// Vertical markers (the capacity), with a label.
    pub vlines: Vec<(f64, String)>,
    /// Start the y axis at 0 (throughput); else at the smallest value.
    pub y_from_zero: bool,
}

impl LineChart {
    pub fn new(id: &str, title: &str, x_label: &str, y_label: &str) -> Self {
        LineChart {
            id: id.into(),
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: vec![],
            shaded: vec![],
            hlines: vec![],
            vlines: vec![],
            y_from_zero: true,
        }
    }
}

const W: f64 = 760.0;
const H: f64 = 340.0;
const ML: f64 = 72.0;
const MR: f64 = 150.0;
const MT: f64 = 34.0;
const MB: f64 = 48.0;

/// Maps data to pixels on one axis.
struct Axis {
    scale: Scale,
    lo: f64,
    hi: f64,
    px0: f64,
    px1: f64,
}

impl Axis {
    fn t(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => v,
            Scale::Log10 | Scale::Percentile => v.max(f64::MIN_POSITIVE).log10(),
        }
    }
    fn px(&self, v: f64) -> f64 {
        let (a, b) = (self.t(self.lo), self.t(self.hi));
        let f = if b > a {
            (self.t(v) - a) / (b - a)
        } else {
            0.5
        };
        self.px0 + (self.px1 - self.px0) * f.clamp(-0.05, 1.05)
    }
    /// Tick values and their labels.
    fn ticks(&self) -> Vec<(f64, String)> {
        match self.scale {
            Scale::Linear => {
                let span = self.hi - self.lo;
                if span <= 0.0 {
                    return vec![(self.lo, short(self.lo))];
                }
                let raw = span / 5.0;
                let mag = 10f64.powf(raw.log10().floor());
                let step = [1.0, 2.0, 2.5, 5.0, 10.0]
                    .iter()
                    .map(|m| m * mag)
                    .find(|s| span / s <= 6.0)
                    .unwrap_or(10.0 * mag);
                let mut v = (self.lo / step).ceil() * step;
                let mut out = vec![];
                while v <= self.hi + step * 1e-9 {
                    out.push((v, short(v)));
                    v += step;
                }
                out
            }
            Scale::Log10 => {
                let mut out = vec![];
                let mut d = self.lo.log10().floor() as i32;
                while 10f64.powi(d) <= self.hi * 1.0001 {
                    let v = 10f64.powi(d);
                    if v >= self.lo * 0.9999 {
                        out.push((v, short(v)));
                    }
                    d += 1;
                }
                out
            }
            Scale::Percentile => {
                let mut out = vec![];
                for (q, label) in [
                    (0.0, "0%"),
                    (0.9, "90%"),
                    (0.99, "99%"),
                    (0.999, "99.9%"),
                    (0.9999, "99.99%"),
                    (0.99999, "99.999%"),
                    (0.999999, "99.9999%"),
                ] {
                    let x = 1.0 / (1.0 - q);
                    if x >= self.lo * 0.9999 && x <= self.hi * 1.0001 {
                        out.push((x, label.to_string()));
                    }
                }
                out
            }
        }
    }
}

fn bounds(values: impl Iterator<Item = f64>, scale: Scale, from_zero: bool) -> (f64, f64) {
    let v: Vec<f64> = values
        .filter(|x| x.is_finite())
        .filter(|x| scale == Scale::Linear || *x > 0.0)
        .collect();
    if v.is_empty() {
        return match scale {
            Scale::Linear => (0.0, 1.0),
            _ => (1.0, 10.0),
        };
    }
    let (mut lo, mut hi) = (
        v.iter().cloned().fold(f64::INFINITY, f64::min),
        v.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
    );
    match scale {
        Scale::Linear => {
            if from_zero {
                lo = lo.min(0.0);
            }
            if hi <= lo {
                hi = lo + 1.0;
            }
            hi += (hi - lo) * 0.05;
        }
        Scale::Log10 => {
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil());
            if hi <= lo {
                hi = lo * 10.0;
            }
        }
        Scale::Percentile => {
            lo = 1.0;
            if hi <= lo {
                hi = 10.0;
            }
        }
    }
    (lo, hi)
}

fn svg_open(out: &mut String, id: &str, title: &str, w: f64, h: f64) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-figure="{}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="sans-serif" font-size="11" role="img"><title>{}</title><rect width="{w}" height="{h}" fill="white"/><text x="{}" y="18" font-size="13" text-anchor="middle">{}</text>"#,
        escape(id),
        escape(title),
        w / 2.0,
        escape(title)
    );
}

impl LineChart {
    pub fn svg(&self) -> String {
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(self.shaded.iter().flat_map(|s| [s.0, s.1]))
            .chain(self.vlines.iter().map(|v| v.0));
        let (xlo, xhi) = bounds(xs, self.x_scale, self.x_scale == Scale::Linear);
        let ys = self
            .series
            .iter()
            .flat_map(|s| {
                s.points
                    .iter()
                    .map(|p| p.1)
                    .chain(s.whiskers.iter().flatten().flat_map(|(a, b)| [*a, *b]))
            })
            .chain(self.hlines.iter().map(|h| h.0));
        let (ylo, yhi) = bounds(ys, self.y_scale, self.y_from_zero);
        let x = Axis {
            scale: self.x_scale,
            lo: xlo,
            hi: xhi,
            px0: ML,
            px1: W - MR,
        };
        let y = Axis {
            scale: self.y_scale,
            lo: ylo,
            hi: yhi,
            px0: H - MB,
            px1: MT,
        };
        let mut out = String::new();
        svg_open(&mut out, &self.id, &self.title, W, H);
        for (a, b, label) in &self.shaded {
            let (pa, pb) = (x.px(*a), x.px(*b));
            let _ = write!(
                out,
                r##"<rect class="shaded" x="{pa:.1}" y="{MT}" width="{:.1}" height="{}" fill="#eeeeee"><title>{}</title></rect><text x="{:.1}" y="{}" fill="#888">{}</text>"##,
                (pb - pa).max(0.0),
                H - MT - MB,
                escape(label),
                pa + 3.0,
                MT + 12.0,
                escape(label)
            );
        }
        axes(&mut out, &x, &y, &self.x_label, &self.y_label);
        for (v, label) in &self.hlines {
            let py = y.px(*v);
            let _ = write!(
                out,
                r##"<line class="reference" x1="{ML}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#c00" stroke-dasharray="6 4"/><text x="{}" y="{:.1}" fill="#c00" text-anchor="end">{}</text>"##,
                W - MR,
                W - MR - 4.0,
                py - 4.0,
                escape(label)
            );
        }
        for (v, label) in &self.vlines {
            let px = x.px(*v);
            let _ = write!(
                out,
                r##"<line class="marker" x1="{px:.1}" y1="{MT}" x2="{px:.1}" y2="{}" stroke="#444" stroke-dasharray="3 3"/><text x="{:.1}" y="{}" fill="#444">{}</text>"##,
                H - MB,
                px + 3.0,
                MT + 24.0,
                escape(label)
            );
        }
        for (i, s) in self.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            series(&mut out, s, color, &x, &y, self);
            legend(&mut out, i, &s.name, color, s.dashed);
        }
        out.push_str("</svg>\n");
        out
    }
}

fn axes(out: &mut String, x: &Axis, y: &Axis, x_label: &str, y_label: &str) {
    let _ = write!(
        out,
        r##"<g class="axes" stroke="#000"><line x1="{ML}" y1="{}" x2="{}" y2="{}"/><line x1="{ML}" y1="{MT}" x2="{ML}" y2="{}"/></g>"##,
        H - MB,
        W - MR,
        H - MB,
        H - MB
    );
    for (v, label) in x.ticks() {
        let px = x.px(v);
        let _ = write!(
            out,
            r##"<line x1="{px:.1}" y1="{}" x2="{px:.1}" y2="{}" stroke="#000"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
            H - MB,
            H - MB + 4.0,
            H - MB + 16.0,
            escape(&label)
        );
    }
    for (v, label) in y.ticks() {
        let py = y.px(v);
        let _ = write!(
            out,
            r##"<line x1="{ML}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - MR,
            ML - 5.0,
            py + 4.0,
            escape(&label)
        );
    }
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>"#,
        (ML + W - MR) / 2.0,
        H - 10.0,
        escape(x_label),
        (MT + H - MB) / 2.0,
        (MT + H - MB) / 2.0,
        escape(y_label)
    );
}

fn series(out: &mut String, s: &Series, color: &str, x: &Axis, y: &Axis, c: &LineChart) {
    let _ = write!(
        out,
        r#"<g class="series" data-series="{}" data-points="{}">"#,
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
    let path: Vec<String> = visible
        .iter()
        .map(|(a, b)| format!("{:.1},{:.1}", x.px(*a), y.px(*b)))
        .collect();
    let _ = write!(
        out,
        r#"<polyline fill="none" stroke="{color}" stroke-width="1.6"{} points="{}"><title>{}</title></polyline>"#,
        if s.dashed {
            r#" stroke-dasharray="5 3""#
        } else {
            ""
        },
        path.join(" "),
        escape(&s.name)
    );
    for (i, (a, b)) in s.points.iter().enumerate() {
        if let Some(Some((lo, hi))) = s.whiskers.get(i) {
            let px = x.px(*a);
            let _ = write!(
                out,
                r#"<line class="whisker" x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="{color}"><title>{}: 95 % CI {} – {}</title></line>"#,
                y.px(*lo),
                y.px(*hi),
                escape(&s.name),
                short(*lo),
                short(*hi)
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
                short(*b)
            );
        }
    }
    out.push_str("</g>");
}

fn legend(out: &mut String, i: usize, name: &str, color: &str, dashed: bool) {
    let ly = MT + 8.0 + 16.0 * i as f64;
    let _ = write!(
        out,
        r#"<line x1="{}" y1="{ly:.1}" x2="{}" y2="{ly:.1}" stroke="{color}" stroke-width="2"{}/><text x="{}" y="{:.1}">{}</text>"#,
        W - MR + 10.0,
        W - MR + 28.0,
        if dashed {
            r#" stroke-dasharray="5 3""#
        } else {
            ""
        },
        W - MR + 32.0,
        ly + 4.0,
        escape(name)
    );
}

/// A bar chart: one bar per label, optionally sorted by value (largest first).
#[derive(Clone, Debug)]
pub struct BarChart {
    pub id: String,
    pub title: String,
    pub y_label: String,
    /// (label, value, note shown on hover).
    pub bars: Vec<(String, f64, String)>,
    pub sorted: bool,
}

impl BarChart {
    pub fn svg(&self) -> String {
        let mut bars = self.bars.clone();
        if self.sorted {
            bars.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal));
        }
        let (ylo, yhi) = bounds(bars.iter().map(|b| b.1), Scale::Linear, true);
        let y = Axis {
            scale: Scale::Linear,
            lo: ylo,
            hi: yhi,
            px0: H - MB,
            px1: MT,
        };
        let mut out = String::new();
        let n = bars.len().max(1) as f64;
        let slot = (W - ML - 20.0) / n;
        // Labels wider than their slot are turned 45° and the figure grows to hold them.
        let longest = bars.iter().map(|b| b.0.chars().count()).max().unwrap_or(0) as f64;
        let turned = longest * 6.0 > slot;
        let extra = if turned {
            (longest * 4.6).min(160.0)
        } else {
            0.0
        };
        svg_open(&mut out, &self.id, &self.title, W, H + extra);
        for (v, label) in y.ticks() {
            let py = y.px(v);
            let _ = write!(
                out,
                r##"<line x1="{ML}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                W - 20.0,
                ML - 5.0,
                py + 4.0,
                escape(&label)
            );
        }
        let _ = write!(
            out,
            r##"<line x1="{ML}" y1="{}" x2="{}" y2="{}" stroke="#000"/><text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">{}</text><g class="series" data-series="{}" data-points="{}">"##,
            y.px(0.0),
            W - 20.0,
            y.px(0.0),
            (MT + H - MB) / 2.0,
            (MT + H - MB) / 2.0,
            escape(&self.y_label),
            escape(&self.title),
            bars.len()
        );
        for (i, (label, v, note)) in bars.iter().enumerate() {
            let x0 = ML + slot * i as f64 + slot * 0.15;
            let (top, base) = (y.px(v.max(0.0)), y.px(v.min(0.0)));
            let _ = write!(
                out,
                r##"<rect class="bar" x="{x0:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {}{}</title></rect><text x="{:.1}" y="{}" {} font-size="10">{}</text>"##,
                slot * 0.7,
                (base - top).max(0.5),
                PALETTE[0],
                escape(label),
                short(*v),
                if note.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", escape(note))
                },
                x0 + slot * 0.35,
                H - MB + 14.0,
                if turned {
                    format!(
                        r#"text-anchor="end" transform="rotate(-45 {:.1} {})""#,
                        x0 + slot * 0.35,
                        H - MB + 14.0
                    )
                } else {
                    r#"text-anchor="middle""#.to_string()
                },
                escape(label)
            );
        }
        out.push_str("</g></svg>\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_numbers_are_short() {
        assert_eq!(
            escape("mean < 1 ms & \"x\""),
            "mean &lt; 1 ms &amp; &quot;x&quot;"
        );
        assert_eq!(short(1_234_567.0), "1.23M");
        assert_eq!(short(25_000.0), "25k");
        assert_eq!(short(12_345.0), "12.3k");
        assert_eq!(short(950.0), "950");
        assert_eq!(short(0.5), "0.50");
    }

    #[test]
    fn a_line_chart_has_its_series_and_parses_as_xml_shaped_text() {
        let mut c = LineChart::new("t", "a < b", "x", "y");
        c.series
            .push(Series::new("one", vec![(0.0, 1.0), (1.0, 2.0)]));
        c.series
            .push(Series::new("two", vec![(0.0, 3.0), (1.0, 4.0)]));
        c.shaded.push((0.0, 0.5, "warm-up".into()));
        let s = c.svg();
        assert_eq!(s.matches(r#"<g class="series""#).count(), 2);
        assert!(s.contains(r#"data-figure="t""#));
        assert!(s.contains("a &lt; b") && !s.contains("a < b"));
        // Percentile axis ticks read as percentiles.
        let x = Axis {
            scale: Scale::Percentile,
            lo: 1.0,
            hi: 1000.0,
            px0: 0.0,
            px1: 100.0,
        };
        let labels: Vec<String> = x.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0%", "90%", "99%", "99.9%"]);
    }
}
