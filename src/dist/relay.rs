//! Reports that bypass etcd (issue 33, docs/distributed.md "Where reports go"): each agent
//! pushes its interval and phase-end reports to the coordinator over one TCP connection, and
//! etcd keeps only membership, leases, start times and aborts. etcd then holds O(agents ×
//! phases) revisions whatever the run's length: through etcd, every report is a revision that
//! only a compaction frees, and etcd's compaction is etcd-wide (it would drop the history of
//! every other user's keys), so kvmeter never compacts someone else's etcd.
//!
//! The wire format is kvmeter's own because nothing this small exists as a crate: a frame is
//! `key length (u16 BE) · value length (u32 BE) · key · value`, the key relative to the run's
//! prefix (`iv/<p>/<k>/<i>`, `done/<p>/<i>`) and the value sealed exactly as it would be in
//! etcd (`seal`: HMAC over the full key, the run's nonce and the body). The coordinator drops
//! a connection at its first frame that is oversized, malformed or does not verify, and one
//! whose first frame (`hello`, sealed like a report) has not verified within 10 s, so the
//! channel adds nothing an etcd writer could not already do. An agent ends by shutting down
//! its side and waiting for the coordinator to close: every frame it sent was read.
//!
//! The coordinator's side is one thread with mio (the engine's poller, already a dependency):
//! up to 1,024 agents' connections without a thread each. Everything is bounded: connections
//! (agents + a few), a key (256 B), a frame (1 MiB; a report is 2–40 KB), the bytes buffered
//! over all connections (64 MiB), and a frame must arrive within 30 s of its first byte.

