//! The coordinator's end of the report channel (relay.rs has the protocol): one thread with
//! mio (the engine's poller, already a dependency) serves up to 1,024 agents' connections
//! without a thread each, and hands the reports that verify to the coordinator.
//!
//! What it stops (docs/security.md "The report channel"): a frame that is oversized,
//! malformed, under another agent's key, or does not verify at its place on its connection
//! closes that connection; a connection without its hello 5 s after it opened is closed, and
//! when agents + 64 such connections wait the oldest gives its place to the next, so idle
//! connections never lock an agent out; an agent holds one authenticated connection (a new one replaces
//! it); connections are read in turn, 64 KiB each per round, so none starves the others.
//!
//! Bounded, in bytes: a frame's value (1 MiB; 512 B before the hello), partial frames over all
//! connections (64 MiB), and each agent's verified reports waiting for the coordinator (8 MiB:
//! past that its connection is not read until the coordinator takes them, and TCP holds the
//! agent back). A frame must arrive within 30 s of its first byte. In TLS (tls.rs) each
//! connection adds rustls's state, tens of KiB: at most agents + 64 connections are open.

use super::tls::{ServerSide, ServerTls};
use super::{
    encode_frame, hello_agent, parse_frame, CHALLENGE, HELLO_V1, MAX_FRAME, MAX_HELLO_FRAME,
    PROTOCOL, WELCOME,
};
use crate::distributed::seal::{fresh_nonce, Seal};
use mio::net::{TcpListener, TcpStream as MioStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes held in partial frames over all connections at most.
const MAX_BUFFERED: usize = 64 << 20;
/// An agent's verified reports not yet taken by the coordinator, in bytes, at most.
pub const MAX_QUEUED_PER_AGENT: usize = 8 << 20;
/// Connections that have not said their hello yet, beyond one per agent, at most (past that
/// the oldest goes for a new one). One per agent lets every agent of a run connect at once.
pub const SPARE_PENDING: usize = 64;
/// Bytes read from one connection per round.
const READ_CHUNK: usize = 64 << 10;
/// A frame begun must be complete within this.
const FRAME_DEADLINE: Duration = Duration::from_secs(30);
/// A connection must say its hello within this (an agent answers the challenge at once).
const HELLO_DEADLINE: Duration = Duration::from_secs(if cfg!(test) { 1 } else { 5 });

/// Verified reports waiting for the coordinator, and their bytes by agent.
#[derive(Default)]
struct Queue {
    frames: Vec<(String, String)>,
    bytes: HashMap<usize, usize>,
}

/// What the listening thread hands to the coordinator.
#[derive(Default)]
struct Shared {
    /// Verified (key relative to the prefix, body), in arrival order per connection.
    inbox: Mutex<Queue>,
    /// (who, why) of each dropped connection, said once by the coordinator.
    rejected: Mutex<Vec<(String, String)>>,
    stop: AtomicBool,
    bytes: AtomicU64,
    frames: AtomicU64,
    connections: AtomicU64,
}

impl Shared {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.inbox.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The coordinator's end: a listening thread.
pub struct Inbox {
    addr: SocketAddr,
    shared: Arc<Shared>,
    waker: Arc<Waker>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const LISTENER: Token = Token(0);
const WAKE: Token = Token(1);

impl Inbox {
    /// Listens on `addr` for the `agents` agents of a run, in TLS when `tls` is given: every
    /// frame must open under `seal` (the run's) at `prefix + key`, with a key for which
    /// `report_agent` names the agent whose connection carries it.
    pub fn bind(
        addr: SocketAddr,
        tls: Option<ServerTls>,
        seal: Seal,
        prefix: String,
        agents: usize,
        report_agent: fn(&str) -> Option<usize>,
    ) -> io::Result<Inbox> {
        let mut listener = TcpListener::bind(addr)?;
        let bound = listener.local_addr()?;
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let shared = Arc::new(Shared::default());
        let mut l = Loop {
            poll,
            listener,
            conns: HashMap::new(),
            by_agent: HashMap::new(),
            pending: VecDeque::new(),
            n_pending: 0,
            max_pending: agents + SPARE_PENDING,
            ready: BTreeSet::new(),
            chunk: vec![0u8; READ_CHUNK],
            next_token: 2,
            buffered: 0,
            tls,
            seal,
            prefix,
            agents,
            report_agent,
            shared: shared.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("kvm-dist-inbox".into())
            .spawn(move || l.run())?;
        Ok(Inbox {
            addr: bound,
            shared,
            waker,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The verified reports received since the last call.
    pub fn take(&self) -> Vec<(String, String)> {
        let mut q = self.shared.queue();
        q.bytes.clear();
        std::mem::take(&mut q.frames)
    }

    /// Bytes of verified reports waiting to be taken.
    pub fn queued_bytes(&self) -> usize {
        self.shared.queue().bytes.values().sum()
    }

    /// Connections dropped since the last call: who and why.
    pub fn take_rejected(&self) -> Vec<(String, String)> {
        std::mem::take(
            &mut *self
                .shared
                .rejected
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    /// (frames, bytes, connections accepted) so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.shared.frames.load(Ordering::Relaxed),
            self.shared.bytes.load(Ordering::Relaxed),
            self.shared.connections.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Conn {
    stream: MioStream,
    /// rustls's state when the channel is TLS.
    tls: Option<ServerSide>,
    peer: SocketAddr,
    buf: Vec<u8>,
    /// When the first byte of the frame now being read arrived.
    frame_began: Option<Instant>,
    opened: Instant,
    /// Sent on accept; every frame of this connection is sealed with it.
    challenge: String,
    /// The agent whose hello verified here.
    agent: Option<usize>,
    /// Place of the last frame verified (the hello is 0).
    seq: u64,
}

struct Loop {
    poll: Poll,
    listener: TcpListener,
    conns: HashMap<Token, Conn>,
    /// Each agent's one authenticated connection.
    by_agent: HashMap<usize, Token>,
    /// Connections without a hello, oldest first (closed or authenticated ones are skipped).
    pending: VecDeque<Token>,
    n_pending: usize,
    max_pending: usize,
    /// Connections that may have more to read.
    ready: BTreeSet<Token>,
    /// The read buffer, reused.
    chunk: Vec<u8>,
    next_token: usize,
    buffered: usize,
    tls: Option<ServerTls>,
    seal: Seal,
    prefix: String,
    agents: usize,
    report_agent: fn(&str) -> Option<usize>,
    shared: Arc<Shared>,
}

impl Loop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        while !self.shared.stop.load(Ordering::Relaxed) {
            let wait = if self.ready.is_empty() {
                Duration::from_secs(1)
            } else if self.ready.iter().any(|t| !self.paused(*t)) {
                Duration::ZERO
            } else {
                Duration::from_millis(10)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.reject("the report listener".into(), format!("poll failed: {e}"));
                    return;
                }
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept_all(),
                    WAKE => {}
                    t => {
                        self.ready.insert(t);
                    }
                }
            }
            // One round: each connection with data gets one read, in turn.
            let round: Vec<Token> = self.ready.iter().copied().collect();
            for t in round {
                if !self.paused(t) && !self.read_once(t) {
                    self.ready.remove(&t);
                }
            }
            self.expire();
        }
    }

    /// Whether the connection's agent has as much waiting for the coordinator as it may.
    fn paused(&self, t: Token) -> bool {
        self.conns.get(&t).and_then(|c| c.agent).is_some_and(|a| {
            self.shared.queue().bytes.get(&a).copied().unwrap_or(0) >= MAX_QUEUED_PER_AGENT
        })
    }

    fn reject(&self, who: String, why: String) {
        let mut r = self
            .shared
            .rejected
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if r.len() < 1000 {
            r.push((who, why));
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Out of descriptors or the like: the next readiness tries again.
                Err(_) => return,
            }
        }
    }

    /// Sends a new connection its challenge; the oldest connection still without a hello
    /// makes room when `max_pending` wait.
    fn admit(&mut self, mut stream: MioStream, peer: SocketAddr) {
        if self.n_pending >= self.max_pending {
            while let Some(old) = self.pending.pop_front() {
                if self.conns.get(&old).is_some_and(|c| c.agent.is_none()) {
                    self.close(
                        old,
                        Some(format!(
                            "the oldest of {} connections without a hello: closed for a newer one",
                            self.max_pending
                        )),
                    );
                    break;
                }
            }
        }
        let challenge = fresh_nonce();
        let mut frame = Vec::with_capacity(64);
        encode_frame(&mut frame, CHALLENGE, &challenge);
        let token = Token(self.next_token);
        self.next_token += 1;
        let (tls, interest) = match &self.tls {
            // The challenge waits in rustls until the handshake is done; what the socket
            // does not take at once goes when it is writable again.
            Some(config) => match ServerSide::new(config) {
                Ok(mut side) => {
                    if side.write(&mut stream, &frame).is_err() {
                        return;
                    }
                    (Some(side), Interest::READABLE | Interest::WRITABLE)
                }
                Err(_) => return,
            },
            // A new socket's send buffer is empty: the challenge goes at once or not at all.
            None => {
                if !matches!(stream.write(&frame), Ok(n) if n == frame.len()) {
                    return;
                }
                (None, Interest::READABLE)
            }
        };
        if self
            .poll
            .registry()
            .register(&mut stream, token, interest)
            .is_err()
        {
            return;
        }
        self.shared.connections.fetch_add(1, Ordering::Relaxed);
        self.conns.insert(
            token,
            Conn {
                stream,
                tls,
                peer,
                buf: Vec::new(),
                frame_began: None,
                opened: Instant::now(),
                challenge,
                agent: None,
                seq: 0,
            },
        );
        self.n_pending += 1;
        self.pending.push_back(token);
        if self.pending.len() > 4 * self.max_pending {
            let conns = &self.conns;
            self.pending
                .retain(|t| conns.get(t).is_some_and(|c| c.agent.is_none()));
        }
    }

    fn close(&mut self, t: Token, why: Option<String>) {
        if let Some(mut c) = self.conns.remove(&t) {
            self.buffered -= c.buf.len();
            self.ready.remove(&t);
            match c.agent {
                None => self.n_pending -= 1,
                Some(a) => {
                    if self.by_agent.get(&a) == Some(&t) {
                        self.by_agent.remove(&a);
                    }
                }
            }
            let _ = self.poll.registry().deregister(&mut c.stream);
            if let Some(why) = why {
                self.reject(c.peer.ip().to_string(), why);
            }
        }
    }

    /// Reads once from a connection; whether it may have more.
    fn read_once(&mut self, t: Token) -> bool {
        let mut chunk = std::mem::take(&mut self.chunk);
        let more = self.read_into(t, &mut chunk);
        self.chunk = chunk;
        more
    }

    fn read_into(&mut self, t: Token, chunk: &mut [u8]) -> bool {
        let Some(c) = self.conns.get_mut(&t) else {
            return false;
        };
        let got = match &mut c.tls {
            Some(side) => side.read(&mut c.stream, chunk),
            None => c.stream.read(chunk),
        };
        match got {
            Ok(0) => {
                self.close(t, None);
                false
            }
            Ok(n) => {
                if self.buffered + n > MAX_BUFFERED {
                    self.close(
                        t,
                        Some(format!("over {MAX_BUFFERED} bytes buffered: closed")),
                    );
                    return false;
                }
                if c.buf.is_empty() {
                    c.frame_began = Some(Instant::now());
                }
                c.buf.extend_from_slice(&chunk[..n]);
                self.buffered += n;
                match self.frames(t) {
                    Ok(()) => true,
                    Err(why) => {
                        self.close(t, Some(why));
                        false
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => true,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                self.close(t, Some(e.to_string()));
                false
            }
            Err(_) => {
                self.close(t, None);
                false
            }
        }
    }

    /// The agent a connection's first frame, its hello, proves it is.
    fn hello(&self, c: &Conn, key: &str, value: &str) -> Result<usize, String> {
        if key == HELLO_V1 {
            return Err(format!(
                "a hello of report channel protocol 1 (an older kvmeter agent; this coordinator speaks protocol {PROTOCOL}: run the same kvmeter on every host): closed, that agent posts through etcd"
            ));
        }
        let Some(agent) = hello_agent(key) else {
            return Err(format!("{key}: expected the hello"));
        };
        if agent >= self.agents {
            return Err(format!("{key}: this run has {} agents", self.agents));
        }
        let body = self
            .seal
            .open_frame(&format!("{}{key}", self.prefix), &c.challenge, 0, value)
            .map_err(|e| format!("{key}: {e} (a hello is good for one connection)"))?;
        if !body.is_empty() {
            return Err(format!("{key}: a hello with a body"));
        }
        Ok(agent)
    }

    /// Takes every complete frame off the connection's buffer; the reports that verified
    /// before a bad frame are kept, and the bad frame's reason is returned.
    fn frames(&mut self, t: Token) -> Result<(), String> {
        let c = self.conns.get(&t).expect("caller holds it");
        let (mut agent, mut seq) = (c.agent, c.seq);
        let mut used = 0;
        let mut got = Vec::new();
        let mut welcomed = false;
        let failed = loop {
            let max = if agent.is_some() {
                MAX_FRAME
            } else {
                MAX_HELLO_FRAME
            };
            let (key, value, len) = match parse_frame(&c.buf[used..], max) {
                Ok(Some(f)) => f,
                Ok(None) => break None,
                Err(e) => break Some(e),
            };
            match agent {
                None => match self.hello(c, key, value) {
                    Ok(a) => {
                        agent = Some(a);
                        welcomed = true;
                    }
                    Err(e) => break Some(e),
                },
                Some(a) => match self.report(c, a, seq + 1, key, value) {
                    Ok(body) => {
                        seq += 1;
                        got.push((key.to_string(), body.to_string()));
                    }
                    Err(e) => break Some(e),
                },
            }
            used += len;
        };
        if let (false, Some(a)) = (got.is_empty(), agent) {
            let bytes: usize = got.iter().map(|(k, v)| k.len() + v.len()).sum();
            self.shared
                .frames
                .fetch_add(got.len() as u64, Ordering::Relaxed);
            self.shared.bytes.fetch_add(used as u64, Ordering::Relaxed);
            let mut q = self.shared.queue();
            *q.bytes.entry(a).or_default() += bytes;
            q.frames.extend(got);
        }
        if let Some(why) = failed {
            return Err(why);
        }
        if welcomed {
            self.welcome(t, agent.expect("set with welcomed"))?;
        }
        let c = self.conns.get_mut(&t).expect("caller holds it");
        c.seq = seq;
        c.buf.drain(..used);
        c.frame_began = if c.buf.is_empty() {
            None
        } else if used > 0 {
            Some(Instant::now())
        } else {
            c.frame_began
        };
        self.buffered -= used;
        Ok(())
    }

    /// The body of report number `seq` of agent `a`'s connection, if it verifies there.
    fn report<'v>(
        &self,
        c: &Conn,
        a: usize,
        seq: u64,
        key: &str,
        value: &'v str,
    ) -> Result<&'v str, String> {
        if (self.report_agent)(key) != Some(a) {
            return Err(format!(
                "{key}: not a report of agent {a}, whose connection this is"
            ));
        }
        self.seal
            .open_frame(&format!("{}{key}", self.prefix), &c.challenge, seq, value)
            .map_err(|e| {
                format!("{key}: {e} (a frame replayed, repeated or out of its place does not)")
            })
    }

    /// Makes the connection agent `a`'s (closing any it held before) and says so to it.
    fn welcome(&mut self, t: Token, a: usize) -> Result<(), String> {
        if let Some(old) = self.by_agent.insert(a, t) {
            self.close(
                old,
                Some(format!("agent {a}: replaced by its newer connection")),
            );
        }
        self.n_pending -= 1;
        let c = self.conns.get_mut(&t).expect("caller holds it");
        c.agent = Some(a);
        let mut frame = Vec::with_capacity(16);
        encode_frame(&mut frame, WELCOME, "");
        let sent = match &mut c.tls {
            Some(side) => side.write(&mut c.stream, &frame).is_ok(),
            None => matches!(c.stream.write(&frame), Ok(n) if n == frame.len()),
        };
        if sent {
            Ok(())
        } else {
            Err(format!("agent {a}: its welcome could not be sent"))
        }
    }

    fn expire(&mut self) {
        let slow: Vec<(Token, String)> = self
            .conns
            .iter()
            .filter_map(|(t, c)| {
                if c.agent.is_none() && c.opened.elapsed() > HELLO_DEADLINE {
                    Some(format!(
                        "no hello within {} s: closed",
                        HELLO_DEADLINE.as_secs()
                    ))
                } else if c.frame_began.is_some_and(|t| t.elapsed() > FRAME_DEADLINE)
                    && !self.paused(*t)
                {
                    Some(format!(
                        "a frame not complete {} s after its first byte: closed",
                        FRAME_DEADLINE.as_secs()
                    ))
                } else {
                    None
                }
                .map(|why| (*t, why))
            })
            .collect();
        for (t, why) in slow {
            self.close(t, Some(why));
        }
    }
}
