//! Per-operation latency recording and the per-interval series (design.md "Measurement rules").
//!
//! Every worker records into its own `Stats` (HdrHistograms in nanoseconds, 3 significant
//! digits, per metric: successful ops, failed ops, and intended-start latency when paced).
//! The per-op path is a relaxed atomic load and a histogram increment: no lock, no allocation.
//!
//! Interval handoff: the collector bumps a shared epoch at each interval boundary; a worker
//! that sees a new epoch (checked once per operation) hands its interval stats over through
//! its slot's mutex — one lock per worker per interval, never per operation — and continues
//! with the emptied set it gets back. An operation is counted in the interval in which it
//! completes; if a worker is stuck in one long call past the collector's grace period, its
//! operations land in the next interval (never lost, never double-counted).

pub mod clock;
pub mod cpu;
pub mod hdr;
pub mod percentile;
pub mod timeline;
pub mod wire;

use crate::store::{ErrorKind, Status};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Highest trackable latency: one hour in ns. Longer values are clamped (saturating).
pub const HIGHEST_NS: u64 = 3_600_000_000_000;
pub const SIGFIG: u8 = 3;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_NS, SIGFIG).expect("valid histogram bounds")
}

/// The measured metrics, with YCSB's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    Read = 0,
    Update,
    Insert,
    Scan,
    Delete,
    ReadModifyWrite,
    Verify,
    Cleanup,
}

pub const METRICS: usize = 8;

impl Metric {
    pub const ALL: [Metric; METRICS] = [
        Metric::Read,
        Metric::Update,
        Metric::Insert,
        Metric::Scan,
        Metric::Delete,
        Metric::ReadModifyWrite,
        Metric::Verify,
        Metric::Cleanup,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Metric::Read => "READ",
            Metric::Update => "UPDATE",
            Metric::Insert => "INSERT",
            Metric::Scan => "SCAN",
            Metric::Delete => "DELETE",
            Metric::ReadModifyWrite => "READ-MODIFY-WRITE",
            Metric::Verify => "VERIFY",
            Metric::Cleanup => "CLEANUP",
        }
    }
}

/// Status counter slots: ok, not found, then one per error kind.
pub const STATUS_SLOTS: usize = 2 + ErrorKind::ALL.len();

#[inline]
fn status_slot(s: Status) -> usize {
    match s {
        Status::Ok => 0,
        Status::NotFound => 1,
        Status::Error { kind, .. } => 2 + kind as usize,
    }
}

pub fn status_slot_name(i: usize) -> &'static str {
    match i {
        0 => "ok",
        1 => "not_found",
        _ => ErrorKind::ALL[i - 2].name(),
    }
}

/// One metric's counts and histograms.
#[derive(Clone)]
pub struct OpStats {
    pub ok: Histogram<u64>,
    pub failed: Option<Histogram<u64>>,
    pub intended: Option<Histogram<u64>>,
    pub statuses: [u64; STATUS_SLOTS],
    /// User data bytes moved (values written or returned, with field names).
    pub bytes: u64,
}

impl OpStats {
    fn new(paced: bool) -> Self {
        OpStats {
            ok: new_histogram(),
            failed: None,
            intended: paced.then(new_histogram),
            statuses: [0; STATUS_SLOTS],
            bytes: 0,
        }
    }

    pub fn count(&self) -> u64 {
        self.statuses.iter().sum()
    }

    pub fn errors(&self) -> u64 {
        self.count() - self.statuses[0]
    }

    fn add(&mut self, o: &OpStats) {
        self.ok.add(&o.ok).expect("same bounds");
        if let Some(f) = &o.failed {
            self.failed
                .get_or_insert_with(new_histogram)
                .add(f)
                .expect("same bounds");
        }
        if let Some(i) = &o.intended {
            self.intended
                .get_or_insert_with(new_histogram)
                .add(i)
                .expect("same bounds");
        }
        for (a, b) in self.statuses.iter_mut().zip(o.statuses) {
            *a += b;
        }
        self.bytes += o.bytes;
    }

    fn reset(&mut self) {
        self.ok.reset();
        if let Some(f) = &mut self.failed {
            f.reset();
        }
        if let Some(i) = &mut self.intended {
            i.reset();
        }
        self.statuses = [0; STATUS_SLOTS];
        self.bytes = 0;
    }
}

/// All metrics of one worker's interval, or of an aggregate.
#[derive(Clone)]
pub struct Stats {
    ops: [Option<Box<OpStats>>; METRICS],
    paced: bool,
    /// Paced and open-loop runs: how late each operation was sent after its intended start
    /// (the sender's lag; 0 when on time).
    pub lag: Option<Box<Histogram<u64>>>,
}

