//! The recovery timeline (`--timeline 100ms`, papers/002 §recovery): completions, errors by
//! kind and latency in buckets finer than the 1 s interval, split into operations on the
//! affected data and on the rest where a cluster tells them apart, plus the first and last
//! successful completion in each bucket — so the longest gap between successes (the
//! unavailability) is exact, not rounded to a bucket.
//!
//! Why not HdrHistograms per bucket: ten a second per worker would be megabytes, and the
//! timeline needs p50/p99/max per 100 ms, not 3 significant digits. Each bucket keeps a
//! log-linear histogram of 8 sub-buckets per power of two (a value is placed within 7 %),
//! from 1 µs to about 69 s; max is exact.
//!
//! Each worker writes only its own ring of buckets (single writer: plain load + store on
//! atomics, no lock, no read-modify-write across cores); the interval loop reads the buckets
//! that are complete and merges workers. A ring slot is reused `ring` buckets later, long
//! after it was read.

use crate::store::{ErrorKind, Status};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

const SUB_BITS: u32 = 3;
const MIN_SHIFT: u32 = 10; // 1.024 µs
const OCTAVES: u32 = 26; // up to 2^36 ns ≈ 69 s
pub const BINS: usize = ((OCTAVES << SUB_BITS) + 1) as usize;
pub const KINDS: usize = ErrorKind::ALL.len();
/// Operations on the data a fault affected, and on the rest.
pub const CLASSES: usize = 2;
pub const AFFECTED: usize = 0;
pub const REST: usize = 1;

#[inline]
fn bin(ns: u64) -> usize {
    let v = ns >> MIN_SHIFT;
    if v == 0 {
        return 0;
    }
    let octave = 63 - v.leading_zeros();
    if octave >= OCTAVES {
        return BINS - 1;
    }
    let sub = if octave >= SUB_BITS {
        (v >> (octave - SUB_BITS)) as u32 & ((1 << SUB_BITS) - 1)
    } else {
        ((v << (SUB_BITS - octave)) as u32) & ((1 << SUB_BITS) - 1)
    };
    1 + ((octave << SUB_BITS) | sub) as usize
}

/// The middle of a bin, in ns (what a percentile reports).
pub fn bin_value(b: usize) -> u64 {
    if b == 0 {
        return 1 << (MIN_SHIFT - 1);
    }
    let i = (b - 1) as u32;
    let (octave, sub) = (i >> SUB_BITS, i & ((1 << SUB_BITS) - 1));
    let lo = ((1u64 << SUB_BITS) | sub as u64) << octave >> SUB_BITS;
    let width = (1u64 << octave >> SUB_BITS).max(1);
    (lo << MIN_SHIFT) + (width << MIN_SHIFT) / 2
}

struct Class {
    ok: AtomicU32,
    errors: [AtomicU32; KINDS],
    first_ok: AtomicU64,
    last_ok: AtomicU64,
    max: AtomicU64,
    bins: [AtomicU32; BINS],
}

struct Slot {
    /// Bucket number + 1 this slot holds (0: none yet).
    bucket: AtomicU64,
    class: [Class; CLASSES],
}

fn zeroed_class() -> Class {
    Class {
        ok: AtomicU32::new(0),
        errors: std::array::from_fn(|_| AtomicU32::new(0)),
        first_ok: AtomicU64::new(u64::MAX),
        last_ok: AtomicU64::new(0),
        max: AtomicU64::new(0),
        bins: std::array::from_fn(|_| AtomicU32::new(0)),
    }
}

#[inline]
fn bump(a: &AtomicU32) {
    a.store(a.load(Relaxed).wrapping_add(1), Relaxed);
}

/// One worker's ring; only that worker writes it.
pub struct WorkerTimeline {
    slots: Box<[Slot]>,
    width_ns: u64,
    /// The clock reading (ns) the phase started at.
    start_ns: u64,
}

