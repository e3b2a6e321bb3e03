//! The Facebook ETC memcached pool's fitted distributions (Atikoglu et al., "Workload Analysis
//! of a Large-Scale Key-Value Store", SIGMETRICS'12), as mutilate ships them (`fb_key`,
//! `fb_value`, `fb_ia` in Generator.cc): key sizes, value sizes and inter-arrival gaps.
//!
//! Two of mutilate's choices are kept because they define what "fb_value" means there: the
//! 15-entry table of small sizes is drawn first and the generalized-Pareto tail is drawn
//! afresh (not conditioned on the size being above the table) with the remaining
//! probability; a key's size is a function of its index (a hash of it through the
//! generalized-extreme-value inverse CDF), so a key has one name for the whole run. One is not:
//! mutilate builds both Pareto generators as `GPareto(214.476, 0.348238)`, which its
//! constructor reads as (location, scale) with shape 1 — kvmeter uses the paper's fit
//! (location 0, scale σ, shape ξ) as the constants' names say (docs/workloads-models.md).

use super::Rng;

/// Generalized extreme value key sizes: μ, σ, ξ (bytes).
pub const KEY_GEV: (f64, f64, f64) = (30.7984, 8.20449, 0.078688);
/// The value-size tail: generalized Pareto θ = 0, σ, ξ (bytes).
pub const VALUE_GPD: (f64, f64) = (214.476, 0.348238);
/// Inter-arrival gaps: generalized Pareto θ = 0, σ, ξ (µs). kvmeter keeps the shape and scales
/// σ to the offered rate (mutilate's `set_lambda`): mean gap (σ/(1 − ξ)) = 1/rate.
pub const IA_GPD: (f64, f64) = (16.0292, 0.154971);
/// mutilate's table of small value sizes: (probability, size in bytes).
pub const VALUE_TABLE: [(f64, i64); 15] = [
    (0.00536, 0),
    (0.00047, 1),
    (0.17820, 2),
    (0.09239, 3),
    (0.00018, 4),
    (0.02740, 5),
    (0.00065, 6),
    (0.00606, 7),
    (0.00023, 8),
    (0.00837, 9),
    (0.00837, 10),
    (0.08989, 11),
    (0.00092, 12),
    (0.00326, 13),
    (0.01980, 14),
];
/// The longest key a memcached key may be (250 bytes), which bounds fb_key's tail.
pub const MAX_KEY: usize = 250;
/// The largest value fb_value draws (the tail is unbounded; 1 MiB is memcached's item limit).
pub const MAX_VALUE: i64 = 1 << 20;

/// The generalized Pareto inverse CDF at 1 − u (u in (0, 1]): σ(u^(−ξ) − 1)/ξ.
#[inline]
pub fn gpd_inverse(u: f64, sigma: f64, xi: f64) -> f64 {
    sigma * (u.powf(-xi) - 1.0) / xi
}

/// An `fb_value` size: the table, else the Pareto tail truncated to whole bytes (mutilate's
/// double → int), at most `MAX_VALUE`.
#[inline]
pub fn value_size(rng: &mut Rng) -> i64 {
    let mut u = rng.next_f64();
    for (p, size) in VALUE_TABLE {
        if u < p {
            return size;
        }
        u -= p;
    }
    let (sigma, xi) = VALUE_GPD;
    let x = gpd_inverse(1.0 - rng.next_f64(), sigma, xi);
    (x as i64).clamp(0, MAX_VALUE)
}

/// The `fb_key` length of key `index` among `keys`: ⌊G + ½⌋ with G the GEV's inverse CDF at
/// u = hash(index)/2^64 (mutilate's KeyGenerator), at least the digits of `keys` (so every
/// index fits) and at most `MAX_KEY`.
#[inline]
pub fn key_len(index: i64, keys: i64) -> usize {
    let h = fnv1a64(index as u64);
    // u in (0, 1): the GEV draws E = −ln u, an exponential.
    let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let (mu, sigma, xi) = KEY_GEV;
    let e = -u.ln();
    let g = mu + sigma * (e.powf(-xi) - 1.0) / xi;
    let digits = digits(keys.max(1) as u64);
    (g.round().max(0.0) as usize).clamp(digits, MAX_KEY)
}

