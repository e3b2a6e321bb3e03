//! What a trace holds, read once in bounded memory (`kvmeter trace stats`): records and
//! duration, the rate over time, the op mix by the trace's own names and by `Kind`, key
//! popularity (distinct keys and a Zipf α fit) and key and value size distributions — so a
//! user sees what they are about to replay. Pure computation over a `TraceReader`; `cli`
//! prints it and writes the files and figures.
//!
//! Bounds (a trace can be larger than memory): the rate is counted in buckets of one second
//! until there are `MAX_BUCKETS`, then adjacent buckets merge (the width doubles, stated in the
//! output); keys are tracked by a 64-bit hash up to `Options::key_cap` distinct keys (a
//! collision among 10M keys has a probability near 3·10⁻⁶), past which the distinct count is
//! "at least" and popularity covers the keys seen first; sizes are counted exactly up to
//! `MAX_SIZES` distinct sizes, past which they are rounded to a coarser grid (stated); op names
//! past `MAX_OPS` distinct are counted as "(other)".

use super::{Kind, TraceReader, TraceRecord};
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

/// The most rate buckets kept (then they merge pairwise).
pub const MAX_BUCKETS: usize = 100_000;
/// The most distinct sizes counted exactly.
pub const MAX_SIZES: usize = 1 << 20;
/// The most distinct op names counted by name.
pub const MAX_OPS: usize = 256;
/// The default bound on tracked distinct keys.
pub const KEY_CAP: usize = 10_000_000;
/// The most ranks the Zipf fit uses.
pub const FIT_RANKS: usize = 1000;
/// Keys seen fewer times than this are left out of the fit (their counts are mostly noise,
/// and sorted noise bends the tail of a rank–frequency line).
pub const FIT_MIN_COUNT: u64 = 10;

#[derive(Clone, Debug)]
pub struct Options {
    pub key_cap: usize,
    /// Count lines that break the format and go on, rather than stop at the first.
    pub skip_bad: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            key_cap: KEY_CAP,
            skip_bad: false,
        }
    }
}

/// A size distribution: exact counts per size, coarsened when there are too many sizes.
#[derive(Clone, Debug, Default)]
pub struct Sizes {
    counts: HashMap<u64, u64>,
    /// Sizes are rounded down to a multiple of 2^shift (0: exact).
    pub shift: u32,
    pub n: u64,
    pub sum: u128,
}

impl Sizes {
    pub fn add(&mut self, v: u64) {
        self.n += 1;
        self.sum += u128::from(v);
        *self
            .counts
            .entry(v >> self.shift << self.shift)
            .or_insert(0) += 1;
        if self.counts.len() > MAX_SIZES {
            self.shift += 4;
            let old = std::mem::take(&mut self.counts);
            for (k, c) in old {
                *self
                    .counts
                    .entry(k >> self.shift << self.shift)
                    .or_insert(0) += c;
            }
        }
    }

    /// The nearest-rank percentiles: for each q, the smallest size with at least ⌈q·n⌉ of
    /// the sizes at or below it (q = 0: the smallest size).
    pub fn percentiles(&self, qs: &[f64]) -> Vec<u64> {
        let mut sorted: Vec<(u64, u64)> = self.counts.iter().map(|(&k, &c)| (k, c)).collect();
        sorted.sort_unstable();
        qs.iter()
            .map(|&q| {
                let want = ((q * self.n as f64).ceil() as u64).max(1);
                let mut seen = 0;
                for &(v, c) in &sorted {
                    seen += c;
                    if seen >= want {
                        return v;
                    }
                }
                sorted.last().map_or(0, |&(v, _)| v)
            })
            .collect()
    }
}

/// A least-squares line through (ln rank, ln count) of the most popular keys: count ∝
/// rank^(−α). A fit, stated with its R² and the ranks it used.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ZipfFit {
    pub alpha: f64,
    pub r2: f64,
    pub ranks: usize,
}

