//! db_bench's `mixgraph` model (Cao et al., "Characterizing, Modeling, and Benchmarking RocksDB
//! Key-Value Workloads at Facebook", FAST'20) as a kvmeter workload: the operation mix
//! (get/put/seek), value sizes and scan lengths from generalized Pareto distributions, key
//! hotness from a power law or from two-term exponential key-range hotness. The QPS sine lives
//! in the open-loop schedule (`driver::arrivals`), which this module only describes
//! (`SineRate`): the workload knows nothing of time.
//!
//! The formulas are db_bench's (`tools/db_bench_tool.cc`: `ParetoCdfInversion`,
//! `PowerCdfInversion`, `GenerateTwoTermExpKeys`, `MixGraph`), including its clamps: a value
//! size below 10 is 10 and one above `mix_max_value_size` is taken modulo it; a scan length is
//! taken modulo `mix_max_scan_len` (and at least 1 here: kvmeter has no empty scan). Where
//! db_bench shuffles the key ranges' hotness at random, kvmeter keeps range i (by key number)
//! at the hotness f(i+1), so a run's hot ranges are known (docs/workloads-models.md).

use super::keys::fnvhash64;
use super::Rng;
use serde::Serialize;

/// Every `mixgraph.` property: db_bench's flag names, prefixed.
pub const PROPERTIES: &[&str] = &[
    "mixgraph.value_k",
    "mixgraph.value_sigma",
    "mixgraph.value_theta",
    "mixgraph.mix_max_value_size",
    "mixgraph.iter_k",
    "mixgraph.iter_sigma",
    "mixgraph.iter_theta",
    "mixgraph.mix_max_scan_len",
    "mixgraph.key_dist_a",
    "mixgraph.key_dist_b",
    "mixgraph.keyrange_dist_a",
    "mixgraph.keyrange_dist_b",
    "mixgraph.keyrange_dist_c",
    "mixgraph.keyrange_dist_d",
    "mixgraph.keyrange_num",
    "mixgraph.mix_get_ratio",
    "mixgraph.mix_put_ratio",
    "mixgraph.mix_seek_ratio",
    "mixgraph.sine_mix_rate",
    "mixgraph.sine_a",
    "mixgraph.sine_b",
    "mixgraph.sine_c",
    "mixgraph.sine_d",
    "mixgraph.sine_mix_rate_noise",
    "mixgraph.sine_mix_rate_interval_milliseconds",
];

/// A generalized Pareto distribution as db_bench writes it: location θ, shape k, scale σ;
/// F(x) = 1 − (1 + k(x−θ)/σ)^(−1/k) (k ≠ 0), 1 − e^(−(x−θ)/σ) (k = 0).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Gpd {
    pub theta: f64,
    pub k: f64,
    pub sigma: f64,
}

impl Gpd {
    /// `ParetoCdfInversion(u, theta, k, sigma)`: the inverse CDF at 1 − u, rounded up.
    #[inline]
    pub fn inverse_ceil(&self, u: f64) -> i64 {
        let x = if self.k == 0.0 {
            self.theta - self.sigma * u.ln()
        } else {
            self.theta + self.sigma * (u.powf(-self.k) - 1.0) / self.k
        };
        // `as` saturates: an infinite draw (u = 0) becomes i64::MAX, folded by the caller.
        x.ceil() as i64
    }
}

/// The model's settings, with db_bench's flag names and defaults.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MixGraphConfig {
    pub value: Gpd,
    pub mix_max_value_size: i64,
    pub iter: Gpd,
    pub mix_max_scan_len: i64,
    pub key_dist_a: f64,
    pub key_dist_b: f64,
    /// a, b, c, d of f(x) = a·e^(b·x) + c·e^(d·x).
    pub keyrange_dist: [f64; 4],
    pub keyrange_num: i64,
    pub mix_get_ratio: f64,
    pub mix_put_ratio: f64,
    pub mix_seek_ratio: f64,
    /// The QPS sine, when `sine_mix_rate=true` (the schedule's, `plan::OpenLoop::sine`).
    pub sine: Option<SineRate>,
}

impl Default for MixGraphConfig {
    fn default() -> Self {
        MixGraphConfig {
            value: Gpd {
                theta: 0.0,
                k: 0.2615,
                sigma: 25.45,
            },
            mix_max_value_size: 1024,
            iter: Gpd {
                theta: 0.0,
                k: 2.517,
                sigma: 14.236,
            },
            mix_max_scan_len: 10000,
            key_dist_a: 0.0,
            key_dist_b: 0.0,
            keyrange_dist: [0.0; 4],
            keyrange_num: 1,
            mix_get_ratio: 1.0,
            mix_put_ratio: 0.0,
            mix_seek_ratio: 0.0,
            sine: None,
        }
    }
}

