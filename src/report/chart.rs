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
//!
//! Every text is sized from its content, never cut: titles and axis titles wrap, the legend
//! column is as wide as its widest entry (long entries wrap), and labels on the plot (warm-up,
//! SLO bounds, capacity and fault markers) are placed where they cover no other label
//! (`text::Placer`). Latency axes are log with ticks in µs/ms/s (`ticks`).

mod bar;
mod draw;
mod style;
pub mod text;
pub mod ticks;

pub use bar::BarChart;
pub use ticks::Unit;

use draw::{legend_entry, series};
use std::fmt::Write as _;
use style::{styles, PALETTE};
use text::{Anchor, Placer};

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

/// One line of a chart.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Per point: (low, high) of a confidence interval, drawn as whiskers.
    pub whiskers: Vec<Option<(f64, f64)>>,
    /// Drawn with a broken line (from intended start); `styles` gives the pattern.
    pub dashed: bool,
    /// Draw a marker at each point (few points) rather than a bare line (a time series).
    pub markers: bool,
    /// A step in x wider than this breaks the line: intervals without data (a stall) are a
    /// gap, not a straight line drawn across them. None: always joined.
    pub gap: Option<f64>,
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
    /// How y tick values are written (latency: µs, ms, s).
    pub y_unit: Unit,
    pub series: Vec<Series>,
    /// x ranges shaded grey, with a label (warm-up).
    pub shaded: Vec<(f64, f64, String)>,
    /// x ranges tinted by kind (`flush`, `compaction`, `stall`: what the store did then),
    /// each with a tooltip and no label (there can be hundreds).
    pub bands: Vec<(f64, f64, &'static str, String)>,
    /// Horizontal reference lines (an SLO bound), with a label.
    pub hlines: Vec<(f64, String)>,
    /// Vertical markers (the capacity), with a label.
    pub vlines: Vec<(f64, String)>,
    /// An x range the axis covers whatever the points (a phase's intervals from the first's
    /// start to the last's end, where the points are their midpoints).
    pub x_span: Option<(f64, f64)>,
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
            y_unit: Unit::Plain,
            series: vec![],
            shaded: vec![],
            bands: vec![],
            hlines: vec![],
            vlines: vec![],
            x_span: None,
            y_from_zero: true,
        }
    }

    /// A latency axis: log, ticks in µs/ms/s, not from zero.
    pub fn latency_y(mut self) -> Self {
        self.y_scale = Scale::Log10;
        self.y_unit = Unit::Micros;
        self.y_from_zero = false;
        self
    }
}

/// Plot area size; the margins around it grow with the text they hold.
const PW: f64 = 538.0;
const PH: f64 = 258.0;
const FONT: f64 = 11.0;
const TITLE_FONT: f64 = 13.0;
/// Widest a legend entry grows before it wraps.
const LEGEND_WRAP: f64 = 230.0;

/// Where the plot area sits in the figure, from the text around it.
pub(crate) struct Frame {
    pub w: f64,
    pub h: f64,
    pub ml: f64,
    pub mt: f64,
    pub title: Vec<String>,
}

impl Frame {
    fn right(&self) -> f64 {
        self.ml + PW
    }
    fn bottom(&self) -> f64 {
        self.mt + PH
    }
}

/// The left margin holding the y tick labels and the (wrapped) y axis title.
pub(crate) fn left_margin(y_title_lines: usize, widest_tick: f64) -> f64 {
    let title = 8.0 + FONT * text::LINE * y_title_lines as f64;
    (title + widest_tick + 12.0).max(58.0 + 14.0 * y_title_lines as f64)
}

/// Maps data to pixels on one axis.
struct Axis {
    scale: Scale,
    unit: Unit,
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
            Scale::Linear => ticks::linear(self.lo, self.hi)
                .into_iter()
                .map(|v| (v, self.unit.label(v)))
                .collect(),
            Scale::Log10 => ticks::log(self.lo, self.hi)
                .into_iter()
                .map(|v| (v, self.unit.label(v)))
                .collect(),
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
        Scale::Log10 => (lo, hi) = ticks::log_range(lo, hi),
        Scale::Percentile => {
            lo = 1.0;
            if hi <= lo {
                hi = 10.0;
            }
        }
    }
    (lo, hi)
}