impl Stats {
    /// Histograms for `metrics` are made up front so recording them never allocates.
    pub fn new(metrics: &[Metric], paced: bool) -> Self {
        let mut s = Stats {
            ops: Default::default(),
            paced,
            lag: paced.then(|| Box::new(new_histogram())),
        };
        for m in metrics {
            s.ops[*m as usize] = Some(Box::new(OpStats::new(paced)));
        }
        s
    }

    #[cold]
    fn make(&mut self, m: Metric) -> &mut OpStats {
        self.ops[m as usize].insert(Box::new(OpStats::new(self.paced)))
    }

    /// Records one operation. `intended_ns` is the latency from the intended start (paced
    /// runs only).
    #[inline]
    pub fn record(
        &mut self,
        m: Metric,
        status: Status,
        service_ns: u64,
        intended_ns: u64,
        bytes: u64,
    ) {
        let op = match &mut self.ops[m as usize] {
            Some(op) => op,
            None => self.make(m),
        };
        op.statuses[status_slot(status)] += 1;
        op.bytes += bytes;
        if status.is_ok() {
            op.ok.saturating_record(service_ns);
        } else {
            op.failed
                .get_or_insert_with(new_histogram)
                .saturating_record(service_ns);
        }
        if let Some(h) = &mut op.intended {
            h.saturating_record(intended_ns);
        }
    }

    /// Records how late an operation was sent after its intended start.
    #[inline]
    pub fn record_lag(&mut self, lag_ns: u64) {
        if let Some(h) = &mut self.lag {
            h.saturating_record(lag_ns);
        }
    }

    pub fn add(&mut self, o: &Stats) {
        if let Some(theirs) = &o.lag {
            self.lag
                .get_or_insert_with(|| Box::new(new_histogram()))
                .add(&**theirs)
                .expect("same bounds");
        }
        for (i, theirs) in o.ops.iter().enumerate() {
            if let Some(t) = theirs {
                match &mut self.ops[i] {
                    Some(mine) => mine.add(t),
                    None => self.ops[i] = Some(t.clone()),
                }
            }
        }
    }

    pub fn reset(&mut self) {
        for op in self.ops.iter_mut().flatten() {
            op.reset();
        }
        if let Some(h) = &mut self.lag {
            h.reset();
        }
    }

    pub fn get(&self, m: Metric) -> Option<&OpStats> {
        self.ops[m as usize].as_deref()
    }

    /// Metrics with at least one operation, in `Metric` order.
    pub fn metrics(&self) -> impl Iterator<Item = (Metric, &OpStats)> {
        Metric::ALL
            .into_iter()
            .filter_map(|m| self.get(m).filter(|o| o.count() > 0).map(|o| (m, o)))
    }

    /// Operations as YCSB's `done` counts them, and as an open-loop schedule offers them: one
    /// per transaction (an RMW is one, though its read and update are counted apart too).
    pub fn transactions(&self) -> u64 {
        let c = |m: Metric| self.get(m).map(|o| o.count()).unwrap_or(0);
        c(Metric::Read)
            + c(Metric::Update)
            + c(Metric::Insert)
            + c(Metric::Scan)
            + c(Metric::Delete)
            - c(Metric::ReadModifyWrite)
    }

    pub fn total_ops(&self) -> u64 {
        self.ops.iter().flatten().map(|o| o.count()).sum()
    }
}

struct SlotInner {
    stats: Stats,
    has_data: bool,
    epoch: u64,
}

/// A worker's mailbox to the collector.
pub struct Slot(Mutex<SlotInner>);

/// Epoch a finished worker publishes with, so the collector never waits on it.
const FINISHED: u64 = u64::MAX;

/// The worker side: records, and hands its interval over when the epoch moves.
pub struct WorkerRecorder {
    pub stats: Stats,
    slot: Arc<Slot>,
    epoch: Arc<AtomicU64>,
    seen: u64,
}

impl WorkerRecorder {
    #[inline]
    pub fn record(
        &mut self,
        m: Metric,
        status: Status,
        service_ns: u64,
        intended_ns: u64,
        bytes: u64,
    ) {
        self.stats.record(m, status, service_ns, intended_ns, bytes);
    }

    #[inline]
    pub fn record_lag(&mut self, lag_ns: u64) {
        self.stats.record_lag(lag_ns);
    }

    /// Call once per operation: hands the interval over if the collector moved the epoch.
    #[inline]
    pub fn tick(&mut self) {
        let e = self.epoch.load(Ordering::Relaxed);
        if e != self.seen {
            self.publish(e);
        }
    }

