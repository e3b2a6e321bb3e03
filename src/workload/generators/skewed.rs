//! The request distributions built on the core generators: latest, hotspot, exponential and
//! sequential (§5.4–§5.7).

use super::*;

/// `SkewedLatestGenerator(basis)` (§5.4): favours the newest acknowledged key; never 0 (quirk 6).
pub struct SkewedLatest {
    zipf: Zipfian,
}

impl SkewedLatest {
    pub fn new(basis: &AcknowledgedCounter) -> Self {
        SkewedLatest {
            zipf: Zipfian::new(0, basis.last() - 1),
        }
    }
    #[inline]
    pub fn next(&self, rng: &mut Rng, basis: &AcknowledgedCounter) -> i64 {
        let max = basis.last();
        max - self.zipf.next_n(rng, max)
    }
}

/// `HotspotIntegerGenerator` (§5.5). Empty hot or cold sets on a reachable branch are rejected
/// at validation (quirk 10), so `next` never divides by zero.
#[derive(Debug, Clone)]
pub struct Hotspot {
    lb: i64,
    hot_interval: i64,
    cold_interval: i64,
    hot_opn_fraction: f64,
}

impl Hotspot {
    pub fn new(lb: i64, ub: i64, hotset_fraction: f64, hot_opn_fraction: f64) -> Self {
        let (lb, ub) = if lb > ub { (ub, lb) } else { (lb, ub) };
        let hotset_fraction = if (0.0..=1.0).contains(&hotset_fraction) {
            hotset_fraction
        } else {
            0.0
        };
        let hot_opn_fraction = if (0.0..=1.0).contains(&hot_opn_fraction) {
            hot_opn_fraction
        } else {
            0.0
        };
        let interval = ub - lb + 1;
        // The cast is to a 32-bit int upstream.
        let hot_interval = (interval as f64 * hotset_fraction) as i32 as i64;
        Hotspot {
            lb,
            hot_interval,
            cold_interval: interval - hot_interval,
            hot_opn_fraction,
        }
    }
    pub fn intervals(&self) -> (i64, i64) {
        (self.hot_interval, self.cold_interval)
    }
    pub fn mean(&self) -> f64 {
        let (lb, hot, cold) = (
            self.lb as f64,
            self.hot_interval as f64,
            self.cold_interval as f64,
        );
        self.hot_opn_fraction * (lb + hot / 2.0)
            + (1.0 - self.hot_opn_fraction) * (lb + hot + cold / 2.0)
    }
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> i64 {
        if rng.next_f64() < self.hot_opn_fraction {
            self.lb + rng.next_i64().wrapping_abs() % self.hot_interval
        } else {
            self.lb + self.hot_interval + rng.next_i64().wrapping_abs() % self.cold_interval
        }
    }
}

/// `ExponentialGenerator(percentile, range)` (§5.6).
#[derive(Debug, Clone)]
pub struct Exponential {
    gamma: f64,
}

impl Exponential {
    pub fn new(percentile: f64, range: f64) -> Self {
        Exponential {
            gamma: -(1.0 - percentile / 100.0).ln() / range,
        }
    }
    pub fn gamma(&self) -> f64 {
        self.gamma
    }
    pub fn mean(&self) -> f64 {
        1.0 / self.gamma
    }
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> f64 {
        -rng.next_f64().ln() / self.gamma
    }
}

/// `SequentialGenerator(start, end)` (§5.7): cycles through [start, end] over a shared counter.
pub struct Sequential {
    start: i64,
    interval: i64,
    counter: AtomicI64,
}

impl Sequential {
    pub fn new(start: i64, end: i64) -> Self {
        Sequential {
            start,
            interval: end - start + 1,
            counter: AtomicI64::new(0),
        }
    }
    #[inline]
    pub fn next(&self) -> i64 {
        self.start + self.counter.fetch_add(1, Ordering::Relaxed) % self.interval
    }
}
