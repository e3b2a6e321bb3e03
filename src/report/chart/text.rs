//! Text in a figure: how wide it is, where it wraps, and where a label goes so that it does
//! not cover another. An SVG has no layout engine, so widths are estimated from the character
//! count at a deliberately generous average width (0.6 em; DejaVu Sans and Liberation Sans
//! average near 0.55 em on labels like these): a figure sized from the estimate holds its text
//! in any common sans-serif font, at the price of some white space.

use super::escape;
use std::fmt::Write as _;

/// Average character width as a share of the font size (see the module header).
pub const EM_PER_CHAR: f64 = 0.6;
/// Line height as a share of the font size.
pub const LINE: f64 = 1.25;

/// The estimated width of `s` at `size` px.
pub fn width(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * EM_PER_CHAR
}

/// `s` broken at spaces into lines of at most `max_px` at `size` px; a word longer than a line
/// keeps its own line whole (the caller sizes the figure from the widest line, so nothing is
/// ever cut).
pub fn wrap(s: &str, size: f64, max_px: f64) -> Vec<String> {
    let max_chars = ((max_px / (size * EM_PER_CHAR)).floor() as usize).max(1);
    let mut lines: Vec<String> = vec![];
    let mut cur = String::new();
    for word in s.split(' ') {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > max_chars {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

/// The widest of `lines` at `size` px.
pub fn widest(lines: &[String], size: f64) -> f64 {
    lines.iter().map(|l| width(l, size)).fold(0.0, f64::max)
}

/// Horizontal anchor of a text element.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    fn attr(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// A text element at (x, y) (y: the first line's baseline), one `<tspan>` per further line.
/// `extra` is written into the element as is (fill, class, transform).
pub fn lines(
    out: &mut String,
    x: f64,
    y: f64,
    anchor: Anchor,
    size: f64,
    extra: &str,
    text: &[String],
) {
    let _ = write!(
        out,
        r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{}"{}{extra}>"#,
        anchor.attr(),
        if extra.is_empty() { "" } else { " " }
    );
    for (i, l) in text.iter().enumerate() {
        if i == 0 {
            out.push_str(&escape(l));
        } else {
            let _ = write!(
                out,
                r#"<tspan x="{x:.1}" dy="{:.1}">{}</tspan>"#,
                size * LINE,
                escape(l)
            );
        }
    }
    out.push_str("</text>");
}

/// A box (x0, y0, x1, y1) in pixels.
pub type Rect = (f64, f64, f64, f64);

/// The box a one-line label occupies at (x, y) (y: baseline).
pub fn label_box(x: f64, y: f64, anchor: Anchor, size: f64, s: &str) -> Rect {
    let w = width(s, size);
    let x0 = match anchor {
        Anchor::Start => x,
        Anchor::Middle => x - w / 2.0,
        Anchor::End => x - w,
    };
    (x0, y - size, x0 + w, y + size * 0.25)
}

fn overlap(a: &Rect, b: &Rect) -> bool {
    a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
}

/// Labels placed so far in one figure; a new label takes the first of its candidate places
/// that covers none of them and lies inside `area`.
pub struct Placer {
    pub area: Rect,
    placed: Vec<Rect>,
}

impl Placer {
    pub fn new(area: Rect) -> Self {
        Placer {
            area,
            placed: vec![],
        }
    }

    /// Marks a box as taken (a label drawn elsewhere).
    pub fn take(&mut self, r: Rect) {
        self.placed.push(r);
    }

    fn free(&self, r: &Rect) -> bool {
        let a = &self.area;
        r.0 >= a.0
            && r.2 <= a.2
            && r.1 >= a.1
            && r.3 <= a.3
            && !self.placed.iter().any(|p| overlap(p, r))
    }

    /// The first free candidate (x, y, anchor) for `s`, taken; when none is free, the last
    /// candidate (the caller lists its fallback last).
    pub fn place(
        &mut self,
        s: &str,
        size: f64,
        candidates: &[(f64, f64, Anchor)],
    ) -> (f64, f64, Anchor) {
        let pick = candidates
            .iter()
            .copied()
            .find(|&(x, y, a)| self.free(&label_box(x, y, a, size, s)))
            .or_else(|| candidates.last().copied())
            .unwrap_or((self.area.0, self.area.1 + size, Anchor::Start));
        self.placed.push(label_box(pick.0, pick.1, pick.2, size, s));
        pick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_keeps_every_word_and_breaks_at_spaces() {
        let l = wrap("p99 from intended start", 11.0, 80.0);
        // 80 px at 6.6 px a character: 12 characters a line.
        assert_eq!(l, ["p99 from", "intended", "start"]);
        assert_eq!(l.join(" "), "p99 from intended start");
        assert_eq!(
            wrap("averyveryverylongword x", 10.0, 30.0),
            ["averyveryverylongword", "x"]
        );
        assert_eq!(wrap("", 10.0, 30.0), [""]);
    }

    #[test]
    fn the_placer_moves_a_label_off_a_taken_place() {
        let mut p = Placer::new((0.0, 0.0, 500.0, 300.0));
        let c = [(100.0, 20.0, Anchor::Start), (100.0, 34.0, Anchor::Start)];
        assert_eq!(p.place("capacity 20k", 11.0, &c).1, 20.0);
        // The same spot again: the second candidate.
        assert_eq!(p.place("capacity 21k", 11.0, &c).1, 34.0);
        // Outside the area is not free.
        let out = [(480.0, 20.0, Anchor::Start), (480.0, 60.0, Anchor::End)];
        assert!(p.place("long label here", 11.0, &out).2 == Anchor::End);
    }
}
