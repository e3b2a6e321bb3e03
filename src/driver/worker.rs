//! One worker thread: choose op → store call → record, in a closed loop, on YCSB's per-thread
//! schedule when paced (ycsb-workload-spec §8.3, §8.4), or serving the phase's shared open-loop
//! schedule (`arrivals.rs`).
//!
//! The hot path allocates nothing and takes no lock: the key, values, read result and scan
//! result live in buffers owned by the worker and reused; recording is a histogram increment;
//! the only shared accesses are relaxed loads of the stop flag and the interval epoch.

use crate::measure::clock::Clock;
use crate::measure::{Metric, WorkerRecorder};
use crate::report::ErrorSample;
use crate::store::{ErrorKind, Queued, RecordView, ScanOut, Session, Status};
use crate::workload::{CoreWorkload, Op, OpBuffers, Rng};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The data-integrity check of a read (spec §4.3), timed: `None` when the mode is off.
#[inline]
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
    let t0 = clock.now();
    let good = wl.verify(key, view, scratch);
    Some((good, clock.now().saturating_sub(t0)))
}

/// Everything the workers of one phase share.
pub struct Shared<'a> {
    pub workload: &'a CoreWorkload,
    pub stop: AtomicBool,
    pub fatal: Mutex<Option<String>>,
    pub finished: AtomicUsize,
    /// Latest worker end, in ns since `t0`.
    pub end_ns: AtomicU64,
    pub t0: Instant,
    pub load: bool,
    /// Per-thread schedule spacing when paced (`--target`).
    pub tick_ns: Option<u64>,
    /// The open-loop schedule the pool serves (`--rate`).
    pub arrivals: Option<&'a super::arrivals::Arrivals>,
    pub seed: u64,
    pub clock: Clock,
    /// Open this worker's own counter groups (`--counters`).
    pub counters: bool,
}

impl Shared<'_> {
    #[cold]
    fn fail(&self, msg: String) {
        let mut f = self.fatal.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(msg);
        }
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct Worker<'s, 'a> {
    sh: &'s Shared<'a>,
    session: Box<dyn Session>,
    rec: WorkerRecorder,
    rng: Rng,
    b: OpBuffers,
    scan: ScanOut,
    scratch: Vec<u8>,
    samples: Vec<ErrorSample>,
    table: String,
    clock: Clock,
    index: u64,
    /// Open loop: how early to stop sleeping before an arrival is due (learned).
    wake_early_ns: u64,
    /// Operations per round trip (`pipeline=N`); 1: each operation waits for its reply.
    depth: usize,
    /// The queued batch: metric, intended start, bytes written, key to acknowledge.
    pending: Vec<(Metric, Option<u64>, u64, Option<i64>)>,
    /// Each reply of a flushed batch: status, clock at its arrival, bytes returned.
    replies: Vec<(Status, u64, u64)>,
}

#[inline]
fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

pub fn run(
    sh: &Shared,
    index: usize,
    session: Box<dyn Session>,
    rec: WorkerRecorder,
    ops: u64,
) -> (
    Vec<ErrorSample>,
    Option<crate::telemetry::counters::CounterFigures>,
) {
    // Pacing sleeps should wake on time, not up to 50 µs late (Linux's default timer slack).
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64);
    }
    let mut groups = sh
        .counters
        .then(crate::telemetry::counters::WorkerGroups::open);
    // Data-integrity checks need each read's view, which a batch does not keep.
    let depth = if sh.workload.cfg.dataintegrity {
        1
    } else {
        session.pipeline_depth().max(1)
    };
    let mut w = Worker {
        sh,
        depth,
        pending: Vec::with_capacity(depth),
        replies: Vec::with_capacity(depth),
        session,
        rec,
        rng: Rng::for_worker(sh.seed, index as u64),
        b: OpBuffers::default(),
        scan: ScanOut::default(),
        scratch: Vec::new(),
        samples: Vec::new(),
        table: sh.workload.cfg.table.clone(),
        clock: sh.clock.clone(),
        index: index as u64,
        wake_early_ns: 50_000,
    };
    w.run(ops);
    let counted = groups.as_mut().map(|g| g.figures());
    let Worker {
        session,
        mut rec,
        samples,
        ..
    } = w;
    let t = Instant::now();
    let st = session.close();
    let took = ns(t.elapsed());
    rec.record(Metric::Cleanup, st, took, took, 0);
    rec.finish();
    sh.end_ns.fetch_max(ns(sh.t0.elapsed()), Ordering::Relaxed);
    sh.finished.fetch_add(1, Ordering::Release);
    (samples, counted)
}