use super::seal::Seal;
use mio::net::{TcpListener, TcpStream as MioStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A key longer than this is not kvmeter's.
pub const MAX_KEY: usize = 256;
/// A frame's value larger than this is not a report.
pub const MAX_FRAME: usize = 1 << 20;
/// Bytes held in partial frames over all connections at most.
const MAX_BUFFERED: usize = 64 << 20;
/// A frame begun must be complete within this.
const FRAME_DEADLINE: Duration = Duration::from_secs(30);
const HEADER: usize = 6;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const FINISH_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection must prove it holds the run's key (its `hello` frame) within this.
const HELLO_DEADLINE: Duration = Duration::from_secs(if cfg!(test) { 1 } else { 10 });
/// The first frame of every connection: sealed like a report, forwarded to no one.
const HELLO: &str = "hello";

/// Where the coordinator listens, parsed from a published plan: only an IP-literal socket
/// address with a port (a plan never makes an agent resolve a name).
pub fn parse_published_addr(s: &str) -> Result<SocketAddr, String> {
    let a: SocketAddr = s.parse().map_err(|_| {
        format!(
            "'{}' is not IP:PORT",
            s.chars().take(80).collect::<String>()
        )
    })?;
    if a.port() == 0 || a.ip().is_unspecified() || a.ip().is_multicast() {
        return Err(format!("{a} is not an address to connect to"));
    }
    Ok(a)
}

/// An agent's end of the channel.
pub struct Sender {
    stream: TcpStream,
    seal: Seal,
    prefix: String,
    frame: Vec<u8>,
    /// Bytes written (headers, keys, sealed values).
    pub bytes_sent: u64,
}

impl Sender {
    /// Connects to the coordinator's published address (`addr` checked by
    /// [`parse_published_addr`]), within 3 s.
    pub fn connect(addr: &str, seal: Seal, prefix: String) -> io::Result<Sender> {
        let a = parse_published_addr(addr).map_err(io::Error::other)?;
        let stream = TcpStream::connect_timeout(&a, CONNECT_TIMEOUT)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let mut s = Sender {
            stream,
            seal,
            prefix,
            frame: Vec::with_capacity(8 << 10),
            bytes_sent: 0,
        };
        // The coordinator keeps only connections that authenticate at once (an idle one
        // would hold an agent's slot).
        s.send(HELLO, "")?;
        Ok(s)
    }

    /// Seals `body` under the run's `prefix + key` and sends it as one frame.
    pub fn send(&mut self, key: &str, body: &str) -> io::Result<()> {
        let value = self.seal.seal(&format!("{}{key}", self.prefix), body);
        if key.len() > MAX_KEY || value.len() > MAX_FRAME {
            return Err(io::Error::other(format!(
                "a report of {} bytes under {key} is over the channel's {MAX_FRAME}-byte frame",
                value.len()
            )));
        }
        self.frame.clear();
        self.frame
            .extend_from_slice(&(key.len() as u16).to_be_bytes());
        self.frame
            .extend_from_slice(&(value.len() as u32).to_be_bytes());
        self.frame.extend_from_slice(key.as_bytes());
        self.frame.extend_from_slice(value.as_bytes());
        self.stream.write_all(&self.frame)?;
        self.bytes_sent += self.frame.len() as u64;
        Ok(())
    }

    /// Ends the channel: the coordinator has read every frame once it closes its side
    /// (waited for at most 10 s).
    pub fn finish(self) -> io::Result<()> {
        self.stream.shutdown(Shutdown::Write)?;
        self.stream.set_read_timeout(Some(FINISH_TIMEOUT))?;
        let mut s = &self.stream;
        let mut scratch = [0u8; 64];
        let deadline = Instant::now() + FINISH_TIMEOUT;
        // The coordinator sends nothing; anything it did send is read and ignored.
        while Instant::now() < deadline {
            match s.read(&mut scratch) {
                Ok(0) => return Ok(()),
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the coordinator did not close the channel",
        ))
    }
}

/// What the listening thread hands to the coordinator.
#[derive(Default)]
struct Shared {
    /// Verified (key relative to the prefix, body), in arrival order per connection.
    inbox: Mutex<Vec<(String, String)>>,
    /// (who, why) of each dropped connection, said once by the coordinator.
    rejected: Mutex<Vec<(String, String)>>,
    stop: AtomicBool,
    bytes: AtomicU64,
    frames: AtomicU64,
    connections: AtomicU64,
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
    /// Listens on `addr` for at most `max_connections` agents; every frame must open under
    /// `seal` (the run's) at `prefix + key`, with a key `accept` allows.
    pub fn bind(
        addr: SocketAddr,
        seal: Seal,
        prefix: String,
        max_connections: usize,
        accept: fn(&str) -> bool,
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
            next_token: 2,
            buffered: 0,
            seal,
            prefix,
            max_connections,
            accept,
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
        std::mem::take(&mut *self.shared.inbox.lock().unwrap_or_else(|p| p.into_inner()))
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
    peer: SocketAddr,
    buf: Vec<u8>,
    /// When the first byte of the frame now being read arrived.
    frame_began: Option<Instant>,
    /// When it was accepted, and whether a frame has verified since.
    opened: Instant,
    verified: bool,
}

struct Loop {
    poll: Poll,
    listener: TcpListener,
    conns: HashMap<Token, Conn>,
    next_token: usize,
    buffered: usize,
    seal: Seal,
    prefix: String,
    max_connections: usize,
    accept: fn(&str) -> bool,
    shared: Arc<Shared>,
}

impl Loop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        while !self.shared.stop.load(Ordering::Relaxed) {
            if let Err(e) = self.poll.poll(&mut events, Some(Duration::from_secs(1))) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.reject("the report listener".into(), format!("poll failed: {e}"));
                    return;
                }
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept_all(),
                    WAKE => {}
                    t => self.read(t),
                }
            }
            self.expire_slow_frames();
        }
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
                Ok((mut stream, peer)) => {
                    if self.conns.len() >= self.max_connections {
                        self.reject(
                            peer.ip().to_string(),
                            format!("over {} connections: closed", self.max_connections),
                        );
                        continue;
                    }
                    let token = Token(self.next_token);
                    self.next_token += 1;
                    if self
                        .poll
                        .registry()
                        .register(&mut stream, token, Interest::READABLE)
                        .is_ok()
                    {
                        self.shared.connections.fetch_add(1, Ordering::Relaxed);
                        self.conns.insert(
                            token,
                            Conn {
                                stream,
                                peer,
                                buf: Vec::new(),
                                frame_began: None,
                                opened: Instant::now(),
                                verified: false,
                            },
                        );
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Out of descriptors or the like: the next readiness tries again.
                Err(_) => return,
            }
        }
    }

    fn close(&mut self, t: Token, why: Option<String>) {
        if let Some(mut c) = self.conns.remove(&t) {
            self.buffered -= c.buf.len();
            let _ = self.poll.registry().deregister(&mut c.stream);
            if let Some(why) = why {
                self.reject(c.peer.ip().to_string(), why);
            }
        }
    }

    fn read(&mut self, t: Token) {
        let mut chunk = [0u8; 64 << 10];
        loop {
            let Some(c) = self.conns.get_mut(&t) else {
                return;
            };
            match c.stream.read(&mut chunk) {
                Ok(0) => return self.close(t, None),
                Ok(n) => {
                    if self.buffered + n > MAX_BUFFERED {
                        return self.close(
                            t,
                            Some(format!("over {MAX_BUFFERED} bytes buffered: closed")),
                        );
                    }
                    if c.buf.is_empty() {
                        c.frame_began = Some(Instant::now());
                    }
                    c.buf.extend_from_slice(&chunk[..n]);
                    self.buffered += n;
                    if let Err(why) = self.frames(t) {
                        return self.close(t, Some(why));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return self.close(t, None),
            }
        }
    }

    /// Takes every complete frame off the connection's buffer.
    fn frames(&mut self, t: Token) -> Result<(), String> {
        let c = self.conns.get_mut(&t).expect("caller holds it");
        let mut used = 0;
        let mut got = Vec::new();
        loop {
            let rest = &c.buf[used..];
            if rest.len() < HEADER {
                break;
            }
            let klen = u16::from_be_bytes([rest[0], rest[1]]) as usize;
            let vlen = u32::from_be_bytes([rest[2], rest[3], rest[4], rest[5]]) as usize;
            if klen == 0 || klen > MAX_KEY || vlen > MAX_FRAME {
                return Err(format!(
                    "a frame of key {klen} and value {vlen} bytes (at most {MAX_KEY} and {MAX_FRAME})"
                ));
            }
            if rest.len() < HEADER + klen + vlen {
                break;
            }
            let key = std::str::from_utf8(&rest[HEADER..HEADER + klen])
                .map_err(|_| "a key that is not UTF-8".to_string())?;
            let value = std::str::from_utf8(&rest[HEADER + klen..HEADER + klen + vlen])
                .map_err(|_| format!("{key}: a value that is not UTF-8"))?;
            if key != HELLO && !(self.accept)(key) {
                return Err(format!("{key}: not a report's key"));
            }
            let body = self
                .seal
                .open(&format!("{}{key}", self.prefix), value)
                .map_err(|e| format!("{key}: {e}"))?;
            c.verified = true;
            if key != HELLO {
                got.push((key.to_string(), body.to_string()));
            }
            used += HEADER + klen + vlen;
        }
        c.buf.drain(..used);
        c.frame_began = if c.buf.is_empty() {
            None
        } else if used > 0 {
            Some(Instant::now())
        } else {
            c.frame_began
        };
        self.buffered -= used;
        if !got.is_empty() {
            self.shared
                .frames
                .fetch_add(got.len() as u64, Ordering::Relaxed);
            self.shared.bytes.fetch_add(used as u64, Ordering::Relaxed);
            self.shared
                .inbox
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(got);
        }
        Ok(())
    }

    fn expire_slow_frames(&mut self) {
        let slow: Vec<(Token, String)> = self
            .conns
            .iter()
            .filter_map(|(t, c)| {
                if !c.verified && c.opened.elapsed() > HELLO_DEADLINE {
                    Some(format!(
                        "no authenticated frame within {} s: closed",
                        HELLO_DEADLINE.as_secs()
                    ))
                } else if c.frame_began.is_some_and(|t| t.elapsed() > FRAME_DEADLINE) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn seal() -> Seal {
        let s = Seal::load(None, Some("0123456789abcdef0123".into())).unwrap();
        s.for_run("nonce-of-this-run")
    }

    fn reports(k: &str) -> bool {
        k.starts_with("iv/") || k.starts_with("done/")
    }

    fn inbox() -> Inbox {
        Inbox::bind(
            "127.0.0.1:0".parse().unwrap(),
            seal(),
            "/kvmeter/t/".into(),
            4,
            reports,
        )
        .unwrap()
    }

    fn wait_for(i: &Inbox, n: usize) -> Vec<(String, String)> {
        let mut got = vec![];
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < n && Instant::now() < deadline {
            got.extend(i.take());
            std::thread::sleep(Duration::from_millis(10));
        }
        got
    }

    #[test]
    fn sealed_frames_arrive_in_order_and_finish_waits_for_the_close() {
        let i = inbox();
        let mut s = Sender::connect(&i.addr().to_string(), seal(), "/kvmeter/t/".into()).unwrap();
        for k in 0..50 {
            s.send(&format!("iv/0/{k:06}/0001"), &"x".repeat(k * 100))
                .unwrap();
        }
        s.send("done/0/0001", "{}").unwrap();
        s.finish().unwrap();
        let got = wait_for(&i, 51);
        assert_eq!(got.len(), 51);
        for (k, (key, body)) in got.iter().take(50).enumerate() {
            assert_eq!(key, &format!("iv/0/{k:06}/0001"));
            assert_eq!(body.len(), k * 100);
        }
        assert_eq!(got[50].0, "done/0/0001");
        assert!(i.take_rejected().is_empty());
    }

    #[test]
    fn a_frame_that_does_not_verify_closes_its_connection_only() {
        let i = inbox();
        // Another key, another nonce, a bad key name, an oversized header.
        let other = Seal::load(None, Some("another key of 20 bytes".into()))
            .unwrap()
            .for_run("nonce-of-this-run");
        let mut bad = Sender::connect(&i.addr().to_string(), other, "/kvmeter/t/".into()).unwrap();
        bad.send("iv/0/000000/0002", "forged").unwrap();
        let mut wrong_key =
            Sender::connect(&i.addr().to_string(), seal(), "/kvmeter/t/".into()).unwrap();
        wrong_key.send("plan", "not a report").unwrap();
        let mut raw = TcpStream::connect(i.addr()).unwrap();
        raw.write_all(&[0, 10, 0xff, 0xff, 0xff, 0xff]).unwrap();
        let mut good =
            Sender::connect(&i.addr().to_string(), seal(), "/kvmeter/t/".into()).unwrap();
        good.send("iv/0/000000/0001", "fine").unwrap();
        good.finish().unwrap();
        let got = wait_for(&i, 1);
        assert_eq!(
            got,
            vec![("iv/0/000000/0001".to_string(), "fine".to_string())]
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut why = vec![];
        while why.len() < 3 && Instant::now() < deadline {
            why.extend(i.take_rejected().into_iter().map(|(_, w)| w));
            std::thread::sleep(Duration::from_millis(10));
        }
        why.sort();
        assert_eq!(why.len(), 3, "{why:?}");
        assert!(why.iter().any(|w| w.contains("does not verify")), "{why:?}");
        assert!(
            why.iter().any(|w| w.contains("plan: not a report's key")),
            "{why:?}"
        );
        assert!(
            why.iter().any(|w| w.contains("value 4294967295 bytes")),
            "{why:?}"
        );
    }

    #[test]
    fn a_connection_that_does_not_authenticate_is_closed() {
        let i = inbox();
        let mut idle = TcpStream::connect(i.addr()).unwrap();
        idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        let t = Instant::now();
        assert!(matches!(idle.read(&mut b), Ok(0) | Err(_)));
        assert!(t.elapsed() < Duration::from_secs(5));
        let why: Vec<String> = i.take_rejected().into_iter().map(|(_, w)| w).collect();
        assert!(
            why.iter().any(|w| w.contains("no authenticated frame")),
            "{why:?}"
        );
        // A sender's hello is enough to stay.
        let s = Sender::connect(&i.addr().to_string(), seal(), "/kvmeter/t/".into()).unwrap();
        std::thread::sleep(Duration::from_millis(2500));
        s.finish().unwrap();
        assert!(i.take().is_empty(), "a hello is not a report");
    }

    #[test]
    fn connections_past_the_bound_are_closed() {
        let i = inbox();
        let held: Vec<TcpStream> = (0..4)
            .map(|_| TcpStream::connect(i.addr()).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let mut extra = TcpStream::connect(i.addr()).unwrap();
        extra
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut b = [0u8; 1];
        // Closed by the coordinator: EOF (or a reset), not a timeout.
        match extra.read(&mut b) {
            Ok(0) => {}
            Err(e) => assert_ne!(e.kind(), io::ErrorKind::WouldBlock, "{e}"),
            Ok(_) => panic!("the coordinator sent data"),
        }
        drop(held);
    }

    #[test]
    fn a_published_address_is_an_ip_literal_with_a_port() {
        assert!(parse_published_addr("10.0.0.5:7070").is_ok());
        assert!(parse_published_addr("[::1]:7070").is_ok());
        for bad in [
            "coordinator:7070",
            "10.0.0.5",
            "0.0.0.0:7070",
            "10.0.0.5:0",
            "/tmp/sock",
        ] {
            assert!(parse_published_addr(bad).is_err(), "{bad}");
        }
    }
}
