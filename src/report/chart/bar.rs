//! Bar charts: one bar per label, optionally sorted (papers/004's pressure scale; papers/000
//! Fig. 1's operations per joule by phase). Labels wider than their slot are turned 45° and the
//! figure grows below and to the left to hold the longest, so no label is cut.

use super::text::{self, Anchor};
use super::{bounds, escape, left_margin, short, svg_open, title_lines, y_title, Axis, Frame};
use super::{Scale, Unit, FONT, PALETTE, PH, PW};
use std::fmt::Write as _;

/// Font size of the bars' labels.
const LABEL_FONT: f64 = 10.0;

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
        let mut y = Axis {
            scale: Scale::Linear,
            unit: Unit::Plain,
            lo: ylo,
            hi: yhi,
            px0: 0.0,
            px1: 0.0,
        };
        let n = bars.len().max(1) as f64;
        let slot = PW / n;
        let widths: Vec<f64> = bars.iter().map(|b| text::width(&b.0, LABEL_FONT)).collect();
        let turned = widths.iter().any(|w| *w > slot * 0.95);
        let y_label = text::wrap(&self.y_label, FONT, PH);
        let widest_tick = y
            .ticks()
            .iter()
            .map(|t| text::width(&t.1, FONT))
            .fold(0.0, f64::max);
        let mut ml = left_margin(y_label.len(), widest_tick);
        let mut below = 24.0;
        if turned {
            // A label turned 45° reaches w·cos 45° left of its bar's centre and as far down.
            for (i, w) in widths.iter().enumerate() {
                ml = ml.max(6.0 + w * 0.71 - slot * (i as f64 + 0.5));
            }
            below += widths.iter().fold(0.0, |a: f64, b| a.max(*b)) * 0.71;
        }
        let w = (ml + PW + 20.0).ceil();
        let (title, mt) = title_lines(&self.title, w);
        let f = Frame {
            w,
            h: (mt + PH + below + 8.0).ceil(),
            ml,
            mt,
            title,
        };
        y.px0 = f.bottom();
        y.px1 = f.mt;
        let mut out = String::new();
        svg_open(&mut out, &self.id, &self.title, &f);
        y_axis(&mut out, &y, &f, &y_label);
        let _ = write!(
            out,
            r##"<g class="series" data-series="{}" data-points="{}">"##,
            escape(&self.title),
            bars.len()
        );
        for (i, (label, v, note)) in bars.iter().enumerate() {
            let x0 = ml + slot * i as f64 + slot * 0.15;
            let cx = x0 + slot * 0.35;
            let (top, base) = (y.px(v.max(0.0)), y.px(v.min(0.0)));
            let _ = write!(
                out,
                r##"<rect class="bar" x="{x0:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {}{}</title></rect>"##,
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
            );
            let ly = f.bottom() + 14.0;
            let (anchor, extra) = if turned {
                (
                    Anchor::End,
                    format!(r#"class="bar-label" transform="rotate(-45 {cx:.1} {ly:.1})""#),
                )
            } else {
                (Anchor::Middle, r#"class="bar-label""#.to_string())
            };
            text::lines(
                &mut out,
                cx,
                ly,
                anchor,
                LABEL_FONT,
                &extra,
                std::slice::from_ref(label),
            );
        }
        out.push_str("</g></svg>\n");
        out
    }
}

/// The y axis: its grid lines and tick labels, the zero line, the turned title.
fn y_axis(out: &mut String, y: &Axis, f: &Frame, y_label: &[String]) {
    let ml = f.ml;
    for (v, label) in y.ticks() {
        let py = y.px(v);
        let _ = write!(
            out,
            r##"<line x1="{ml}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#e4e4e4"/><text class="y-tick" x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            f.right(),
            ml - 5.0,
            py + 4.0,
            escape(&label)
        );
    }
    let _ = write!(
        out,
        r##"<line x1="{ml}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#000"/>"##,
        y.px(0.0),
        f.right(),
        y.px(0.0),
    );
    y_title(out, y_label, f.mt);
}
