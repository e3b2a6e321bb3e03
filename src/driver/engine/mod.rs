//! The event-driven engine for network stores (issue 30): `--threads` event loops, each
//! serving its share of `--connections` with `--depth` requests in flight on every one,
//! refilled as replies arrive (memtier's pipeline), or taking the phase's open-loop arrivals
//! (`--rate`) and sending each on a connection with a free slot.
//!
//! **Mechanism: epoll through mio**, edge-triggered, one `Poll` per loop, plus a timerfd for
//! arrival wake-ups at nanosecond precision (`timer.rs`). Chosen on measurement
//! (bench/mechanisms.sh: the same closed-loop memcached GET client driven by mio, tokio and
//! io_uring, 1 to 10,000 connections, depth 1 and 4, 5 interleaved rounds, this 2-vCPU VM): no
//! candidate used less client CPU per operation than mio outside the round-to-round spread,
//! except io_uring by 5 % at 1,000 connections x depth 4 when pinned (within the spread
//! unpinned). io_uring cut the system calls per operation from 2 to 0.03, yet ~90 % of the
//! client's CPU is kernel time in the loopback TCP path, which it runs all the same; it would
//! also need an epoll fallback (Docker's default seccomp profile refuses io_uring since 25.0,
//! moby#46762; kernels >= 6.6 can disable it by sysctl) and lends every idle connection's read
//! buffer to the kernel. tokio's current_thread runtime cost 3–9 % more CPU per operation at
//! 1,000 and 10,000 connections (outside the spread in 3 of 4 measurements; its task and waker
//! per wake-up: 575 ns of user time per op against mio's 379) and 17 % more memory at 10,000;
//! its multi-thread runtime 20–30 % more (2.6x at depth 4 pinned), with uneven service across
//! connections. No candidate had a throughput lead outside the spread. mio is tokio's
//! own thin, well-kept epoll layer, and a plain loop keeps the per-request path free of
//! allocation and locks.
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

mod chain;
mod cluster;
mod conn;
mod integrity;
mod issue;
mod link;
mod open_loop;
mod opened;
mod recv;
mod repair;
mod sends;
mod sleep;
mod timer;
mod udp;

pub use opened::Opened;

use super::call::{self, Done};
use super::worker::Shared;
use crate::measure::clock::Clock;
use crate::measure::{timeline, Metric, WorkerRecorder};
use crate::plan::engine::Engine;
use crate::record::{Record, Span};
use crate::report::ErrorSample;
use crate::store::wire::{AfterError, ClusterMap, Codec, EventTarget, Parsed};
use crate::store::{ErrorKind, Status};
use crate::workload::{OpBuffers, Rng};
use conn::{Chain, Conn};
use mio::{Events, Interest, Poll, Token};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the engine's loops counted in one phase (the summary's `engine` block).
#[derive(Default)]
pub struct EngineStats {
    pub reconnects: AtomicU64,
    /// Redis Cluster: requests sent again where a MOVED or ASK reply said.
    pub moved: AtomicU64,
    pub asked: AtomicU64,
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
    pub socks: Vec<crate::store::wire::Link>,
    /// Connection number of `socks[0]` across the run (its stream index).
    pub first_conn: u64,
    pub ops: u64,
    pub target: &'a dyn EventTarget,
    pub cfg: &'a Engine,
    pub stats: &'a EngineStats,
    /// Open loop: the run's send counts, for the arrival-process check.
    pub sends: Option<&'a sends::Sends>,
    /// The schedule this loop serves: the phase's (`--rate`), or the probe's own.
    pub arrivals: Option<&'a super::arrivals::Arrivals>,
    /// The probe loop (`--probe-rate`), beside the phase's `main_loops`.
    pub probe: bool,
    pub main_loops: usize,
    /// A Redis Cluster's slot map: `socks` are then one per node for each client, client by
    /// client (`cluster.rs`).
    pub map: Option<&'a ClusterMap>,
}

type Handback = (
    Vec<ErrorSample>,
    Option<crate::telemetry::counters::CounterFigures>,
    Vec<(std::net::SocketAddr, u64)>,
);

/// `run`, with a panic turned into the phase's fatal error (as `worker::run_guarded`).
pub fn run_guarded(sh: &Shared, share: LoopShare, rec: WorkerRecorder) -> Handback {
    let probe = share.probe;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(sh, share, rec)));
    r.unwrap_or_else(|p| {
        sh.fail(crate::panics::message_of(p.as_ref()));
        if !probe {
            let now = sh.clock.now().saturating_sub(sh.grid.origin);
            sh.end_ns.fetch_max(now, Ordering::Relaxed);
            sh.finished.fetch_add(1, Ordering::Release);
        }
        (Vec::new(), None, Vec::new())
    })
}

