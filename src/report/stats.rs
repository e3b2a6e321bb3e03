//! The statistics `kvmeter compare` decides with: one procedure that gives the estimate, its
//! confidence interval, the p-value and the verdict together, so they can never disagree.
//!
//! The estimate is the Hodges–Lehmann shift (the median of every pairwise difference B − A;
//! compare takes logs, so it is a ratio); the interval is the exact Mann–Whitney interval
//! for the shift (Bauer 1972; the order statistics of the pairwise differences that the
//! exact rank test's critical value picks), which is the set of shifts the same test does not
//! reject. Hence "different at α" ⇔ the 1 − α interval excludes 0 ⇔ p ≤ α, by construction
//! and not by luck. The p-value counts ties against the verdict (a zero difference counts on
//! both sides), which keeps the equivalence when values tie.
//!
//! Exact distributions because benchmarks have 3–10 runs a side, where the normal
//! approximation is wrong and where what matters is the smallest p a sample size can ever give
//! (2 / C(n + m, n)): 3 + 3 runs cannot go below 0.1, 4 + 4 reach 0.029, 5 + 5 reach 0.0079.
//! Written here because the crates that have these give only the normal approximation or pull
//! in a linear-algebra stack for two functions.
//!
//! `Spread` (mean, standard deviation, and the geometric mean with Student's t interval on the
//! logarithms of a sweep point's repeats) and
//! `median` live here too: report's statistics, which sweeps and experiments import.

/// Largest side the exact distribution is computed for (n·m coefficients, n passes over them);
/// beyond it the normal approximation with continuity correction, accurate there.
const EXACT_MAX: usize = 100;

/// P(U ≤ u) for u = 0..=n·m under "no difference" (U: pairs with the B value above the A
/// value), exact up to `EXACT_MAX` runs a side.
pub fn u_cdf(n: usize, m: usize) -> Vec<f64> {
    let nm = n * m;
    if n == 0 || m == 0 {
        return vec![1.0];
    }
    if n > EXACT_MAX || m > EXACT_MAX {
        let mean = nm as f64 / 2.0;
        let sd = (nm as f64 * (n + m + 1) as f64 / 12.0).sqrt();
        return (0..=nm)
            .map(|u| normal_cdf((u as f64 + 0.5 - mean) / sd))
            .collect();
    }
    // The counts of U are the coefficients of the Gaussian binomial [n + m choose n]_q =
    // Π_{i=1..n} (1 − q^(m+i)) / (1 − q^i). Coefficient k only ever depends on coefficients
    // ≤ k, so the lower tail (the one the test uses) is exact in f64.
    let mut c = vec![0.0f64; nm + 1];
    c[0] = 1.0;
    for i in 1..=n {
        // × (1 − q^(m+i)), from the top so each step reads the old coefficient.
        for k in (m + i..=nm).rev() {
            c[k] -= c[k - m - i];
        }
        // ÷ (1 − q^i): a running sum with stride i.
        for k in i..=nm {
            c[k] += c[k - i];
        }
    }
    let total: f64 = c.iter().sum();
    let mut acc = 0.0;
    c.iter()
        .map(|x| {
            acc += x.max(0.0);
            (acc / total).min(1.0)
        })
        .collect()
}

/// The smallest two-sided p-value n + m runs can give: every B above every A.
pub fn min_p(n: usize, m: usize) -> f64 {
    if n == 0 || m == 0 {
        return 1.0;
    }
    (2.0 * u_cdf(n, m)[0]).min(1.0)
}

/// Runs a side (equal sides) the exact test needs before it can reach `alpha` at all.
pub fn runs_needed(alpha: f64) -> usize {
    (1..=EXACT_MAX)
        .find(|k| min_p(*k, *k) <= alpha)
        .unwrap_or(EXACT_MAX)
}

