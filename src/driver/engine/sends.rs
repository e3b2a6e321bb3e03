//! The engine's own check of the open-loop process it put on the wire (issue 30): the sends
//! of all loops are counted in 10 ms bins, and over the measured window the counts' index of
//! dispersion (variance over mean, in windows of at least 5 expected sends) is compared with
//! the arrival process asked for — 1 for Poisson (a Poisson count's variance is its mean; the
//! statistic's spread over k windows is √(2/(k−1))), near 0 for fixed arrivals. Sends that
//! bunch (a stalled client, or the catch-up after a stalled server) or a schedule that was not
//! kept fail the check, and the phase says so (`open_loop.arrivals_check`, `kept_up`).
//!
//! A time-varying rate (mixgraph's sine) is checked against what its schedule expects in each
//! window, E_i = Λ(end) − Λ(start): the statistic is Σ (x_i − s·E_i)² / (s·E_i) / (k − 1), s
//! scaling the expectations to the sends counted (a Poisson count's variance is its mean, so
//! this is again 1 for an inhomogeneous Poisson process, near 0 for fixed arrivals). With a
//! constant rate every s·E_i is the windows' mean and the statistic is variance over mean
//! exactly, as before.

use crate::plan::Arrival;
use crate::report::ArrivalsCheck;
use std::sync::atomic::{AtomicU32, Ordering};

const BIN_NS: u64 = 10_000_000;
/// Bins kept: one hour of sends; a longer phase is checked over its first hour.
const MAX_BINS: usize = 360_000;

pub struct Sends {
    origin: u64,
    bins: Vec<AtomicU32>,
}

