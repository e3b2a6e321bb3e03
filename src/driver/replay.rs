//! A replay phase (`kvmeter replay`, docs/replay.md "Replaying"): a feeder thread reads the
//! trace and hands each record, with its intended start, to worker hash(key) mod T through
//! that worker's bounded FIFO queue; the worker waits for the intended start, sends the
//! operation through its `Session` (every store: embedded, servers, plug-ins) and records it
//! with the phase's measured call — from the intended start and from the send. The
//! event-driven engine is not used for replay.
//!
//! Why a feeder and queues: a trace is one ordered stream, the workers are many. One reader
//! keeps memory bounded (the trace is never held, only one second of it, `SPREAD_MAX`) and
//! routing by key keeps each key's operations in trace order on one connection. The queues are
//! std's bounded channels (crossbeam's array queue inside): a receive that finds a record is
//! lock-free, and it happens before the wait for the intended start, outside the measured
//! call. Key buffers go back to the feeder on a second channel, so a worker allocates and frees
//! nothing per record.
//!
//! Falling behind: a record already due when its worker takes it is sent at once (late) and
//! counted as `behind`; its from-intended latency carries the delay (coordinated omission
//! corrected), its from-send latency does not.

use super::feed::*;
use super::worker::{Shared, Worker};
use crate::measure::Metric;
use crate::store::Fields;
use crate::trace::{Kind, TraceReader, TraceRecord};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::time::Duration;

impl Feed {
    /// The feeder thread's body: reads the trace and hands records over until its end, the
    /// `--ops` count, the phase's deadline or a stop. A bad line (without `--skip-bad`) or a
    /// read error fails the phase with file:line. Dropping the senders at the end tells the
    /// workers there is no more.
    pub(super) fn feed(&self, sh: &Shared) {
        let taken = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(FeederEnds {
            reader,
            senders,
            back,
        }) = taken
        else {
            return;
        };
        let mut f = Feeder {
            feed: self,
            sh,
            reader,
            senders,
            back,
            rec: TraceRecord::default(),
            pending: false,
            slots: Vec::new(),
            names: Vec::new(),
            counts: ReplayCounts::default(),
            first_us: None,
            handed: 0,
            cont: None,
            whole: false,
            large_end: 0,
        };
        let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.run()))
            .unwrap_or_else(|p| Err(crate::panics::message_of(p.as_ref())));
        let mut counts = std::mem::take(&mut f.counts);
        for (name, n) in &f.names {
            if n.0 > 0 {
                counts.replayed_by_op.insert(name.clone(), n.0);
            }
            if n.1 > 0 {
                counts.unreplayable_by_op.insert(name.clone(), n.1);
            }
        }
        match ended {
            Ok(why) => counts.ended_by = why.into(),
            Err(e) => {
                counts.ended_by = "stopped".into();
                sh.fail(format!("replay: {e}"));
            }
        }
        *self.counts.lock().unwrap_or_else(|p| p.into_inner()) = counts;
    }
}

/// One buffered record of the current second.
#[derive(Default)]
struct Slot {
    key: Vec<u8>,
    kind: Option<Kind>,
    value_size: u64,
    scan_len: u32,
    time_us: u64,
    /// Index into `Feeder::names`.
    op: usize,
}

struct Feeder<'f, 's, 'a> {
    feed: &'f Feed,
    sh: &'s Shared<'a>,
    reader: TraceReader,
    senders: Vec<SyncSender<Item>>,
    back: Receiver<Vec<u8>>,
    rec: TraceRecord,
    /// `rec` holds a record read ahead (the first of the next second).
    pending: bool,
    slots: Vec<Slot>,
    /// Operation names seen, with (handed over, unreplayable) counts.
    names: Vec<(String, (u64, u64))>,
    counts: ReplayCounts,
    /// The first replayed record's time: the replay's zero.
    first_us: Option<u64>,
    /// Operations handed over so far.
    handed: u64,
    /// An overfull second continues: its time, the next index in it, its spacing (n).
    cont: Option<(u64, u64, u64)>,
    /// The buffered group is one whole second (spread within it), not one exact time.
    whole: bool,
    /// One past the highest slot that may hold a key buffer over `KEEP_CAPACITY`.
    large_end: usize,
}

