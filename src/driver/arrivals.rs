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
//! worker draws from its own stream seeded from the run's seed. `fb_ia` arrivals do the same
//! with Facebook ETC's generalized-Pareto gaps (`workload::fb`), scaled to mean 1/rate.
//!
//! A time-varying rate (mixgraph's sine, `plan::OpenLoop::sine`) is a time change: arrivals are
//! placed in "operation time" x exactly as above with rate 1 (ticket i at x = i; Poisson gaps of
//! mean 1), and each x is mapped to the clock by t = Λ⁻¹(x), where Λ(t) = ∫₀ᵗ rate is the
//! expected count by t. Λ is in closed form (the sine's integral plus the noise's piecewise
//! linear sum from a table built here), increasing (the plan keeps the rate above a positive
//! floor), and inverted by safeguarded Newton steps: a few sines per arrival, no lock, no
//! allocation. A Poisson process in operation time so becomes an inhomogeneous Poisson process
//! of intensity rate(t).

use crate::plan::{Arrival, OpenLoop};
use crate::workload::mixgraph::SineRate;
use crate::workload::Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Noise windows in the table before it repeats (the noise of window k is the table's
/// k mod this entry).
const NOISE_WINDOWS: usize = 4096;

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
    /// fb_ia: the gaps' shape ξ and scale σ (ns), mean σ/(1 − ξ) = 1/rate.
    gpd: (f64, f64),
    /// A time-varying rate; `gap_ns` is then 1e9 (one unit of operation time, in ns).
    curve: Option<Curve>,
    /// Arrivals taken but not yet sent: the engine's loops take every due arrival and hold
    /// the ones with no free connection in a backlog; each loop publishes its oldest held
    /// intended start in its slot (`NONE_HELD`: none), so `behind_ns` sees that lateness too.
    /// The lock is taken when a loop starts and once per interval, never per operation.
    held: Mutex<Vec<Arc<AtomicU64>>>,
}

/// A holder's slot value when it holds no arrival.
pub const NONE_HELD: u64 = u64::MAX;

/// rate(t) as the schedule uses it: the sine plus each noise window's constant offset.
struct Curve {
    sine: SineRate,
    /// Window length, s.
    window: f64,
    /// Each window's rate offset (ops/s), and the offsets' running sums before each window
    /// (times the window: the noise's share of Λ at the window's start).
    noise: Vec<f64>,
    noise_before: Vec<f64>,
    /// The whole table's share of Λ (one period of the noise).
    noise_period: f64,
    /// Bounds on the rate, for the bracket: floor > 0 and ceiling.
    floor: f64,
    ceiling: f64,
}

impl Curve {
    /// The noise table: offsets δ·noise, δ uniform in [−a/2, a/2) (db_bench's `AddNoise`),
    /// from its own stream of the run's seed.
    fn new(sine: SineRate, seed: u64) -> Curve {
        let window = sine.interval_ms.max(1) as f64 / 1000.0;
        let (mut noise, mut noise_before) = (Vec::new(), Vec::new());
        let mut sum = 0.0;
        if sine.noise > 0.0 {
            let mut rng = Rng::for_worker(seed, u64::MAX);
            for _ in 0..NOISE_WINDOWS {
                let delta = (rng.next_f64() - 0.5) * sine.a.abs() * sine.noise;
                noise_before.push(sum);
                noise.push(delta);
                sum += delta * window;
            }
        }
        let spread = sine.a.abs() * (1.0 + sine.noise / 2.0);
        Curve {
            sine,
            window,
            noise,
            noise_before,
            noise_period: sum,
            floor: sine.floor().max(1e-9),
            ceiling: sine.d + spread,
        }
    }

    /// The noise's offset at `t` and its share of Λ by `t`.
    #[inline]
    fn noise_at(&self, t: f64) -> (f64, f64) {
        if self.noise.is_empty() {
            return (0.0, 0.0);
        }
        let k = (t / self.window).floor().max(0.0);
        let periods = (k / NOISE_WINDOWS as f64).floor();
        let i = (k - periods * NOISE_WINDOWS as f64) as usize % NOISE_WINDOWS;
        let into = t - k * self.window;
        let area = periods * self.noise_period + self.noise_before[i] + self.noise[i] * into;
        (self.noise[i], area)
    }

