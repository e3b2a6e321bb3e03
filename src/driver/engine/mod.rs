//! The event-driven engine for network stores (issue 30): `--threads` event loops, each
//! serving its share of `--connections` with `--depth` requests in flight on every one,
//! refilled as replies arrive (memtier's pipeline), or taking the phase's open-loop arrivals
//! (`--rate`) and sending each on a connection with a free slot.
//!
//! **Mechanism: epoll through mio**, edge-triggered, one `Poll` per loop, plus a timerfd for
//! arrival wake-ups at nanosecond precision (`timer.rs`). Chosen over io_uring and an async
//! runtime on these grounds: each request here is tens of bytes written and a reply read on a
//! socket that is almost always ready, so the work per wake-up is one `read` per ready
//! connection and one `write` per connection with new requests — what epoll costs is two
//! system calls per batch, the same as memtier's libevent loop, which is the peer to match;
//! io_uring saves those calls only with registered buffers and multishot receives, which
//! Debian 12's 6.1 kernels and VMs with io_uring disabled do not all offer, and its
//! completion model would put every read buffer in flight for 10,000 idle connections; an
//! async runtime (tokio) adds a task, a waker and a scheduler queue per request between the
//! socket and the histogram, which is the per-request client CPU the issue asks to cut. mio is
//! tokio's own thin, well-kept epoll layer.
//!
//! **Times.** Every request carries its intended start — its arrival in open loop; in closed
//! loop the moment its slot freed (the previous reply's arrival), so from-intended minus
//! from-send is the client's own queueing — and the clock reading when its last byte went to
//! the socket. Both latencies are recorded for every request (the phase's histograms are
//! made "paced"). A reply is timed at the read that completed it.
//!
//! **Streams.** Connection c (numbered across the run's loops) draws its operations from
//! `Rng::for_worker(seed, stream_base + c)`: the same `--seed` replays the same key sequence
//! on every connection whatever the loop count. Open-loop gaps come from each loop's own
//! stream, as the worker pool's do.
//!
//! **Failures.** A reply that breaks the protocol, a connection the server closes, a request
//! older than `timeout_ms`: every request in flight on that connection is counted as an error
//! of that kind, and the connection is replaced at once (a server that will not take one ends
//! the phase, unless faults are scheduled, when it is tried again every 100 ms). Nothing a
//! server sends is trusted: replies are parsed by the store's `wire::Codec`, bounded by
//! `max_reply`.

mod conn;
mod sends;
mod timer;

use super::worker::Shared;
use crate::measure::clock::Clock;
use crate::measure::{timeline, Metric, WorkerRecorder};
use crate::plan::engine::{Engine, WhenFull};
use crate::record::{Record, RecordView, Span};
use crate::report::ErrorSample;
use crate::store::wire::{Codec, EventTarget, Parsed, Sent};
use crate::store::{ErrorKind, Queued, Status};
use crate::workload::{Op, Rng};
use conn::Conn;
use mio::{Events, Interest, Poll, Token};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the engine's loops counted in one phase (the summary's `engine` block).
#[derive(Default)]
pub struct EngineStats {
    pub reconnects: AtomicU64,
    /// Open loop: arrivals that waited for a free slot, skipped ones, the longest backlog.
    pub queued: AtomicU64,
    pub skipped: AtomicU64,
    pub max_backlog: AtomicU64,
    /// Requests still in flight when the phase was stopped (Ctrl-C or a failure): not counted.
    pub abandoned: AtomicU64,
}

/// One loop's part of the phase.
pub struct LoopShare<'a> {
    pub index: usize,
    pub socks: Vec<std::net::TcpStream>,
    /// Connection number of `socks[0]` across the run (its stream index).
    pub first_conn: u64,
    pub ops: u64,
    pub target: &'a dyn EventTarget,
    pub cfg: &'a Engine,
    pub stats: &'a EngineStats,
    /// Open loop: the run's send counts, for the arrival-process check.
    pub sends: Option<&'a sends::Sends>,
}