/// Fits α over the top counts (sorted descending inside): ranks 1..=FIT_RANKS with at least
/// FIT_MIN_COUNT each; None with fewer than 3 such ranks.
pub fn zipf_fit(counts: &mut [u64]) -> Option<ZipfFit> {
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let pts: Vec<(f64, f64)> = counts
        .iter()
        .take(FIT_RANKS)
        .take_while(|&&c| c >= FIT_MIN_COUNT)
        .enumerate()
        .map(|(i, &c)| (((i + 1) as f64).ln(), (c as f64).ln()))
        .collect();
    if pts.len() < 3 {
        return None;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let syy: f64 = pts.iter().map(|p| (p.1 - my).powi(2)).sum();
    let slope = sxy / sxx;
    let r2 = if syy == 0.0 {
        1.0
    } else {
        sxy * sxy / (sxx * syy)
    };
    Some(ZipfFit {
        alpha: -slope,
        r2,
        ranks: pts.len(),
    })
}

/// Everything `trace stats` reports.
#[derive(Clone, Debug, Default)]
pub struct TraceStats {
    pub records: u64,
    /// Lines skipped as bad (`--skip-bad`), and the first one's message.
    pub bad_lines: u64,
    pub first_bad: Option<String>,
    pub first_us: Option<u64>,
    pub min_us: u64,
    pub max_us: u64,
    /// Records whose time is before an earlier record's (counted in the first bucket).
    pub out_of_order: u64,
    /// Records per bucket of `bucket_s` seconds from the first record's time.
    pub buckets: Vec<u64>,
    pub bucket_s: u64,
    pub whole_second: bool,
    pub ops: BTreeMap<String, u64>,
    pub kinds: BTreeMap<Kind, u64>,
    keys: HashMap<u64, u64>,
    pub distinct_keys: u64,
    /// More distinct keys than the cap: `distinct_keys` is a lower bound.
    pub keys_at_least: bool,
    /// Sizes of the keys of every record with one.
    pub key_sizes: Sizes,
    /// Sizes of the values written (Write records): what a replay generates.
    pub value_sizes: Sizes,
}

impl TraceStats {
    fn add(&mut self, r: &TraceRecord, key_cap: usize) {
        self.records += 1;
        self.whole_second |= r.whole_second;
        let first = *self.first_us.get_or_insert(r.time_us);
        if self.records == 1 {
            (self.min_us, self.max_us) = (r.time_us, r.time_us);
            self.bucket_s = 1;
        }
        if r.time_us < self.max_us {
            self.out_of_order += 1;
        }
        self.min_us = self.min_us.min(r.time_us);
        self.max_us = self.max_us.max(r.time_us);
        self.count_rate(r.time_us.saturating_sub(first) / 1_000_000);
        let op = if self.ops.len() < MAX_OPS || self.ops.contains_key(&r.op) {
            r.op.as_str()
        } else {
            "(other)"
        };
        match self.ops.get_mut(op) {
            Some(c) => *c += 1,
            None => {
                self.ops.insert(op.to_string(), 1);
            }
        }
        *self
            .kinds
            .entry(r.kind.unwrap_or(Kind::Unreplayable))
            .or_insert(0) += 1;
        if !r.key.is_empty() {
            self.count_key(&r.key, key_cap);
            self.key_sizes.add(r.key.len() as u64);
        }
        if r.kind == Some(Kind::Write) {
            self.value_sizes.add(r.value_size);
        }
    }

    fn count_rate(&mut self, sec: u64) {
        let mut idx = sec / self.bucket_s;
        while idx >= MAX_BUCKETS as u64 {
            // Merge pairs: the width doubles, memory stays at MAX_BUCKETS.
            let merged: Vec<u64> = self.buckets.chunks(2).map(|c| c.iter().sum()).collect();
            self.buckets = merged;
            self.bucket_s *= 2;
            idx = sec / self.bucket_s;
        }
        let idx = idx as usize;
        if self.buckets.len() <= idx {
            self.buckets.resize(idx + 1, 0);
        }
        self.buckets[idx] += 1;
    }

    fn count_key(&mut self, key: &[u8], cap: usize) {
        let mut h = std::hash::DefaultHasher::new();
        key.hash(&mut h);
        let h = h.finish();
        if let Some(c) = self.keys.get_mut(&h) {
            *c += 1;
        } else if self.keys.len() < cap {
            self.keys.insert(h, 1);
            self.distinct_keys += 1;
        } else {
            // Unknown whether it is new: the count becomes a lower bound.
            self.keys_at_least = true;
        }
    }

    /// The trace's span, first to last time, in seconds.
    pub fn duration_s(&self) -> f64 {
        (self.max_us - self.min_us) as f64 / 1e6
    }

    /// The Zipf fit of the tracked keys' counts (consumes the key table).
    pub fn zipf(&mut self) -> Option<ZipfFit> {
        let mut counts: Vec<u64> = std::mem::take(&mut self.keys).into_values().collect();
        zipf_fit(&mut counts)
    }
}

/// Reads the whole trace. A bad line stops it (the error names file:line) unless
/// `skip_bad`, which counts it and goes on; an error that does not move past its line (a read
/// error) stops it either way.
pub fn collect(reader: &mut TraceReader, opts: &Options) -> Result<TraceStats, super::TraceError> {
    let mut st = TraceStats::default();
    let mut rec = TraceRecord::default();
    let mut last_bad = None;
    loop {
        match reader.next_into(&mut rec) {
            Ok(true) => st.add(&rec, opts.key_cap),
            Ok(false) => return Ok(st),
            Err(e) if opts.skip_bad && last_bad != Some(e.line) => {
                last_bad = Some(e.line);
                st.bad_lines += 1;
                st.first_bad.get_or_insert_with(|| e.to_string());
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s = Sizes::default();
        for v in 1..=100 {
            s.add(v);
        }
        assert_eq!(
            s.percentiles(&[0.0, 0.5, 0.9, 0.99, 1.0]),
            vec![1, 50, 90, 99, 100]
        );
    }

    #[test]
    fn an_exact_power_law_fits_its_exponent() {
        let mut c: Vec<u64> = (1..=200)
            .map(|r| (1e6 * (r as f64).powf(-1.2)).round() as u64)
            .collect();
        let f = zipf_fit(&mut c).unwrap();
        assert!((f.alpha - 1.2).abs() < 0.01, "{f:?}");
        assert!(f.r2 > 0.999);
    }

    #[test]
    fn rate_buckets_merge_past_the_bound() {
        let mut st = TraceStats {
            bucket_s: 1,
            ..Default::default()
        };
        st.count_rate(0);
        st.count_rate(MAX_BUCKETS as u64 + 1);
        assert_eq!(st.bucket_s, 2);
        assert_eq!(st.buckets.iter().sum::<u64>(), 2);
        assert!(st.buckets.len() <= MAX_BUCKETS);
    }
}