impl Sends {
    /// Bins for a phase starting at `origin` (clock ns) and lasting `seconds` (at most an hour).
    pub fn new(origin: u64, seconds: f64) -> Sends {
        let n = ((seconds * 100.0).ceil() as usize + 1).clamp(1, MAX_BINS);
        Sends {
            origin,
            bins: (0..n).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    #[inline]
    pub fn count(&self, now: u64) {
        let b = (now.saturating_sub(self.origin) / BIN_NS) as usize;
        if let Some(c) = self.bins.get(b) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The check over `[from_s, to_s)` of the phase; `expected_by(t)` is the arrivals the
    /// schedule expects by t seconds from the phase's start (rate·t, or a sine's Λ(t)).
    pub fn check(
        &self,
        arrival: Arrival,
        expected_by: &dyn Fn(f64) -> f64,
        from_s: f64,
        to_s: f64,
    ) -> Option<ArrivalsCheck> {
        let counts: Vec<u64> = self
            .bins
            .iter()
            .map(|c| c.load(Ordering::Relaxed) as u64)
            .collect();
        dispersion_check_by(&counts, arrival, expected_by, from_s, to_s)
    }
}

/// The check on 10 ms bin counts at a constant `rate`; `None` when the window holds fewer
/// than 30 windows.
#[cfg(test)]
pub fn dispersion_check(
    bins: &[u64],
    arrival: Arrival,
    rate: f64,
    from_s: f64,
    to_s: f64,
) -> Option<ArrivalsCheck> {
    dispersion_check_by(bins, arrival, &|t| rate * t, from_s, to_s)
}

/// The check on 10 ms bin counts against the schedule's expected arrivals by each time
/// (`expected_by`, increasing); `None` when the window holds fewer than 30 windows.
pub fn dispersion_check_by(
    bins: &[u64],
    arrival: Arrival,
    expected_by: &dyn Fn(f64) -> f64,
    from_s: f64,
    to_s: f64,
) -> Option<ArrivalsCheck> {
    let bin_s = BIN_NS as f64 / 1e9;
    let first = (from_s * 100.0).ceil() as usize;
    let last = ((to_s * 100.0).floor() as usize).min(bins.len());
    let bins = bins.get(first..last)?;
    // Windows of whole bins expecting at least 5 sends each, at the schedule's lowest rate.
    let at = |b: usize| expected_by((first + b) as f64 * bin_s);
    let per_bin = (0..bins.len())
        .map(|b| at(b + 1) - at(b))
        .fold(f64::INFINITY, f64::min);
    if per_bin.is_nan() || per_bin <= 0.0 {
        return None;
    }
    // (Less a rounding error: Λ's differences of a constant rate are not exact.)
    let w = ((5.0 / per_bin * (1.0 - 1e-9)).ceil() as usize).max(1);
    let (windows, expected): (Vec<f64>, Vec<f64>) = bins
        .chunks_exact(w)
        .enumerate()
        .map(|(i, c)| {
            let sent = c.iter().sum::<u64>() as f64;
            (sent, at((i + 1) * w) - at(i * w))
        })
        .unzip();
    let k = windows.len();
    if k < 30 {
        return None;
    }
    let (sent, due) = (windows.iter().sum::<f64>(), expected.iter().sum::<f64>());
    if sent <= 0.0 || due <= 0.0 {
        return None;
    }
    // Each window's expectation scaled to the sends counted: at a constant rate, the mean.
    let scale = sent / due;
    let d = windows
        .iter()
        .zip(&expected)
        .map(|(x, e)| (x - scale * e).powi(2) / (scale * e))
        .sum::<f64>()
        / (k - 1) as f64;
    let sigma = (2.0 / (k - 1) as f64).sqrt();
    let (expected, tolerance) = match arrival {
        // 4 sigma, and never tighter than ±0.25: sends are arrivals moved by each one's lag.
        Arrival::Poisson => (1.0, (4.0 * sigma).max(0.25)),
        // Evenly spaced sends: counts vary by at most one per window.
        Arrival::Fixed => (0.0, 0.5),
        // A renewal process's count dispersion tends to its gaps' squared coefficient of
        // variation, 1/(1 − 2ξ) for a generalized Pareto; its heavier tail spreads the
        // statistic more than a Poisson count's, hence 6 sigma and never tighter than ±0.4.
        Arrival::FbIa => {
            let xi = crate::workload::fb::IA_GPD.1;
            let cv2 = 1.0 / (1.0 - 2.0 * xi);
            (cv2, (6.0 * cv2 * sigma).max(0.4))
        }
    };
    Some(ArrivalsCheck {
        statistic: "index of dispersion of sends per window".into(),
        window_ms: (w as u64 * BIN_NS / 1_000_000) as f64,
        windows: k,
        dispersion: d,
        expected,
        tolerance,
        passed: (d - expected).abs() <= tolerance,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::RngCore;

    /// Bin counts of arrivals at `rate` for `secs`, Poisson or fixed, from a seeded stream
    /// (independent of the engine: exponential gaps by inverse transform here).
    fn bins(poisson: bool, rate: f64, secs: f64, bunch_at: Option<f64>) -> Vec<u64> {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::from_seed_u64(9);
        let mut v = vec![0u64; (secs * 100.0) as usize + 1];
        let mut t = 0.0;
        while t < secs {
            let gap = if poisson {
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                -(1.0 - u).ln() / rate
            } else {
                1.0 / rate
            };
            t += gap;
            // A 300 ms stall: its sends all go at its end.
            let at = match bunch_at {
                Some(s) if t >= s && t < s + 0.3 => s + 0.3,
                _ => t,
            };
            if at < secs {
                v[(at * 100.0) as usize] += 1;
            }
        }
        v
    }

    trait Seed {
        fn from_seed_u64(s: u64) -> Self;
    }
    impl Seed for rand_xoshiro::Xoshiro256PlusPlus {
        fn from_seed_u64(s: u64) -> Self {
            rand_core::SeedableRng::seed_from_u64(s)
        }
    }

    #[test]
    fn poisson_passes_fixed_is_flat_and_a_bunch_fails() {
        let c = dispersion_check(
            &bins(true, 20_000.0, 5.0, None),
            Arrival::Poisson,
            20_000.0,
            0.0,
            5.0,
        )
        .unwrap();
        assert!(c.passed && (c.dispersion - 1.0).abs() < 0.2, "{c:?}");
        let c = dispersion_check(
            &bins(false, 20_000.0, 5.0, None),
            Arrival::Fixed,
            20_000.0,
            0.0,
            5.0,
        )
        .unwrap();
        assert!(c.passed && c.dispersion < 0.2, "{c:?}");
        // Fixed sends checked as Poisson: far too even.
        assert!(
            !dispersion_check(
                &bins(false, 20_000.0, 5.0, None),
                Arrival::Poisson,
                20_000.0,
                0.0,
                5.0
            )
            .unwrap()
            .passed
        );
        let c = dispersion_check(
            &bins(true, 2_000.0, 5.0, Some(2.0)),
            Arrival::Poisson,
            2_000.0,
            0.0,
            5.0,
        )
        .unwrap();
        assert!(!c.passed && c.dispersion > 10.0, "{c:?}");
        // A low rate widens the window to 5 expected sends; too few windows: no verdict.
        let c = dispersion_check(
            &bins(true, 100.0, 20.0, None),
            Arrival::Poisson,
            100.0,
            0.0,
            20.0,
        )
        .unwrap();
        assert_eq!(c.window_ms, 50.0);
        assert!(dispersion_check(
            &bins(true, 100.0, 1.0, None),
            Arrival::Poisson,
            100.0,
            0.0,
            1.0
        )
        .is_none());
    }

    /// Bin counts of a sine-paced schedule's arrivals over 12 s (the phase's own `Arrivals`),
    /// sends bunched at the end of a 300 ms stall at `stall`.
    fn sine_bins(arrival: Arrival, noise: f64, stall: Option<f64>) -> Vec<u64> {
        let a = sine_schedule(arrival, noise);
        let mut rng = crate::workload::Rng::for_worker(4, 0);
        let mut v = vec![0u64; 1201];
        loop {
            let t = a.take(&mut rng).unwrap() as f64 / 1e9;
            if t >= 12.0 {
                return v;
            }
            let at = match stall {
                Some(s) if t >= s && t < s + 0.3 => s + 0.3,
                _ => t,
            };
            v[(at * 100.0) as usize] += 1;
        }
    }

    /// rate(t) = 2000·sin(2t) + 5000 (a 3.1 s period), noise windows of 500 ms.
    fn sine_schedule(arrival: Arrival, noise: f64) -> crate::driver::arrivals::Arrivals {
        let sine = crate::workload::mixgraph::SineRate {
            a: 2000.0,
            b: 2.0,
            c: 0.0,
            d: 5000.0,
            noise,
            interval_ms: 500,
        };
        let o = crate::plan::OpenLoop {
            arrival,
            rate: sine.d,
            offset_gaps: 0.0,
            sine: Some(sine),
        };
        crate::driver::arrivals::Arrivals::seeded(&o, 0, 0, 11)
    }

    #[test]
    fn a_sine_schedule_is_judged_against_its_own_rate() {
        // Λ(t) = 5000·t + 1000·(1 − cos 2t), written out here: the sends of a kept schedule
        // pass (1200 windows of 10 ms: tolerance ±0.25 around 1).
        let lambda = |t: f64| 5000.0 * t + 1000.0 * (1.0 - (2.0 * t).cos());
        let kept = sine_bins(Arrival::Poisson, 0.0, None);
        let c = dispersion_check_by(&kept, Arrival::Poisson, &lambda, 0.0, 12.0).unwrap();
        assert!(c.passed && (c.dispersion - 1.0).abs() < 0.2, "{c:?}");
        // Judged at the constant mean rate instead, the sine's own swing (30 to 70 sends a
        // bin) looks like bunching: variance over mean ≈ 1 + 20²/2/50 = 5.
        let flat = dispersion_check(&kept, Arrival::Poisson, 5000.0, 0.0, 12.0).unwrap();
        assert!(!flat.passed && flat.dispersion > 3.0, "{flat:?}");
        // With noise, the expectation is the schedule's, noise windows included (as conclude
        // makes it: a fresh schedule from the same seed).
        let judge = sine_schedule(Arrival::Poisson, 1.0);
        let by = |t: f64| judge.expected_by(t);
        let noisy = sine_bins(Arrival::Poisson, 1.0, None);
        let c = dispersion_check_by(&noisy, Arrival::Poisson, &by, 0.0, 12.0).unwrap();
        assert!(c.passed, "{c:?}");
        // A 300 ms stall's sends bunched at its end (1500 of them in one bin) fail it.
        let stalled = sine_bins(Arrival::Poisson, 1.0, Some(5.0));
        let c = dispersion_check_by(&stalled, Arrival::Poisson, &by, 0.0, 12.0).unwrap();
        assert!(!c.passed && c.dispersion > 10.0, "{c:?}");
        // Fixed arrivals on the sine: each window within one send of Λ's share, near 0.
        let judge = sine_schedule(Arrival::Fixed, 1.0);
        let fixed = sine_bins(Arrival::Fixed, 1.0, None);
        let c = dispersion_check_by(&fixed, Arrival::Fixed, &|t| judge.expected_by(t), 0.0, 12.0)
            .unwrap();
        assert!(c.passed && c.dispersion < 0.1, "{c:?}");
    }
}
