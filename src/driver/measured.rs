//! The measured call, after YCSB's `DBWrapper`: read the clock, call the store, read the
//! clock, record — for every operation kind, for pipelined batches (each reply timed from the
//! batch's send to its own arrival) and for load inserts with YCSB's retries. Adapters never
//! time themselves. What is recorded of a completed operation is `call.rs`, shared with the
//! event-driven engine (style.md).
//!
//! Fused into the worker rather than a wrapper session because a read's view borrows the
//! session until its next call (the data-integrity check must use it in between) and a
//! pipelined flush reports replies through a callback. Hot path: no allocation, no lock.

use super::call::{self, Done};
use super::worker::Worker;
use crate::measure::clock::Clock;
use crate::measure::{timeline, Metric};
use crate::store::{ErrorKind, RecordView, Status};
use crate::workload::{CoreWorkload, Op};
use std::sync::atomic::Ordering;

/// The data-integrity check of a read (spec §4.3), timed: `None` when the mode is off. The
/// test is inlined into every read; the check itself is out of line (a profile of LMDB reads
/// showed the call costing every read even with the mode off).
#[inline(always)]
fn verify(
    wl: &CoreWorkload,
    clock: &Clock,
    key: &[u8],
    view: RecordView<'_>,
    scratch: &mut Vec<u8>,
) -> Option<(bool, u64)> {
    if !wl.cfg.dataintegrity {
        return None;
    }
    verify_timed(wl, clock, key, view, scratch)
}

#[cold]
#[inline(never)]
fn verify_timed(
    wl: &CoreWorkload,
    clock: &Clock,
    key: &[u8],
    view: RecordView<'_>,
    scratch: &mut Vec<u8>,
) -> Option<(bool, u64)> {
    let t0 = clock.now();
    let good = wl.verify(key, view, scratch);
    Some((good, clock.now().saturating_sub(t0)))
}

impl Worker<'_, '_> {
    /// Sends the queued batch; each reply's latency runs from the send to its arrival.
    pub(super) fn flush_batch(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let t0 = self.clock.now();
        let clock = &self.clock;
        let replies = &mut self.replies;
        replies.clear();
        self.session
            .flush(&mut |st, bytes| replies.push((st, clock.now(), bytes)));
        let pending = std::mem::take(&mut self.pending);
        for (k, &(metric, intended, written, ack)) in pending.iter().enumerate() {
            let (st, t1, read) = self.replies.get(k).copied().unwrap_or((
                Status::Error {
                    kind: ErrorKind::Other,
                    fatal: true,
                },
                self.clock.now(),
                0,
            ));
            let bytes = if metric == Metric::Read {
                read
            } else {
                written
            };
            self.record(metric, st, t0, t1, intended, bytes);
            if let Some(key) = ack {
                if let Err(e) = self.sh.workload.acknowledge(key) {
                    self.sh.fail(e.to_string());
                }
            }
        }
        self.pending = pending;
        self.pending.clear();
    }

    #[inline]
    pub(super) fn record(
        &mut self,
        m: Metric,
        st: Status,
        t_start: u64,
        t_end: u64,
        intended: Option<u64>,
        bytes: u64,
    ) {
        // The recovery timeline's class: asked of the session only while a timeline is kept.
        let class = match self.sh.affected_shard {
            Some(v) if self.timeline.is_some() && self.session.shard() != Some(v) => timeline::REST,
            _ => timeline::AFFECTED,
        };
        let done = Done {
            metric: m,
            status: st,
            start: t_start,
            intended: intended.unwrap_or(t_start),
            end: t_end,
            bytes,
        };
        call::record(&mut self.rec, self.timeline.as_deref(), class, &done);
        if let Status::Error { kind, fatal } = st {
            self.error(m, kind, fatal);
        }
    }