/// The shift of B against A, its interval and its test, from one procedure.
#[derive(Debug, Clone, PartialEq)]
pub struct Shift {
    /// Hodges–Lehmann estimate: the median of the n·m differences b − a.
    pub estimate: f64,
    /// The exact 1 − alpha interval; None when n + m runs cannot reach alpha.
    pub ci: Option<(f64, f64)>,
    /// The coverage the interval really has (≥ 1 − alpha: the distribution is discrete).
    pub level: Option<f64>,
    /// Exact two-sided Mann–Whitney p, ties counted against a verdict.
    pub p: f64,
    /// The interval excludes 0 (⇔ p ≤ alpha).
    pub different: bool,
}

/// Tests "B is A shifted by 0" at two-sided level `alpha` and estimates the shift.
pub fn shift(a: &[f64], b: &[f64], alpha: f64) -> Shift {
    let (n, m) = (a.len(), b.len());
    let mut d: Vec<f64> = b
        .iter()
        .flat_map(|y| a.iter().map(move |x| y - x))
        .collect();
    d.sort_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
    let estimate = median(&d);
    if d.is_empty() {
        return Shift {
            estimate,
            ci: None,
            level: None,
            p: 1.0,
            different: false,
        };
    }
    let cdf = u_cdf(n, m);
    let nm = d.len();
    // c: the largest count of "wrong-side" differences the test still rejects with.
    let c = (0..=nm / 2).take_while(|u| 2.0 * cdf[*u] <= alpha).last();
    let below = d.iter().filter(|x| **x <= 0.0).count();
    let above = d.iter().filter(|x| **x >= 0.0).count();
    let p = (2.0 * cdf[below.min(above).min(nm)]).min(1.0);
    let (ci, level, different) = match c {
        Some(c) => {
            let (lo, hi) = (d[c], d[nm - 1 - c]);
            (
                Some((lo, hi)),
                Some(1.0 - 2.0 * cdf[c]),
                lo > 0.0 || hi < 0.0,
            )
        }
        None => (None, None, false),
    };
    Shift {
        estimate,
        ci,
        level,
        p,
        different,
    }
}

/// Φ(z), from erfc's Abramowitz–Stegun 7.1.26 approximation (|error| < 1.5e-7).
pub fn normal_cdf(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.3275911 * x);
    let poly = t
        * (0.254829592
            + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        1.0 - erfc / 2.0
    } else {
        erfc / 2.0
    }
}

/// A sweep point's repeats of one (positive) figure: the arithmetic mean and sample standard
/// deviation of the values, and the geometric mean with its 95 % confidence interval computed on
/// the logarithms (Student's t with n − 1 degrees of freedom on ln x, exponentiated). Throughput,
/// latency and ops/J are positive, and an interval on the values themselves reaches below zero
/// with few repeats (2 repeats: t = 12.7, issue 40 item 6); on logarithms it stays positive and
/// is as wide as the repeats really leave the figure. No interval from fewer than 2 values
/// ("too few repeats") or when a value is ≤ 0 (no logarithm): `ci95_unavailable` says which.
#[derive(Clone, Debug, serde::Serialize, PartialEq)]
pub struct Spread {
    pub n: usize,
    /// Arithmetic mean of the values.
    pub mean: f64,
    /// Sample standard deviation of the values.
    pub stddev: Option<f64>,
    /// Geometric mean (exp of the mean of ln x); None when a value is ≤ 0.
    pub geomean: Option<f64>,
    /// 95 % interval of the geometric mean, on logarithms.
    pub geomean_ci95_low: Option<f64>,
    pub geomean_ci95_high: Option<f64>,
    /// Why there is no interval, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci95_unavailable: Option<String>,
    pub values: Vec<f64>,
}

/// What a sweep's interval is, as sweep.json's `confidence` and the figures say it.
pub const CONFIDENCE: &str = "95 % interval of the geometric mean: Student's t with n − 1 degrees of freedom on the logarithms of the repetitions' values, exponentiated (stays positive); none from fewer than 2 repetitions (too few repeats) or when a value is 0";

