//! Per-operation latency recording and the per-interval series (design.md "Measurement rules").
//!
//! Every worker records into its own `Stats` (HdrHistograms in nanoseconds, 3 significant
//! digits, per metric: successful ops, failed ops, and intended-start latency when paced).
//! The per-op path is an integer compare and a histogram increment: no lock, no allocation.
//!
//! Interval handoff (`handoff.rs`): each operation is counted in the interval of the phase's
//! fixed grid in which it completed; a worker hands an interval over, tagged with its index,
//! when its clock passes the interval's end, and the collector writes a row once every worker
//! has moved past it. Every interval has its row (zeros when nothing completed).

pub mod clock;
pub mod cpu;
pub mod handoff;
pub mod hdr;
pub mod percentile;
pub mod timeline;
pub mod wire;

use crate::store::{ErrorKind, Status};
use hdrhistogram::Histogram;

pub use handoff::{Collector, Grid, WorkerRecorder};

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

/// Whether an operation's hit ratio means anything: a lookup's (READ, SCAN,
/// READ-MODIFY-WRITE) always; another's only when some of its calls found no key (an UPDATE
/// or DELETE of a key not there), since otherwise its "hits" are merely its successes.
pub fn has_hit_ratio(op: &str, misses: u64) -> bool {
    matches!(op, "READ" | "SCAN" | "READ-MODIFY-WRITE") || misses > 0
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
    /// Every call that did not succeed (misses included: YCSB's `NAME-FAILED`).
    pub failed: Option<Histogram<u64>>,
    /// Misses (`not_found`) alone, also in `failed`: for a cache a miss is an answer, and its
    /// latency is shown on its own.
    pub missed: Option<Histogram<u64>>,
    pub intended: Option<Histogram<u64>>,
    pub statuses: [u64; STATUS_SLOTS],
    /// User data bytes moved by successful calls (values written or returned, with field
    /// names); a failed write moved nothing the store kept.
    pub bytes: u64,
}

impl OpStats {
    fn new(paced: bool) -> Self {
        OpStats {
            ok: new_histogram(),
            failed: None,
            missed: None,
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
        if let Some(m) = &o.missed {
            self.missed
                .get_or_insert_with(new_histogram)
                .add(m)
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
        if let Some(m) = &mut self.missed {
            m.reset();
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
        if status.is_ok() {
            op.bytes += bytes;
            op.ok.saturating_record(service_ns);
        } else {
            // Made on a worker's first failure or miss only: `emptied` keeps the shape, so a
            // later interval's handoff brings them made up front.
            op.failed
                .get_or_insert_with(new_histogram)
                .saturating_record(service_ns);
            if status == Status::NotFound {
                op.missed
                    .get_or_insert_with(new_histogram)
                    .saturating_record(service_ns);
            }
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

    /// Calls of every metric, and how many of them ended with an error of `kind`.
    pub fn calls_with(&self, kind: ErrorKind) -> (u64, u64) {
        let slot = status_slot(Status::Error { kind, fatal: false });
        self.ops.iter().flatten().fold((0, 0), |(all, of), o| {
            (all + o.count(), of + o.statuses[slot])
        })
    }

    /// No operation and no send lag recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.iter().flatten().all(|o| o.count() == 0)
            && self.lag.as_ref().is_none_or(|h| h.is_empty())
    }

    /// A set with the same metrics made up front, all empty (not a clone: nothing copied);
    /// a metric that had failures or misses gets those histograms made too, so the worker
    /// that records into it next allocates nothing.
    pub fn emptied(&self) -> Stats {
        let mut s = Stats {
            ops: Default::default(),
            paced: self.paced,
            lag: self.paced.then(|| Box::new(new_histogram())),
        };
        for (i, o) in self.ops.iter().enumerate() {
            if let Some(o) = o {
                let mut e = OpStats::new(self.paced);
                e.failed = o.failed.as_ref().map(|_| new_histogram());
                e.missed = o.missed.as_ref().map(|_| new_histogram());
                s.ops[i] = Some(Box::new(e));
            }
        }
        s
    }

    /// The metrics an interval's row lists: those with operations, and the phase's own
    /// operations even when none completed (a stalled interval is a row of zeros, not a
    /// missing row). CLEANUP and VERIFY are listed only when they happened.
    pub fn row_metrics(&self) -> impl Iterator<Item = (Metric, &OpStats)> {
        Metric::ALL.into_iter().filter_map(|m| {
            let o = self.get(m)?;
            let planned = !matches!(m, Metric::Cleanup | Metric::Verify);
            (planned || o.count() > 0).then_some((m, o))
        })
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(u.missed.as_ref().unwrap().len(), 1);
        assert!(s.emptied().get(Metric::Update).unwrap().missed.is_some());
        assert_eq!(u.intended.as_ref().unwrap().len(), 3);
        assert_eq!(s.get(Metric::Read).unwrap().count(), 1);
    }
}