/// Writes key `index` as mutilate does: its decimal digits, zero-padded to `key_len`.
#[inline]
pub fn key_name(index: i64, keys: i64, out: &mut Vec<u8>) {
    let len = key_len(index, keys);
    let mut fmt = itoa::Buffer::new();
    let d = fmt.format(index.max(0)).as_bytes();
    out.clear();
    for _ in d.len()..len {
        out.push(b'0');
    }
    out.extend_from_slice(d);
}

fn digits(mut n: u64) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// FNV-1a over the 8 little-endian bytes (mutilate hashes the index with `fnv_64`).
#[inline]
fn fnv1a64(v: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for octet in v.to_le_bytes() {
        h ^= octet as u64;
        h = h.wrapping_mul(1_099_511_628_211);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ks_critical(n: usize) -> f64 {
        1.9495 / (n as f64).sqrt()
    }

    #[test]
    fn value_sizes_fit_the_table_and_the_pareto_tail() {
        // P(size ≤ v) = Σ table(≤ v) + (1 − Σ table)·P(⌊X⌋ ≤ v), X ~ GPD(0, σ, ξ) written out.
        let (sigma, xi) = (214.476f64, 0.348238f64);
        let tail = |v: i64| 1.0 - (1.0 + xi * (v + 1) as f64 / sigma).powf(-1.0 / xi);
        let table = [
            0.00536, 0.00047, 0.17820, 0.09239, 0.00018, 0.02740, 0.00065, 0.00606, 0.00023,
            0.00837, 0.00837, 0.08989, 0.00092, 0.00326, 0.01980,
        ];
        let rest = 1.0 - table.iter().sum::<f64>();
        let cdf = |v: i64| {
            if v < 0 {
                return 0.0;
            }
            let head: f64 = table.iter().take((v + 1).min(15) as usize).sum();
            head + rest * tail(v)
        };
        let mut rng = Rng::for_worker(21, 0);
        let n = 50_000;
        let mut s: Vec<i64> = (0..n).map(|_| value_size(&mut rng)).collect();
        s.sort_unstable();
        let mut d: f64 = 0.0;
        for (i, v) in s.iter().enumerate() {
            let below = s.partition_point(|x| x < v);
            let upto = s.partition_point(|x| x <= v);
            if below == i {
                d = d.max((below as f64 / n as f64 - cdf(v - 1)).abs());
                d = d.max((upto as f64 / n as f64 - cdf(*v)).abs());
            }
        }
        assert!(d < ks_critical(n), "D = {d}");
        // 2 bytes is the commonest size: 17.8 % from the table plus the tail's share.
        let twos = s.iter().filter(|v| **v == 2).count() as f64 / n as f64;
        assert!(
            (twos - 0.1782 - rest * (tail(2) - tail(1))).abs() < 0.01,
            "{twos}"
        );
    }

    #[test]
    fn key_lengths_fit_the_gev_and_are_stable() {
        // F(x) = exp(−(1 + ξ(x − μ)/σ)^(−1/ξ)); the length is round(G): P(len ≤ l) = F(l + ½).
        let (mu, sigma, xi) = (30.7984f64, 8.20449f64, 0.078688f64);
        let f = |x: f64| (-(1.0 + xi * (x - mu) / sigma).powf(-1.0 / xi)).exp();
        let n = 50_000usize;
        let keys = 100i64; // 3 digits: the floor at 3 bytes has F(3.5) ≈ 1e-9 of the mass.
        let mut lens: Vec<usize> = (0..n as i64).map(|i| key_len(i, keys)).collect();
        lens.sort_unstable();
        let mut d: f64 = 0.0;
        for l in 0..=MAX_KEY {
            let upto = lens.partition_point(|x| *x <= l) as f64 / n as f64;
            d = d.max((upto - f(l as f64 + 0.5)).abs());
        }
        assert!(d < ks_critical(n), "D = {d}");
        let mut k = Vec::new();
        key_name(42, 1000, &mut k);
        assert_eq!(k.len(), key_len(42, 1000));
        assert!(k.ends_with(b"42") && k.iter().all(|b| b.is_ascii_digit()));
        let mut again = Vec::new();
        key_name(42, 1000, &mut again);
        assert_eq!(k, again);
    }
}
