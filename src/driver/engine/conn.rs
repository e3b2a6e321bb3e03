//! One connection of an event loop: its socket, read and write buffers, the ring of requests
//! in flight (`--depth` slots, made once and reused: the hot path allocates nothing once a
//! connection's buffers have grown to its largest reply), and its own seeded operation stream.

use super::link::Link;
use crate::measure::Metric;
use crate::record::Record;
use crate::store::wire::Sent;
use crate::workload::{OpBuffers, Rng};
use std::io::{Read, Write};

/// A request in flight: what its reply is parsed as, and its times (clock ns).
pub(super) struct Slot {
    pub(super) metric: Metric,
    pub(super) sent: Sent,
    /// When it was meant to start: its open-loop arrival, or (closed loop) when its slot freed.
    pub(super) intended: u64,
    /// When its bytes were handed to the socket; 0 while still in the write buffer.
    pub(super) at_send: u64,
    pub(super) key: Vec<u8>,
    /// The field of a one-field read (empty otherwise).
    pub(super) field: Vec<u8>,
    /// User bytes the request wrote (values with their names).
    pub(super) written: u64,
    /// A run phase's insert: the key number acknowledged when it completes.
    pub(super) ack: Option<i64>,
    /// Where this request stands in a chain of requests that make one operation.
    pub(super) chain: Chain,
    /// A chain's update values (written after its read).
    pub(super) values: Record,
    /// A chain's update started here (its first request's send); 0: not begun.
    pub(super) update_start: u64,
    /// A read-modify-write started here (its read's send); 0: not part of one.
    pub(super) rmw_start: u64,
    /// Redis Cluster: the shard of its key (the recovery timeline's split); else 0.
    pub(super) shard: u16,
    /// Redis Cluster: a request sent again where a MOVED or ASK reply said (once only), and
    /// when it was first sent (its from-send latency covers both trips, as the worker
    /// threads' session times its retry); 0: not redirected.
    pub(super) redirected: bool,
    pub(super) first_send: u64,
}

/// An operation that is more than one request on its connection, each sent when the previous
/// one's reply arrives (the blocking session's order: YCSB's read-modify-write is a read then an
/// update; an update of part of a record a store keeps as one value is a read, a merge and a
/// write of the whole).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Chain {
    /// One request.
    None,
    /// A read-modify-write's read (recorded as READ); its update follows.
    RmwRead,
    /// The read of a read-merge-write update (not recorded by itself).
    MergeRead,
    /// Redis Cluster's ASKING before a request an ASK reply redirected: its `+OK` is read and
    /// not recorded.
    Asking,
    /// The write that ends an update (a merged record, or a hash's fields): recorded as UPDATE,
    /// and as READ-MODIFY-WRITE when `rmw_start` is set.
    Write,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            metric: Metric::Read,
            sent: Sent::Delete,
            intended: 0,
            at_send: 0,
            key: Vec::new(),
            field: Vec::new(),
            written: 0,
            ack: None,
            chain: Chain::None,
            values: Record::new(),
            update_start: 0,
            rmw_start: 0,
            shard: 0,
            redirected: false,
            first_send: 0,
        }
    }
}

pub(super) struct Conn {
    /// `None` while the connection is being replaced.
    pub(super) sock: Option<Link>,
    pub(super) rbuf: Vec<u8>,
    /// Where the next unparsed reply starts in `rbuf`, and where the bytes read end.
    pub(super) rstart: usize,
    pub(super) rend: usize,
    pub(super) wbuf: Vec<u8>,
    pub(super) wstart: usize,
    /// The ring of requests in flight, oldest at `head`.
    pub(super) slots: Vec<Slot>,
    head: usize,
    len: usize,
    /// Requests of the ring not yet stamped with their send time (the newest ones).
    pub(super) unsent: usize,
    pub(super) rng: Rng,
    pub(super) bufs: OpBuffers,
    /// Waiting for the socket to take the rest of `wbuf` (WRITABLE interest registered).
    pub(super) blocked: bool,
    /// In its loop's list of connections with requests to write.
    pub(super) dirty: bool,
    /// Clock ns before which a broken connection is not tried again.
    pub(super) retry_at: u64,
    /// The last read stopped at a full buffer it was not allowed to grow.
    pub(super) held: bool,
}

/// Initial buffer sizes: a 1 KiB value's reply and request fit; larger ones grow the buffer
/// once (10,000 connections at these sizes are 60 MB).
const RBUF: usize = 4096;
const WBUF: usize = 2048;
/// Receive-buffer bytes above `RBUF` that one event loop's connections may hold together
/// (security review F8: a server's large or unfinished replies made every connection hold up
/// to 4 MiB, ~40 GB at 10,000 connections). Past it, only one connection at a time may grow
/// its buffer further (up to 2 × (`max_reply` + 64 KiB)), so one reply always completes; the
/// others wait with their bytes in the kernel (`recv.rs`). A buffer returns to `RBUF` once it
/// holds nothing unparsed while the loop holds more than half the budget.
pub(super) const GROWTH_BUDGET: usize = 64 << 20;

impl Conn {
    pub(super) fn new(sock: Link, depth: usize, rng: Rng) -> Conn {
        let mut c = Conn::new_idle(depth, rng);
        c.sock = Some(sock);
        c
    }