type Handback = (
    Vec<ErrorSample>,
    Option<crate::telemetry::counters::CounterFigures>,
    Vec<(std::net::SocketAddr, u64)>,
);

/// Opens `n` connections before the phase's clock starts (each ready for requests).
pub fn connect_all(target: &dyn EventTarget, n: usize) -> anyhow::Result<Vec<std::net::TcpStream>> {
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let s = target.connect().map_err(|e| {
            anyhow::anyhow!("--connections {n}: connection {} of {n} failed: {e}", i + 1)
        })?;
        s.set_nonblocking(true)?;
        v.push(s);
    }
    Ok(v)
}

/// `run`, with a panic turned into the phase's fatal error (as `worker::run_guarded`).
pub fn run_guarded(sh: &Shared, share: LoopShare, rec: WorkerRecorder) -> Handback {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(sh, share, rec)));
    r.unwrap_or_else(|p| {
        sh.fail(crate::panics::message_of(p.as_ref()));
        let now = sh.clock.now().saturating_sub(sh.grid.origin);
        sh.end_ns.fetch_max(now, Ordering::Relaxed);
        sh.finished.fetch_add(1, Ordering::Release);
        (Vec::new(), None, Vec::new())
    })
}

fn run(sh: &Shared, share: LoopShare, mut rec: WorkerRecorder) -> Handback {
    rec.start(sh.grid);
    #[cfg(target_os = "linux")]
    // SAFETY: sets this thread's timer slack; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64);
    }
    let mut l = match Loop::new(sh, share, rec) {
        Ok(l) => l,
        Err(b) => {
            let (e, mut rec) = *b;
            sh.fail(format!("event loop: {e}"));
            rec.finish();
            sh.finished.fetch_add(1, Ordering::Release);
            return (Vec::new(), None, Vec::new());
        }
    };
    l.main();
    l.drain();
    let Loop {
        mut rec,
        samples,
        conns,
        ..
    } = l;
    let last = rec.last().saturating_sub(sh.grid.origin);
    let t = Instant::now();
    drop(conns);
    let took = t.elapsed().as_nanos() as u64;
    rec.record(Metric::Cleanup, Status::Ok, took, took, 0);
    rec.finish();
    sh.end_ns.fetch_max(last, Ordering::Relaxed);
    sh.finished.fetch_add(1, Ordering::Release);
    (samples, None, Vec::new())
}

const TIMER: Token = Token(usize::MAX);
/// How often request deadlines are checked and broken connections tried again.
const CHECK_NS: u64 = 10_000_000;
const RETRY_NS: u64 = 100_000_000;
/// The most open-loop arrivals one loop holds back; more are skipped (and counted).
const MAX_BACKLOG: usize = 1 << 20;

struct Loop<'s, 'a> {
    sh: &'s Shared<'a>,
    target: &'s dyn EventTarget,
    cfg: &'s Engine,
    stats: &'s EngineStats,
    sends: Option<&'s sends::Sends>,
    codec: Box<dyn Codec>,
    poll: Poll,
    events: Events,
    timer: timer::Timer,
    conns: Vec<Conn>,
    /// Open loop: connections with a free slot, in turn.
    free: VecDeque<usize>,
    listed: Vec<bool>,
    dirty: Vec<usize>,
    backlog: VecDeque<u64>,
    rec: WorkerRecorder,
    clock: Clock,
    spans: Vec<Span>,
    scratch: Vec<u8>,
    one: Record,
    samples: Vec<ErrorSample>,
    timeline: Option<std::sync::Arc<timeline::WorkerTimeline>>,
    /// Requests this loop may still start (`u64::MAX`: until the deadline).
    ops_left: u64,
    next_arrival: Option<u64>,
    gaps: Rng,
    max_reply: usize,
    timeout_ns: u64,
    next_check: u64,
    /// While a broken connection's requests are counted: why it broke.
    broken_why: Option<String>,
}

