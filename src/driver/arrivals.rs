//! Open-loop arrivals: the intended start times of a run phase, independent of replies
//! (papers/003 measures latency against offered load this way; design.md "Measurement rules").
//!
//! One schedule is shared by the phase's worker pool. A free worker takes the next arrival with
//! one relaxed `fetch_add` (no lock), sleeps until it is due and sends it; a worker held by a
//! slow reply takes nothing, so the others keep serving the schedule, and when every worker is
//! busy the arrivals wait with their intended times kept — latency measured from those times
//! counts the queueing that a closed loop hides (coordinated omission).
//!
//! Fixed arrivals come every 1/rate exactly (ticket i is due at i/rate). Poisson arrivals add an
//! exponential gap per ticket to a shared time accumulator; whichever worker draws a gap, the
//! gaps are independent with mean 1/rate, so the arrival times are a Poisson process. Each
//! worker draws from its own stream seeded from the run's seed.

use crate::plan::{Arrival, OpenLoop};
use crate::workload::Rng;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Arrivals {
    arrival: Arrival,
    /// Clock ns of time zero.
    start: u64,
    gap_ns: f64,
    /// Fixed arrivals: the schedule's phase in gaps (agent i of N: i/N; `plan::share`).
    offset_gaps: f64,
    /// Tickets handed out (fixed: the next ticket's index).
    tickets: AtomicU64,
    /// Poisson: ns after `start` of the latest arrival handed out.
    poisson_at: AtomicU64,
    /// Arrivals in the phase (`operationcount`); 0 = until the phase's duration ends.
    limit: u64,
}

impl Arrivals {
    pub fn new(o: &OpenLoop, start: u64, limit: u64) -> Self {
        Arrivals {
            arrival: o.arrival,
            start,
            gap_ns: 1e9 / o.rate,
            offset_gaps: o.offset_gaps,
            tickets: AtomicU64::new(0),
            poisson_at: AtomicU64::new(0),
            limit,
        }
    }

    /// Clock ns of the schedule's time zero.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The next arrival's intended start (clock ns), or `None` once `limit` are handed out.
    #[inline]
    pub fn take(&self, rng: &mut Rng) -> Option<u64> {
        let t = self.tickets.fetch_add(1, Ordering::Relaxed);
        if self.limit > 0 && t >= self.limit {
            return None;
        }
        Some(match self.arrival {
            Arrival::Fixed => self.start + ((t as f64 + self.offset_gaps) * self.gap_ns) as u64,
            Arrival::Poisson => {
                let gap = self.exponential_gap(rng);
                self.start + self.poisson_at.fetch_add(gap, Ordering::Relaxed) + gap
            }
        })
    }

    /// An exponential gap of mean 1/rate, rounded to the nearest ns (inverse transform).
    #[inline]
    fn exponential_gap(&self, rng: &mut Rng) -> u64 {
        let u = rng.next_f64(); // [0, 1)
        (-(1.0 - u).ln() * self.gap_ns + 0.5) as u64
    }

    /// The earliest the next arrival not yet handed out can be due (clock ns).
    pub fn next_due(&self) -> u64 {
        match self.arrival {
            Arrival::Fixed => {
                let t = self.tickets.load(Ordering::Relaxed) as f64;
                self.start + ((t + self.offset_gaps) * self.gap_ns) as u64
            }
            Arrival::Poisson => self.start + self.poisson_at.load(Ordering::Relaxed),
        }
    }

    /// How far the schedule is behind at `now` (clock ns): the time since the oldest arrival
    /// that is due but not yet taken by a worker. 0 when every due arrival has been sent, or
    /// once all `limit` arrivals are handed out.
    pub fn behind_ns(&self, now: u64) -> u64 {
        if self.limit > 0 && self.tickets.load(Ordering::Relaxed) >= self.limit {
            return 0;
        }
        now.saturating_sub(self.next_due())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrivals(arrival: Arrival, rate: f64, limit: u64) -> Arrivals {
        Arrivals::new(
            &OpenLoop {
                arrival,
                rate,
                offset_gaps: 0.0,
            },
            1_000,
            limit,
        )
    }

    #[test]
    fn fixed_arrivals_are_exactly_spaced() {
        let a = arrivals(Arrival::Fixed, 3.0, 0);
        let mut rng = Rng::for_worker(1, 0);
        let t: Vec<u64> = (0..4).map(|_| a.take(&mut rng).unwrap()).collect();
        // 1/3 s apart, from time zero; no drift after many tickets.
        assert_eq!(t, [1_000, 333_334_333, 666_667_666, 1_000_001_000]);
        assert_eq!(a.next_due(), 1_000 + 1_333_333_333);
        assert_eq!(a.behind_ns(2_000_000_000), 2_000_000_000 - 1_333_334_333);
        assert_eq!(a.behind_ns(5), 0);
    }

    #[test]
    fn the_limit_ends_the_schedule() {
        let a = arrivals(Arrival::Fixed, 1000.0, 2);
        let mut rng = Rng::for_worker(1, 0);
        assert!(a.take(&mut rng).is_some());
        assert!(a.take(&mut rng).is_some());
        assert!(a.take(&mut rng).is_none());
        assert_eq!(a.behind_ns(u64::MAX / 2), 0);
    }

    #[test]
    fn poisson_gaps_have_the_rate_and_the_spread_of_an_exponential() {
        // Four workers' streams interleaved, as in a pool: the merged gaps must still be
        // exponential with mean 1/rate (mean = stddev; P(gap > mean) = 1/e).
        let rate = 20_000.0;
        let a = arrivals(Arrival::Poisson, rate, 0);
        let mut rngs: Vec<Rng> = (0..4).map(|i| Rng::for_worker(7, i)).collect();
        let n = 200_000;
        let mut last = 1_000u64;
        let (mut sum, mut sum2, mut above) = (0f64, 0f64, 0u64);
        for i in 0..n {
            let t = a.take(&mut rngs[i % 4]).unwrap();
            let gap = (t - last) as f64;
            last = t;
            sum += gap;
            sum2 += gap * gap;
            above += u64::from(gap > 50_000.0);
        }
        let mean = sum / n as f64;
        let sd = (sum2 / n as f64 - mean * mean).sqrt();
        // Standard error of the mean is 50 µs/√n ≈ 0.11 µs: 1 % is ~9 standard errors.
        assert!((mean - 50_000.0).abs() < 500.0, "mean gap {mean}");
        assert!((sd - 50_000.0).abs() < 1_000.0, "sd {sd}");
        let share = above as f64 / n as f64;
        assert!(
            (share - (-1f64).exp()).abs() < 0.005,
            "P(gap > mean) {share}"
        );
    }
}