impl Feeder<'_, '_, '_> {
    fn run(&mut self) -> Result<&'static str, String> {
        loop {
            let (n, full) = self.fill()?;
            if n == 0 {
                return Ok("end of trace");
            }
            if let Some(why) = self.hand_over(n, full)? {
                return Ok(why);
            }
            // Slots past this group keep no large key buffer: their number is bounded by
            // SPREAD_MAX, their bytes then by KEEP_CAPACITY each.
            if self.large_end > n {
                for s in &mut self.slots[n..self.large_end] {
                    if s.key.capacity() > KEEP_CAPACITY {
                        s.key = Vec::new();
                    }
                }
                self.large_end = n;
            }
        }
    }

    /// The next replayable record into `rec`: bad lines, `--skip`ped and unreplayable records
    /// are counted and passed over. `Ok(false)`: the end of the trace.
    fn advance(&mut self) -> Result<bool, String> {
        loop {
            match self.reader.next_into(&mut self.rec) {
                Ok(false) => return Ok(false),
                Ok(true) => {}
                Err(e) if self.feed.plan.skip_bad && !e.msg.starts_with("cannot read") => {
                    self.counts.bad_lines += 1;
                    if self.counts.first_bad_lines.len() < 10 {
                        self.counts.first_bad_lines.push(e.to_string());
                    }
                    continue;
                }
                Err(e) => return Err(e.to_string()),
            }
            self.counts.records_read += 1;
            if self.counts.skipped < self.feed.plan.skip {
                self.counts.skipped += 1;
                continue;
            }
            let op = self.name_index();
            let replayable = match self.rec.kind {
                Some(Kind::Unreplayable) | None => false,
                Some(Kind::Scan) => self.feed.can_scan,
                Some(_) => true,
            };
            if !replayable {
                self.names[op].1 .1 += 1;
                continue;
            }
            return Ok(true);
        }
    }

    /// The index of the record's operation name (a handful of names: a linear search).
    fn name_index(&mut self) -> usize {
        match self.names.iter().position(|(n, _)| *n == self.rec.op) {
            Some(i) => i,
            None => {
                self.names.push((self.rec.op.clone(), (0, 0)));
                self.names.len() - 1
            }
        }
    }

    /// Buffers the next group of records due together: one whole second (at most
    /// `SPREAD_MAX` records / `SPREAD_MAX_BYTES` of keys), or one record with an exact time.
    /// Returns how many, and whether the bound cut the second short.
    fn fill(&mut self) -> Result<(usize, bool), String> {
        if !self.pending && !self.advance()? {
            return Ok((0, false));
        }
        let (t, whole) = (self.rec.time_us, self.rec.whole_second);
        self.whole = whole;
        let (mut n, mut bytes) = (0usize, 0usize);
        loop {
            self.take_into_slot(n);
            bytes += self.rec.key.len();
            n += 1;
            self.pending = false;
            if !whole {
                return Ok((n, false));
            }
            if n >= SPREAD_MAX || bytes >= SPREAD_MAX_BYTES {
                return Ok((n, true));
            }
            if !self.advance()? {
                return Ok((n, false));
            }
            self.pending = true;
            if self.rec.time_us != t || !self.rec.whole_second {
                return Ok((n, false));
            }
        }
    }

    fn take_into_slot(&mut self, i: usize) {
        if self.slots.len() == i {
            self.slots.push(Slot::default());
        }
        let op = self.name_index();
        let s = &mut self.slots[i];
        if s.key.capacity() > KEEP_CAPACITY && self.rec.key.len() <= KEEP_CAPACITY {
            // A large key's buffer does not outlive it: slots number up to SPREAD_MAX.
            s.key = Vec::new();
        }
        s.key.clear();
        s.key.extend_from_slice(&self.rec.key);
        let large = s.key.capacity() > KEEP_CAPACITY;
        s.kind = self.rec.kind;
        s.value_size = self.rec.value_size;
        s.scan_len = self.rec.scan_len;
        s.time_us = self.rec.time_us;
        s.op = op;
        if large {
            self.large_end = self.large_end.max(i + 1);
        }
    }

    /// The intended starts of the `n` buffered records (× `--amplify`), each handed to its
    /// worker. `Some(why)` when feeding ends here.
    fn hand_over(&mut self, n: usize, full: bool) -> Result<Option<&'static str>, String> {
        let feed = self.feed;
        let plan = &feed.plan;
        let k = plan.amplify;
        let t = self.slots[0].time_us;
        let first = *self.first_us.get_or_insert(t);
        // The position in the second and the second's record count (after --amplify).
        let (mut index, count) = match self.cont {
            Some((ct, next, per)) if ct == t => (next, per),
            _ if full => {
                self.counts.overfull_seconds += 1;
                (0, n as u64 * k)
            }
            _ => (0, n as u64 * k),
        };
        let origin = self.sh.grid.origin + LEAD_NS;
        for j in 0..n {
            for copy in 1..=k {
                if feed.ops > 0 && self.handed >= feed.ops {
                    return Ok(Some("--ops"));
                }
                let rel_ns = match plan.rate {
                    Some(r) => self.handed as f64 * 1e9 / r,
                    None => {
                        let recorded = t.saturating_sub(first) as f64 * 1e3;
                        let spread = match self.whole {
                            true => index as f64 * 1e9 / count as f64,
                            false => 0.0,
                        };
                        (recorded + spread) / plan.speed
                    }
                };
                index += 1;
                let intended = origin.saturating_add(rel_ns as u64);
                if intended >= self.sh.deadline_ns {
                    return Ok(Some("--duration"));
                }
                if !self.send(j, copy, k, intended) {
                    return Ok(Some("stopped"));
                }
            }
        }
        self.cont = full.then_some((t, index, count));
        Ok(None)
    }

    /// Hands one operation to its worker, waiting while that worker's queue is full. `false`:
    /// the phase stopped (or the worker is gone).
    fn send(&mut self, j: usize, copy: u64, k: u64, intended: u64) -> bool {
        let s = &self.slots[j];
        let mut key = self.back.try_recv().unwrap_or_default();
        key.clear();
        key.extend_from_slice(&s.key);
        if k > 1 {
            key.push(b'~');
            key.extend_from_slice(itoa::Buffer::new().format(copy).as_bytes());
        }
        let w = (fnv1a(&key) % self.feed.threads as u64) as usize;
        let mut item = Item {
            key,
            kind: s.kind.unwrap_or(Kind::Unreplayable),
            value_size: s.value_size,
            scan_len: s.scan_len,
            intended,
        };
        let op = s.op;
        let len = item.key.len() as u64;
        let queued = &self.feed.queued_bytes;
        // Within the byte bound (one key always goes, however long: it is bounded by the trace
        // reader's own key limit).
        while queued.load(Ordering::Acquire) > 0
            && queued.load(Ordering::Acquire) + len > QUEUE_BYTES
        {
            if self.sh.stop.load(Ordering::Relaxed) {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        queued.fetch_add(len, Ordering::AcqRel);
        loop {
            match self.senders[w].try_send(item) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => {
                    queued.fetch_sub(len, Ordering::AcqRel);
                    return false;
                }
                Err(TrySendError::Full(back)) => {
                    if self.sh.stop.load(Ordering::Relaxed) {
                        queued.fetch_sub(len, Ordering::AcqRel);
                        return false;
                    }
                    item = back;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        self.names[op].1 .0 += 1;
        self.handed += 1;
        true
    }
}

/// FNV-1a, 64-bit: which worker a key goes to (stable across runs and machines).
fn fnv1a(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Worker<'_, '_> {
    /// A replay worker: takes its records in order, waits for each one's intended start,
    /// sends it, records it; ends when the feeder is done and the queue empty, or the phase
    /// stops. Each operation waits for its reply (`pipeline=N` is not used in replay).
    pub(super) fn replay(&mut self, feed: &Feed) {
        let ends = feed
            .workers
            .get(self.index as usize)
            .and_then(|m| m.lock().unwrap_or_else(|p| p.into_inner()).take());
        let Some(ends) = ends else {
            return;
        };
        let (mut behind, mut not_sent) = (0u64, 0u64);
        while self.go_on() {
            let item = match ends.rx.try_recv() {
                Ok(i) => i,
                Err(TryRecvError::Disconnected) => break,
                Err(TryRecvError::Empty) => match self.idle(&ends.rx) {
                    Some(i) => i,
                    None => continue,
                },
            };
            feed.queued_bytes
                .fetch_sub(item.key.len() as u64, Ordering::AcqRel);
            let mut now = self.clock.now();
            if item.intended > now {
                now = self.wait_until(item.intended);
                if !self.go_on() {
                    not_sent += 1;
                    break;
                }
            } else {
                behind += 1;
            }
            self.rec.at(now);
            self.rec.record_lag(now.saturating_sub(item.intended));
            self.replay_one(&item);
            // Full only if the feeder stopped taking buffers back: then it is freed. A large
            // buffer is freed at once, so spare buffers stay small.
            if item.key.capacity() <= KEEP_CAPACITY {
                let _ = ends.back.try_send(item.key);
            }
        }
        while let Ok(item) = ends.rx.try_recv() {
            feed.queued_bytes
                .fetch_sub(item.key.len() as u64, Ordering::AcqRel);
            not_sent += 1;
        }
        feed.behind.fetch_add(behind, Ordering::Relaxed);
        feed.not_sent.fetch_add(not_sent, Ordering::Relaxed);
    }

    /// An empty queue: waits for a record at most until the next interval boundary (handing
    /// the interval over first) or 20 ms. `None`: nothing yet (the caller checks for a stop).
    #[cold]
    fn idle(&mut self, rx: &Receiver<Item>) -> Option<Item> {
        let now = self.clock.now();
        self.rec.at(now);
        let until = self.rec.next_end().min(self.sh.deadline_ns);
        let wait = until.saturating_sub(now).clamp(1_000, 20_000_000);
        rx.recv_timeout(Duration::from_nanos(wait)).ok()
    }

    /// Sends one record's operation, timed by the measured call.
    #[inline]
    fn replay_one(&mut self, item: &Item) {
        let intended = Some(item.intended);
        match item.kind {
            Kind::Read => {
                let t0 = self.clock.now();
                let (st, view) = self.session.read(&self.table, &item.key, Fields::All);
                let t1 = self.clock.now();
                let bytes = view.data_bytes();
                self.record(Metric::Read, st, t0, t1, intended, bytes);
            }
            Kind::Write => {
                let v = &mut self.bufs.values;
                v.clear();
                v.begin_field(FIELD).resize(item.value_size as usize, b'v');
                v.end_field();
                let t0 = self.clock.now();
                let st = self.session.insert(&self.table, &item.key, v);
                let t1 = self.clock.now();
                self.record(Metric::Insert, st, t0, t1, intended, item.value_size);
            }
            Kind::Delete => {
                let t0 = self.clock.now();
                let st = self.session.delete(&self.table, &item.key);
                let t1 = self.clock.now();
                self.record(Metric::Delete, st, t0, t1, intended, 0);
            }
            Kind::Scan => {
                let t0 = self.clock.now();
                let st = self.session.scan(
                    &self.table,
                    &item.key,
                    item.scan_len as usize,
                    Fields::All,
                    &mut self.scan,
                );
                let t1 = self.clock.now();
                self.record(Metric::Scan, st, t0, t1, intended, self.scan.data_bytes());
            }
            // Never queued (the feeder counts them).
            Kind::Unreplayable => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_known_values() {
        // The FNV reference values (draft-eastlake-fnv): "" and "a".
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
    }
}
