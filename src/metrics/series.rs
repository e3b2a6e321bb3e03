//! The exporter's cumulative state: per run × phase × operation, the operations by status,
//! the bytes, and the latency histograms as the buckets Prometheus reads (classic `le`
//! buckets and native exponential buckets), added to once per interval from the interval's
//! HDR histograms. Keeping buckets rather than HDR histograms makes each render a walk over
//! ~100 numbers per series.

use crate::measure::{status_slot_name, Stats, STATUS_SLOTS};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;

/// Classic bucket `i` has the upper bound 2^(i/4) s (19 % wide): from 2^-20 s (0.95 µs) to
/// 2^6 s (64 s), then +Inf. They are the native schema-2 boundaries, so the two agree.
pub const CLASSIC_LO: i32 = -80;
pub const CLASSIC_HI: i32 = 24;
/// Native histograms' schema: bucket `i` is (2^((i-1)/8), 2^(i/8)] seconds (9 % wide).
pub const NATIVE_SCHEMA: i32 = 3;

/// Upper bound of classic bucket `i`, in seconds.
pub fn classic_bound(i: i32) -> f64 {
    (i as f64 / 4.0).exp2()
}

/// The smallest `i` whose bound `2^(i/per_octave)` is at least `s` (s > 0): a logarithm,
/// then corrected by exact compares against the bounds themselves.
fn bucket_index(s: f64, per_octave: i32) -> i32 {
    let p = per_octave as f64;
    let bound = |i: i32| (i as f64 / p).exp2();
    let mut i = (s.log2() * p).ceil() as i32;
    while bound(i - 1) >= s {
        i -= 1;
    }
    while bound(i) < s {
        i += 1;
    }
    i
}

/// One latency histogram, cumulative since its series began.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hist {
    /// Per classic bucket (not cumulative), CLASSIC_LO..=CLASSIC_HI, then the overflow.
    pub classic: Vec<u64>,
    /// Native bucket index → count.
    pub native: BTreeMap<i32, u64>,
    pub count: u64,
    /// Seconds.
    pub sum: f64,
}

impl Hist {
    pub fn new() -> Self {
        Hist {
            classic: vec![0; (CLASSIC_HI - CLASSIC_LO + 2) as usize],
            ..Default::default()
        }
    }

    /// Adds `n` observations of `s` seconds.
    pub fn add(&mut self, s: f64, n: u64) {
        if n == 0 {
            return;
        }
        let s = s.max(1e-12);
        let c = bucket_index(s, 4).max(CLASSIC_LO);
        let slot = if c > CLASSIC_HI {
            self.classic.len() - 1
        } else {
            (c - CLASSIC_LO) as usize
        };
        self.classic[slot] += n;
        *self
            .native
            .entry(bucket_index(s, 1 << NATIVE_SCHEMA))
            .or_default() += n;
        self.count += n;
        self.sum += s * n as f64;
    }

    /// Adds an HDR histogram in nanoseconds: each recorded value as its bucket's highest
    /// equivalent value, as `Histogram::value_at_quantile` (summary.json's percentiles)
    /// reports it.
    pub fn add_hdr(&mut self, h: &Histogram<u64>) {
        for v in h.iter_recorded() {
            self.add(v.value_iterated_to() as f64 * 1e-9, v.count_at_value());
        }
    }

    /// (upper bound, cumulative count) per classic bucket, +Inf last.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        self.classic
            .iter()
            .enumerate()
            .map(|(j, n)| {
                acc += n;
                let i = CLASSIC_LO + j as i32;
                let le = if i > CLASSIC_HI {
                    f64::INFINITY
                } else {
                    classic_bound(i)
                };
                (le, acc)
            })
            .collect()
    }
}

/// One operation's cumulative figures in one phase of one run.
#[derive(Clone, Debug)]
pub struct OpSeries {
    pub statuses: [u64; STATUS_SLOTS],
    pub bytes: u64,
    /// Successful operations, from send (service time).
    pub send: Hist,
    /// Successful operations, from the intended start (paced and open-loop runs).
    pub intended: Option<Hist>,
    /// Misses (`not_found`), from send: for a cache a miss is an answer with its own latency.
    pub missed: Option<Hist>,
}

impl OpSeries {
    pub fn count(&self) -> u64 {
        self.statuses.iter().sum()
    }