/// Opens the figure and writes its (wrapped) title.
pub(crate) fn svg_open(out: &mut String, id: &str, title: &str, f: &Frame) {
    let (w, h) = (f.w, f.h);
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-figure="{}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="sans-serif" font-size="{FONT}" role="img"><title>{}</title><rect width="{w}" height="{h}" fill="white"/>"#,
        escape(id),
        escape(title),
    );
    text::lines(
        out,
        w / 2.0,
        18.0,
        Anchor::Middle,
        TITLE_FONT,
        r#"class="title""#,
        &f.title,
    );
}

/// The title's lines and the top margin they need, for a figure `w` wide.
pub(crate) fn title_lines(title: &str, w: f64) -> (Vec<String>, f64) {
    let lines = text::wrap(title, TITLE_FONT, w - 20.0);
    let mt = 34.0 + TITLE_FONT * text::LINE * (lines.len() as f64 - 1.0);
    (lines, mt)
}

/// The y axis title, turned, wrapped to the plot's height.
pub(crate) fn y_title(out: &mut String, label: &[String], mt: f64) {
    let cy = mt + PH / 2.0;
    text::lines(
        out,
        14.0,
        cy,
        Anchor::Middle,
        FONT,
        &format!(r#"class="axis-title" transform="rotate(-90 14 {cy:.1})""#),
        label,
    );
}

impl LineChart {
    /// The x and y ranges the axes cover: every point, whisker, shaded span and reference.
    fn data_bounds(&self) -> ((f64, f64), (f64, f64)) {
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(self.shaded.iter().flat_map(|s| [s.0, s.1]))
            .chain(self.bands.iter().flat_map(|b| [b.0, b.1]))
            .chain(self.x_span.iter().flat_map(|s| [s.0, s.1]))
            .chain(self.vlines.iter().map(|v| v.0));
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
        (
            bounds(xs, self.x_scale, self.x_scale == Scale::Linear),
            bounds(ys, self.y_scale, self.y_from_zero),
        )
    }

    pub fn svg(&self) -> String {
        let ((xlo, xhi), (ylo, yhi)) = self.data_bounds();
        let mut y = Axis {
            scale: self.y_scale,
            unit: self.y_unit,
            lo: ylo,
            hi: yhi,
            px0: 0.0,
            px1: 0.0,
        };
        // Margins from the text: y tick labels and title on the left, the legend on the right,
        // the title on top.
        let y_label = text::wrap(&self.y_label, FONT, PH);
        let widest_tick = y
            .ticks()
            .iter()
            .map(|t| text::width(&t.1, FONT))
            .fold(0.0, f64::max);
        let ml = left_margin(y_label.len(), widest_tick);
        let legend: Vec<Vec<String>> = self
            .series
            .iter()
            .map(|s| text::wrap(&s.name, FONT, LEGEND_WRAP))
            .collect();
        let legend_w = legend
            .iter()
            .map(|l| text::widest(l, FONT))
            .fold(0.0, f64::max);
        let mr = if legend.is_empty() {
            20.0
        } else {
            42.0 + legend_w
        };
        let w = (ml + PW + mr).ceil();
        let (title, mt) = title_lines(&self.title, w);
        let legend_h: f64 = legend
            .iter()
            .map(|l| FONT * text::LINE * l.len() as f64 + 5.0)
            .sum();
        let h = (mt + PH + 48.0).max(mt + legend_h + 16.0).ceil();
        let f = Frame {
            w,
            h,
            ml,
            mt,
            title,
        };
        y.px0 = f.bottom();
        y.px1 = f.mt;
        let x = Axis {
            scale: self.x_scale,
            unit: Unit::Plain,
            lo: xlo,
            hi: xhi,
            px0: f.ml,
            px1: f.right(),
        };
        let mut out = String::new();
        svg_open(&mut out, &self.id, &self.title, &f);
        let mut placer = Placer::new((f.ml, f.mt, f.right(), f.bottom()));
        for (a, b, label) in &self.shaded {
            let (pa, pb) = (x.px(*a), x.px(*b));
            let _ = write!(
                out,
                r##"<rect class="shaded" x="{pa:.1}" y="{}" width="{:.1}" height="{PH}" fill="#eeeeee"><title>{}</title></rect>"##,
                f.mt,
                (pb - pa).max(0.0),
                escape(label),
            );
            let cands: Vec<_> = (0..6)
                .map(|k| (pa + 3.0, f.mt + 12.0 + 14.0 * k as f64, Anchor::Start))
                .collect();
            let (lx, ly, an) = placer.place(label, FONT, &cands);
            text::lines(
                &mut out,
                lx,
                ly,
                an,
                FONT,
                r##"fill="#888" paint-order="stroke" stroke="white" stroke-width="3""##,
                std::slice::from_ref(label),
            );
        }
        draw::bands(&mut out, &self.bands, &x, f.mt, PH);
        axes(&mut out, &f, &x, &y, &self.x_label, &y_label);
        self.references(&mut out, &f, &x, &y, &mut placer);
        let mut ly = f.mt + 8.0;
        for (i, (s, (color, dash))) in self.series.iter().zip(styles(&self.series)).enumerate() {
            series(&mut out, s, (color, dash), &x, &y, self);
            legend_entry(&mut out, f.right(), ly, &legend[i], (color, dash));
            ly += FONT * text::LINE * legend[i].len() as f64 + 5.0;
        }
        out.push_str("</svg>\n");
        out
    }

    /// Reference lines (SLO bounds) and markers (capacity, faults), their labels placed where
    /// they cover no other label, each with a white halo so that a line under it stays readable.
    fn references(&self, out: &mut String, f: &Frame, x: &Axis, y: &Axis, placer: &mut Placer) {
        for (v, label) in &self.hlines {
            let py = y.px(*v);
            let _ = write!(
                out,
                r##"<line class="reference" x1="{:.1}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#c00" stroke-dasharray="6 4"/>"##,
                f.ml,
                f.right(),
            );
            let (r, l) = (f.right() - 4.0, f.ml + 4.0);
            let cands = [
                (r, py - 4.0, Anchor::End),
                (r, py + 13.0, Anchor::End),
                (l, py - 4.0, Anchor::Start),
                (l, py + 13.0, Anchor::Start),
                ((l + r) / 2.0, py - 4.0, Anchor::Middle),
                ((l + r) / 2.0, py + 13.0, Anchor::Middle),
            ];
            let (lx, ly, an) = placer.place(label, FONT, &cands);
            text::lines(
                out,
                lx,
                ly,
                an,
                FONT,
                r##"class="reference-label" fill="#c00" paint-order="stroke" stroke="white" stroke-width="3""##,
                std::slice::from_ref(label),
            );
        }
        for (v, label) in &self.vlines {
            let px = x.px(*v);
            let _ = write!(
                out,
                r##"<line class="marker" x1="{px:.1}" y1="{}" x2="{px:.1}" y2="{:.1}" stroke="#444" stroke-dasharray="3 3"/>"##,
                f.mt,
                f.bottom(),
            );
            let cands: Vec<_> = (0..16)
                .flat_map(|k| {
                    let ly = f.mt + 12.0 + 14.0 * k as f64;
                    [(px + 3.0, ly, Anchor::Start), (px - 3.0, ly, Anchor::End)]
                })
                .collect();
            let (lx, ly, an) = placer.place(label, FONT, &cands);
            text::lines(
                out,
                lx,
                ly,
                an,
                FONT,
                r##"class="marker-label" fill="#444" paint-order="stroke" stroke="white" stroke-width="3""##,
                std::slice::from_ref(label),
            );
        }
    }
}

fn axes(out: &mut String, f: &Frame, x: &Axis, y: &Axis, x_label: &str, y_label: &[String]) {
    let (b, r, ml, mt) = (f.bottom(), f.right(), f.ml, f.mt);
    let _ = write!(
        out,
        r##"<g class="axes" stroke="#000"><line x1="{ml}" y1="{b}" x2="{r}" y2="{b}"/><line x1="{ml}" y1="{mt}" x2="{ml}" y2="{b}"/></g>"##,
    );
    for (v, label) in x.ticks() {
        let px = x.px(v);
        let _ = write!(
            out,
            r##"<line x1="{px:.1}" y1="{b}" x2="{px:.1}" y2="{}" stroke="#000"/><text class="x-tick" x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
            b + 4.0,
            b + 16.0,
            escape(&label)
        );
    }
    for (v, label) in y.ticks() {
        let py = y.px(v);
        let _ = write!(
            out,
            r##"<line x1="{ml}" y1="{py:.1}" x2="{r}" y2="{py:.1}" stroke="#e4e4e4"/><text class="y-tick" x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            ml - 5.0,
            py + 4.0,
            escape(&label)
        );
    }
    let x_title = text::wrap(x_label, FONT, PW);
    text::lines(
        out,
        (ml + r) / 2.0,
        b + 32.0,
        Anchor::Middle,
        FONT,
        r#"class="axis-title""#,
        &x_title,
    );
    y_title(out, y_label, mt);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Five 1 s intervals drawn at their midpoints, a flush in the last 0.3 s: the x axis
    /// reaches the intervals' end and the flush, where it ended at the last midpoint (4.5 s)
    /// and left the last quarter-second's events out of the figure.
    #[test]
    fn the_x_axis_holds_the_bands_and_the_intervals_span() {
        let mut c = LineChart::new("t", "t", "s", "ops/s");
        c.series.push(Series::new(
            "READ",
            (0..5).map(|i| (i as f64 + 0.5, 100.0)).collect(),
        ));
        assert!(c.data_bounds().0 .1 < 4.8);
        c.bands.push((4.7, 5.0, "flush", String::new()));
        assert!(c.data_bounds().0 .1 >= 5.0);
        c.bands.clear();
        c.x_span = Some((0.0, 5.0));
        let (lo, hi) = c.data_bounds().0;
        assert!(lo <= 0.0 && hi >= 5.0, "{lo} {hi}");
    }

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
            unit: Unit::Plain,
            lo: 1.0,
            hi: 1000.0,
            px0: 0.0,
            px1: 100.0,
        };
        let labels: Vec<String> = x.ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(labels, ["0%", "90%", "99%", "99.9%"]);
    }

    #[test]
    fn a_figure_grows_to_hold_its_legend_and_title() {
        const ML_MIN: f64 = 72.0;
        let long = "p99 from intended start of a very long series name";
        let mut c = LineChart::new("t", &"a long title ".repeat(12), "x", "y").latency_y();
        c.series
            .push(Series::new(long, vec![(0.0, 10.0), (1.0, 2000.0)]));
        let s = c.svg();
        let width: f64 = s
            .split("width=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // The legend's lines, whole, end inside the figure.
        let legend_x = ML_MIN + PW + 32.0;
        for line in text::wrap(long, FONT, LEGEND_WRAP) {
            assert!(s.contains(&line), "{line}");
            assert!(legend_x + text::width(&line, FONT) <= width);
        }
        // The title wrapped into several lines, each as wide as the figure at most.
        assert!(s.matches("<tspan").count() >= 2);
        // Latency ticks with units at 10 µs, 100 µs, 1 ms.
        for t in ["10 µs", "100 µs", "1 ms"] {
            assert!(s.contains(&format!(">{t}</text>")), "{t}");
        }
    }
}
