//! One worker thread: choose op → store call → record, in a closed loop, on YCSB's per-thread
//! schedule when paced (ycsb-workload-spec §8.3, §8.4), or serving the phase's shared open-loop
//! schedule (`arrivals.rs`).
//!
//! The hot path allocates nothing and takes no lock: the key, values, read result and scan
//! result live in buffers owned by the worker and reused; recording is a histogram increment;
//! the only shared access is a relaxed load of the stop flag. Each completion's clock reading
//! places the operation in its interval (`measure::handoff`) and is compared with the phase's
//! deadline, so a worker stops on its own clock, not when the interval loop next wakes.

use crate::measure::clock::Clock;
use crate::measure::{Metric, WorkerRecorder};
use crate::report::ErrorSample;
use crate::store::{Queued, ScanOut, Session, Status};
use crate::workload::{CoreWorkload, Op, OpBuffers, Rng};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Everything the workers of one phase share.
pub struct Shared<'a> {
    pub workload: &'a CoreWorkload,
    pub stop: AtomicBool,
    pub fatal: Mutex<Option<String>>,
    pub finished: AtomicUsize,
    /// Latest worker end (its last completion), in ns since `t0` (`grid.origin`).
    pub end_ns: AtomicU64,
    pub t0: Instant,
    /// The phase's interval grid; its origin is the clock reading at `t0`.
    pub grid: crate::measure::Grid,
    /// The phase's end (`--duration`), clock ns; `u64::MAX` when none.
    pub deadline_ns: u64,
    pub load: bool,
    /// Per-thread schedule spacing when paced (`--target`).
    pub tick_ns: Option<u64>,
    /// The open-loop schedule the pool serves (`--rate`).
    pub arrivals: Option<&'a super::arrivals::Arrivals>,
    /// A replay phase's records (`kvmeter replay`), instead of the workload.
    pub replay: Option<&'a super::feed::Feed>,
    pub seed: u64,
    /// The first worker's random stream: 0 on one host; agent i of a distributed run with T
    /// threads per agent starts at i·T, so its workers replay one big host's (`plan::share`).
    pub stream_base: u64,
    pub clock: Clock,
    /// Open this worker's own counter groups (`--counters`).
    pub counters: bool,
    /// Each worker's recovery-timeline ring (`--timeline`), by worker index.
    pub timelines: Vec<std::sync::Arc<crate::measure::timeline::WorkerTimeline>>,
    /// Faults are scheduled: a store error that would end the phase is counted instead.
    pub tolerate_fatal: bool,
    /// The shard a fault hits (`master:i` of a Redis Cluster): the timeline then splits
    /// operations on it from the rest.
    pub affected_shard: Option<u16>,
}

impl Shared<'_> {
    #[cold]
    pub(super) fn fail(&self, msg: String) {
        let mut f = self.fatal.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(msg);
        }
        self.stop.store(true, Ordering::Relaxed);
    }

    pub(super) fn fatal_is_none(&self) -> bool {
        self.fatal().is_none()
    }

    /// The error that ended the phase, if one did.
    pub(super) fn fatal(&self) -> Option<String> {
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

pub(super) struct Worker<'s, 'a> {
    pub(super) sh: &'s Shared<'a>,
    pub(super) session: Box<dyn Session>,
    pub(super) rec: WorkerRecorder,
    pub(super) rng: Rng,
    pub(super) bufs: OpBuffers,
    pub(super) scan: ScanOut,
    pub(super) scratch: Vec<u8>,
    pub(super) samples: Vec<ErrorSample>,
    pub(super) table: String,
    pub(super) clock: Clock,
    pub(super) index: u64,
    /// Open loop: how early to stop sleeping before an arrival is due (learned).
    pub(super) wake_early_ns: u64,
    /// Operations per round trip (`pipeline=N`); 1: each operation waits for its reply.
    pub(super) depth: usize,
    /// The queued batch: metric, intended start, bytes written, key to acknowledge.
    pub(super) pending: Vec<(Metric, Option<u64>, u64, Option<i64>)>,
    /// Each reply of a flushed batch: status, clock at its arrival, bytes returned.
    pub(super) replies: Vec<(Status, u64, u64)>,
    pub(super) timeline: Option<std::sync::Arc<crate::measure::timeline::WorkerTimeline>>,
}

#[inline]
fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// What a worker hands back: error samples, its own counters, requests sent by address.
type Handback = (
    Vec<ErrorSample>,
    Option<crate::telemetry::counters::CounterFigures>,
    Vec<(std::net::SocketAddr, u64)>,
);

/// `run`, with a panic (a store client's bug, a hostile reply) turned into the phase's fatal
/// error: the other workers stop, and the interval loop sees this one finished instead of
/// waiting for it forever. What it recorded so far is handed over by the recorder's `Drop`.
/// `catch_unwind` costs nothing on the operation path.
pub fn run_guarded(
    sh: &Shared,
    index: usize,
    session: Box<dyn Session>,
    rec: WorkerRecorder,
    ops: u64,
) -> Handback {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(sh, index, session, rec, ops)
    }));
    r.unwrap_or_else(|p| {
        // The hook's text names the thread (kvm-worker-N), so the interval loop, which may
        // see the panic first, records the same words.
        sh.fail(crate::panics::message_of(p.as_ref()));
        let now = sh.clock.now().saturating_sub(sh.grid.origin);
        sh.end_ns.fetch_max(now, Ordering::Relaxed);
        sh.finished.fetch_add(1, Ordering::Release);
        (Vec::new(), None, Vec::new())
    })
}

