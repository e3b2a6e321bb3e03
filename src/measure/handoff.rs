//! The interval handoff: every operation is counted in the interval in which it completed, on
//! the phase's fixed grid of interval boundaries, and every interval gets its row.
//!
//! Why tagged handoff and not an epoch: the collector used to bump an epoch at each boundary and
//! take whatever a worker had recorded when it next looked; a worker stuck in one call across a
//! boundary (a stalled server) handed over late, so its operations landed in a later row and the
//! interval of the stall had no row at all. Now the worker owns the decision, with the clock
//! reading it already has: after each store call it compares the completion time `t1` with the
//! end of its current interval (a plain integer compare, no atomic, no allocation). When `t1`
//! crosses it, the worker hands its stats over *tagged with the interval index they belong to*
//! and starts the interval that holds `t1`; intervals it skipped (it sat in one call) are zeros
//! from it. The collector adds each handoff into the row of its index, and writes row `k` once
//! every worker has moved past `k` (or finished).
//!
//! The price: while a worker sits in one call, rows are written late — exact and in order, but
//! late (a network store's per-operation deadline bounds how late). Workers that sleep (pacing,
//! open-loop waits, retry pauses) wake at boundaries to move on, so they never hold rows back.
//!
//! Cost: one lock per worker per interval in which it completed something (never per
//! operation); the stats it hands over are swapped for an emptied set the collector returned
//! earlier, so steady state allocates nothing. Nothing is lost: a worker that finishes or
//! panics hands everything over (its `Drop`), and the phase's end writes every pending
//! interval as its own row.

use super::Stats;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The phase's interval boundaries, in clock ns: interval 0 ends at `origin + first` (the end
/// of warm-up, or one interval), interval `k` at `origin + first + k·width`, and none after
/// the phase's deadline: the interval holding the deadline ends there, and the calls in flight
/// at the deadline (at most one per worker) are counted in it — so the measured window is
/// exactly the plan's, and the slowest calls are not the ones dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    /// The clock reading the phase started at.
    pub origin: u64,
    /// The end of interval 0, ns after the origin.
    pub first: u64,
    /// The length of every later interval, ns.
    pub width: u64,
    /// The phase's end (`--duration`), ns after the origin; `u64::MAX` when none.
    pub deadline: u64,
}

impl Grid {
    pub fn new(origin: u64, first: u64, width: u64) -> Grid {
        Grid {
            origin,
            first: first.max(1),
            width: width.max(1),
            deadline: u64::MAX,
        }
    }

    /// The same grid, ending at `deadline` ns after the origin.
    pub fn until(self, deadline: u64) -> Grid {
        Grid {
            deadline: deadline.max(1),
            ..self
        }
    }

    /// The end of interval `k`, ns after the origin (saturating; at most the deadline).
    pub fn end(&self, k: u64) -> u64 {
        self.first
            .saturating_add(k.saturating_mul(self.width))
            .min(self.deadline)
    }

    /// The start of interval `k`, ns after the origin.
    pub fn start(&self, k: u64) -> u64 {
        if k == 0 {
            0
        } else {
            self.end(k - 1)
        }
    }

    /// The interval holding the instant `t` ns after the origin (from the deadline on: the
    /// last one).
    pub fn index_at(&self, t: u64) -> u64 {
        let t = t.min(self.deadline - 1);
        if t < self.first {
            0
        } else {
            1 + (t - self.first) / self.width
        }
    }
}

struct SlotInner {
    /// Handed-over stats, tagged with their interval, oldest first.
    ready: Vec<(u64, Stats)>,
    /// Emptied stats the collector gave back, for the worker's next handoff.
    spare: Vec<Stats>,
    /// Every interval before this one is complete from this worker.
    reached: u64,
    finished: bool,
}

/// A worker's mailbox to the collector.
pub struct Slot(Mutex<SlotInner>);

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The worker side: records into the interval its clock readings fall in.
pub struct WorkerRecorder {
    pub stats: Stats,
    slot: Arc<Slot>,
    grid: Grid,
    /// The interval `stats` belongs to.
    index: u64,
    /// Its end, in clock ns (`u64::MAX` until `start`).
    next_end: u64,
    /// The latest clock reading passed to `at`.
    last: u64,
    finished: bool,
}

impl WorkerRecorder {
    /// The phase's grid, known when the workers start (after the recorders were made).
    pub fn start(&mut self, grid: Grid) {
        self.grid = grid;
        self.index = 0;
        self.next_end = grid.origin.saturating_add(grid.end(0));
        if grid.end(0) >= grid.deadline {
            self.next_end = u64::MAX;
        }
        self.last = grid.origin;
    }

    /// Places what is recorded next at clock `t` (an operation's completion): hands the current
    /// interval over when `t` is past its end. Call before `record`.
    #[inline]
    pub fn at(&mut self, t: u64) {
        if t >= self.next_end {
            self.cross(t);
        }
        self.last = self.last.max(t);
    }

    /// The end of the current interval (clock ns): a sleeping worker wakes by then.
    #[inline]
    pub fn next_end(&self) -> u64 {
        self.next_end
    }