    /// Λ(t) and rate(t).
    #[inline]
    fn lambda(&self, t: f64) -> (f64, f64) {
        let (offset, area) = self.noise_at(t);
        (self.sine.integral(t) + area, self.sine.rate(t) + offset)
    }

    /// Λ⁻¹(x) in seconds: Newton from x/d, kept inside the bracket [x/ceiling, x/floor] (Λ is
    /// increasing with slope in [floor, ceiling]), halving the bracket when a step leaves it.
    #[inline]
    fn inverse(&self, x: f64) -> f64 {
        if x <= 0.0 {
            return 0.0;
        }
        let (mut lo, mut hi) = (x / self.ceiling, x / self.floor);
        let mut t = (x / self.sine.d).clamp(lo, hi);
        for _ in 0..60 {
            let (l, r) = self.lambda(t);
            let err = l - x;
            if err > 0.0 {
                hi = t;
            } else {
                lo = t;
            }
            if err.abs() < 1e-7 || hi - lo < 1e-10 {
                break;
            }
            let next = t - err / r.max(self.floor);
            t = if next > lo && next < hi {
                next
            } else {
                0.5 * (lo + hi)
            };
        }
        t
    }
}

impl Arrivals {
    pub fn new(o: &OpenLoop, start: u64, limit: u64) -> Self {
        Self::seeded(o, start, limit, 0)
    }

    /// With the seed a sine's noise is drawn from (the run's `--seed`).
    pub fn seeded(o: &OpenLoop, start: u64, limit: u64, seed: u64) -> Self {
        let curve = o.sine.map(|s| Curve::new(s, seed));
        // With a curve the schedule runs in operation time: one unit per expected arrival.
        let rate = if curve.is_some() { 1.0 } else { o.rate };
        let gap_ns = 1e9 / rate;
        let xi = crate::workload::fb::IA_GPD.1;
        Arrivals {
            arrival: o.arrival,
            start,
            gap_ns,
            offset_gaps: o.offset_gaps,
            tickets: AtomicU64::new(0),
            poisson_at: AtomicU64::new(0),
            limit,
            gpd: (xi, gap_ns * (1.0 - xi)),
            curve,
            held: Mutex::new(Vec::new()),
        }
    }

    /// A slot for one holder of taken, unsent arrivals (an engine loop's backlog): it stores
    /// its oldest held arrival's intended start there, or `NONE_HELD`.
    pub fn holder(&self) -> Arc<AtomicU64> {
        let slot = Arc::new(AtomicU64::new(NONE_HELD));
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(slot.clone());
        slot
    }

