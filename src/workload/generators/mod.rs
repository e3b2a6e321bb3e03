//! YCSB's number generators with their exact constants and quirks (ycsb-workload-spec §5).
//!
//! All workers share one instance of each generator, as YCSB's threads share one workload
//! object; only the RNG is per worker. Shared state is atomic. The one lock is the Zipfian's
//! incremental zeta update (§5.2), taken only when the item count grows — in practice by
//! `latest` after an acknowledged insert — exactly where YCSB takes its lock.

use super::keys::fnvhash64;
use super::rng::Rng;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use strength_reduce::StrengthReducedU64;

mod counters;
mod lengths;
mod skewed;

pub use counters::*;
pub use lengths::*;
pub use skewed::*;

/// `x mod n` with Java's sign rule for `x` = a wrapping absolute value (≥ 0, or `i64::MIN`),
/// using a precomputed divisor: a hardware 64-bit division costs ~40 cycles per key.
#[derive(Debug, Clone, Copy)]
pub struct FastMod {
    n: i64,
    reduced: StrengthReducedU64,
}

impl FastMod {
    pub fn new(n: i64) -> Self {
        FastMod {
            n,
            reduced: StrengthReducedU64::new(n.max(1) as u64),
        }
    }
    #[inline(always)]
    pub fn rem(&self, x: i64) -> i64 {
        if x >= 0 {
            (x as u64 % self.reduced) as i64
        } else {
            x % self.n
        }
    }
}

pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// ScrambledZipfian's fixed item count and its precomputed ζ(1e10, 0.99) (§5.3).
pub const SCRAMBLED_ITEM_COUNT: i64 = 10_000_000_000;
pub const SCRAMBLED_ZETAN: f64 = 26.46902820178302;

/// ζ(n, θ) summed in increasing i from 0.0 (the order decides the last bits).
pub fn zeta(n: i64, theta: f64) -> f64 {
    zeta_continue(0, n, theta, 0.0)
}