fn run(sh: &Shared, share: LoopShare, mut rec: WorkerRecorder) -> Handback {
    // The probe loop is not one of the phase's workers: the interval loop neither waits for it
    // nor takes its rows (its own collector does).
    let probe = share.probe;
    let done = |sh: &Shared, last: Option<u64>| {
        if !probe {
            if let Some(l) = last {
                sh.end_ns.fetch_max(l, Ordering::Relaxed);
            }
            sh.finished.fetch_add(1, Ordering::Release);
        }
    };
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
            done(sh, None);
            return (Vec::new(), None, Vec::new());
        }
    };
    l.main();
    l.drain();
    let sent_to = l.routes.as_ref().map(|r| r.sent_to()).unwrap_or_default();
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
    done(sh, Some(last));
    (samples, None, sent_to)
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
    /// `reply_wait=spin`: how long to poll before sleeping in epoll (None: sleep at once).
    spin: Option<Duration>,
    stats: &'s EngineStats,
    sends: Option<&'s sends::Sends>,
    arrivals: Option<&'s super::arrivals::Arrivals>,
    probe: bool,
    main_loops: usize,
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
    /// Open loop: where the backlog's oldest arrival is published (`Arrivals::holder`).
    held: Option<std::sync::Arc<AtomicU64>>,
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
    /// Updates are read-merge-writes: the store keeps a record as one value and the workload
    /// writes part of it.
    merge_updates: bool,
    /// A chain's merged record (`chain.rs`), and the stored one it is made from.
    merged: Record,
    stored: Record,
    /// The events of one poll: token, readable, writable, closed.
    ready: Vec<(Token, bool, bool, bool)>,
    /// Redis Cluster: clients, their sockets per node, the slot map (`cluster.rs`).
    routes: Option<cluster::Routes>,
    /// A stream's buffers while its request is written to another connection (`issue.rs`).
    drawn: OpBuffers,
    /// The recovery timeline's class of the request being completed (`cluster::class_of`).
    class: usize,
    /// Receive-buffer growth its connections hold (`conn::GROWTH_BUDGET`), the connections
    /// waiting for room to read on, and the one allowed past the budget (`recv.rs`).
    kept: usize,
    paused: VecDeque<usize>,
    priority: Option<usize>,
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
        let max_reply = share.target.max_reply();
        for (k, s) in share.socks.into_iter().enumerate() {
            let mut s = match link::Link::from_opened(s, share.cfg.depth, max_reply) {
                Ok(s) => s,
                Err(e) => return Err(Box::new((e, rec))),
            };
            if let Err(e) =
                poll.registry()
                    .register(&mut s, Token(k), Interest::READABLE | Interest::WRITABLE)
            {
                return Err(Box::new((e, rec)));
            }
            // A cluster client's sockets share its stream (the first one's).
            let client = k / share.map.map_or(1, |m| m.nodes.len().max(1));
            let stream = sh.stream_base + share.first_conn + client as u64;
            conns.push(Conn::new(
                s,
                cluster::ring_len(share.cfg.depth, share.map.is_some()),
                Rng::for_worker(sh.seed, stream),
            ));
        }
        Ok(Loop {
            sh,
            target: share.target,
            cfg: share.cfg,
            spin: share.target.wait().budget(),
            stats: share.stats,
            sends: share.sends,
            arrivals: share.arrivals,
            probe: share.probe,
            main_loops: share.main_loops,
            codec: share.target.codec(),
            poll,
            events: Events::with_capacity(1024),
            timer,
            conns,
            free: VecDeque::with_capacity(n),
            listed: vec![false; n],
            dirty: Vec::with_capacity(n),
            backlog: VecDeque::new(),
            held: share.arrivals.map(|a| a.holder()),
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
            merge_updates: share.target.whole_record_writes()
                && !sh.workload.cfg.writeallfields
                && sh.workload.cfg.fieldcount > 1,
            merged: Record::new(),
            stored: Record::new(),
            ready: Vec::with_capacity(1024),
            routes: share
                .map
                .map(|m| cluster::Routes::new(m.clone(), n / m.nodes.len().max(1))),
            drawn: OpBuffers::default(),
            class: timeline::AFFECTED,
            kept: 0,
            paused: VecDeque::new(),
            priority: None,
        })
    }

    #[inline]
    fn go_on(&self) -> bool {
        !self.sh.stop.load(Ordering::Relaxed)
            && self.rec.last() < self.sh.deadline_ns
            // The probe stops when the load does.
            && !(self.probe && self.sh.finished.load(Ordering::Acquire) >= self.main_loops)
    }

    fn in_flight(&self) -> usize {
        self.conns.iter().map(Conn::in_flight).sum()
    }

    fn main(&mut self) {
        let now = self.clock.now();
        self.rec.at(now);
        self.next_check = now + CHECK_NS;
        match self.arrivals {
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
            if self.arrivals.is_some() {
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

    /// Completes every whole reply at the front of connection `ci`'s buffer.
    fn parse(&mut self, ci: usize) {
        loop {
            let c = &self.conns[ci];
            if c.rstart == c.rend {
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
                c.unparsed(),
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
                    if self.conns[ci].oldest().map(|s| s.chain) == Some(Chain::MergeRead) {
                        self.merge_from_reply(ci, status, view_base);
                    }
                    let c = &mut self.conns[ci];
                    c.rstart += used;
                    let i = c.pop_index();
                    let s = &c.slots[i];
                    let after = if status != Status::Ok {
                        self.codec.after_error()
                    } else {
                        AfterError::default()
                    };
                    if s.chain == Chain::Asking {
                        if status != Status::Ok {
                            // Refused: the request behind it answers for itself.
                            let _ = self.codec.last_error();
                        }
                        continue;
                    }
                    let shard = s.shard;
                    self.class = self.class_of(shard);
                    if after.redirect.is_some()
                        && self.routes.is_some()
                        && self.redirect(ci, i, now, after)
                    {
                        self.refill(ci, now);
                        continue;
                    }
                    self.settle(ci, i, status, now, bytes);
                    if let Some((good, took)) = check {
                        let st = if good {
                            Status::Ok
                        } else {
                            Status::error(ErrorKind::UnexpectedState)
                        };
                        self.rec.record(Metric::Verify, st, took, took, 0);
                    }
                    if after.rerouted {
                        self.refresh_routes(now);
                    }
                    if after.replace_connection {
                        self.broken(
                            ci,
                            ErrorKind::Io,
                            "the server no longer serves this connection (READONLY: demoted); connecting to the new primary",
                        );
                        return;
                    }
                    self.refill(ci, now);
                }
            }
        }
    }

    /// Records the operation in slot `i` of connection `ci` as answered, or moves its chain
    /// (read-modify-write, a merged update) on. `bytes`: the reply's, for a read.
    #[inline]
    fn settle(&mut self, ci: usize, i: usize, status: Status, now: u64, bytes: u64) {
        let s = &self.conns[ci].slots[i];
        if s.chain != Chain::None {
            self.chained(ci, i, status, now, bytes);
            return;
        }
        let at_send = if s.first_send != 0 {
            s.first_send
        } else {
            s.at_send
        };
        let (metric, intended, written, ack) = (s.metric, s.intended, s.written, s.ack);
        let bytes = if metric == Metric::Read {
            bytes
        } else {
            written
        };
        self.complete(metric, status, intended, at_send, now, bytes, ack);
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
        let done = Done {
            metric,
            status: st,
            start: if at_send == 0 { intended } else { at_send },
            intended,
            end,
            bytes,
        };
        call::record(&mut self.rec, self.timeline.as_deref(), self.class, &done);
        if let Some(k) = ack {
            if let Err(e) = self.sh.workload.acknowledge(k) {
                self.sh.fail(e.to_string());
            }
        }
        if let Status::Error { kind, fatal } = st {
            let msg = match &self.broken_why {
                Some(w) => Some(w.clone()),
                None => self.codec.last_error(),
            };
            self.error_sample(metric, (kind, fatal), msg);
        }
    }

    /// A failed request: the rule on fatal errors and the first sample of each metric and kind
    /// (`call::failed`, as on worker threads); an event loop never waits after one.
    #[cold]
    fn error_sample(&mut self, m: Metric, kind: (ErrorKind, bool), msg: Option<String>) {
        call::failed(self.sh, &mut self.samples, m, kind, msg);
    }

    /// Closed loop: fills connection `ci` to `--depth`; open loop: sends held-back arrivals,
    /// or lists the connection as free.
    fn refill(&mut self, ci: usize, now: u64) {
        let ci = self.home(ci);
        if !self.go_on() || (self.routes.is_none() && self.conns[ci].sock.is_none()) {
            return;
        }
        if self.arrivals.is_some() {
            let mut sent_held = false;
            while self.can_issue(ci) {
                let Some(t) = self.backlog.pop_front() else {
                    break;
                };
                self.rec.record_lag(now.saturating_sub(t));
                if let Some(s) = self.sends {
                    s.count(now);
                }
                self.issue(ci, t);
                sent_held = true;
            }
            if sent_held {
                self.publish_held();
            }
            self.list_free(ci);
            return;
        }
        while self.can_issue(ci) && self.ops_left > 0 {
            self.issue(ci, now);
        }
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
}