/// rate(t) = a·sin(b·t + c) + d operations per second, t in seconds from the phase's start;
/// with `noise` > 0 each `interval_ms` window adds δ·noise with δ uniform on [−a/2, a/2)
/// (db_bench's `AddNoise`, drawn here from the run's seed when the schedule is built).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SineRate {
    pub a: f64,
    pub b: f64,
    pub c: f64,
    pub d: f64,
    pub noise: f64,
    pub interval_ms: u64,
}

impl SineRate {
    /// The noiseless rate at `t` seconds.
    #[inline]
    pub fn rate(&self, t: f64) -> f64 {
        self.a * (self.b * t + self.c).sin() + self.d
    }

    /// ∫₀ᵗ rate: d·t + (a/b)(cos c − cos(b·t + c)) (a·t·sin c when b = 0).
    #[inline]
    pub fn integral(&self, t: f64) -> f64 {
        if self.b == 0.0 {
            return (self.a * self.c.sin() + self.d) * t;
        }
        self.d * t + self.a / self.b * (self.c.cos() - (self.b * t + self.c).cos())
    }

    /// The lowest rate the schedule can reach, noise included: it must stay positive.
    pub fn floor(&self) -> f64 {
        self.d - self.a.abs() - self.noise * self.a.abs() / 2.0
    }
}

/// What one mixgraph operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MixOp {
    Get,
    Put,
    Seek,
}

/// The model, built once per phase; every draw is a few float operations (no allocation).
pub struct MixGraph {
    cfg: MixGraphConfig,
    /// Cumulative thresholds of get and put (seek is the rest).
    get_below: f64,
    put_below: f64,
    /// Cumulative access probability of each key range (empty: one range).
    ranges: Vec<f64>,
    range_size: i64,
    keys: i64,
}

impl MixGraph {
    /// The model over `keys` key numbers (from 0). The config must be validated
    /// (`plan::workload`): ratios ≥ 0 with a positive sum, positive maxima.
    pub fn new(cfg: MixGraphConfig, keys: i64) -> Self {
        let sum = cfg.mix_get_ratio + cfg.mix_put_ratio + cfg.mix_seek_ratio;
        let get_below = cfg.mix_get_ratio / sum;
        let put_below = get_below + cfg.mix_put_ratio / sum;
        let keys = keys.max(1);
        let [a, b, c, d] = cfg.keyrange_dist;
        let n = cfg.keyrange_num.clamp(1, keys);
        let mut ranges = Vec::new();
        if n > 1 && [a, b, c, d].iter().any(|v| *v != 0.0) {
            let hot: Vec<f64> = (1..=n)
                .map(|x| {
                    let x = x as f64;
                    (a * (b * x).exp() + c * (d * x).exp()).max(0.0)
                })
                .collect();
            let total: f64 = hot.iter().sum();
            if total > 0.0 {
                let mut acc = 0.0;
                for h in hot {
                    acc += h / total;
                    ranges.push(acc);
                }
            }
        }
        let range_size = if ranges.is_empty() { keys } else { keys / n };
        MixGraph {
            cfg,
            get_below,
            put_below,
            ranges,
            range_size,
            keys,
        }
    }

    pub fn config(&self) -> &MixGraphConfig {
        &self.cfg
    }

    /// The operation for a uniform draw `u` in [0, 1).
    #[inline]
    pub fn op(&self, u: f64) -> MixOp {
        if u < self.get_below {
            MixOp::Get
        } else if u < self.put_below {
            MixOp::Put
        } else {
            MixOp::Seek
        }
    }

    /// A value size: `ParetoCdfInversion` with db_bench's clamps (below 10 → 10, above the
    /// maximum → modulo the maximum).
    #[inline]
    pub fn value_size(&self, rng: &mut Rng) -> i64 {
        let v = self.cfg.value.inverse_ceil(open_unit(rng));
        fold_value(v, self.cfg.mix_max_value_size)
    }

    /// A scan length: the iterator Pareto modulo `mix_max_scan_len`, at least 1.
    #[inline]
    pub fn scan_len(&self, rng: &mut Rng) -> i64 {
        let v = self.cfg.iter.inverse_ceil(open_unit(rng));
        (v.max(0) % self.cfg.mix_max_scan_len).max(1)
    }