impl<'s, 'a> Loop<'s, 'a> {
    fn new(
        sh: &'s Shared<'a>,
        share: LoopShare<'s>,
        rec: WorkerRecorder,
    ) -> Result<Self, Box<(std::io::Error, WorkerRecorder)>> {
        let poll = match Poll::new() {
            Ok(p) => p,
            Err(e) => return Err(Box::new((e, rec))),
        };
        let timer = match timer::Timer::new(poll.registry(), TIMER) {
            Ok(t) => t,
            Err(e) => return Err(Box::new((e, rec))),
        };
        let n = share.socks.len();
        let mut conns = Vec::with_capacity(n);
        for (k, s) in share.socks.into_iter().enumerate() {
            let mut s = mio::net::TcpStream::from_std(s);
            if let Err(e) =
                poll.registry()
                    .register(&mut s, Token(k), Interest::READABLE | Interest::WRITABLE)
            {
                return Err(Box::new((e, rec)));
            }
            let stream = sh.stream_base + share.first_conn + k as u64;
            conns.push(Conn::new(
                s,
                share.cfg.depth,
                Rng::for_worker(sh.seed, stream),
            ));
        }
        Ok(Loop {
            sh,
            target: share.target,
            cfg: share.cfg,
            stats: share.stats,
            sends: share.sends,
            codec: share.target.codec(),
            poll,
            events: Events::with_capacity(1024),
            timer,
            conns,
            free: VecDeque::with_capacity(n),
            listed: vec![false; n],
            dirty: Vec::with_capacity(n),
            backlog: VecDeque::new(),
            rec,
            clock: sh.clock.clone(),
            spans: Vec::new(),
            scratch: Vec::new(),
            one: Record::new(),
            samples: Vec::new(),
            timeline: sh.timelines.get(share.index).cloned(),
            ops_left: if share.ops == 0 { u64::MAX } else { share.ops },
            next_arrival: None,
            gaps: Rng::for_worker(
                sh.seed ^ 0x0A11_1FA1_5EED,
                sh.stream_base + share.index as u64,
            ),
            max_reply: share.target.max_reply(),
            timeout_ns: share.target.timeout().as_nanos() as u64,
            next_check: 0,
            broken_why: None,
        })
    }

    #[inline]
    fn go_on(&self) -> bool {
        !self.sh.stop.load(Ordering::Relaxed) && self.rec.last() < self.sh.deadline_ns
    }

    fn in_flight(&self) -> usize {
        self.conns.iter().map(Conn::in_flight).sum()
    }

    fn main(&mut self) {
        let now = self.clock.now();
        self.rec.at(now);
        self.next_check = now + CHECK_NS;
        match self.sh.arrivals {
            None => {
                for ci in 0..self.conns.len() {
                    self.refill(ci, now);
                }
            }
            Some(a) => {
                for ci in 0..self.conns.len() {
                    self.list_free(ci);
                }
                self.next_arrival = a.take(&mut self.gaps);
            }
        }
        self.flush_writes();
        while self.go_on() {
            let now = self.clock.now();
            self.rec.at(now);
            if self.sh.arrivals.is_some() {
                self.arrivals_due(now);
                if self.next_arrival.is_none() && self.backlog.is_empty() && self.in_flight() == 0 {
                    break;
                }
            } else if self.ops_left == 0 && self.in_flight() == 0 {
                break;
            }
            self.flush_writes();
            self.wait(now);
        }
    }