    /// A connection with no socket yet (a cluster client's socket to a node opened later).
    pub(super) fn new_idle(depth: usize, rng: Rng) -> Conn {
        Conn {
            sock: None,
            rbuf: vec![0; RBUF],
            rstart: 0,
            rend: 0,
            wbuf: Vec::with_capacity(WBUF),
            wstart: 0,
            slots: (0..depth).map(|_| Slot::new()).collect(),
            head: 0,
            len: 0,
            unsent: 0,
            rng,
            bufs: OpBuffers::default(),
            blocked: false,
            dirty: false,
            retry_at: 0,
            held: false,
        }
    }

    #[inline]
    pub(super) fn in_flight(&self) -> usize {
        self.len
    }

    #[inline]
    pub(super) fn free(&self) -> bool {
        self.sock.is_some() && self.len < self.slots.len()
    }

    /// The index in `slots` of a new request (the caller fills it, then calls `push`).
    #[inline]
    pub(super) fn next_index(&self) -> usize {
        (self.head + self.len) % self.slots.len()
    }

    #[inline]
    pub(super) fn push(&mut self) {
        self.len += 1;
        self.unsent += 1;
    }

    #[inline]
    pub(super) fn oldest(&self) -> Option<&Slot> {
        (self.len > 0).then(|| &self.slots[self.head])
    }

    /// Removes the oldest request; it stays readable until the next `push`.
    #[inline]
    pub(super) fn pop(&mut self) -> &Slot {
        let i = self.pop_index();
        &self.slots[i]
    }

    /// As `pop`, giving the slot's index.
    #[inline]
    pub(super) fn pop_index(&mut self) -> usize {
        let i = self.head;
        self.head = (self.head + 1) % self.slots.len();
        self.len -= 1;
        self.unsent = self.unsent.min(self.len);
        i
    }

    /// Stamps the requests written since the last stamp with `now`.
    #[inline]
    fn stamp(&mut self, now: u64) {
        let n = self.slots.len();
        for k in self.len - self.unsent..self.len {
            self.slots[(self.head + k) % n].at_send = now;
        }
        self.unsent = 0;
    }

    /// Writes what the buffer holds; `Ok(true)`: all of it. The requests are stamped with
    /// `now` once their last byte is taken by the socket.
    pub(super) fn write(&mut self, now: u64) -> std::io::Result<bool> {
        let Some(s) = self.sock.as_mut() else {
            return Ok(true);
        };
        while self.wstart < self.wbuf.len() {
            match s.write(&self.wbuf[self.wstart..]) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => self.wstart += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.wbuf.clear();
        self.wstart = 0;
        // TLS: the last ciphertext byte must be the socket's before the send is stamped.
        if !s.flush()? {
            return Ok(false);
        }
        self.stamp(now);
        Ok(true)
    }

    /// The bytes read and not yet parsed.
    #[inline]
    pub(super) fn unparsed(&self) -> &[u8] {
        &self.rbuf[self.rstart..self.rend]
    }

    /// Reads what the socket has. `Ok(false)`: the server closed the connection. `limit`
    /// bounds the unparsed bytes held (a reply larger than `max_reply` never fits). The buffer
    /// is initialised once, when it grows: a read never clears memory it is about to fill.
    /// Without `may_grow`, a full buffer ends the read with `held` set (the rest stays in
    /// the kernel's socket buffer).
    pub(super) fn read(&mut self, limit: usize, may_grow: bool) -> std::io::Result<bool> {
        let Some(s) = self.sock.as_mut() else {
            return Ok(true);
        };
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        } else if self.rstart > self.rbuf.len() / 2 {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend -= self.rstart;
            self.rstart = 0;
        }
        let drains = s.short_read_drains();
        loop {
            if self.rend == self.rbuf.len() {
                if self.rend - self.rstart > limit {
                    return Err(std::io::Error::other("a reply larger than max_reply"));
                }
                if !may_grow {
                    self.held = true;
                    return Ok(true);
                }
                let grown = self.rbuf.len() * 2;
                self.rbuf.resize(grown, 0);
            }
            let room = self.rbuf.len() - self.rend;
            match s.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.rend += n;
                    // Edge-triggered: a short read emptied the socket; data arriving later
                    // raises a new event.
                    if drains && n < room {
                        return Ok(true);
                    }
                }
                Err(e) => match e.kind() {
                    std::io::ErrorKind::WouldBlock => return Ok(true),
                    std::io::ErrorKind::Interrupted => {}
                    _ => return Err(e),
                },
            }
        }
    }

    /// The bytes its receive buffer holds above its initial size.
    #[inline]
    pub(super) fn grown(&self) -> usize {
        self.rbuf.len().saturating_sub(RBUF)
    }

    /// Returns the receive buffer to its initial size if nothing unparsed is in it; the bytes
    /// of growth given back.
    #[cold]
    pub(super) fn shrink(&mut self) -> usize {
        let grown = self.grown();
        if grown == 0 || self.rstart != self.rend {
            return 0;
        }
        self.rbuf = vec![0; RBUF];
        self.rstart = 0;
        self.rend = 0;
        grown
    }

    /// Forgets the socket and everything buffered (the requests in flight are the caller's to
    /// count first).
    pub(super) fn reset(&mut self) {
        self.sock = None;
        self.rstart = 0;
        self.rend = 0;
        self.held = false;
        self.wbuf.clear();
        self.wstart = 0;
        self.blocked = false;
        self.unsent = 0;
    }
}