/// The two-sided 95 % critical value of Student's t with `df` degrees of freedom (its 97.5 %
/// quantile, statrs's inverse CDF): exact for every `df`, where a printed table steps (its 2.000
/// for 31 to 60 degrees of freedom is up to 2 % low: t(31) = 2.0395). NaN for 0.
pub fn t95(df: usize) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    match StudentsT::new(0.0, 1.0, df as f64) {
        Ok(t) if df > 0 => t.inverse_cdf(0.975),
        _ => f64::NAN,
    }
}

/// Mean and sample standard deviation (None under 2 values).
fn mean_sd(values: &[f64]) -> (f64, Option<f64>) {
    let n = values.len();
    if n == 0 {
        return (f64::NAN, None);
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let sd = (n >= 2)
        .then(|| (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt());
    (mean, sd)
}

impl Spread {
    pub fn of(values: &[f64]) -> Self {
        let n = values.len();
        let (mean, stddev) = mean_sd(values);
        let positive = n > 0 && values.iter().all(|v| *v > 0.0 && v.is_finite());
        let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
        let (lmean, lsd) = mean_sd(&logs);
        let geomean = positive.then(|| lmean.exp());
        let (lo, hi, why) = match (positive, lsd) {
            (true, Some(s)) => {
                let half = t95(n - 1) * s / (n as f64).sqrt();
                (Some((lmean - half).exp()), Some((lmean + half).exp()), None)
            }
            (false, _) if n > 0 => (
                None,
                None,
                Some("a repetition's value is 0 or less: no interval on logarithms"),
            ),
            _ => (
                None,
                None,
                Some("too few repeats: an interval needs at least 2"),
            ),
        };
        Spread {
            n,
            mean,
            stddev,
            geomean,
            geomean_ci95_low: lo,
            geomean_ci95_high: hi,
            ci95_unavailable: why.map(str::to_string),
            values: values.to_vec(),
        }
    }
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_matches_hand_computation() {
        // 10, 12, 14: mean 12, s = 2. Logs: ln 10 = 2.302585, ln 12 = 2.484907, ln 14 =
        // 2.639057; their mean 2.475516 (geomean 11.8878), sd 0.168433; t(2) = 4.302653, half-width
        // 4.302653·0.168433/√3 = 0.418409: interval e^2.057107 = 7.8233 to e^2.893925 = 18.0641.
        let s = Spread::of(&[10.0, 12.0, 14.0]);
        assert_eq!(s.n, 3);
        assert_eq!(s.mean, 12.0);
        assert!((s.stddev.unwrap() - 2.0).abs() < 1e-12);
        assert!((s.geomean.unwrap() - 11.8878).abs() < 1e-4, "{s:?}");
        assert!((s.geomean_ci95_low.unwrap() - 7.8233).abs() < 1e-4, "{s:?}");
        assert!(
            (s.geomean_ci95_high.unwrap() - 18.0641).abs() < 1e-4,
            "{s:?}"
        );
        assert_eq!(s.ci95_unavailable, None);
        let one = Spread::of(&[5.0]);
        assert_eq!(
            (one.mean, one.stddev, one.geomean_ci95_low),
            (5.0, None, None)
        );
        assert!(one.ci95_unavailable.unwrap().contains("too few repeats"));
        let zero = Spread::of(&[0.0, 3.0]);
        assert_eq!((zero.geomean, zero.geomean_ci95_low), (None, None));
        assert!(zero.ci95_unavailable.unwrap().contains("0 or less"));
        // R's qt(0.975, df): 12.706205, 4.302653, 2.039513, 1.962339.
        for (df, t) in [
            (1, 12.706205),
            (2, 4.302653),
            (31, 2.039513),
            (1000, 1.962339),
        ] {
            assert!((t95(df) - t).abs() < 1e-6, "t95({df}) = {}", t95(df));
        }
        assert!(t95(0).is_nan());
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    /// Issue 40 item 6: two repeats of a positive figure (t = 12.706205) that differ by 3×: an
    /// interval on the values is 2M ± 12.7M, below zero; on logarithms it stays positive.
    /// ln 1e6 = 13.815511, ln 3e6 = 14.914123: mean 14.364817 (geomean 1.732051e6), sd
    /// 0.776836, half-width 12.706205·0.776836/√2 = 6.979596: e^7.385221 = 1611.98 to
    /// e^21.344413 = 1.861062e9.
    #[test]
    fn two_repeats_give_a_positive_interval() {
        let s = Spread::of(&[1e6, 3e6]);
        let (lo, hi) = (s.geomean_ci95_low.unwrap(), s.geomean_ci95_high.unwrap());
        assert!(lo > 0.0, "{s:?}");
        assert!((lo - 1611.98).abs() < 0.01, "{s:?}");
        assert!((hi / 1.861062e9 - 1.0).abs() < 1e-6, "{s:?}");
        assert!((s.geomean.unwrap() - 1.732051e6).abs() < 1.0);
        assert!(lo < s.geomean.unwrap() && s.geomean.unwrap() < hi);
    }

    fn binom(n: u64, k: u64) -> f64 {
        (1..=k).fold(1.0, |acc, i| acc * (n - k + i) as f64 / i as f64)
    }

    /// Brute force: U over every split of 0..n+m into an A set of n, for the exact counts.
    fn brute_counts(n: usize, m: usize) -> Vec<u64> {
        let mut counts = vec![0u64; n * m + 1];
        for mask in 0u32..(1 << (n + m)) {
            if mask.count_ones() as usize != n {
                continue;
            }
            // Ranks 0..n+m; bit set = an A value. U = pairs with the B value above the A value.
            let mut u = 0;
            for i in 0..n + m {
                for j in i + 1..n + m {
                    if mask & (1 << i) != 0 && mask & (1 << j) == 0 {
                        u += 1;
                    }
                }
            }
            counts[u] += 1;
        }
        counts
    }

    /// Golden values from standard tables and counting by hand.
    #[test]
    fn the_exact_distribution_matches_tables_and_brute_force() {
        // Fully separated: P(U ≤ 0) = 1/C(n+m, n); two-sided 2/C.
        assert!((min_p(4, 4) - 2.0 / 70.0).abs() < 1e-12); // 0.0286
        assert!((min_p(5, 5) - 2.0 / 252.0).abs() < 1e-12); // 0.0079
        assert!((min_p(3, 3) - 0.1).abs() < 1e-12);
        assert!((min_p(3, 10) - 2.0 / binom(13, 3)).abs() < 1e-12);
        assert_eq!(runs_needed(0.05), 4);
        assert_eq!(runs_needed(0.025), 5);
        assert_eq!(runs_needed(0.01), 5);
        assert_eq!(runs_needed(0.005), 6); // 2/924 = 0.0022
                                           // Tables (e.g. Siegel & Castellan, n = m = 5): P(U ≤ 2) = 4/252, P(U ≤ 4) = 12/252.
        let c = u_cdf(5, 5);
        assert!((c[2] - 4.0 / 252.0).abs() < 1e-12, "{}", c[2]);
        assert!((c[4] - 12.0 / 252.0).abs() < 1e-12, "{}", c[4]);
        for (n, m) in [(1, 1), (2, 3), (4, 4), (3, 6), (5, 5), (6, 7)] {
            let brute = brute_counts(n, m);
            let total: u64 = brute.iter().sum();
            assert_eq!(total as f64, binom((n + m) as u64, n as u64));
            let mut acc = 0;
            for (u, p) in u_cdf(n, m).iter().enumerate() {
                acc += brute[u];
                assert!((p - acc as f64 / total as f64).abs() < 1e-12, "{n} {m} {u}");
            }
        }
        // Large sides: the normal approximation, still a distribution.
        let big = u_cdf(120, 120);
        assert!((big[120 * 60] - 0.5).abs() < 0.01 && *big.last().unwrap() > 0.999);
    }

    /// Hodges–Lehmann and its interval by hand: A = 1..4, B = 11..14. Differences b − a run
    /// from 7 to 13; their median is 10; with 4 + 4 runs c = 0 (2/70 ≤ 0.05 < 4/70), so the
    /// 95 % interval is [min, max] = [7, 13], with true coverage 1 − 2/70.
    #[test]
    fn hodges_lehmann_and_the_exact_interval_by_hand() {
        let s = shift(&[1.0, 2.0, 3.0, 4.0], &[11.0, 12.0, 13.0, 14.0], 0.05);
        assert_eq!(s.estimate, 10.0);
        assert_eq!(s.ci, Some((7.0, 13.0)));
        assert!((s.level.unwrap() - (1.0 - 2.0 / 70.0)).abs() < 1e-12);
        assert!((s.p - 2.0 / 70.0).abs() < 1e-12 && s.different);
        // 5 + 5 at 5 %: c = 2 (4/252 ≤ 0.025 < 7/252), the 3rd smallest and 3rd largest of
        // the 25 differences.
        let a = [0.0, 10.0, 20.0, 30.0, 40.0];
        let b = [101.0, 111.0, 121.0, 131.0, 141.0];
        let s = shift(&a, &b, 0.05);
        // b − a = 101 + 10k for k = −4..=4, with multiplicities 1,2,3,4,5,4,3,2,1: the 3rd
        // smallest is 71 (k = −3), the 3rd largest 131.
        assert_eq!(s.ci, Some((71.0, 131.0)));
        assert_eq!(s.estimate, 101.0);
        // At 1 %, c = 0 (2/252 ≤ 0.01 < 4/252): [min, max].
        assert_eq!(shift(&a, &b, 0.01).ci, Some((61.0, 141.0)));
        // 3 + 3 cannot reach 5 %: no interval, no verdict, p = 0.1 at best.
        let s = shift(&[1.0, 2.0, 3.0], &[7.0, 8.0, 9.0], 0.05);
        assert_eq!((s.ci, s.different), (None, false));
        assert!((s.p - 0.1).abs() < 1e-12);
        // Identical samples: every tie counts against the verdict.
        let s = shift(&[1.0, 2.0, 3.0, 4.0], &[1.0, 2.0, 3.0, 4.0], 0.05);
        assert_eq!((s.estimate, s.p, s.different), (0.0, 1.0, false));
    }

    /// The verdict, the interval and the p-value agree on every sample (pseudo-random sets
    /// with ties, 2..8 a side, several levels).
    #[test]
    fn the_interval_and_the_p_value_never_disagree() {
        let mut rng = crate::workload::Rng::for_worker(7, 0);
        for t in 0..3000 {
            let n = 2 + rng.next_u64_below(7) as usize;
            let m = 2 + rng.next_u64_below(7) as usize;
            let shift_by = rng.next_u64_below(12) as f64;
            let a: Vec<f64> = (0..n).map(|_| rng.next_u64_below(10) as f64).collect();
            let b: Vec<f64> = (0..m)
                .map(|_| rng.next_u64_below(10) as f64 + shift_by)
                .collect();
            let alpha = [0.05, 0.025, 0.01][t % 3];
            let s = shift(&a, &b, alpha);
            assert_eq!(s.different, s.p <= alpha, "{a:?} {b:?} {alpha} {s:?}");
            if let Some((lo, hi)) = s.ci {
                assert!(lo <= s.estimate && s.estimate <= hi, "{s:?}");
                assert_eq!(s.different, lo > 0.0 || hi < 0.0);
            }
        }
    }

    #[test]
    fn the_normal_cdf_matches_tables() {
        assert!((normal_cdf(1.96) - 0.975).abs() < 1e-4);
        assert!((normal_cdf(-1.0) - 0.158_655).abs() < 1e-5);
    }
}