    /// Open loop: sends every arrival that is due, on a connection with a free slot, or holds
    /// it back (`--when-full`).
    fn arrivals_due(&mut self, now: u64) {
        let Some(a) = self.sh.arrivals else { return };
        while let Some(t) = self.next_arrival {
            if t > now || !self.go_on() {
                break;
            }
            match self.take_free() {
                Some(ci) => {
                    self.rec.record_lag(now.saturating_sub(t));
                    if let Some(s) = self.sends {
                        s.count(now);
                    }
                    self.issue(ci, t);
                    self.list_free(ci);
                }
                None if self.cfg.when_full == WhenFull::Queue
                    && self.backlog.len() < MAX_BACKLOG =>
                {
                    self.backlog.push_back(t);
                    self.stats.queued.fetch_add(1, Ordering::Relaxed);
                    self.stats
                        .max_backlog
                        .fetch_max(self.backlog.len() as u64, Ordering::Relaxed);
                }
                None => {
                    self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.next_arrival = a.take(&mut self.gaps);
        }
    }

    fn take_free(&mut self) -> Option<usize> {
        while let Some(ci) = self.free.pop_front() {
            self.listed[ci] = false;
            if self.conns[ci].free() {
                return Some(ci);
            }
        }
        None
    }

    fn list_free(&mut self, ci: usize) {
        if !self.listed[ci] && self.conns[ci].free() {
            self.listed[ci] = true;
            self.free.push_back(ci);
        }
    }

    /// Sleeps in epoll until a socket is ready, the next arrival is due, an interval ends, the
    /// deadline passes or the next check is due; then handles what woke it.
    fn wait(&mut self, now: u64) {
        let mut wake = self
            .rec
            .next_end()
            .min(self.sh.deadline_ns)
            .min(self.next_check);
        if let Some(t) = self.next_arrival {
            wake = wake.min(t);
        }
        if wake <= now {
            self.poll_once(Some(Duration::ZERO));
        } else {
            self.timer.arm(wake, wake - now);
            self.poll_once(Some(Duration::from_millis(100)));
        }
    }

    fn poll_once(&mut self, timeout: Option<Duration>) {
        if let Err(e) = self.poll.poll(&mut self.events, timeout) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                self.sh.fail(format!("event loop: epoll: {e}"));
            }
            return;
        }
        let n = self.events.iter().count();
        for k in 0..n {
            let (token, readable, writable, closed) = {
                let e = self.events.iter().nth(k).expect("counted");
                (
                    e.token(),
                    e.is_readable(),
                    e.is_writable(),
                    e.is_read_closed() || e.is_error(),
                )
            };
            if token == TIMER {
                self.timer.clear();
                continue;
            }
            let ci = token.0;
            if ci >= self.conns.len() || self.conns[ci].sock.is_none() {
                continue;
            }
            if readable || closed {
                self.on_readable(ci);
            }
            if writable && self.conns[ci].blocked {
                self.conns[ci].blocked = false;
                self.mark_dirty(ci);
            }
        }
        let now = self.clock.now();
        if now >= self.next_check {
            self.next_check = now + CHECK_NS;
            self.check(now);
        }
        self.flush_writes();
    }

    fn on_readable(&mut self, ci: usize) {
        let limit = self.max_reply.saturating_add(1 << 16);
        match self.conns[ci].read(limit) {
            Ok(open) => {
                self.parse(ci);
                if !open && self.conns[ci].sock.is_some() {
                    self.broken(ci, ErrorKind::Io, "the server closed the connection");
                }
            }
            Err(e) => {
                let kind = if e.kind() == std::io::ErrorKind::Other {
                    ErrorKind::Protocol
                } else {
                    ErrorKind::Io
                };
                self.broken_owned(ci, kind, format!("read: {e}"));
            }
        }
    }

    /// Completes every whole reply at the front of connection `ci`'s buffer.
    fn parse(&mut self, ci: usize) {
        loop {
            let c = &self.conns[ci];
            if c.rstart == c.rbuf.len() {
                return;
            }
            let Some(slot) = c.oldest() else {
                self.broken(ci, ErrorKind::Protocol, "a reply to no request");
                return;
            };
            let p = self.codec.decode(
                slot.sent,
                &slot.key,
                &slot.field,
                &c.rbuf[c.rstart..],
                &mut self.spans,
            );
            match p {
                Parsed::More => return,
                Parsed::Broken(why) => {
                    self.broken(ci, ErrorKind::Protocol, why);
                    return;
                }
                Parsed::Reply {
                    status,
                    used,
                    bytes,
                    view_base,
                } => {
                    let now = self.clock.now();
                    let check = self.verify(ci, status, view_base);
                    let c = &mut self.conns[ci];
                    c.rstart += used;
                    let s = c.pop();
                    let (metric, intended, at_send, written, ack) =
                        (s.metric, s.intended, s.at_send, s.written, s.ack);
                    let bytes = if metric == Metric::Read {
                        bytes
                    } else {
                        written
                    };
                    self.complete(metric, status, intended, at_send, now, bytes, ack);
                    if let Some((good, took)) = check {
                        let st = if good {
                            Status::Ok
                        } else {
                            Status::error(ErrorKind::UnexpectedState)
                        };
                        self.rec.record(Metric::Verify, st, took, took, 0);
                    }
                    self.refill(ci, now);
                }
            }
        }
    }

