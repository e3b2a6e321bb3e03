//! Percentiles and summary values the way YCSB's HdrHistogram 2.1.12 computes them
//! (ycsb-workload-spec §8.6): rank = max(1, ceil(nextDown(p)·n/100)), then the highest
//! equivalent value of the bucket where the cumulative count reaches the rank. The Rust crate's
//! own `value_at_quantile` rounds differently at exact boundaries, so the rank is computed here.

use hdrhistogram::Histogram;

fn next_down(x: f64) -> f64 {
    if x > 0.0 {
        f64::from_bits(x.to_bits() - 1)
    } else if x == 0.0 {
        -f64::from_bits(1)
    } else {
        f64::from_bits(x.to_bits() + 1)
    }
}

/// Value at percentile `p` (0..=100), in the histogram's unit.
pub fn value_at(h: &Histogram<u64>, p: f64) -> u64 {
    let total = h.len();
    if total == 0 {
        return 0;
    }
    let q = next_down(p).clamp(0.0, 100.0);
    let rank = ((q * total as f64 / 100.0).ceil() as u64).max(1);
    let mut seen = 0u64;
    for v in h.iter_recorded() {
        seen += v.count_at_value();
        if seen >= rank {
            let value = v.value_iterated_to();
            return if p == 0.0 {
                h.lowest_equivalent(value)
            } else {
                h.highest_equivalent(value)
            };
        }
    }
    h.highest_equivalent(h.max())
}

/// HdrHistogram's mean: Σ(median-equivalent × count) / total; 0 when empty (2.1.12).
pub fn mean(h: &Histogram<u64>) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    let sum: f64 = h
        .iter_recorded()
        .map(|v| h.median_equivalent(v.value_iterated_to()) as f64 * v.count_at_value() as f64)
        .sum();
    sum / h.len() as f64
}

/// Lowest-equivalent of the minimum (0 when empty).
pub fn min(h: &Histogram<u64>) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.lowest_equivalent(h.min())
    }
}

/// Highest-equivalent of the maximum (0 when empty).
pub fn max(h: &Histogram<u64>) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.highest_equivalent(h.max())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::new_histogram;

    fn with(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut h = new_histogram();
        for v in values {
            h.record(v).unwrap();
        }
        h
    }

    #[test]
    fn vectors_12_9() {
        let h = with(1..=10_000);
        assert_eq!(h.len(), 10_000);
        assert_eq!(min(&h), 1);
        assert_eq!(max(&h), 10_007);
        assert!((mean(&h) - 5000.898).abs() < 1e-9, "{}", mean(&h));
        assert_eq!(value_at(&h, 50.0), 5003);
        assert_eq!(value_at(&h, 90.0), 9007);
        assert_eq!(value_at(&h, 95.0), 9503);
        assert_eq!(value_at(&h, 99.0), 9903);
        assert_eq!(value_at(&h, 99.9), 9991);
        assert_eq!(value_at(&h, 99.99), 9999);

        let h = with(1..=7);
        assert_eq!(value_at(&h, 50.0), 4);
        assert_eq!(value_at(&h, 90.0), 7); // 2.1.12 (2.1.4 says 6)
        assert_eq!(value_at(&h, 95.0), 7);
        assert_eq!(mean(&h), 4.0);

        let h = with(1..=100);
        assert_eq!(value_at(&h, 7.0), 7);
        assert_eq!(value_at(&h, 50.0), 50);
        assert_eq!(value_at(&h, 95.0), 95);
        assert_eq!(value_at(&h, 99.0), 99);
        assert_eq!(value_at(&h, 99.9), 100);

        let h = with([0, 1, 2047, 2048, 2049, 100_000, 1_234_567]);
        assert_eq!(min(&h), 0);
        assert_eq!(max(&h), 1_234_943);
        assert_eq!(mean(&h), 191511.14285714287);
        assert_eq!(value_at(&h, 50.0), 2049);
        assert_eq!(value_at(&h, 95.0), 1_234_943);

        let h = new_histogram();
        assert_eq!(
            (min(&h), max(&h), mean(&h), value_at(&h, 95.0)),
            (0, 0, 0.0, 0)
        );
    }

    #[test]
    fn equivalence_ranges_12_9() {
        let h = new_histogram();
        for (v, lo, hi, med) in [
            (2047u64, 2047u64, 2047u64, 2047u64),
            (2048, 2048, 2049, 2049),
            (4097, 4096, 4099, 4098),
            (100_000, 99_968, 100_031, 100_000),
            (1_234_567, 1_233_920, 1_234_943, 1_234_432),
        ] {
            assert_eq!(h.lowest_equivalent(v), lo);
            assert_eq!(h.highest_equivalent(v), hi);
            assert_eq!(h.median_equivalent(v), med);
        }
    }
}