impl WorkerTimeline {
    /// Records an operation that completed at clock `end_ns` after `latency_ns`.
    #[inline]
    pub fn record(&self, class: usize, st: Status, end_ns: u64, latency_ns: u64) {
        let t = end_ns.saturating_sub(self.start_ns);
        let b = t / self.width_ns;
        let slot = &self.slots[(b % self.slots.len() as u64) as usize];
        if slot.bucket.load(Relaxed) != b + 1 {
            self.reset(slot, b);
        }
        let c = &slot.class[class];
        match st {
            Status::Ok | Status::NotFound => {
                bump(&c.ok);
                if c.first_ok.load(Relaxed) > t {
                    c.first_ok.store(t, Relaxed);
                }
                c.last_ok.store(t, Relaxed);
                bump(&c.bins[bin(latency_ns)]);
                if c.max.load(Relaxed) < latency_ns {
                    c.max.store(latency_ns, Relaxed);
                }
            }
            Status::Error { kind, .. } => bump(&c.errors[kind as usize]),
        }
    }

    #[cold]
    fn reset(&self, slot: &Slot, b: u64) {
        for c in &slot.class {
            c.ok.store(0, Relaxed);
            c.errors.iter().for_each(|e| e.store(0, Relaxed));
            c.first_ok.store(u64::MAX, Relaxed);
            c.last_ok.store(0, Relaxed);
            c.max.store(0, Relaxed);
            c.bins.iter().for_each(|x| x.store(0, Relaxed));
        }
        slot.bucket.store(b + 1, Relaxed);
    }
}

/// One class of one merged bucket.
#[derive(Clone, Debug, Default)]
pub struct ClassBucket {
    pub ok: u64,
    pub errors: [u64; KINDS],
    /// First and last successful completion, ns since the phase start.
    pub first_ok: Option<u64>,
    pub last_ok: Option<u64>,
    pub max_ns: u64,
    /// Non-empty histogram bins: (bin, count).
    pub bins: Vec<(u16, u32)>,
}

impl ClassBucket {
    pub fn error_total(&self) -> u64 {
        self.errors.iter().sum()
    }
    pub fn add(&mut self, o: &ClassBucket) {
        self.ok += o.ok;
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
        self.first_ok = match (self.first_ok, o.first_ok) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_ok = self.last_ok.max(o.last_ok);
        self.max_ns = self.max_ns.max(o.max_ns);
        for &(b, n) in &o.bins {
            match self.bins.binary_search_by_key(&b, |x| x.0) {
                Ok(i) => self.bins[i].1 += n,
                Err(i) => self.bins.insert(i, (b, n)),
            }
        }
    }
    /// The latency percentile `p` (0–100) in ns, from the bins (within 7 %); max is exact.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        let total: u64 = self.bins.iter().map(|x| x.1 as u64).sum();
        if total == 0 {
            return None;
        }
        let want = ((p / 100.0 * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0u64;
        for &(b, n) in &self.bins {
            seen += n as u64;
            if seen >= want {
                return Some(bin_value(b as usize).min(self.max_ns.max(1)));
            }
        }
        Some(self.max_ns)
    }
}

/// A merged bucket: `index` × width after the phase start.
#[derive(Clone, Debug, Default)]
pub struct Bucket {
    pub index: u64,
    pub class: [ClassBucket; CLASSES],
}

impl Bucket {
    pub fn all(&self) -> ClassBucket {
        let mut a = self.class[AFFECTED].clone();
        a.add(&self.class[REST]);
        a
    }
}

/// Every worker's ring, and where reading stands.
pub struct Timeline {
    pub width_ns: u64,
    workers: Vec<Arc<WorkerTimeline>>,
    /// The next bucket to read.
    next: u64,
}

impl Timeline {
    /// `ring`: buckets each worker keeps (enough to cover the time between two reads).
    pub fn new(width_ns: u64, start_ns: u64, workers: usize, ring: usize) -> Timeline {
        let ring = ring.max(8);
        let make = || {
            Arc::new(WorkerTimeline {
                slots: (0..ring)
                    .map(|_| Slot {
                        bucket: AtomicU64::new(0),
                        class: std::array::from_fn(|_| zeroed_class()),
                    })
                    .collect(),
                width_ns: width_ns.max(1),
                start_ns,
            })
        };
        Timeline {
            width_ns: width_ns.max(1),
            workers: (0..workers).map(|_| make()).collect(),
            next: 0,
        }
    }