    /// The data-integrity check of a read's reply (spec §4.3), timed; `None` when off.
    fn verify(&mut self, ci: usize, status: Status, view_base: usize) -> Option<(bool, u64)> {
        let wl = self.sh.workload;
        let c = &self.conns[ci];
        let slot = c.oldest()?;
        if !wl.cfg.dataintegrity || slot.metric != Metric::Read || !status.is_ok() {
            return None;
        }
        let t0 = self.clock.now();
        let bytes = &c.rbuf[c.rstart + view_base..];
        let view = RecordView::new(bytes, &self.spans);
        let one_unnamed = !slot.field.is_empty()
            && view.len() == 1
            && view.iter().next().is_some_and(|(n, _)| n.is_empty());
        let good = if one_unnamed {
            // HGET's reply is the value alone: pair it with the field asked for.
            let value = view.iter().next().map(|(_, v)| v).unwrap_or_default();
            self.one.clear();
            self.one.push(&slot.field, value);
            wl.verify(&slot.key, self.one.view(), &mut self.scratch)
        } else {
            wl.verify(&slot.key, view, &mut self.scratch)
        };
        Some((good, self.clock.now().saturating_sub(t0)))
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn complete(
        &mut self,
        metric: Metric,
        st: Status,
        intended: u64,
        at_send: u64,
        end: u64,
        bytes: u64,
        ack: Option<i64>,
    ) {
        let start = if at_send == 0 { intended } else { at_send };
        let service = end.saturating_sub(start);
        let from_intended = end.saturating_sub(intended);
        self.rec.at(end);
        self.rec.record(metric, st, service, from_intended, bytes);
        if let Some(t) = &self.timeline {
            t.record(timeline::AFFECTED, st, end, from_intended);
        }
        if let Some(k) = ack {
            if let Err(e) = self.sh.workload.acknowledge(k) {
                self.sh.fail(e.to_string());
            }
        }
        if let Status::Error { kind, .. } = st {
            let msg = match &self.broken_why {
                Some(w) => Some(w.clone()),
                None => self.codec.last_error(),
            };
            self.error_sample(metric, kind, msg);
        }
    }

    #[cold]
    fn error_sample(&mut self, m: Metric, kind: ErrorKind, msg: Option<String>) {
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

    /// Closed loop: fills connection `ci` to `--depth`; open loop: sends held-back arrivals,
    /// or lists the connection as free.
    fn refill(&mut self, ci: usize, now: u64) {
        if !self.go_on() || self.conns[ci].sock.is_none() {
            return;
        }
        if self.sh.arrivals.is_some() {
            while self.conns[ci].free() {
                let Some(t) = self.backlog.pop_front() else {
                    break;
                };
                self.rec.record_lag(now.saturating_sub(t));
                if let Some(s) = self.sends {
                    s.count(now);
                }
                self.issue(ci, t);
            }
            self.list_free(ci);
            return;
        }
        while self.conns[ci].free() && self.ops_left > 0 {
            self.issue(ci, now);
        }
    }

    /// Writes the next operation of connection `ci`'s stream into its buffer.
    fn issue(&mut self, ci: usize, intended: u64) {
        let wl = self.sh.workload;
        let load = self.sh.load;
        let c = &mut self.conns[ci];
        let op = if load {
            wl.next_load(&mut c.rng, &mut c.bufs);
            Op::Insert
        } else {
            wl.next_op(&mut c.rng, &mut c.bufs)
        };
        let fields = wl.read_fields(&c.bufs);
        let written = c.bufs.values.data_bytes();
        let (metric, queued, written, ack) = match op {
            Op::Read => (Metric::Read, Queued::Read(&c.bufs.key, fields), 0, None),
            Op::Update => (
                Metric::Update,
                Queued::Update(&c.bufs.key, &c.bufs.values),
                written,
                None,
            ),
            Op::Insert => (
                Metric::Insert,
                Queued::Insert(&c.bufs.key, &c.bufs.values),
                written,
                (!load).then_some(c.bufs.keynum),
            ),
            // Refused by plan::engine; counted, never sent, should a workload reach here.
            Op::Scan | Op::ReadModifyWrite => {
                let m = if op == Op::Scan {
                    Metric::Scan
                } else {
                    Metric::ReadModifyWrite
                };
                self.ops_left = self.ops_left.saturating_sub(1);
                self.complete(
                    m,
                    Status::error(ErrorKind::NotImplemented),
                    intended,
                    intended,
                    intended,
                    0,
                    None,
                );
                return;
            }
        };
        let sent = Sent::of(&queued);
        let encoded = self.codec.encode(queued, &mut c.wbuf);
        debug_assert!(
            encoded,
            "the engine's codecs encode every request plan lets through"
        );
        let i = c.next_index();
        let s = &mut c.slots[i];
        s.metric = metric;
        s.sent = sent;
        s.intended = intended;
        s.at_send = 0;
        s.written = written;
        s.ack = ack;
        s.key.clear();
        s.key.extend_from_slice(&c.bufs.key);
        s.field.clear();
        if let crate::store::Fields::One(f) = fields {
            s.field.extend_from_slice(f);
        }
        c.push();
        if self.ops_left != u64::MAX {
            self.ops_left -= 1;
        }
        self.mark_dirty(ci);
    }

    #[inline]
    fn mark_dirty(&mut self, ci: usize) {
        let c = &mut self.conns[ci];
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(ci);
        }
    }

    /// Writes every connection's new requests (one system call each).
    fn flush_writes(&mut self) {
        let mut k = 0;
        while k < self.dirty.len() {
            let ci = self.dirty[k];
            k += 1;
            let c = &mut self.conns[ci];
            c.dirty = false;
            if c.blocked || c.sock.is_none() {
                continue;
            }
            let now = self.clock.now();
            match c.write(now) {
                Ok(true) => {}
                Ok(false) => c.blocked = true,
                Err(e) => self.broken_owned(ci, ErrorKind::Io, format!("write: {e}")),
            }
        }
        self.dirty.clear();
    }

    /// Request deadlines, and connections to try again.
    fn check(&mut self, now: u64) {
        for ci in 0..self.conns.len() {
            let c = &self.conns[ci];
            if c.sock.is_none() {
                if now >= c.retry_at && self.go_on() {
                    self.reconnect(ci, now);
                }
                continue;
            }
            if let Some(s) = c.oldest() {
                let since = if s.at_send == 0 {
                    s.intended
                } else {
                    s.at_send
                };
                if now.saturating_sub(since) > self.timeout_ns {
                    self.broken(ci, ErrorKind::Timeout, "no reply within timeout_ms");
                }
            }
        }
    }

    fn broken(&mut self, ci: usize, kind: ErrorKind, why: &str) {
        self.broken_owned(ci, kind, why.to_string());
    }

    /// Counts every request in flight on `ci` as an error of `kind`, and replaces the
    /// connection.
    #[cold]
    fn broken_owned(&mut self, ci: usize, kind: ErrorKind, why: String) {
        let now = self.clock.now();
        let st = Status::error(kind);
        self.broken_why = Some(format!(
            "{}: {why} (connection replaced)",
            self.target.addr()
        ));
        while self.conns[ci].oldest().is_some() {
            let s = self.conns[ci].pop();
            let (metric, intended, at_send, ack) = (s.metric, s.intended, s.at_send, s.ack);
            self.complete(metric, st, intended, at_send, now, 0, ack);
        }
        self.broken_why = None;
        if let Some(mut s) = self.conns[ci].sock.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        self.conns[ci].reset();
        if self.go_on() {
            self.reconnect(ci, now);
        }
    }

    /// Opens connection `ci` again; one that cannot be opened ends the phase unless faults are
    /// scheduled (then it is tried again every 100 ms).
    fn reconnect(&mut self, ci: usize, now: u64) {
        match self.target.connect() {
            Ok(s) => {
                let _ = s.set_nonblocking(true);
                let mut s = mio::net::TcpStream::from_std(s);
                if let Err(e) = self.poll.registry().register(
                    &mut s,
                    Token(ci),
                    Interest::READABLE | Interest::WRITABLE,
                ) {
                    self.sh.fail(format!("event loop: {e}"));
                    return;
                }
                self.stats.reconnects.fetch_add(1, Ordering::Relaxed);
                self.conns[ci].sock = Some(s);
                self.refill(ci, now);
            }
            Err(e) => {
                self.conns[ci].retry_at = now + RETRY_NS;
                if !self.sh.tolerate_fatal {
                    self.sh
                        .fail(format!("connection lost and not opened again: {e}"));
                }
            }
        }
    }

    /// After the deadline: waits for the replies in flight, up to the request timeout (a
    /// stop — Ctrl-C or a failure — waits 100 ms, and what is still in flight is abandoned,
    /// not counted).
    fn drain(&mut self) {
        let stopped = self.sh.stop.load(Ordering::Relaxed);
        let now = self.clock.now();
        let until = now
            + if stopped {
                100_000_000
            } else {
                self.timeout_ns
            };
        self.flush_writes();
        while self.in_flight() > 0 {
            let now = self.clock.now();
            if now >= until {
                break;
            }
            self.timer.arm(until, until - now);
            self.poll_once(Some(Duration::from_millis(100)));
        }
        let left = self.in_flight() as u64;
        if left > 0 {
            self.stats.abandoned.fetch_add(left, Ordering::Relaxed);
        }
    }
}

/// A phase's engine, opened before its clock starts: the connections, split over the loops.
pub struct Opened {
    target: Box<dyn EventTarget>,
    socks: Vec<Vec<std::net::TcpStream>>,
    recs: Vec<WorkerRecorder>,
    pub stats: EngineStats,
    cfg: Engine,
    sends: Option<sends::Sends>,
}

impl Opened {
    /// Raises the descriptor limit, connects every connection and splits them over `loops`.
    pub fn open(
        cfg: &Engine,
        store: &dyn crate::store::Store,
        loops: usize,
        collector: &mut crate::measure::Collector,
    ) -> anyhow::Result<Opened> {
        let target = store
            .event_target()
            .ok_or_else(|| anyhow::anyhow!("this store has no event-driven client"))?;
        let limit = crate::plan::engine::raise_fd_limit(cfg.fds_needed);
        if limit < cfg.fds_needed {
            anyhow::bail!(
                "--connections {}: the descriptor limit is {limit}, {} are needed",
                cfg.connections,
                cfg.fds_needed
            );
        }
        let mut all = connect_all(target.as_ref(), cfg.connections)?.into_iter();
        let socks = (0..loops)
            .map(|i| {
                let n = crate::plan::split_ops(cfg.connections as u64, loops, i) as usize;
                all.by_ref().take(n).collect()
            })
            .collect();
        Ok(Opened {
            target,
            socks,
            recs: (0..loops).map(|_| collector.worker()).collect(),
            stats: EngineStats::default(),
            cfg: cfg.clone(),
            sends: None,
        })
    }