    /// The oldest intended start any holder still holds.
    fn oldest_held(&self) -> Option<u64> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&t| t != NONE_HELD)
            .min()
    }

    /// Operation time (ns) → clock ns after `start`.
    #[inline]
    fn clock(&self, x_ns: f64) -> u64 {
        match &self.curve {
            None => x_ns as u64,
            Some(c) => (c.inverse(x_ns / 1e9) * 1e9) as u64,
        }
    }

    /// The arrivals the schedule expects by `t` seconds after its time zero: rate·t, or Λ(t)
    /// for a time-varying rate (noise windows included). For the sends' check after the
    /// phase (`engine::sends`), not the hot path.
    pub fn expected_by(&self, t: f64) -> f64 {
        match &self.curve {
            None => t * 1e9 / self.gap_ns,
            Some(c) => c.lambda(t).0,
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
            Arrival::Fixed => self.start + self.clock((t as f64 + self.offset_gaps) * self.gap_ns),
            Arrival::Poisson | Arrival::FbIa => {
                let gap = if self.arrival == Arrival::FbIa {
                    self.pareto_gap(rng)
                } else {
                    self.exponential_gap(rng)
                };
                let x = self.poisson_at.fetch_add(gap, Ordering::Relaxed) + gap;
                self.start + self.clock(x as f64)
            }
        })
    }

    /// A generalized-Pareto gap (fb_ia) of mean 1/rate, in ns: σ(u^(−ξ) − 1)/ξ, u in (0, 1].
    #[inline]
    fn pareto_gap(&self, rng: &mut Rng) -> u64 {
        let (xi, sigma) = self.gpd;
        let u = 1.0 - rng.next_f64();
        (crate::workload::fb::gpd_inverse(u, sigma, xi) + 0.5).min(1e18) as u64
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
                self.start + self.clock((t + self.offset_gaps) * self.gap_ns)
            }
            Arrival::Poisson | Arrival::FbIa => {
                self.start + self.clock(self.poisson_at.load(Ordering::Relaxed) as f64)
            }
        }
    }

    /// How far the schedule is behind at `now` (clock ns): the time since the oldest arrival
    /// that is due but not yet sent, whether no worker has taken it yet or an engine loop holds
    /// it in its backlog. 0 when every due arrival has been sent.
    pub fn behind_ns(&self, now: u64) -> u64 {
        // A held arrival was taken before any arrival not yet taken: it is the oldest.
        if let Some(t) = self.oldest_held() {
            return now.saturating_sub(t);
        }
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
                sine: None,
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
    fn arrivals_held_in_a_backlog_count_as_behind() {
        // Fixed, 1 per second from 1,000 ns: tickets due at 1,000, 1e9 + 1,000, ...
        let a = arrivals(Arrival::Fixed, 1.0, 3);
        let mut rng = Rng::for_worker(1, 0);
        let (first, second) = (a.take(&mut rng).unwrap(), a.take(&mut rng).unwrap());
        let (h1, h2) = (a.holder(), a.holder());
        // Taken and sent: only the untaken third ticket (due at 2e9 + 1,000) can be late.
        assert_eq!(a.behind_ns(2_500_001_000), 500_000_000);
        // Two loops hold the first two: the oldest held one is how far behind the schedule is.
        h2.store(second, Ordering::Relaxed);
        h1.store(first, Ordering::Relaxed);
        assert_eq!(a.behind_ns(2_500_001_000), 2_500_000_000);
        h1.store(NONE_HELD, Ordering::Relaxed);
        assert_eq!(a.behind_ns(2_500_001_000), 1_500_000_000);
        // Every ticket handed out (the limit), one still held: still behind.
        a.take(&mut rng).unwrap();
        assert_eq!(a.behind_ns(3_000_001_000), 2_000_000_000);
        h2.store(NONE_HELD, Ordering::Relaxed);
        assert_eq!(a.behind_ns(3_000_001_000), 0);
    }

    fn sine(a: f64, b: f64, c: f64, d: f64, noise: f64) -> SineRate {
        SineRate {
            a,
            b,
            c,
            d,
            noise,
            interval_ms: 1000,
        }
    }

    fn with_sine(arrival: Arrival, s: SineRate, seed: u64) -> Arrivals {
        let o = OpenLoop {
            arrival,
            rate: s.d,
            offset_gaps: 0.0,
            sine: Some(s),
        };
        Arrivals::seeded(&o, 0, 0, seed)
    }

    /// Arrivals per whole second of the schedule over `secs` seconds.
    fn per_second(a: &Arrivals, secs: usize, rngs: &mut [Rng]) -> Vec<f64> {
        let mut counts = vec![0f64; secs];
        let mut i = 0;
        loop {
            let t = a.take(&mut rngs[i % rngs.len()]).unwrap();
            i += 1;
            let s = (t / 1_000_000_000) as usize;
            if s >= secs {
                return counts;
            }
            counts[s] += 1.0;
        }
    }

    #[test]
    fn sine_arrivals_follow_the_integral_of_the_rate() {
        // rate(t) = 2000·sin(0.5·t + 1) + 5000 over 30 s: each second's Poisson count has mean
        // ∫ rate over that second, written out here, and sd √mean; 5 sd is a 1 in 3.5 million
        // miss per second, so 30 seconds pass with certainty at a fixed seed.
        let (a, b, c, d) = (2000.0, 0.5, 1.0, 5000.0);
        let area =
            |t0: f64, t1: f64| d * (t1 - t0) + a / b * ((b * t0 + c).cos() - (b * t1 + c).cos());
        let s = with_sine(Arrival::Poisson, sine(a, b, c, d, 0.0), 3);
        let mut rngs: Vec<Rng> = (0..4).map(|i| Rng::for_worker(9, i)).collect();
        let counts = per_second(&s, 30, &mut rngs);
        for (i, n) in counts.iter().enumerate() {
            let mean = area(i as f64, i as f64 + 1.0);
            assert!(
                (n - mean).abs() < 5.0 * mean.sqrt(),
                "second {i}: {n} vs {mean}"
            );
        }
        // The curve is there: the busiest second is far above the quietest.
        let (lo, hi) = counts
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), n| (l.min(*n), h.max(*n)));
        assert!(hi - lo > 2500.0, "{lo}..{hi}");
        // Fixed arrivals under the same curve: the count by t is ⌊Λ(t)⌋ + 1 exactly.
        let f = with_sine(Arrival::Fixed, sine(a, b, c, d, 0.0), 3);
        let counts = per_second(&f, 30, &mut rngs);
        let mut by = 0.0;
        for (i, n) in counts.iter().enumerate() {
            by += n;
            let want = area(0.0, i as f64 + 1.0).ceil();
            assert!((by - want).abs() <= 1.0, "by {}: {by} vs {want}", i + 1);
        }
    }

    #[test]
    fn sine_noise_moves_each_window_and_keeps_the_rate_positive() {
        // Noise 1 with a = 4000: each 1 s window's rate moves by up to ±2000, drawn from the
        // seed; the count by the end of each second is Λ(t) exactly (fixed arrivals), so it
        // must differ from the noiseless integral, and stay within ±2000 per elapsed second.
        let s = sine(4000.0, 0.2, 0.0, 9000.0, 1.0);
        let f = with_sine(Arrival::Fixed, s, 5);
        let mut rngs = vec![Rng::for_worker(1, 0)];
        let counts = per_second(&f, 20, &mut rngs);
        let (mut by, mut moved) = (0.0, 0.0f64);
        for (i, n) in counts.iter().enumerate() {
            assert!(*n > 0.0);
            by += n;
            let t = i as f64 + 1.0;
            let off = by - s.integral(t);
            assert!(off.abs() <= 2000.0 * t + 2.0, "{off}");
            moved = moved.max(off.abs());
        }
        assert!(moved > 100.0, "{moved}");
        // The same seed draws the same schedule.
        let g = with_sine(Arrival::Fixed, s, 5);
        assert_eq!(per_second(&g, 20, &mut rngs), counts);
    }

    #[test]
    fn fb_ia_gaps_are_generalized_pareto_with_the_rate() {
        // Gaps G = σ(U^(−ξ) − 1)/ξ with σ = (1 − ξ)/rate: P(G ≤ g) = 1 − (1 + ξg/σ)^(−1/ξ).
        let rate = 50_000.0;
        let a = arrivals(Arrival::FbIa, rate, 0);
        let xi = 0.154971f64;
        let sigma = (1.0 - xi) / rate * 1e9;
        let mut rng = Rng::for_worker(17, 0);
        let n = 50_000;
        let mut last = 1_000u64;
        let mut gaps: Vec<f64> = (0..n)
            .map(|_| {
                let t = a.take(&mut rng).unwrap();
                let g = (t - last) as f64;
                last = t;
                g
            })
            .collect();
        gaps.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let cdf = |g: f64| 1.0 - (1.0 + xi * g / sigma).powf(-1.0 / xi);
        let d = gaps
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let f = cdf(*g);
                (f - i as f64 / n as f64)
                    .abs()
                    .max(((i + 1) as f64 / n as f64 - f).abs())
            })
            .fold(0.0, f64::max);
        assert!(d < 1.9495 / (n as f64).sqrt(), "D = {d}");
        let mean = gaps.iter().sum::<f64>() / n as f64;
        assert!((mean / 20_000.0 - 1.0).abs() < 0.05, "{mean}");
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