/// Continues a ζ sum from `from` terms (whose sum is `sum`) to `to` terms.
pub fn zeta_continue(from: i64, to: i64, theta: f64, mut sum: f64) -> f64 {
    for i in from..to {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// `UniformLongGenerator(lb, ub)`: one i64 draw (§5.1).
#[derive(Debug, Clone)]
pub struct UniformLong {
    lb: i64,
    interval: FastMod,
}

impl UniformLong {
    pub fn new(lb: i64, ub: i64) -> Self {
        UniformLong {
            lb,
            interval: FastMod::new(ub - lb + 1),
        }
    }
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> i64 {
        self.lb + self.interval.rem(rng.next_i64().wrapping_abs())
    }
}

/// `ZipfianGenerator(min, max, θ [, zetan])` (§5.2), Gray et al. SIGMOD 1994.
pub struct Zipfian {
    items: i64,
    base: i64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    half_pow_theta: f64,
    // Published state: `count` is written last (Release) after `zetan`/`eta`.
    count: AtomicI64,
    zetan: AtomicU64,
    eta: AtomicU64,
    grow: Mutex<()>,
}

impl Zipfian {
    pub fn new(min: i64, max: i64) -> Self {
        Self::with_zetan(min, max, ZIPFIAN_CONSTANT, None)
    }

    pub fn with_zetan(min: i64, max: i64, theta: f64, zetan: Option<f64>) -> Self {
        let items = max - min + 1;
        let zetan = zetan.unwrap_or_else(|| zeta(items, theta));
        let zeta2theta = zeta(2, theta);
        let z = Zipfian {
            items,
            base: min,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            half_pow_theta: 0.5f64.powf(theta),
            count: AtomicI64::new(items),
            zetan: AtomicU64::new(zetan.to_bits()),
            eta: AtomicU64::new(0),
            grow: Mutex::new(()),
        };
        z.eta.store(z.eta_for(zetan).to_bits(), Ordering::Relaxed);
        z
    }

    /// Uses the constructor's `items`, also after growth (quirk 2).
    fn eta_for(&self, zetan: f64) -> f64 {
        (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / zetan)
    }

    pub fn items(&self) -> i64 {
        self.items
    }
    pub fn zetan(&self) -> f64 {
        f64::from_bits(self.zetan.load(Ordering::Acquire))
    }
    pub fn eta(&self) -> f64 {
        f64::from_bits(self.eta.load(Ordering::Acquire))
    }
    pub fn count_for_zeta(&self) -> i64 {
        self.count.load(Ordering::Acquire)
    }

    /// Grows ζ to `itemcount` terms if needed; never shrinks (quirk 3).
    fn ensure(&self, itemcount: i64) {
        if itemcount <= self.count.load(Ordering::Acquire) {
            return;
        }
        let _guard = self.grow.lock().unwrap_or_else(|e| e.into_inner());
        let have = self.count.load(Ordering::Acquire);
        if itemcount > have {
            let zetan = zeta_continue(have, itemcount, self.theta, self.zetan());
            self.zetan.store(zetan.to_bits(), Ordering::Release);
            self.eta
                .store(self.eta_for(zetan).to_bits(), Ordering::Release);
            self.count.store(itemcount, Ordering::Release);
        }
    }

    /// `next(itemcount)` with the uniform draw given: the testable core of §5.2.
    #[inline]
    pub fn value_for(&self, u: f64, itemcount: i64) -> i64 {
        self.ensure(itemcount);
        let zetan = self.zetan();
        let uz = u * zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + self.half_pow_theta {
            return self.base + 1;
        }
        let eta = self.eta();
        self.base + (itemcount as f64 * (eta * u - eta + 1.0).powf(self.alpha)) as i64
    }

    #[inline]
    pub fn next_n(&self, rng: &mut Rng, itemcount: i64) -> i64 {
        let u = rng.next_f64();
        self.value_for(u, itemcount)
    }

    #[inline]
    pub fn next(&self, rng: &mut Rng) -> i64 {
        self.next_n(rng, self.items)
    }
}

/// `ScrambledZipfianGenerator(min, max)` (§5.3): popular raw ranks scattered by FNV.
pub struct ScrambledZipfian {
    min: i64,
    itemcount: FastMod,
    inner: Zipfian,
}

impl ScrambledZipfian {
    pub fn new(min: i64, max: i64) -> Self {
        ScrambledZipfian {
            min,
            itemcount: FastMod::new(max - min + 1),
            // max = ITEM_COUNT, so the inner generator has 1e10 + 1 items (quirk 4).
            inner: Zipfian::with_zetan(
                0,
                SCRAMBLED_ITEM_COUNT,
                ZIPFIAN_CONSTANT,
                Some(SCRAMBLED_ZETAN),
            ),
        }
    }
    pub fn inner(&self) -> &Zipfian {
        &self.inner
    }
    #[inline]
    pub fn scramble(&self, raw: i64) -> i64 {
        self.min + self.itemcount.rem(fnvhash64(raw))
    }
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> i64 {
        self.scramble(self.inner.next(rng))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeta_vectors_12_5() {
        let t = ZIPFIAN_CONSTANT;
        assert_eq!(zeta(1, t), 1.0);
        assert_eq!(zeta(2, t), 1.5034777750283594);
        assert_eq!(zeta(3, t), 1.840493339007644);
        assert_eq!(zeta(10, t), 2.9561075165103636);
        assert_eq!(zeta(100, t), 5.294568831377164);
        assert_eq!(zeta(999, t), 7.727881697979491);
        assert_eq!(zeta(1000, t), 7.728953217284729);
        assert_eq!(zeta(1001, t), 7.730023676840303);
        assert_eq!(zeta(10_000, t), 10.224361459595578);
        assert_eq!(zeta(100_000, t), 12.778338062551246);
        assert_eq!(zeta(1_000_000, t), 15.391849746037371);
        assert_eq!(1.0 / (1.0 - t), 99.99999999999991);
        assert_eq!(0.5f64.powf(t), 0.5034777750283594);
    }

    #[test]
    fn zipfian_constants_12_5() {
        let z = Zipfian::new(0, 999);
        assert_eq!(z.items(), 1000);
        assert_eq!(z.zetan(), 7.728953217284729);
        assert_eq!(z.eta(), 0.07480608670689805);
        let s = ScrambledZipfian::new(0, 1000);
        assert_eq!(s.inner().items(), 10_000_000_001);
        assert_eq!(s.inner().eta(), 0.21220003380967406);
    }

    #[test]
    fn zipfian_incremental_update_quirk_2() {
        let z = Zipfian::new(0, 998);
        assert_eq!(z.zetan(), 7.727881697979491);
        assert_eq!(z.eta(), 0.07479691848503967);
        z.value_for(0.5, 1005);
        assert_eq!(z.zetan(), 7.734294959566066);
        assert_eq!(z.eta(), 0.07478194047218675);
        assert_eq!(z.count_for_zeta(), 1005);
        // A smaller item count changes nothing (quirk 3).
        z.value_for(0.5, 1000);
        assert_eq!(z.zetan(), 7.734294959566066);
        assert_eq!(z.count_for_zeta(), 1005);
    }

    #[test]
    fn zipfian_u_to_value_12_6() {
        let z = Zipfian::new(0, 999);
        let cases = [
            (0.0, 0),
            (0.02, 0),
            (0.05, 0),
            (0.1, 0),
            (0.2, 2),
            (0.3, 4),
            (0.5, 22),
            (0.7, 103),
            (0.9, 471),
            (0.99, 927),
            (0.999999, 999),
            (0.236535047774046, 2),
            (0.03379878301382788, 0),
            (0.34146985411269504, 6),
            (0.41639239951138274, 11),
            (0.5251687621563603, 26),
            (0.6841408270844009, 91),
            (0.8353864989995211, 289),
            (0.9906119662557633, 932),
        ];
        for (u, want) in cases {
            assert_eq!(z.value_for(u, 1000), want, "u = {u}");
        }
    }

    #[test]
    fn scrambled_zipfian_12_7() {
        let s = ScrambledZipfian::new(0, 1000);
        let cases = [
            (0.09428988668031268, 5, 545),
            (0.1822634947415409, 52, 594),
            (0.3906339504840828, 9693, 23),
            (0.6380608588974683, 3383880, 771),
            (0.7406905600294582, 34834551, 875),
            (0.8544432883044218, 433946012, 317),
            (0.9576193540988146, 4051954571, 117),
        ];
        for (u, raw, key) in cases {
            let r = s.inner().value_for(u, s.inner().items());
            assert_eq!(r, raw, "u = {u}");
            assert_eq!(s.scramble(r), key);
        }
        let ranks = |n: i64| -> Vec<i64> {
            let s = ScrambledZipfian::new(0, n - 1);
            (0..5).map(|r| s.scramble(r)).collect()
        };
        assert_eq!(ranks(1001), [144, 610, 213, 679, 10]);
        assert_eq!(ranks(1000), [211, 620, 393, 802, 769]);
        assert_eq!(ranks(1101), [903, 403, 802, 302, 660]);
        assert_eq!(1.0 / SCRAMBLED_ZETAN, 0.03778000432719466);
    }

    #[test]
    fn other_generators_12_8() {
        let e = Exponential::new(95.0, 1000.0 * 0.8571428571);
        assert_eq!(e.gamma(), 0.003495020985987739);
        assert_eq!(e.mean(), 286.12131486740896);

        let h = Hotspot::new(0, 999, 0.2, 0.8);
        assert_eq!(h.intervals(), (200, 800));
        assert_eq!(h.mean(), 199.99999999999997);
        assert_eq!(Hotspot::new(0, 9, 0.25, 0.5).intervals(), (2, 8));

        let a = AcknowledgedCounter::new(1000);
        assert_eq!(a.last(), 999);
        assert_eq!((a.next(), a.next(), a.next()), (1000, 1001, 1002));
        a.acknowledge(1001).unwrap();
        assert_eq!(a.last(), 999);
        a.acknowledge(1000).unwrap();
        assert_eq!(a.last(), 1001);
        a.acknowledge(1002).unwrap();
        assert_eq!(a.last(), 1002);

        let s = Sequential::new(5, 7);
        let v: Vec<i64> = (0..5).map(|_| s.next()).collect();
        assert_eq!(v, [5, 6, 7, 5, 6]);

        let c = Counter::new(10);
        assert_eq!(c.last(), 9);
        assert_eq!(c.next(), 10);
        assert_eq!(c.last(), 10);
    }

    #[test]
    fn acknowledged_counter_detects_full_window() {
        let a = AcknowledgedCounter::new(0);
        // Leave 0 unacknowledged so nothing sweeps, then wrap onto slot 1.
        for v in 1..ACK_WINDOW {
            a.acknowledge(v).unwrap();
        }
        assert_eq!(a.last(), -1);
        assert_eq!(a.acknowledge(ACK_WINDOW + 1), Err(TooManyUnacknowledged));
    }

    #[test]
    fn skewed_latest_never_zero_and_favours_latest() {
        let basis = AcknowledgedCounter::new(1000);
        let l = SkewedLatest::new(&basis);
        let mut rng = Rng::for_worker(3, 0);
        let mut top = 0;
        for _ in 0..10_000 {
            let v = l.next(&mut rng, &basis);
            assert!((1..=999).contains(&v), "{v}");
            if v == 999 {
                top += 1;
            }
        }
        // P(max) = 1/zeta(999) ≈ 0.129.
        assert!((1_100..1_500).contains(&top), "{top}");
    }

    #[test]
    fn histogram_lengths_follow_buckets() {
        let h = HistogramLengths::parse("BlockSize\t10\n0\t0\n1\t3\n2\t1\n").unwrap();
        let mut rng = Rng::for_worker(5, 0);
        for _ in 0..1000 {
            let v = h.next(&mut rng);
            assert!(v == 10 || v == 20, "{v}");
        }
        assert!(HistogramLengths::parse("Block\t1\n").is_err());
    }

    #[test]
    fn fast_mod_matches_java_remainder() {
        for n in [1i64, 2, 3, 7, 1000, 1001, 1101, 10_000_000_001, i64::MAX] {
            let m = FastMod::new(n);
            for x in [
                0i64,
                1,
                5,
                999,
                1000,
                123_456_789_012,
                i64::MAX,
                i64::MIN,
                fnvhash64(0),
                fnvhash64(i64::MIN),
            ] {
                assert_eq!(m.rem(x), x % n, "{x} % {n}");
            }
        }
    }

    #[test]
    fn uniform_covers_bounds() {
        let u = UniformLong::new(3, 5);
        let mut rng = Rng::for_worker(9, 0);
        let mut seen = [false; 3];
        for _ in 0..200 {
            let v = u.next(&mut rng);
            assert!((3..=5).contains(&v));
            seen[(v - 3) as usize] = true;
        }
        assert_eq!(seen, [true; 3]);
    }
}