impl Worker<'_, '_> {
    /// Open loop: take the next arrival, wait until it is due, send it. A batch (pipelining)
    /// gathers only arrivals that are already due and is sent before any wait.
    fn serve(&mut self, arrivals: &super::arrivals::Arrivals) {
        // Arrival gaps come from their own stream, so the operation sequence does not depend on
        // the arrival process.
        let mut gaps = Rng::for_worker(self.sh.seed ^ 0x0A11_1FA1_5EED, self.index);
        while !self.sh.stop.load(Ordering::Relaxed) {
            let Some(intended) = arrivals.take(&mut gaps) else {
                break;
            };
            let mut now = self.clock.now();
            if intended > now {
                self.flush_batch();
                now = self.wait_until(intended);
                if self.sh.stop.load(Ordering::Relaxed) {
                    break;
                }
            }
            self.rec.record_lag(now.saturating_sub(intended));
            if self.depth > 1 {
                self.pipelined(Some(intended));
            } else {
                self.transaction(Some(intended));
            }
            self.rec.tick();
        }
        self.flush_batch();
    }

    fn run(&mut self, ops: u64) {
        if let Some(a) = self.sh.arrivals {
            return self.serve(a);
        }
        if let Some(tick) = self.sh.tick_ns {
            // YCSB desyncs threads of at most 1000 ops/s by a random initial sleep (§8.4.1),
            // drawn as 64-bit here (quirk 17).
            if tick >= 1_000_000 {
                let d = self.rng.next_u64_below(tick);
                self.sleep_until(self.clock.now() + d);
            }
        }
        let start = self.clock.now();
        let mut done = 0u64;
        while (ops == 0 || done < ops) && !self.sh.stop.load(Ordering::Relaxed) {
            let intended = match self.sh.tick_ns {
                Some(tick) => {
                    let deadline = start.saturating_add(tick.saturating_mul(done));
                    let now = self.sleep_until(deadline);
                    if self.sh.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    self.rec.record_lag(now.saturating_sub(deadline));
                    Some(deadline)
                }
                None => None,
            };
            if self.depth > 1 {
                self.pipelined(intended);
            } else if self.sh.load {
                self.load_one(intended);
            } else {
                self.transaction(intended);
            }
            self.rec.tick();
            done += 1;
        }
        self.flush_batch();
    }

    /// Pipelined mode: reads, updates and inserts are queued and sent `depth` at a time;
    /// a scan or read-modify-write first sends what is queued, then runs alone. Load inserts
    /// are not retried here (a failure is counted).
    fn pipelined(&mut self, intended: Option<u64>) {
        let wl = self.sh.workload;
        let op = if self.sh.load {
            wl.next_load(&mut self.rng, &mut self.b);
            Op::Insert
        } else {
            wl.next_op(&mut self.rng, &mut self.b)
        };
        let written = self.b.values.data_bytes();
        let (metric, queued, written, ack) = match op {
            Op::Read => {
                let f = wl.read_fields(&self.b);
                (Metric::Read, Queued::Read(&self.b.key, f), 0, None)
            }
            Op::Update => (
                Metric::Update,
                Queued::Update(&self.b.key, &self.b.values),
                written,
                None,
            ),
            Op::Insert => (
                Metric::Insert,
                Queued::Insert(&self.b.key, &self.b.values),
                written,
                (!self.sh.load).then_some(self.b.keynum),
            ),
            Op::Scan | Op::ReadModifyWrite => {
                self.flush_batch();
                self.execute(op, intended);
                return;
            }
        };
        if !self.session.queue(queued) {
            // Not pipelined by this store (memcached: updates and deletes): alone, after the
            // queued ones.
            self.flush_batch();
            if self.sh.load {
                self.load_prepared(intended);
            } else {
                self.execute(op, intended);
            }
            return;
        }
        self.pending.push((metric, intended, written, ack));
        if self.pending.len() >= self.depth {
            self.flush_batch();
        }
    }

