//! The engine's own check of the open-loop process it put on the wire (issue 30): the sends
//! of all loops are counted in 10 ms bins, and over the measured window the counts' index of
//! dispersion (variance over mean, in windows of at least 5 expected sends) is compared with
//! the arrival process asked for — 1 for Poisson (a Poisson count's variance is its mean; the
//! statistic's spread over k windows is √(2/(k−1))), near 0 for fixed arrivals. Sends that
//! bunch (a stalled client, or the catch-up after a stalled server) or a schedule that was not
//! kept fail the check, and the phase says so (`open_loop.arrivals_check`, `kept_up`).

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

    /// The check over `[from_s, to_s)` of the phase for an offered `rate`.
    pub fn check(
        &self,
        arrival: Arrival,
        rate: f64,
        from_s: f64,
        to_s: f64,
    ) -> Option<ArrivalsCheck> {
        let counts: Vec<u64> = self
            .bins
            .iter()
            .map(|c| c.load(Ordering::Relaxed) as u64)
            .collect();
        dispersion_check(&counts, arrival, rate, from_s, to_s)
    }
}

/// The check on 10 ms bin counts; `None` when the window holds fewer than 30 windows.
pub fn dispersion_check(
    bins: &[u64],
    arrival: Arrival,
    rate: f64,
    from_s: f64,
    to_s: f64,
) -> Option<ArrivalsCheck> {
    // Windows of whole bins expecting at least 5 sends each.
    let per_bin = rate * BIN_NS as f64 / 1e9;
    let w = ((5.0 / per_bin).ceil() as usize).max(1);
    let first = (from_s * 100.0).ceil() as usize;
    let last = ((to_s * 100.0).floor() as usize).min(bins.len());
    let windows: Vec<f64> = bins
        .get(first..last)?
        .chunks_exact(w)
        .map(|c| c.iter().sum::<u64>() as f64)
        .collect();
    let k = windows.len();
    if k < 30 {
        return None;
    }
    let mean = windows.iter().sum::<f64>() / k as f64;
    if mean <= 0.0 {
        return None;
    }
    let var = windows.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
    let d = var / mean;
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
}
