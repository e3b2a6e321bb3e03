//! Where an axis puts its ticks and how it writes them. Log axes tick at the decades and, when
//! fewer than three decades are in range, at 2× and 5× between them (1-2-5), so every log axis
//! has at least two readable ticks; latency axes write their ticks with a unit chosen per tick
//! (10 µs, 1 ms, 2 s) rather than a bare number of microseconds.

/// How tick values are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Unit {
    /// A short number (1.2k, 25M).
    #[default]
    Plain,
    /// The value is microseconds: written as µs, ms or s.
    Micros,
}

impl Unit {
    pub fn label(self, v: f64) -> String {
        match self {
            // Below 10k a tick reads as written (0.5, 1.5, 2500); above, short (25k, 1.2M).
            Unit::Plain => tidy(v),
            Unit::Micros => micros(v),
        }
    }
}

/// A number without trailing zeros, at most three significant digits: 2.5, 20, 0.05, 1.5k.
fn tidy(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    if x.abs() >= 1e4 {
        return super::short(x);
    }
    let digits = (2 - x.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{x:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Microseconds written in the unit that keeps the number between 1 and 1000.
pub fn micros(us: f64) -> String {
    if !us.is_finite() {
        return "-".into();
    }
    let a = us.abs();
    if a >= 1e6 {
        format!("{} s", tidy(us / 1e6))
    } else if a >= 1e3 {
        format!("{} ms", tidy(us / 1e3))
    } else if a >= 1.0 || a == 0.0 {
        format!("{} µs", tidy(us))
    } else {
        format!("{} ns", tidy(us * 1e3))
    }
}

/// Ticks of a linear axis: 1, 2, 2.5 or 5 times a power of ten, at most six steps.
pub fn linear(lo: f64, hi: f64) -> Vec<f64> {
    let span = hi - lo;
    if span.is_nan() || span <= 0.0 || !span.is_finite() {
        return vec![lo];
    }
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * mag);
    let mut out = vec![];
    let mut i = (lo / step).ceil();
    while i * step <= hi + step * 1e-9 {
        // Multiplying (not adding) keeps 0.1 + 0.2 from becoming 0.30000000000000004.
        let v = i * step;
        out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        i += 1.0;
    }
    out
}

/// Ticks of a log axis over [lo, hi] (both > 0): the decades, with 2× and 5× added when fewer
/// than three decades fall in range.
pub fn log(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi >= lo && hi.is_finite()) {
        return vec![];
    }
    let in_range = |v: f64| v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9);
    let first = lo.log10().floor() as i32;
    let last = hi.log10().ceil() as i32;
    let decades: Vec<f64> = (first..=last)
        .map(|d| 10f64.powi(d))
        .filter(|v| in_range(*v))
        .collect();
    if decades.len() >= 3 {
        return decades;
    }
    (first..=last)
        .flat_map(|d| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(d)))
        .filter(|v| in_range(*v))
        .collect()
}

/// The range of a log axis holding every value: padded by 5 % of its span on each side (so
/// the smallest value is not drawn on the axis line) and at least a factor of 10 wide (so it
/// holds at least two 1-2-5 ticks).
pub fn log_range(min: f64, max: f64) -> (f64, f64) {
    let (a, b) = (min.log10(), max.log10());
    let pad = ((b - a) * 0.05).max(0.02);
    let (mut a, mut b) = (a - pad, b + pad);
    if b - a < 1.0 {
        let mid = (a + b) / 2.0;
        a = mid - 0.5;
        b = mid + 0.5;
    }
    (10f64.powf(a), 10f64.powf(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_are_the_decades_or_one_two_five() {
        // Hand-computed: 3 µs .. 40 ms holds the decades 10, 100, 1000, 10000.
        assert_eq!(log(3.0, 40_000.0), vec![10.0, 100.0, 1000.0, 10000.0]);
        // 30 .. 900 holds only the decade 100: add 2× and 5×.
        assert_eq!(log(30.0, 900.0), vec![50.0, 100.0, 200.0, 500.0]);
        // Exactly on the ends counts as in range: three decades need no 2× and 5×.
        assert_eq!(log(1.0, 100.0), vec![1.0, 10.0, 100.0]);
        assert_eq!(log(1.0, 50.0), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0]);
        assert!(log(0.0, 10.0).is_empty());
    }

    #[test]
    fn a_log_range_pads_and_is_at_least_a_decade() {
        let (lo, hi) = log_range(20.0, 2000.0);
        // Span 2 decades, 5 % pad = 0.1 decade each side.
        assert!((lo - 20.0 / 10f64.powf(0.1)).abs() < 1e-9);
        assert!((hi - 2000.0 * 10f64.powf(0.1)).abs() < 1e-6);
        let (lo, hi) = log_range(100.0, 100.0);
        assert!((hi / lo - 10.0).abs() < 1e-9 && lo < 100.0 && hi > 100.0);
        assert!(log(lo, hi).len() >= 2);
    }

    #[test]
    fn linear_ticks_step_by_one_two_five() {
        assert_eq!(linear(0.0, 4.2), vec![0.0, 1.0, 2.0, 3.0, 4.0]);
        let small: Vec<String> = linear(0.0, 0.0042)
            .into_iter()
            .map(|v| format!("{v}"))
            .collect();
        assert_eq!(small, ["0", "0.001", "0.002", "0.003", "0.004"]);
        assert_eq!(linear(0.0, 105.0), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
    }

    #[test]
    fn plain_ticks_are_tidy() {
        let l: Vec<String> = [0.0, 0.5, 1.5, 2500.0, 25_000.0, 1_200_000.0]
            .into_iter()
            .map(|v| Unit::Plain.label(v))
            .collect();
        assert_eq!(l, ["0", "0.5", "1.5", "2500", "25k", "1.20M"]);
    }

    #[test]
    fn micros_pick_their_unit() {
        assert_eq!(micros(10.0), "10 µs");
        assert_eq!(micros(100.0), "100 µs");
        assert_eq!(micros(1000.0), "1 ms");
        assert_eq!(micros(2500.0), "2.5 ms");
        assert_eq!(micros(20_000.0), "20 ms");
        assert_eq!(micros(1_000_000.0), "1 s");
        assert_eq!(micros(0.5), "500 ns");
        assert_eq!(micros(0.0), "0 µs");
    }
}