    /// The power law's rank for `u` (`PowerCdfInversion`: ⌈(u/a)^(1/b)⌉), the draw behind a
    /// key before it is hashed onto the key space; `None` without a power law.
    #[inline]
    pub fn power_rank(&self, u: f64) -> Option<i64> {
        let (a, b) = (self.cfg.key_dist_a, self.cfg.key_dist_b);
        if a == 0.0 || b == 0.0 {
            return None;
        }
        Some((u / a).powf(1.0 / b).ceil() as i64)
    }

    /// The key range a uniform draw `u` falls in (0 without key ranges).
    #[inline]
    pub fn range_of(&self, u: f64) -> i64 {
        // A linear walk: keyrange_num is bounded (plan::workload: at most 1024).
        for (i, p) in self.ranges.iter().enumerate() {
            if u < *p {
                return i as i64;
            }
        }
        self.ranges.len().saturating_sub(1) as i64
    }

    /// A key number in [0, keys): a key range by its hotness, then within it the power law's
    /// rank hashed to an offset (db_bench: a `Random64` seeded with the rank), or a uniform
    /// offset without a power law.
    #[inline]
    pub fn keynum(&self, rng: &mut Rng) -> i64 {
        let range = if self.ranges.is_empty() {
            0
        } else {
            self.range_of(rng.next_f64())
        };
        let size = self.range_size.max(1);
        let offset = match self.power_rank(rng.next_f64()) {
            Some(rank) => (fnvhash64(rank) as u64 % size as u64) as i64,
            None => rng.next_u64_below(size as u64) as i64,
        };
        (range * size + offset).min(self.keys - 1)
    }
}

/// Uniform on (0, 1]: the inverse CDFs take a log or a negative power of it.
#[inline]
fn open_unit(rng: &mut Rng) -> f64 {
    1.0 - rng.next_f64()
}