    /// The phase's `engine` figures once its loops have ended.
    pub fn summary(
        &self,
        loops: usize,
        seed: u64,
        stream_base: u64,
    ) -> crate::report::EngineSummary {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        crate::report::EngineSummary {
            connections: self.cfg.connections,
            depth: self.cfg.depth,
            event_loops: loops,
            when_full: format!("{:?}", self.cfg.when_full).to_lowercase(),
            fd_limit: crate::plan::engine::fd_limits().0,
            reconnects: n(&self.stats.reconnects),
            queued: n(&self.stats.queued),
            skipped: n(&self.stats.skipped),
            max_backlog: n(&self.stats.max_backlog),
            abandoned: n(&self.stats.abandoned),
            streams: format!(
                "connection c draws its operations from Rng::for_worker(seed {seed}, stream {stream_base} + c)"
            ),
        }
    }

    /// Open loop: judges the process the sends made over the measured window (and the sends'
    /// lateness, which the worker pool's `max_behind_ms` does not see here: the loops take
    /// every due arrival and hold it in their backlog), marking a schedule not kept.
    pub fn judge_open_loop(
        &self,
        ps: &mut crate::report::PhaseSummary,
        arrival: crate::plan::Arrival,
        rate: f64,
    ) {
        let (from, to) = (ps.warmup_seconds, ps.warmup_seconds + ps.measured_seconds);
        let Some(ol) = ps.open_loop.as_mut() else {
            return;
        };
        ol.arrivals_check = self
            .sends
            .as_ref()
            .and_then(|s| s.check(arrival, rate, from, to));
        let mut why = vec![];
        if let Some(c) = ol.arrivals_check.as_ref().filter(|c| !c.passed) {
            why.push(format!(
                "the sends did not follow the {} process asked for (dispersion {:.2} over {} windows of {} ms, expected {} ± {:.2})",
                ol.arrival, c.dispersion, c.windows, c.window_ms, c.expected, c.tolerance
            ));
        }
        if ol.send_lag_us.p99 > 100_000.0 {
            why.push(format!(
                "sends were late by {:.1} ms at p99 (the loops' backlog reached {} arrivals)",
                ol.send_lag_us.p99 / 1000.0,
                self.stats.max_backlog.load(Ordering::Relaxed)
            ));
        }
        if !why.is_empty() {
            ol.kept_up = false;
            let text = format!(
                "the event-driven engine's checks failed: {}",
                why.join("; ")
            );
            ol.warning = Some(match ol.warning.take() {
                Some(w) => format!("{w} {text}"),
                None => text,
            });
        }
    }

