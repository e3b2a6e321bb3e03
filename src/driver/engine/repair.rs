//! What the engine does when a connection fails it: a reply that breaks the protocol, a close
//! by the server, a request past its deadline — every request in flight on that connection is
//! counted as an error of that kind and the connection is replaced at once (a server that will
//! not take one ends the phase unless faults are scheduled: then it is tried every 100 ms);
//! and the end of a phase, which waits for the replies still in flight.

use super::conn::Chain;
use super::{Loop, RETRY_NS};
use crate::store::{ErrorKind, Status};
use mio::{Interest, Token};
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Loop<'_, '_> {
    /// Request deadlines, and connections to try again.
    pub(super) fn check(&mut self, now: u64) {
        // A cluster client's sockets are opened again when a key is routed to them.
        self.retry_held(now);
        let lazy = self.routes.is_some();
        for ci in 0..self.conns.len() {
            let c = &self.conns[ci];
            if c.sock.is_none() {
                if lazy {
                    continue;
                }
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

    pub(super) fn broken(&mut self, ci: usize, kind: ErrorKind, why: &str) {
        self.broken_owned(ci, kind, why.to_string());
    }

    /// Counts every request in flight on `ci` as an error of `kind`, and replaces the
    /// connection.
    #[cold]
    pub(super) fn broken_owned(&mut self, ci: usize, kind: ErrorKind, why: String) {
        let now = self.clock.now();
        let st = Status::error(kind);
        let addr = match &self.routes {
            Some(r) => r.node_addr(ci),
            None => self.target.addr(),
        };
        self.broken_why = Some(format!("{addr}: {why} (connection replaced)"));
        while self.conns[ci].oldest().is_some() {
            let s = self.conns[ci].pop();
            if s.chain == Chain::Asking {
                continue;
            }
            let at_send = if s.first_send != 0 {
                s.first_send
            } else {
                s.at_send
            };
            let (metric, intended, ack) = (s.metric, s.intended, s.ack);
            let shard = s.shard;
            self.class = self.class_of(shard);
            self.complete(metric, st, intended, at_send, now, 0, ack);
        }
        self.broken_why = None;
        if let Some(mut s) = self.conns[ci].sock.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        self.conns[ci].reset();
        if self.routes.is_some() {
            // Its client goes on; the socket is opened again when a key needs it.
            self.conns[ci].retry_at = 0;
            self.refresh_routes(now);
            self.refill(ci, now);
        } else if self.go_on() {
            self.reconnect(ci, now);
        }
    }

    /// Opens connection `ci` again; one that cannot be opened ends the phase unless faults are
    /// scheduled (then it is tried again every 100 ms).
    pub(super) fn reconnect(&mut self, ci: usize, now: u64) {
        match self.target.connect() {
            Ok(s) => {
                let mut s = match super::link::Link::from_opened(s, self.cfg.depth, self.max_reply)
                {
                    Ok(s) => s,
                    Err(e) => {
                        self.sh.fail(format!("event loop: {e}"));
                        return;
                    }
                };
                if let Err(e) = self.poll.registry().register(
                    &mut s,
                    Token(ci),
                    Interest::READABLE | Interest::WRITABLE,
                ) {
                    self.sh.fail(format!("event loop: {e}"));
                    return;
                }
                if !self.probe {
                    self.stats.reconnects.fetch_add(1, Ordering::Relaxed);
                }
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
    pub(super) fn drain(&mut self) {
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
        if left > 0 && !self.probe {
            self.stats.abandoned.fetch_add(left, Ordering::Relaxed);
        }
    }
}