    /// The latest clock reading seen (the last completion), clock ns.
    pub fn last(&self) -> u64 {
        self.last
    }

    #[inline]
    pub fn record(
        &mut self,
        m: super::Metric,
        status: crate::store::Status,
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

    #[cold]
    #[inline(never)]
    fn cross(&mut self, t: u64) {
        let to = self.grid.index_at(t.saturating_sub(self.grid.origin));
        self.hand_off(to, false);
        self.index = to;
        let end = self.grid.end(to);
        // The interval ending at the deadline takes every later completion.
        self.next_end = match end >= self.grid.deadline {
            true => u64::MAX,
            false => self.grid.origin.saturating_add(end),
        };
    }

    /// Hands `stats` over as interval `self.index` (when it holds anything) and tells the
    /// collector every interval before `reached` is complete from this worker.
    fn hand_off(&mut self, reached: u64, finished: bool) {
        let mut s = self.slot.lock();
        if !self.stats.is_empty() {
            let fresh = s.spare.pop().unwrap_or_else(|| self.stats.emptied());
            let full = std::mem::replace(&mut self.stats, fresh);
            s.ready.push((self.index, full));
        }
        s.reached = s.reached.max(reached);
        s.finished |= finished;
    }

    /// Hands over everything left; the collector stops waiting for this worker. What is
    /// recorded after this (the session's close) is handed over by `Drop`.
    pub fn finish(&mut self) {
        let i = self.index;
        self.hand_off(i, true);
        self.finished = true;
    }
}

impl Drop for WorkerRecorder {
    /// A worker that panicked never called `finish`: what it recorded is still handed over.
    fn drop(&mut self) {
        if !self.finished || !self.stats.is_empty() {
            let i = self.index;
            self.hand_off(i, true);
        }
    }
}

/// The collector side, used by the phase's main thread: rows assembled by interval index.
pub struct Collector {
    slots: Vec<Arc<Slot>>,
    template: Stats,
    /// Behind a lock only so `&Collector` can be shared with the companions (the pressure
    /// scale makes empty stats from it); only the interval loop takes rows.
    rows: Mutex<Rows>,
}

/// The next row to hand out, and the rows from it on.
struct Rows {
    next: u64,
    rows: VecDeque<Stats>,
}

impl Collector {
    pub fn new(metrics: &[super::Metric], paced: bool) -> Self {
        Collector {
            slots: Vec::new(),
            template: Stats::new(metrics, paced),
            rows: Mutex::new(Rows {
                next: 0,
                rows: VecDeque::new(),
            }),
        }
    }

    pub fn worker(&mut self) -> WorkerRecorder {
        let slot = Arc::new(Slot(Mutex::new(SlotInner {
            ready: Vec::with_capacity(4),
            spare: vec![self.empty_stats()],
            reached: 0,
            finished: false,
        })));
        self.slots.push(slot.clone());
        WorkerRecorder {
            stats: self.empty_stats(),
            slot,
            grid: Grid::new(0, u64::MAX, u64::MAX),
            index: 0,
            next_end: u64::MAX,
            last: 0,
            finished: false,
        }
    }