    /// Calls answered with a value (ok) and calls answered "no such key" (not_found).
    pub fn hits(&self) -> u64 {
        self.statuses[0]
    }
    pub fn misses(&self) -> u64 {
        self.statuses[1]
    }

    /// hits / (hits + misses); `None` when there was neither.
    pub fn hit_ratio(&self) -> Option<f64> {
        let answered = self.hits() + self.misses();
        (answered > 0).then(|| self.hits() as f64 / answered as f64)
    }

    /// (kind, count) for every status but ok with at least one operation.
    pub fn errors(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        (1..STATUS_SLOTS)
            .filter(|&i| self.statuses[i] > 0)
            .map(|i| (status_slot_name(i), self.statuses[i]))
    }
}

/// Which run, phase, store and agent a series belongs to (its labels but `op`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub run: String,
    pub phase: String,
    pub store: String,
    pub agent: String,
}

impl Key {
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        vec![
            ("run", self.run.clone()),
            ("phase", self.phase.clone()),
            ("store", self.store.clone()),
            ("agent", self.agent.clone()),
        ]
    }
}

/// Everything one phase of one run has exported so far.
#[derive(Clone, Debug, Default)]
pub struct PhaseSeries {
    pub ops: BTreeMap<&'static str, OpSeries>,
    /// The sender's lag (paced and open-loop runs).
    pub lag: Option<Hist>,
    /// Gauges by name (the last interval's figures, telemetry).
    pub gauges: BTreeMap<&'static str, f64>,
    /// Counters set whole (names from `model::TOTALS`): CPU seconds since the process started.
    pub totals: BTreeMap<&'static str, f64>,
    /// Fault events by kind.
    pub faults: BTreeMap<String, u64>,
    /// The store's own statistics at their latest sample (issue 43): by name, whether a
    /// counter, its unit and value.
    pub store: BTreeMap<&'static str, (bool, &'static str, f64)>,
    /// The events the store logged in the phase so far, by kind.
    pub store_events: BTreeMap<String, u64>,
    /// Intervals exported (after warm-up).
    pub intervals: u64,
}

impl PhaseSeries {
    /// Adds one measured interval's operations and histograms.
    pub fn add(&mut self, stats: &Stats) {
        for (m, o) in stats.metrics() {
            let s = self.ops.entry(m.name()).or_insert_with(|| OpSeries {
                statuses: [0; STATUS_SLOTS],
                bytes: 0,
                send: Hist::new(),
                intended: None,
                missed: None,
            });
            for (a, b) in s.statuses.iter_mut().zip(o.statuses) {
                *a += b;
            }
            s.bytes += o.bytes;
            s.send.add_hdr(&o.ok);
            if let Some(i) = &o.intended {
                s.intended.get_or_insert_with(Hist::new).add_hdr(i);
            }
            if let Some(m) = o.missed.as_ref().filter(|m| !m.is_empty()) {
                s.missed.get_or_insert_with(Hist::new).add_hdr(m);
            }
        }
        if let Some(l) = &stats.lag {
            self.lag.get_or_insert_with(Hist::new).add_hdr(l);
        }
        self.intervals += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bounds_are_exact_at_powers_of_two() {
        // 1 s is the upper bound of bucket 0 (le="1"), not in bucket 1.
        assert_eq!(bucket_index(1.0, 4), 0);
        assert_eq!(bucket_index(1.0000001, 4), 1);
        assert_eq!(bucket_index(0.5, 8), -8);
        assert_eq!(bucket_index(0.50001, 8), -7);
        // An independent check over many values: the bound brackets the value.
        for k in 0..2000 {
            let s = 1e-7 * 1.013f64.powi(k);
            let i = bucket_index(s, 8);
            assert!((((i - 1) as f64) / 8.0).exp2() < s && s <= (i as f64 / 8.0).exp2());
        }
    }

    #[test]
    fn classic_buckets_clamp_and_overflow() {
        let mut h = Hist::new();
        h.add(1e-9, 2); // below the first bound: the first bucket
        h.add(100.0, 3); // above 64 s: +Inf only
        let c = h.cumulative();
        assert_eq!(c[0], (classic_bound(CLASSIC_LO), 2));
        assert_eq!(c[c.len() - 2].1, 2);
        assert_eq!(*c.last().unwrap(), (f64::INFINITY, 5));
        assert_eq!(h.count, 5);
    }
}