/// db_bench's value-size clamp.
#[inline]
pub fn fold_value(v: i64, max: i64) -> i64 {
    if v < 10 {
        10
    } else if v > max {
        v % max
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Kolmogorov–Smirnov critical value at α = 0.001 for n samples (asymptotic:
    /// c(α)/√n with c = √(−ln(α/2)/2) = 1.9495).
    fn ks_critical(n: usize) -> f64 {
        (-(0.0005f64).ln() / 2.0).sqrt() / (n as f64).sqrt()
    }

    /// KS statistic of integer samples against a CDF over the integers.
    fn ks_discrete(samples: &mut [i64], cdf: impl Fn(i64) -> f64) -> f64 {
        samples.sort_unstable();
        let n = samples.len() as f64;
        let mut d: f64 = 0.0;
        let mut i = 0;
        while i < samples.len() {
            let v = samples[i];
            let mut j = i;
            while j < samples.len() && samples[j] == v {
                j += 1;
            }
            // Below v (empirical i/n vs F(v−1)) and at v (j/n vs F(v)).
            d = d.max((i as f64 / n - cdf(v - 1)).abs());
            d = d.max((j as f64 / n - cdf(v)).abs());
            i = j;
        }
        d
    }

    #[test]
    fn the_sine_integral_is_the_area_under_the_rate() {
        let s = SineRate {
            a: 300.0,
            b: 0.7,
            c: 0.4,
            d: 1000.0,
            noise: 0.0,
            interval_ms: 1000,
        };
        // Midpoint rule over 10 s in 1 ms steps, computed from rate() alone.
        let mut area = 0.0;
        for i in 0..10_000 {
            area += s.rate((i as f64 + 0.5) / 1000.0) / 1000.0;
        }
        assert!((s.integral(10.0) - area).abs() < 1e-3, "{area}");
        assert_eq!(s.floor(), 700.0);
    }

    #[test]
    fn ops_follow_the_ratios() {
        let mut c = MixGraphConfig::default();
        (c.mix_get_ratio, c.mix_put_ratio, c.mix_seek_ratio) = (0.8, 0.15, 0.05);
        let m = MixGraph::new(c, 1000);
        assert_eq!(m.op(0.0), MixOp::Get);
        assert_eq!(m.op(0.7999), MixOp::Get);
        assert_eq!(m.op(0.8001), MixOp::Put);
        assert_eq!(m.op(0.9499), MixOp::Put);
        assert_eq!(m.op(0.9501), MixOp::Seek);
    }

    #[test]
    fn value_sizes_fit_the_generalized_pareto() {
        // db_bench's defaults (k 0.2615, σ 25.45, θ 0), max 1024: the exact distribution of
        // ⌈X⌉ with the clamps, from the GPD's CDF written out here.
        let (k, sigma, max) = (0.2615f64, 25.45f64, 1024i64);
        let f = |x: f64| {
            if x <= 0.0 {
                0.0
            } else {
                1.0 - (1.0 + k * x / sigma).powf(-1.0 / k)
            }
        };
        // P(size ≤ v): ⌈X⌉ ≤ v ⟺ X ≤ v; sizes below 10 are 10; sizes above max fold to
        // v % max: add P(⌈X⌉ ∈ (j·max, j·max + v]) for every fold j.
        let cdf = |v: i64| {
            if v < 10 {
                // Folded values below 10 exist (j·max + r, r < 10) but are ≤ 1e-9 likely.
                return 0.0;
            }
            let v = v.min(max);
            let mut p = f(v as f64);
            for j in 1..200 {
                let lo = (j * max) as f64;
                p += f(lo + v as f64) - f(lo);
            }
            p
        };
        let m = MixGraph::new(MixGraphConfig::default(), 1000);
        let mut rng = Rng::for_worker(11, 0);
        let n = 50_000;
        let mut s: Vec<i64> = (0..n).map(|_| m.value_size(&mut rng)).collect();
        assert!(s.iter().all(|v| (0..=max).contains(v)));
        let d = ks_discrete(&mut s, cdf);
        assert!(d < ks_critical(n), "D = {d}, critical {}", ks_critical(n));
        // The test can fail: a σ 20 % off is refused.
        let wrong = |v: i64| {
            let x = v.max(10).min(max) as f64;
            1.0 - (1.0 + k * x / (sigma * 1.2)).powf(-1.0 / k)
        };
        assert!(ks_discrete(&mut s, wrong) > ks_critical(n));
    }

    #[test]
    fn key_ranks_fit_the_power_law() {
        // F(x) = a·x^b on [0, (1/a)^(1/b)]; the rank is ⌈x⌉, so P(rank ≤ r) = min(1, a·r^b).
        let mut c = MixGraphConfig::default();
        (c.key_dist_a, c.key_dist_b) = (0.002312, 0.3467);
        let (a, b) = (c.key_dist_a, c.key_dist_b);
        let m = MixGraph::new(c, 1_000_000);
        let mut rng = Rng::for_worker(12, 0);
        let n = 50_000;
        let mut s: Vec<i64> = (0..n)
            .map(|_| m.power_rank(rng.next_f64()).unwrap())
            .collect();
        let d = ks_discrete(&mut s, |r| (a * (r.max(0) as f64).powf(b)).min(1.0));
        assert!(d < ks_critical(n), "D = {d}");
        // Every key lands in the key space.
        for _ in 0..10_000 {
            assert!((0..1_000_000).contains(&m.keynum(&mut rng)));
        }
    }

    #[test]
    fn key_ranges_follow_the_two_term_exponential() {
        let c = MixGraphConfig {
            keyrange_dist: [14.18, -2.917, 0.0164, -0.08082],
            keyrange_num: 30,
            ..MixGraphConfig::default()
        };
        let m = MixGraph::new(c, 30_000);
        let mut rng = Rng::for_worker(13, 0);
        let n = 100_000;
        let mut counts = [0u64; 30];
        for _ in 0..n {
            counts[(m.keynum(&mut rng) / 1000) as usize] += 1;
        }
        let f = |x: f64| 14.18 * (-2.917 * x).exp() + 0.0164 * (-0.08082 * x).exp();
        let total: f64 = (1..=30).map(|x| f(x as f64)).sum();
        // KS over the range index.
        let (mut emp, mut want, mut d) = (0.0, 0.0, 0.0f64);
        for (i, c) in counts.iter().enumerate() {
            emp += *c as f64 / n as f64;
            want += f((i + 1) as f64) / total;
            d = d.max((emp - want).abs());
        }
        assert!(d < ks_critical(n), "D = {d}");
        assert!(counts[0] > counts[1] && counts[1] > counts[29]);
    }

    #[test]
    fn scan_lengths_fold_into_the_maximum() {
        let c = MixGraphConfig {
            mix_max_scan_len: 100,
            ..MixGraphConfig::default()
        };
        let m = MixGraph::new(c, 10);
        let mut rng = Rng::for_worker(14, 0);
        for _ in 0..10_000 {
            assert!((1..100).contains(&m.scan_len(&mut rng)));
        }
        assert_eq!(fold_value(3, 1024), 10);
        assert_eq!(fold_value(1025, 1024), 1);
        assert_eq!(fold_value(500, 1024), 500);
    }
}