    pub fn empty_stats(&self) -> Stats {
        self.template.emptied()
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, Rows> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes every handoff into its row; returns the first interval not yet complete from
    /// every worker (`u64::MAX` when all have finished).
    fn gather(&self, r: &mut Rows) -> u64 {
        let mut complete = u64::MAX;
        for slot in &self.slots {
            let mut s = slot.lock();
            let ready = std::mem::take(&mut s.ready);
            for (k, mut st) in ready {
                // A handoff for a row already written cannot happen (a worker hands over
                // interval k before it reports reaching past k); kept safe anyway.
                let at = (k.max(r.next) - r.next) as usize;
                while r.rows.len() <= at {
                    r.rows.push_back(self.template.emptied());
                }
                r.rows[at].add(&st);
                st.reset();
                s.spare.push(st);
            }
            if !s.finished {
                complete = complete.min(s.reached);
            }
        }
        complete
    }

    /// The next row, if every worker has moved past it and it is before `before` (the
    /// interval the clock is in): `(index, stats)`, in order, each index once.
    pub fn next_row(&self, before: u64) -> Option<(u64, Stats)> {
        let mut r = self.rows();
        let complete = self.gather(&mut r);
        if r.next >= complete.min(before) {
            return None;
        }
        Some(self.pop(&mut r))
    }

    /// At the phase's end (every worker finished or given up on): the next row up to and
    /// including `last`, whatever the workers reported.
    pub fn next_row_at_end(&self, last: u64) -> Option<(u64, Stats)> {
        let mut r = self.rows();
        self.gather(&mut r);
        if r.next > last {
            return None;
        }
        Some(self.pop(&mut r))
    }

    /// The highest interval index anything was handed over for.
    pub fn last_with_data(&self) -> Option<u64> {
        let mut r = self.rows();
        self.gather(&mut r);
        let n = r.rows.len();
        (0..n)
            .rev()
            .find(|&i| !r.rows[i].is_empty())
            .map(|i| r.next + i as u64)
    }

    fn pop(&self, r: &mut Rows) -> (u64, Stats) {
        let st = r
            .rows
            .pop_front()
            .unwrap_or_else(|| self.template.emptied());
        let k = r.next;
        r.next += 1;
        (k, st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Metric;
    use crate::store::Status;

    fn reads(s: &Stats) -> u64 {
        s.get(Metric::Read).map(|o| o.count()).unwrap_or(0)
    }

    #[test]
    fn grid_places_instants() {
        // Warm-up 500, then intervals of 1000.
        let g = Grid::new(10_000, 500, 1_000);
        assert_eq!(g.index_at(0), 0);
        assert_eq!(g.index_at(499), 0);
        assert_eq!(g.index_at(500), 1);
        assert_eq!(g.index_at(1_499), 1);
        assert_eq!(g.index_at(1_500), 2);
        assert_eq!((g.start(2), g.end(2)), (1_500, 2_500));
        assert_eq!(g.end(u64::MAX), u64::MAX);
        // A deadline at 2_000: interval 2 ends there and takes everything after it.
        let d = g.until(2_000);
        assert_eq!((d.start(2), d.end(2)), (1_500, 2_000));
        assert_eq!(d.index_at(1_999), 2);
        assert_eq!(d.index_at(5_000), 2);
    }

    /// Skipped intervals are zeros, a late handoff lands in its own interval, and a row waits
    /// for every worker.
    #[test]
    fn tagged_handoff_puts_each_operation_in_its_interval() {
        let mut c = Collector::new(&[Metric::Read], false);
        let (mut a, mut b) = (c.worker(), c.worker());
        let g = Grid::new(1_000_000, 100, 100);
        a.start(g);
        b.start(g);
        let rec = |w: &mut WorkerRecorder, t: u64| {
            w.at(g.origin + t);
            w.record(Metric::Read, Status::Ok, 10, 10, 0);
        };
        // Worker a: 3 ops in interval 0, 2 in interval 1.
        for t in [10, 20, 99] {
            rec(&mut a, t);
        }
        rec(&mut a, 100);
        rec(&mut a, 150);
        // Worker b: 1 op in interval 0, then stuck in one call until interval 4.
        rec(&mut b, 50);
        assert!(c.next_row(u64::MAX).is_none(), "nobody moved past 0 yet");
        rec(&mut a, 210); // a reaches interval 2: rows 0 and 1 complete from a.
        assert!(c.next_row(u64::MAX).is_none(), "b has not moved past 0");
        // a goes on through intervals 2..5 while b is stuck.
        for t in [250, 310, 420, 530] {
            rec(&mut a, t);
        }
        assert!(c.next_row(u64::MAX).is_none(), "rows wait for b");
        // b's call returns at 460 (interval 4): its interval-0 op is handed over late.
        rec(&mut b, 460);
        rec(&mut b, 470);
        rec(&mut b, 505); // b reaches 5
        let mut rows = vec![];
        while let Some((k, s)) = c.next_row(u64::MAX) {
            rows.push((k, reads(&s)));
        }
        // a: 0:3, 1:2, 2:2, 3:1, 4:1 ; b: 0:1, 4:2 (1, 2, 3 skipped: zeros).
        assert_eq!(rows, [(0, 4), (1, 2), (2, 2), (3, 1), (4, 3)]);
        // Before-the-clock limit: row 5 is not handed out while the clock is in it.
        a.finish();
        b.finish();
        assert!(c.next_row(5).is_none());
        let mut end = vec![];
        while let Some((k, s)) = c.next_row_at_end(5) {
            end.push((k, reads(&s)));
        }
        // a's op at 530 and b's at 505.
        assert_eq!(end, [(5, 2)]);
        assert!(c.next_row_at_end(5).is_none());
    }

    #[test]
    fn handoff_loses_and_duplicates_nothing() {
        let mut c = Collector::new(&[Metric::Read], false);
        let clock = crate::measure::clock::Clock::monotonic();
        let g = Grid::new(clock.now(), 2_000_000, 2_000_000);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let mut w = c.worker();
                let clock = clock.clone();
                std::thread::spawn(move || {
                    w.start(g);
                    for i in 0..200_000u64 {
                        w.at(clock.now());
                        w.record(Metric::Read, Status::Ok, 1000 + i % 7, 0, 10);
                    }
                    w.finish();
                })
            })
            .collect();
        let mut total = c.empty_stats();
        let mut seen = vec![];
        while !handles.iter().all(|h| h.is_finished()) {
            let before = g.index_at(clock.now() - g.origin);
            while let Some((k, s)) = c.next_row(before) {
                seen.push(k);
                total.add(&s);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        for h in handles {
            h.join().unwrap();
        }
        let last = c.last_with_data().unwrap_or(0);
        while let Some((k, s)) = c.next_row_at_end(last) {
            seen.push(k);
            total.add(&s);
        }
        assert_eq!(seen, (0..seen.len() as u64).collect::<Vec<_>>());
        let r = total.get(Metric::Read).unwrap();
        assert_eq!(r.count(), 600_000);
        assert_eq!(r.ok.len(), 600_000);
        assert_eq!(r.bytes, 6_000_000);
    }
}
