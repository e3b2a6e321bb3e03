//! The key counters (§5.8, §5.9): inserts take the next key; `latest` reads only up to the
//! acknowledged prefix.

use super::*;

/// `CounterGenerator(start)` (§5.8).
pub struct Counter(AtomicI64);

impl Counter {
    pub fn new(start: i64) -> Self {
        Counter(AtomicI64::new(start))
    }
    #[inline]
    pub fn next(&self) -> i64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
    pub fn last(&self) -> i64 {
        self.0.load(Ordering::Relaxed) - 1
    }
}

pub(super) const ACK_WINDOW: i64 = 1 << 20;
const ACK_MASK: i64 = ACK_WINDOW - 1;

/// `AcknowledgedCounterGenerator(start)` (§5.9): `last()` only advances over a contiguous
/// acknowledged prefix. The window is a 2^20-bit atomic bitset; the sweep runs under a
/// `try_lock` that never blocks, as upstream.
pub struct AcknowledgedCounter {
    counter: Counter,
    window: Box<[AtomicU64]>,
    limit: AtomicI64,
    sweep: Mutex<()>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct TooManyUnacknowledged;

impl AcknowledgedCounter {
    pub fn new(start: i64) -> Self {
        AcknowledgedCounter {
            counter: Counter::new(start),
            window: (0..ACK_WINDOW / 64).map(|_| AtomicU64::new(0)).collect(),
            limit: AtomicI64::new(start - 1),
            sweep: Mutex::new(()),
        }
    }
    #[inline]
    pub fn next(&self) -> i64 {
        self.counter.next()
    }
    #[inline]
    pub fn last(&self) -> i64 {
        self.limit.load(Ordering::Acquire)
    }

    fn slot(v: i64) -> (usize, u64) {
        let s = (v & ACK_MASK) as usize;
        (s / 64, 1u64 << (s % 64))
    }

    pub fn acknowledge(&self, v: i64) -> Result<(), TooManyUnacknowledged> {
        let (w, bit) = Self::slot(v);
        if self.window[w].fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            return Err(TooManyUnacknowledged);
        }
        if let Ok(_guard) = self.sweep.try_lock() {
            let mut index = self.limit.load(Ordering::Acquire) + 1;
            loop {
                let (w, bit) = Self::slot(index);
                if self.window[w].load(Ordering::Acquire) & bit == 0 {
                    break;
                }
                self.window[w].fetch_and(!bit, Ordering::AcqRel);
                index += 1;
            }
            self.limit.store(index - 1, Ordering::Release);
        }
        Ok(())
    }
}