    /// Sends the queued batch; each reply's latency runs from the send to its arrival.
    fn flush_batch(&mut self) {
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

    /// Open loop: waits until `deadline` (clock ns) and wakes on time. A sleep wakes late by
    /// the scheduler's wake-up latency (tens of µs in a VM), which would count as sender lag:
    /// so the worker sleeps until its usual lateness before the deadline, then yields the CPU
    /// in a loop until the deadline (yielding, not spinning, so a server on the same CPUs runs).
    fn wait_until(&mut self, deadline: u64) -> u64 {
        let mut now = self.clock.now();
        if deadline > now + self.wake_early_ns {
            let target = deadline - self.wake_early_ns;
            now = self.sleep_until(target);
            // Learn this machine's wake-up lateness (moving average, at most 200 µs).
            let late = now.saturating_sub(target) as i64;
            let e = self.wake_early_ns as i64;
            self.wake_early_ns = (e + (late + 2_000 - e) / 8).clamp(0, 200_000) as u64;
        }
        while now < deadline && !self.sh.stop.load(Ordering::Relaxed) {
            std::thread::yield_now();
            now = self.clock.now();
        }
        now
    }

    /// Sleeps until `deadline` (clock ns), in slices short enough to notice a stop or an
    /// interval change.
    /// Returns the clock at wake-up, so callers need not read it again.
    fn sleep_until(&mut self, deadline: u64) -> u64 {
        loop {
            let now = self.clock.now();
            if now >= deadline || self.sh.stop.load(Ordering::Relaxed) {
                return now;
            }
            self.rec.tick();
            std::thread::sleep(Duration::from_nanos((deadline - now).min(20_000_000)));
        }
    }

    #[inline]
    fn record(
        &mut self,
        m: Metric,
        st: Status,
        t_start: u64,
        t_end: u64,
        intended: Option<u64>,
        bytes: u64,
    ) {
        let service = t_end.saturating_sub(t_start);
        let from_intended = intended.map(|i| t_end.saturating_sub(i)).unwrap_or(service);
        self.rec.record(m, st, service, from_intended, bytes);
        if let Status::Error { kind, fatal } = st {
            self.error(m, kind, fatal);
        }
    }

    #[cold]
    fn error(&mut self, m: Metric, kind: ErrorKind, fatal: bool) {
        let msg = self.session.last_error();
        if fatal {
            self.sh.fail(format!(
                "{} failed: {} error{}",
                m.name(),
                kind.name(),
                msg.as_ref().map(|t| format!(": {t}")).unwrap_or_default()
            ));
        }
        if !self
            .samples
            .iter()
            .any(|s| s.metric == m.name() && s.kind == kind.name())
        {
            self.samples.push(ErrorSample {
                metric: m.name().to_string(),
                kind: kind.name().to_string(),
                message: msg.unwrap_or_else(|| "(the store gave no message)".into()),
            });
        }
    }

    fn load_one(&mut self, intended: Option<u64>) {
        self.sh.workload.next_load(&mut self.rng, &mut self.b);
        self.load_prepared(intended);
    }

    /// Inserts the record `next_load` put in the buffers, with YCSB's retries.
    fn load_prepared(&mut self, intended: Option<u64>) {
        let limit = self.sh.workload.cfg.insertion_retry_limit;
        let mut attempts = 0;
        loop {
            let t0 = self.clock.now();
            let st = self
                .session
                .insert(&self.table, &self.b.key, &self.b.values);
            let t1 = self.clock.now();
            self.record(
                Metric::Insert,
                st,
                t0,
                t1,
                intended,
                self.b.values.data_bytes(),
            );
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
    fn transaction(&mut self, intended: Option<u64>) {
        let op = self.sh.workload.next_op(&mut self.rng, &mut self.b);
        self.execute(op, intended);
    }

    #[inline]
    fn execute(&mut self, op: Op, intended: Option<u64>) {
        let wl = self.sh.workload;
        match op {
            Op::Read => {
                let fields = wl.read_fields(&self.b);
                let t0 = self.clock.now();
                let (st, view) = self.session.read(&self.table, &self.b.key, fields);
                let t1 = self.clock.now();
                // The view lives until the session's next call: use it now.
                let bytes = view.data_bytes();
                let check = verify(wl, &self.clock, &self.b.key, view, &mut self.scratch);
                self.record(Metric::Read, st, t0, t1, intended, bytes);
                self.record_verify(check);
            }
            Op::Update => {
                let t0 = self.clock.now();
                let st = self
                    .session
                    .update(&self.table, &self.b.key, &self.b.values);
                let t1 = self.clock.now();
                self.record(
                    Metric::Update,
                    st,
                    t0,
                    t1,
                    intended,
                    self.b.values.data_bytes(),
                );
            }
            Op::Insert => {
                let t0 = self.clock.now();
                let st = self
                    .session
                    .insert(&self.table, &self.b.key, &self.b.values);
                let t1 = self.clock.now();
                self.record(
                    Metric::Insert,
                    st,
                    t0,
                    t1,
                    intended,
                    self.b.values.data_bytes(),
                );
                // Acknowledged whatever the status, as upstream does (§6.2 Insert).
                if let Err(e) = wl.acknowledge(self.b.keynum) {
                    self.sh.fail(e.to_string());
                }
            }
            Op::Scan => {
                let fields = wl.read_fields(&self.b);
                let t0 = self.clock.now();
                let st = self.session.scan(
                    &self.table,
                    &self.b.key,
                    self.b.scan_len,
                    fields,
                    &mut self.scan,
                );
                let t1 = self.clock.now();
                self.record(Metric::Scan, st, t0, t1, intended, self.scan.data_bytes());
            }
            Op::ReadModifyWrite => {
                let fields = wl.read_fields(&self.b);
                let t0 = self.clock.now();
                let (st_r, view) = self.session.read(&self.table, &self.b.key, fields);
                let t1 = self.clock.now();
                // Verification happens between the two calls (the view ends with the next
                // one) and is excluded from the RMW's time.
                let bytes = view.data_bytes();
                let check = verify(wl, &self.clock, &self.b.key, view, &mut self.scratch);
                // The update runs even if the read failed, as upstream.
                let t1b = self.clock.now();
                let st_u = self
                    .session
                    .update(&self.table, &self.b.key, &self.b.values);
                let t2 = self.clock.now();
                let paused = t1b - t1;
                // Both inner calls share one intended start (quirk 14).
                let ist = intended.or(Some(t0)).map(|i| i + paused);
                self.record(Metric::Read, st_r, t0, t1, intended.or(Some(t0)), bytes);
                let written = self.b.values.data_bytes();
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