    #[cold]
    fn error(&mut self, m: Metric, kind: ErrorKind, fatal: bool) {
        let msg = self.session.last_error();
        if call::failed(self.sh, &mut self.samples, m, (kind, fatal), msg) {
            // A fault is expected to break connections: count it and go on, a little later,
            // so a dead server is not hammered in a tight loop (this bounds the error rate,
            // not the measured gap: the gap ends at the next success).
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Inserts the record in the buffers, timed and recorded.
    #[inline]
    fn timed_insert(&mut self, intended: Option<u64>) -> Status {
        let t0 = self.clock.now();
        let st = self
            .session
            .insert(&self.table, &self.bufs.key, &self.bufs.values);
        let t1 = self.clock.now();
        let bytes = self.bufs.values.data_bytes();
        self.record(Metric::Insert, st, t0, t1, intended, bytes);
        st
    }

    /// Inserts the record `next_load` put in the buffers, with YCSB's retries.
    pub(super) fn load_prepared(&mut self, intended: Option<u64>) {
        let limit = self.sh.workload.cfg.insertion_retry_limit;
        let mut attempts = 0;
        loop {
            let st = self.timed_insert(intended);
            if st.is_ok() || matches!(st, Status::Error { fatal: true, .. }) {
                return;
            }
            attempts += 1;
            if attempts > limit {
                return; // counted; kvmeter keeps going (YCSB would stop this thread)
            }
            let secs = self.sh.workload.cfg.insertion_retry_interval as f64;
            let pause = (secs * (0.8 + 0.4 * self.rng.next_f64()) * 1e9) as u64;
            self.sleep_until(self.clock.now() + pause);
            if self.sh.stop.load(Ordering::Relaxed) {
                return;
            }
        }
    }

    /// Records a data-integrity check made while the read's view was alive.
    #[inline]
    fn record_verify(&mut self, check: Option<(bool, u64)>) {
        if let Some((good, took)) = check {
            let st = if good {
                Status::Ok
            } else {
                Status::error(ErrorKind::UnexpectedState)
            };
            self.rec.record(Metric::Verify, st, took, took, 0);
        }
    }

    #[inline]
    pub(super) fn transaction(&mut self, intended: Option<u64>) {
        let op = self.sh.workload.next_op(&mut self.rng, &mut self.bufs);
        self.execute(op, intended);
    }

    #[inline]
    pub(super) fn execute(&mut self, op: Op, intended: Option<u64>) {
        let wl = self.sh.workload;
        match op {
            Op::Read => {
                let fields = wl.read_fields(&self.bufs);
                let t0 = self.clock.now();
                let (st, view) = self.session.read(&self.table, &self.bufs.key, fields);
                let t1 = self.clock.now();
                // The view lives until the session's next call: use it now.
                let bytes = view.data_bytes();
                let check = verify(wl, &self.clock, &self.bufs.key, view, &mut self.scratch);
                self.record(Metric::Read, st, t0, t1, intended, bytes);
                self.record_verify(check);
            }
            Op::Update => {
                let t0 = self.clock.now();
                let st = self
                    .session
                    .update(&self.table, &self.bufs.key, &self.bufs.values);
                let t1 = self.clock.now();
                self.record(
                    Metric::Update,
                    st,
                    t0,
                    t1,
                    intended,
                    self.bufs.values.data_bytes(),
                );
            }
            Op::Insert => {
                self.timed_insert(intended);
                // Acknowledged whatever the status, as upstream does (§6.2 Insert).
                if let Err(e) = wl.acknowledge(self.bufs.keynum) {
                    self.sh.fail(e.to_string());
                }
            }
            Op::Scan => {
                let fields = wl.read_fields(&self.bufs);
                let t0 = self.clock.now();
                let st = self.session.scan(
                    &self.table,
                    &self.bufs.key,
                    self.bufs.scan_len,
                    fields,
                    &mut self.scan,
                );
                let t1 = self.clock.now();
                self.record(Metric::Scan, st, t0, t1, intended, self.scan.data_bytes());
            }
            Op::ReadModifyWrite => {
                let fields = wl.read_fields(&self.bufs);
                let t0 = self.clock.now();
                let (st_r, view) = self.session.read(&self.table, &self.bufs.key, fields);
                let t1 = self.clock.now();
                // Verification happens between the two calls (the view ends with the next
                // one) and is excluded from the RMW's time.
                let bytes = view.data_bytes();
                let check = verify(wl, &self.clock, &self.bufs.key, view, &mut self.scratch);
                // The update runs even if the read failed, as upstream.
                let t1b = self.clock.now();
                let st_u = self
                    .session
                    .update(&self.table, &self.bufs.key, &self.bufs.values);
                let t2 = self.clock.now();
                let paused = t1b - t1;
                // Both inner calls share one intended start (quirk 14).
                let ist = intended.or(Some(t0)).map(|i| i + paused);
                self.record(Metric::Read, st_r, t0, t1, intended.or(Some(t0)), bytes);
                let written = self.bufs.values.data_bytes();
                self.record(Metric::Update, st_u, t1b, t2, ist, written);
                let st = if !st_r.is_ok() { st_r } else { st_u };
                let service = t2.saturating_sub(t0) - paused;
                let from_intended = intended
                    .map(|i| t2.saturating_sub(i).saturating_sub(paused))
                    .unwrap_or(service);
                self.rec
                    .record(Metric::ReadModifyWrite, st, service, from_intended, 0);
                self.record_verify(check);
            }
        }
    }
}