    #[cold]
    fn publish(&mut self, e: u64) {
        let mut s = self.slot.0.lock().unwrap_or_else(|p| p.into_inner());
        if s.has_data {
            s.stats.add(&self.stats);
            self.stats.reset();
        } else {
            std::mem::swap(&mut s.stats, &mut self.stats);
        }
        s.has_data = true;
        s.epoch = e;
        self.seen = e;
    }

    /// Hands over everything left; the collector stops waiting for this worker.
    pub fn finish(&mut self) {
        self.publish(FINISHED);
    }
}

impl Drop for WorkerRecorder {
    /// A worker that panicked never called `finish`: what it recorded is still handed over,
    /// and the collector stops waiting for it at each interval.
    fn drop(&mut self) {
        if self.seen != FINISHED {
            self.publish(FINISHED);
        }
    }
}

/// The collector side, owned by the phase's main thread.
pub struct Collector {
    slots: Vec<Arc<Slot>>,
    epoch: Arc<AtomicU64>,
    metrics: Vec<Metric>,
    paced: bool,
}

impl Collector {
    pub fn new(metrics: &[Metric], paced: bool) -> Self {
        Collector {
            slots: Vec::new(),
            epoch: Arc::new(AtomicU64::new(0)),
            metrics: metrics.to_vec(),
            paced,
        }
    }

    pub fn worker(&mut self) -> WorkerRecorder {
        let slot = Arc::new(Slot(Mutex::new(SlotInner {
            stats: Stats::new(&self.metrics, self.paced),
            has_data: false,
            epoch: 0,
        })));
        self.slots.push(slot.clone());
        WorkerRecorder {
            stats: Stats::new(&self.metrics, self.paced),
            slot,
            epoch: self.epoch.clone(),
            seen: 0,
        }
    }

    pub fn empty_stats(&self) -> Stats {
        Stats::new(&self.metrics, self.paced)
    }

    /// Closes the current interval: moves the epoch, waits up to `grace` for every live
    /// worker to hand over, and merges what arrived into `into`.
    pub fn close_interval(&self, into: &mut Stats, grace: Duration) {
        let e = self.epoch.fetch_add(1, Ordering::Relaxed) + 1;
        let deadline = Instant::now() + grace;
        loop {
            let all = self.slots.iter().all(|s| {
                let g = s.0.lock().unwrap_or_else(|p| p.into_inner());
                g.epoch >= e
            });
            if all || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        self.drain(into);
    }

    /// Merges whatever the workers handed over (used after they all finished).
    pub fn drain(&self, into: &mut Stats) {
        for s in &self.slots {
            let mut g = s.0.lock().unwrap_or_else(|p| p.into_inner());
            if g.has_data {
                into.add(&g.stats);
                g.stats.reset();
                g.has_data = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoff_loses_and_duplicates_nothing() {
        let mut c = Collector::new(&[Metric::Read], false);
        let workers: Vec<_> = (0..3).map(|_| c.worker()).collect();
        let handles: Vec<_> = workers
            .into_iter()
            .map(|mut w| {
                std::thread::spawn(move || {
                    for i in 0..200_000u64 {
                        w.record(Metric::Read, Status::Ok, 1000 + i % 7, 0, 10);
                        w.tick();
                    }
                    w.finish();
                })
            })
            .collect();
        let mut total = c.empty_stats();
        let mut intervals = 0;
        while !handles.iter().all(|h| h.is_finished()) {
            let mut iv = c.empty_stats();
            c.close_interval(&mut iv, Duration::from_millis(20));
            total.add(&iv);
            intervals += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        for h in handles {
            h.join().unwrap();
        }
        c.drain(&mut total);
        let r = total.get(Metric::Read).unwrap();
        assert_eq!(r.count(), 600_000);
        assert_eq!(r.ok.len(), 600_000);
        assert_eq!(r.bytes, 6_000_000);
        assert!(intervals >= 1);
    }

    #[test]
    fn failures_and_kinds_are_counted_apart() {
        let mut s = Stats::new(&[Metric::Update], true);
        s.record(Metric::Update, Status::Ok, 100, 150, 0);
        s.record(Metric::Update, Status::NotFound, 200, 250, 0);
        s.record(Metric::Update, Status::error(ErrorKind::Io), 300, 350, 0);
        s.record(Metric::Read, Status::Ok, 5, 5, 0);
        let u = s.get(Metric::Update).unwrap();
        assert_eq!(u.count(), 3);
        assert_eq!(u.errors(), 2);
        assert_eq!(u.statuses[1], 1);
        assert_eq!(u.statuses[2 + ErrorKind::Io as usize], 1);
        assert_eq!(u.ok.len(), 1);
        assert_eq!(u.failed.as_ref().unwrap().len(), 2);
        assert_eq!(u.intended.as_ref().unwrap().len(), 3);
        assert_eq!(s.get(Metric::Read).unwrap().count(), 1);
    }
}
