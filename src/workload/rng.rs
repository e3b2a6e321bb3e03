//! Per-worker random streams (ycsb-workload-spec §0 "Randomness").
//!
//! YCSB draws from `ThreadLocalRandom`, which cannot be seeded, so no Java run can be replayed.
//! kvmeter gives every worker its own seedable xoshiro256++ stream derived from `--seed` and the
//! worker index, and exposes exactly the four primitives the core workload needs. Keeping the
//! spec's draw order (§6.3) means a seed replays the same operation stream for one thread.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Golden-ratio increment used to spread worker indices before SplitMix64 seeding, so that
/// (seed s, worker 1) and (seed s+1, worker 0) never share a stream.
const STREAM_SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

pub struct Rng {
    gen: Xoshiro256PlusPlus,
    /// The unused low half of the last 64-bit output, for the next `next_i32` (value bytes
    /// take one int per 6 bytes, so this halves the generator steps they cost).
    spare: Option<u32>,
}

impl Rng {
    /// The stream of worker `stream` for base seed `seed`. `seed_from_u64` expands the 64-bit
    /// value with SplitMix64, as the spec recommends.
    pub fn for_worker(seed: u64, stream: u64) -> Self {
        Rng {
            gen: Xoshiro256PlusPlus::seed_from_u64(
                seed ^ stream.wrapping_add(1).wrapping_mul(STREAM_SPREAD),
            ),
            spare: None,
        }
    }

    /// Uniform over all 2^64 values, as a Java `long`.
    #[inline]
    pub fn next_i64(&mut self) -> i64 {
        self.gen.next_u64() as i64
    }

    /// Uniform in [0, 1) on the 2^-53 grid.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.gen.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform over all 2^32 values, as a Java `int`.
    #[inline]
    pub fn next_i32(&mut self) -> i32 {
        match self.spare.take() {
            Some(low) => low as i32,
            None => {
                let x = self.gen.next_u64();
                self.spare = Some(x as u32);
                (x >> 32) as i32
            }
        }
    }

    /// Uniform in [0, n) for n > 0 (Lemire's multiply-shift with rejection).
    #[inline]
    pub fn next_i32_bounded(&mut self, n: i32) -> i32 {
        debug_assert!(n > 0);
        let n = n as u64;
        loop {
            let x = self.gen.next_u64() >> 32;
            let m = x * n;
            let low = m & 0xFFFF_FFFF;
            if low >= (1u64 << 32) % n {
                return (m >> 32) as i32;
            }
        }
    }

    /// Uniform in [0, n) for n > 0, 64-bit (used for pacing desync, spec §8.4 quirk 17).
    pub fn next_u64_below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let x = self.gen.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_streams_differ() {
        let mut a = Rng::for_worker(42, 0);
        let mut b = Rng::for_worker(42, 0);
        let mut c = Rng::for_worker(42, 1);
        let mut d = Rng::for_worker(43, 0);
        let va: Vec<i64> = (0..8).map(|_| a.next_i64()).collect();
        let vb: Vec<i64> = (0..8).map(|_| b.next_i64()).collect();
        let vc: Vec<i64> = (0..8).map(|_| c.next_i64()).collect();
        let vd: Vec<i64> = (0..8).map(|_| d.next_i64()).collect();
        assert_eq!(va, vb);
        assert_ne!(va, vc);
        assert_ne!(va, vd);
    }

    #[test]
    fn i32_uses_both_halves_of_one_step() {
        let mut a = Rng::for_worker(5, 0);
        let mut b = Rng::for_worker(5, 0);
        let x = b.gen.next_u64();
        assert_eq!(a.next_i32(), (x >> 32) as i32);
        assert_eq!(a.next_i32(), x as u32 as i32);
        assert_eq!(a.next_i64(), b.next_i64());
    }

    #[test]
    fn f64_in_unit_interval_and_bounded_in_range() {
        let mut r = Rng::for_worker(1, 0);
        let mut hist = [0u32; 7];
        for _ in 0..70_000 {
            let f = r.next_f64();
            assert!((0.0..1.0).contains(&f));
            let b = r.next_i32_bounded(7);
            assert!((0..7).contains(&b));
            hist[b as usize] += 1;
        }
        // Each bucket expects 10,000; 5 sigma is about 470.
        for h in hist {
            assert!((9_500..10_500).contains(&h), "{hist:?}");
        }
    }
}