    pub fn worker(&self, i: usize) -> Arc<WorkerTimeline> {
        self.workers[i].clone()
    }

    /// Merges every bucket that ended before `now_ns` (since the phase start) less one bucket
    /// of grace (an operation is placed by its completion time), or every whole bucket up to
    /// `now_ns` when `last` (the workers have stopped; a final partial bucket would read as a
    /// drop in throughput, so it is left out).
    pub fn take(&mut self, now_ns: u64, last: bool) -> Vec<Bucket> {
        let upto = if last {
            now_ns / self.width_ns
        } else {
            (now_ns / self.width_ns).saturating_sub(1)
        };
        let mut out = vec![];
        while self.next < upto {
            let b = self.next;
            let mut m = Bucket {
                index: b,
                ..Default::default()
            };
            for w in &self.workers {
                let slot = &w.slots[(b % w.slots.len() as u64) as usize];
                if slot.bucket.load(Relaxed) != b + 1 {
                    continue;
                }
                for (k, c) in slot.class.iter().enumerate() {
                    let first = c.first_ok.load(Relaxed);
                    let mut one = ClassBucket {
                        ok: c.ok.load(Relaxed) as u64,
                        errors: std::array::from_fn(|i| c.errors[i].load(Relaxed) as u64),
                        first_ok: (first != u64::MAX).then_some(first),
                        last_ok: (first != u64::MAX).then(|| c.last_ok.load(Relaxed)),
                        max_ns: c.max.load(Relaxed),
                        bins: vec![],
                    };
                    for (i, x) in c.bins.iter().enumerate() {
                        let n = x.load(Relaxed);
                        if n > 0 {
                            one.bins.push((i as u16, n));
                        }
                    }
                    m.class[k].add(&one);
                }
            }
            out.push(m);
            self.next += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_place_values_within_seven_percent() {
        for v in [
            1_500u64,
            10_000,
            123_456,
            1_000_000,
            7_777_777,
            2_000_000_000,
        ] {
            let m = bin_value(bin(v)) as f64;
            assert!(
                (m - v as f64).abs() / v as f64 <= 0.0625 + 1e-9,
                "{v} -> {m}"
            );
        }
        assert_eq!(bin(0), 0);
        assert_eq!(bin(u64::MAX), BINS - 1);
        // Bins grow with the value.
        let mut last = 0;
        for v in (10..36).map(|s| 1u64 << s) {
            assert!(bin(v) > last || v < 2048);
            last = bin(v);
        }
    }

    #[test]
    fn buckets_merge_workers_and_keep_exact_success_times() {
        let mut t = Timeline::new(100, 1_000, 2, 16);
        let (a, b) = (t.worker(0), t.worker(1));
        // Bucket 0: ok at 10 and 90; bucket 2: ok at 250 (worker 1) and an error.
        a.record(AFFECTED, Status::Ok, 1_010, 5_000);
        b.record(AFFECTED, Status::Ok, 1_090, 9_000);
        b.record(AFFECTED, Status::error(ErrorKind::Timeout), 1_150, 50);
        b.record(AFFECTED, Status::Ok, 1_250, 20_000);
        let got = t.take(400, false);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].class[AFFECTED].ok, 2);
        assert_eq!(got[0].class[AFFECTED].first_ok, Some(10));
        assert_eq!(got[0].class[AFFECTED].last_ok, Some(90));
        assert_eq!(got[0].class[AFFECTED].max_ns, 9_000);
        assert_eq!(got[1].class[AFFECTED].ok, 0);
        assert_eq!(
            got[1].class[AFFECTED].errors[ErrorKind::Timeout as usize],
            1
        );
        assert_eq!(got[2].class[AFFECTED].first_ok, Some(250));
        // p50 of {5 µs, 9 µs} lies in the 5 µs bin.
        let p50 = got[0].class[AFFECTED].percentile(50.0).unwrap();
        assert!((4_600..=5_400).contains(&p50), "{p50}");
        assert!(t.take(400, false).is_empty());
        // At the end, whole buckets only: 450 ns holds bucket 3 whole, not bucket 4's half.
        let end = t.take(450, true);
        assert_eq!(end.iter().map(|b| b.index).collect::<Vec<_>>(), [3]);
    }
}