pub fn run(
    sh: &Shared,
    index: usize,
    session: Box<dyn Session>,
    mut rec: WorkerRecorder,
    ops: u64,
) -> Handback {
    rec.start(sh.grid);
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
        rng: Rng::for_worker(sh.seed, sh.stream_base + index as u64),
        bufs: OpBuffers::default(),
        scan: ScanOut::default(),
        scratch: Vec::new(),
        samples: Vec::new(),
        table: sh.workload.cfg.table.clone(),
        clock: sh.clock.clone(),
        index: index as u64,
        wake_early_ns: 50_000,
        timeline: sh.timelines.get(index).cloned(),
    };
    w.run(ops);
    let counted = groups.as_mut().map(|g| g.figures());
    let Worker {
        session,
        mut rec,
        samples,
        ..
    } = w;
    let sent = session.sent_to();
    // The phase ends with the last completion; closing the session is outside the measured
    // window (its CLEANUP time is counted in the worker's last interval).
    let last = rec.last().saturating_sub(sh.grid.origin);
    let t = Instant::now();
    let st = session.close();
    let took = ns(t.elapsed());
    rec.record(Metric::Cleanup, st, took, took, 0);
    rec.finish();
    sh.end_ns.fetch_max(last, Ordering::Relaxed);
    sh.finished.fetch_add(1, Ordering::Release);
    (samples, counted, sent)
}

impl Worker<'_, '_> {
    /// Open loop: take the next arrival, wait until it is due, send it. A batch (pipelining)
    /// gathers only arrivals that are already due and is sent before any wait.
    fn serve(&mut self, arrivals: &super::arrivals::Arrivals) {
        // Arrival gaps come from their own stream, so the operation sequence does not depend on
        // the arrival process.
        let mut gaps = Rng::for_worker(
            self.sh.seed ^ 0x0A11_1FA1_5EED,
            self.sh.stream_base + self.index,
        );
        while self.go_on() {
            let Some(intended) = arrivals.take(&mut gaps) else {
                break;
            };
            let mut now = self.clock.now();
            if intended > now {
                self.flush_batch();
                now = self.wait_until(intended);
                if !self.go_on() {
                    break;
                }
            }
            self.rec.at(now);
            self.rec.record_lag(now.saturating_sub(intended));
            if self.depth > 1 {
                self.pipelined(Some(intended));
            } else {
                self.transaction(Some(intended));
            }
        }
        self.flush_batch();
    }

    fn run(&mut self, ops: u64) {
        if let Some(a) = self.sh.arrivals {
            return self.serve(a);
        }
        if let Some(f) = self.sh.replay {
            return self.replay(f);
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
        while (ops == 0 || done < ops) && self.go_on() {
            let intended = match self.sh.tick_ns {
                Some(tick) => {
                    let deadline = start.saturating_add(tick.saturating_mul(done));
                    let now = self.sleep_until(deadline);
                    if !self.go_on() {
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
            wl.next_load(&mut self.rng, &mut self.bufs);
            Op::Insert
        } else {
            wl.next_op(&mut self.rng, &mut self.bufs)
        };
        let written = self.bufs.values.data_bytes();
        let (metric, queued, written, ack) = match op {
            Op::Read => {
                let f = wl.read_fields(&self.bufs);
                (Metric::Read, Queued::Read(&self.bufs.key, f), 0, None)
            }
            Op::Update => (
                Metric::Update,
                Queued::Update(&self.bufs.key, &self.bufs.values),
                written,
                None,
            ),
            Op::Insert => (
                Metric::Insert,
                Queued::Insert(&self.bufs.key, &self.bufs.values),
                written,
                (!self.sh.load).then_some(self.bufs.keynum),
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

    /// Open loop: waits until `deadline` (clock ns) and wakes on time. A sleep wakes late by
    /// the scheduler's wake-up latency (tens of µs in a VM), which would count as sender lag:
    /// so the worker sleeps until its usual lateness before the deadline, then yields the CPU
    /// in a loop until the deadline (yielding, not spinning, so a server on the same CPUs runs).
    pub(super) fn wait_until(&mut self, deadline: u64) -> u64 {
        let mut now = self.clock.now();
        if deadline > now + self.wake_early_ns {
            let target = deadline - self.wake_early_ns;
            now = self.sleep_until(target);
            // Learn this machine's wake-up lateness (moving average, at most 200 µs).
            let late = now.saturating_sub(target) as i64;
            let e = self.wake_early_ns as i64;
            self.wake_early_ns = (e + (late + 2_000 - e) / 8).clamp(0, 200_000) as u64;
        }
        while now < deadline && self.go_on() {
            std::thread::yield_now();
            now = self.clock.now();
        }
        now
    }

    /// Whether to start another operation: not told to stop, and the phase's deadline not
    /// reached by this worker's own clock (the last completion; a plain integer compare).
    #[inline]
    pub(super) fn go_on(&self) -> bool {
        !self.sh.stop.load(Ordering::Relaxed) && self.rec.last() < self.sh.deadline_ns
    }

    /// Sleeps until `deadline` (clock ns), in slices short enough to notice a stop, waking at
    /// each interval boundary to hand the interval over (a sleeping worker never holds a row
    /// back) and at the phase's deadline.
    /// Returns the clock at wake-up, so callers need not read it again.
    pub(super) fn sleep_until(&mut self, deadline: u64) -> u64 {
        let deadline = deadline.min(self.sh.deadline_ns);
        loop {
            let now = self.clock.now();
            self.rec.at(now);
            if now >= deadline || self.sh.stop.load(Ordering::Relaxed) {
                return now;
            }
            let wake = deadline.min(self.rec.next_end()) - now;
            std::thread::sleep(Duration::from_nanos(wake.clamp(1_000, 20_000_000)));
        }
    }

    fn load_one(&mut self, intended: Option<u64>) {
        self.sh.workload.next_load(&mut self.rng, &mut self.bufs);
        self.load_prepared(intended);
    }
}
