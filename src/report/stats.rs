//! The statistics `kvmeter compare` decides with, in benchstat's spirit: a rank test that
//! assumes no distribution (Mann–Whitney U, exact for small samples), Welch's t-test labelled
//! as such when there are too few runs for the rank test to ever reject, Holm's correction for
//! testing many rows at once, and a bootstrap interval for the ratio of medians.
//!
//! Written here because the crates that have these either pull in a linear-algebra stack for
//! two functions or give only the normal approximation, which is wrong at the 4–10 runs a
//! benchmark has.

/// Exact two-sided p-value of the Mann–Whitney U test (no ties assumed; ties get the average
/// rank and the exact distribution then is an approximation), for small samples; the normal
/// approximation with continuity correction above 20 runs a side.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> f64 {
    let (n, m) = (a.len(), b.len());
    if n == 0 || m == 0 {
        return 1.0;
    }
    // U for a: pairs (x in a, y in b) with x > y, ties counting half.
    let mut u: f64 = 0.0;
    for x in a {
        for y in b {
            if x > y {
                u += 1.0;
            } else if x == y {
                u += 0.5;
            }
        }
    }
    let nm = (n * m) as f64;
    let u_small = u.min(nm - u);
    if n <= 20 && m <= 20 {
        // counts[k] = number of arrangements with U = k (dynamic programming over n, m).
        let dist = u_distribution(n, m);
        let total: f64 = dist.iter().sum();
        let k = u_small.floor() as usize;
        let tail: f64 = dist[..=k.min(dist.len() - 1)].iter().sum();
        (2.0 * tail / total).min(1.0)
    } else {
        let mean = nm / 2.0;
        let sd = (nm * (n + m + 1) as f64 / 12.0).sqrt();
        let z = ((u_small - mean).abs() - 0.5).max(0.0) / sd;
        (2.0 * (1.0 - normal_cdf(z))).min(1.0)
    }
}

/// How many of the C(n+m, n) orderings give each U = 0..=n·m.
fn u_distribution(n: usize, m: usize) -> Vec<f64> {
    // f[i][j][u]: orderings of i a's and j b's with statistic u. Recurrence on the largest
    // element: an a adds j to U (it is above every b), a b adds nothing.
    let mut f = vec![vec![vec![]; m + 1]; n + 1];
    for row in f.iter_mut() {
        row[0] = vec![1.0];
    }
    for cell in f[0].iter_mut() {
        *cell = vec![1.0];
    }
    for i in 1..=n {
        for j in 1..=m {
            let mut v = vec![0.0; i * j + 1];
            for (u, c) in f[i - 1][j].iter().enumerate() {
                v[u + j] += c;
            }
            for (u, c) in f[i][j - 1].iter().enumerate() {
                v[u] += c;
            }
            f[i][j] = v;
        }
    }
    f[n][m].clone()
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

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn var(v: &[f64]) -> f64 {
    let m = mean(v);
    v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() as f64 - 1.0)
}

/// Two-sided p of Welch's t-test (n ≥ 2 a side), through Student's t with the
/// Welch–Satterthwaite degrees of freedom.
pub fn welch(a: &[f64], b: &[f64]) -> f64 {
    if a.len() < 2 || b.len() < 2 {
        return 1.0;
    }
    let (va, vb) = (var(a) / a.len() as f64, var(b) / b.len() as f64);
    let se = (va + vb).sqrt();
    if se == 0.0 {
        return if mean(a) == mean(b) { 1.0 } else { 0.0 };
    }
    let t = (mean(a) - mean(b)).abs() / se;
    let df = (va + vb).powi(2)
        / (va.powi(2) / (a.len() as f64 - 1.0) + vb.powi(2) / (b.len() as f64 - 1.0));
    2.0 * student_t_sf(t, df)
}

/// P(T > t) for Student's t with `df` degrees of freedom (regularized incomplete beta).
fn student_t_sf(t: f64, df: f64) -> f64 {
    let x = df / (df + t * t);
    0.5 * incomplete_beta(df / 2.0, 0.5, x)
}

/// I_x(a, b) by its continued fraction (Numerical Recipes' betacf), for the t distribution.
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_beta = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b);
    let front = (ln_beta + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    d = if d.abs() < 1e-300 { 1e-300 } else { d };
    d = 1.0 / d;
    let mut h = d;
    for m in 1..300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < 1e-300 { 1e-300 } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < 1e-300 { 1e-300 } else { c };
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < 1e-300 { 1e-300 } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < 1e-300 { 1e-300 } else { c };
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-12 {
            break;
        }
    }
    h
}