    /// Starts one thread per loop in scope `s`.
    pub fn spawn<'scope, 'env>(
        &'env mut self,
        s: &'scope std::thread::Scope<'scope, 'env>,
        sh: &'env Shared<'env>,
        ops: u64,
    ) -> Vec<std::thread::ScopedJoinHandle<'scope, Handback>> {
        let loops = self.socks.len();
        let mut first = 0u64;
        let socks = std::mem::take(&mut self.socks);
        let recs = std::mem::take(&mut self.recs);
        if sh.arrivals.is_some() {
            let secs = sh.grid.deadline.min(3_600_000_000_000) as f64 / 1e9;
            self.sends = Some(sends::Sends::new(sh.grid.origin, secs));
        }
        let (target, cfg, stats) = (&*self.target, &self.cfg, &self.stats);
        let sends = self.sends.as_ref();
        socks
            .into_iter()
            .zip(recs)
            .enumerate()
            .map(|(i, (socks, rec))| {
                let share = LoopShare {
                    index: i,
                    first_conn: first,
                    ops: if sh.arrivals.is_some() {
                        0
                    } else {
                        crate::plan::split_ops(ops, loops, i)
                    },
                    socks,
                    target,
                    cfg,
                    stats,
                    sends,
                };
                first += share.socks.len() as u64;
                std::thread::Builder::new()
                    .name(format!("kvm-loop-{i}"))
                    .spawn_scoped(s, move || run_guarded(sh, share, rec))
                    .expect("spawn event loop")
            })
            .collect()
    }
}