/// ln Γ(x), Lanczos (g = 7, n = 9).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Holm's step-down adjustment of p-values (family-wise error), in the input order.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..p.len()).collect();
    idx.sort_by(|a, b| {
        p[*a]
            .partial_cmp(&p[*b])
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let n = p.len();
    let mut out = vec![1.0; n];
    let mut running: f64 = 0.0;
    for (rank, &i) in idx.iter().enumerate() {
        let adj = ((n - rank) as f64 * p[i]).min(1.0);
        running = running.max(adj);
        out[i] = running;
    }
    out
}

pub fn median(v: &[f64]) -> f64 {
    crate::experiment::median(v)
}

/// 95 % percentile-bootstrap interval of median(b) / median(a), with a fixed seed so the same
/// runs always give the same interval.
pub fn ratio_ci(a: &[f64], b: &[f64]) -> Option<(f64, f64)> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let mut rng = crate::workload::Rng::for_worker(0x5eed_c0de, 0);
    let mut ratios = Vec::with_capacity(2000);
    let mut ra = vec![0.0; a.len()];
    let mut rb = vec![0.0; b.len()];
    for _ in 0..2000 {
        for x in ra.iter_mut() {
            *x = a[rng.next_u64_below(a.len() as u64) as usize];
        }
        for x in rb.iter_mut() {
            *x = b[rng.next_u64_below(b.len() as u64) as usize];
        }
        let ma = median(&ra);
        if ma != 0.0 {
            ratios.push(median(&rb) / ma);
        }
    }
    ratios.sort_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
    let n = ratios.len();
    (n > 0).then(|| (ratios[n * 25 / 1000], ratios[(n * 975 / 1000).min(n - 1)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden values from the exact distribution by hand and from standard tables.
    #[test]
    fn mann_whitney_exact_small_samples() {
        // 4 vs 4, completely separated: U = 0, P(U ≤ 0) = 1/C(8,4) = 1/70; two-sided 2/70.
        let p = mann_whitney(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0]);
        assert!((p - 2.0 / 70.0).abs() < 1e-12, "{p}");
        // 3 vs 3 can never reach 0.05: the smallest two-sided p is 2/20.
        let p = mann_whitney(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]);
        assert!((p - 0.1).abs() < 1e-12, "{p}");
        // Interleaved: no evidence.
        assert!(mann_whitney(&[1.0, 3.0, 5.0, 7.0], &[2.0, 4.0, 6.0, 8.0]) > 0.5);
        // The distribution sums to C(n+m, n).
        assert_eq!(u_distribution(5, 6).iter().sum::<f64>(), 462.0);
    }

    #[test]
    fn welch_and_the_normal_cdf_match_tables() {
        assert!((normal_cdf(1.96) - 0.975).abs() < 1e-4);
        // t = 2.776 with 4 degrees of freedom is the two-sided 5 % point.
        assert!((2.0 * student_t_sf(2.776, 4.0) - 0.05).abs() < 1e-3);
        // Equal variances and sizes: Welch's df is 2n − 2.
        let p = welch(&[10.0, 12.0, 14.0], &[20.0, 22.0, 24.0]);
        // t = 10 / sqrt(4/3 + 4/3) = 6.124, df = 4: p ≈ 0.00361.
        assert!((p - 0.00361).abs() < 2e-4, "{p}");
    }

    #[test]
    fn holm_steps_down() {
        // p sorted: 0.01·3 = 0.03, 0.02·2 = 0.04, 0.04·1 = 0.04 (monotone).
        assert_eq!(holm(&[0.04, 0.01, 0.02]), vec![0.04, 0.03, 0.04]);
    }

    #[test]
    fn the_ratio_interval_holds_the_true_ratio() {
        let a = [100.0, 101.0, 99.0, 100.5, 99.5];
        let b = [200.0, 202.0, 198.0, 201.0, 199.0];
        let (lo, hi) = ratio_ci(&a, &b).unwrap();
        assert!(lo <= 2.0 && 2.0 <= hi && hi - lo < 0.1, "{lo} {hi}");
    }
}
