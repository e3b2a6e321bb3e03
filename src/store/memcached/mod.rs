//! `memcached`: Memcached over TCP with the text or binary protocol, and GETs over UDP as
//! papers/003 measures it (8-byte frame header with request id and sequence numbers; replies
//! that span several datagrams are reassembled; sets and deletes stay on TCP, as there).
//!
//! A record is one value (the encoding of `record.rs`): memcached has no fields, so a field
//! read filters on the client and an update reads, merges and sets, like the embedded stores.
//! Memcached cannot scan: SCAN is reported N/A, never silently skipped.

use super::kv::{KvSession, RawError, RawKv, ScanError, ScanSink};
use super::net::{self, push_num, Conn};
use super::record;
use super::Queued;
use super::*;
use std::net::SocketAddr;
use std::time::Duration;

mod binary;
mod bincodec;
mod codec;
mod pipeline;
mod server;
mod stats;
mod text;
mod udp;

pub use stats::STATS;

use binary::*;
use server::*;
use text::*;
use udp::*;

const OPTIONS: &[OptSpec] = &[
    OptSpec { name: "addr", default: "", help: "host:port of a memcached you run; empty: kvmeter starts one on loopback (managed)" },
    OptSpec { name: "protocol", default: "text", help: "text or binary (TCP)" },
    OptSpec { name: "udp", default: "false", help: "GETs over UDP (papers/003); sets and deletes over TCP. On the event-driven engine (--connections) every request goes over UDP, one datagram each. Managed servers listen on UDP at the TCP port number" },
    OptSpec { name: "connections", default: "1", help: "TCP connections per worker, used in turn" },
    OptSpec { name: "max_clients", default: "auto", help: "managed server: its connection limit (-c) and listen backlog; auto: 4096, or what --connections needs" },
    OptSpec { name: "pipeline", default: "1", help: "operations per round trip (text protocol over TCP): queued reads become one multi-get ('get k1 k2 ...'), inserts are pipelined sets; updates (read-merge-set) and deletes go alone" },
    OptSpec { name: "timeout_ms", default: "5000", help: "deadline of one request: its whole reply within this, or the operation counts as a timeout (a server that drips bytes, or UDP datagrams of other requests, too)" },
    net::MAX_REPLY_OPT,
    super::wait::WAIT_OPT,
    OptSpec { name: "memory_mb", default: "1024", help: "managed server: item memory (-m)" },
    OptSpec { name: "threads", default: "4", help: "managed server: worker threads (-t)" },
    OptSpec { name: "cpus", default: "", help: "managed: CPUs the server is pinned to, e.g. 1, 0-1 or 0/2; recorded in the manifest" },
];

pub static SERVER: ServerSpec = ServerSpec {
    binary: "memcached",
    package: "memcached",
    ports: 1,
    args: server_args,
    ping,
    clear,
    topology: |_| &super::cluster::SINGLE,
    managed_only: &["max_clients", "memory_mb", "threads", "cpus"],
};

pub static KIND: StoreKind = StoreKind {
    name: "memcached",
    summary: "Memcached server: text/binary over TCP, GETs over UDP (managed or addr=)",
    options: OPTIONS,
    capabilities: Capabilities {
        scan: false,
        persistent: false,
        stores_data: true,
    },
    version: || super::managed::binary_version("memcached", &["-V"]),
    probe: || probe_server(&SERVER),
    check: |o| {
        settings(o)?;
        super::managed::check_cpus(o)
    },
    open,
    server: Some(&SERVER),
    engine: Some(&ENGINE),
    scans_refused: super::scans_always_served,
    stats: STATS,
    profile_symbols: &[],
};

/// The event-driven engine serves memcached's text and binary protocols over TCP and the text
/// protocol over UDP; a managed server takes at least 4,096 connections.
static ENGINE: super::EngineSupport = super::EngineSupport {
    refusal: engine_refusal,
    min_clients: 4096,
    sockets_per_connection: super::one_socket,
};

/// A one-line answer (`set`, `delete`), judged by `text.rs`.
fn answered(c: &mut Conn, what: &str, judge: fn(&[u8]) -> Answer) -> Result<(), RawError> {
    let l = c.line()?;
    match judge(c.bytes(l.clone())) {
        Answer::Done => Ok(()),
        Answer::Refused => Err(server_error(what, c.bytes(l))),
        Answer::Garbage(why) => Err(c.protocol(why)),
    }
}

struct McStore {
    addr: SocketAddr,
    s: Settings,
    /// memcached's `stats`, on a connection of its own.
    poller: super::stats::Poller<Conn>,
}

fn open(_dir: &Path, o: &StoreOptions) -> anyhow::Result<Box<dyn Store>> {
    let s = settings(o)?;
    let addr = net::resolve(o.str("addr")).map_err(|e| anyhow::anyhow!("--store-opt addr={e}"))?;
    Ok(Box::new(McStore {
        addr,
        s,
        poller: Default::default(),
    }))
}

impl Store for McStore {
    fn session(&self) -> anyhow::Result<Box<dyn Session>> {
        let mut conns = Vec::with_capacity(self.s.connections);
        for _ in 0..self.s.connections {
            let mut c = Conn::connect(self.addr, self.s.timeout).map_err(|e| {
                anyhow::anyhow!("cannot connect to memcached at {}: {e}", self.addr)
            })?;
            c.set_limit(self.s.max_reply);
            c.set_wait(self.s.wait);
            conns.push(c);
        }
        let udp = if self.s.udp {
            Some(Udp::new(self.addr, self.s.timeout, self.s.max_reply)?)
        } else {
            None
        };
        Ok(Box::new(KvSession::new(McSession {
            conns,
            next: 0,
            protocol: self.s.protocol,
            udp,
            timeout: self.s.timeout,
            max_reply: self.s.max_reply,
            wait: self.s.wait,
            encoded: Vec::new(),
            spans: Vec::new(),
            last_error: None,
            pipeline: self.s.pipeline,
            batch: None,
            queued: Vec::new(),
            qbytes: Vec::new(),
            get_open: false,
            group: Vec::new(),
        })))
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        Ok(())
    }

    fn stats(&self) -> &'static [super::stats::StatSpec] {
        STATS
    }

    fn sample_stats(&self, out: &mut [Option<u64>]) -> Result<(), String> {
        stats::sample(&self.poller, self.addr, self.s.timeout, out)
    }

    fn event_target(&self) -> Option<Box<dyn wire::EventTarget>> {
        let (addr, timeout, max_reply) = (self.addr, self.s.timeout, self.s.max_reply);
        Some(match self.s.protocol {
            Protocol::Text => Box::new(codec::McTarget {
                addr,
                timeout,
                max_reply,
                udp: self.s.udp,
                wait: self.s.wait,
            }),
            Protocol::Binary => Box::new(bincodec::BinTarget {
                addr,
                timeout,
                max_reply,
                wait: self.s.wait,
            }),
        })
    }
}

struct McSession {
    conns: Vec<Conn>,
    next: usize,
    protocol: Protocol,
    udp: Option<Udp>,
    timeout: Duration,
    max_reply: usize,
    wait: super::wait::Wait,
    /// Inserts' encoding, and the fields of each multi-get value, in a pipelined batch.
    encoded: Vec<u8>,
    spans: Vec<record::Span>,
    /// The latest error of a pipelined batch (`flush` hands it on).
    last_error: Option<String>,
    pipeline: usize,
    /// A pipelined batch: its connection, the queued operations, their keys and field names
    /// (ranges in `qbytes`), and whether a multi-get line is still open.
    batch: Option<Result<usize, RawError>>,
    queued: Vec<McQueued>,
    qbytes: Vec<u8>,
    get_open: bool,
    /// Each read's answer in a multi-get, reused.
    group: Vec<(Status, u64)>,
}

#[derive(Clone)]
enum McQueued {
    /// Key and the one field asked (None: all), as ranges in `qbytes`.
    Read(std::ops::Range<usize>, Option<std::ops::Range<usize>>),
    Set,
}

/// Where a read's value is: in a TCP connection's buffer or in the UDP reassembly buffer.
enum Got {
    Missing,
    Tcp(usize, std::ops::Range<usize>),
    Udp(std::ops::Range<usize>),
}

impl McSession {
    /// The next connection in turn, reconnected if a timeout left it unusable.
    #[inline]
    fn conn(&mut self) -> Result<usize, RawError> {
        let i = self.next;
        self.next = if i + 1 == self.conns.len() { 0 } else { i + 1 };
        if self.conns[i].broken {
            let addr = self.conns[i].addr;
            self.conns[i] = Conn::connect(addr, self.timeout).map_err(|e| {
                RawError::new(
                    ErrorKind::Io,
                    true,
                    format!("cannot reconnect to memcached at {addr}: {e}"),
                )
            })?;
            self.conns[i].set_limit(self.max_reply);
            self.conns[i].set_wait(self.wait);
        }
        self.conns[i].begin();
        Ok(i)
    }

    fn fetch(&mut self, key: &[u8]) -> Result<Got, RawError> {
        if let Some(u) = self.udp.as_mut() {
            return Ok(match u.get(key)? {
                Some(r) => Got::Udp(r),
                None => Got::Missing,
            });
        }
        let i = self.conn()?;
        let c = &mut self.conns[i];
        let limit = c.limit();
        match self.protocol {
            Protocol::Text => {
                c.wbuf.extend_from_slice(b"get ");
                c.wbuf.extend_from_slice(key);
                c.wbuf.extend_from_slice(b"\r\n");
                c.send()?;
                let (got, at) = c.read_until(|b| text::get_reply(b, key, limit))?;
                let shift = |r: std::ops::Range<usize>| at.start + r.start..at.start + r.end;
                match got {
                    text::Got::Value(r) => Ok(Got::Tcp(i, shift(r))),
                    text::Got::Missing => Ok(Got::Missing),
                    text::Got::Refused(r) => Err(server_error("get", c.bytes(shift(r)))),
                }
            }
            Protocol::Binary => {
                binary::request(&mut c.wbuf, OP_GETK, key, 0, 0);
                c.wbuf.extend_from_slice(key);
                c.send()?;
                let (h, at) = c.read_until(|b| binary::frame(b, OP_GETK, key, limit))?;
                let value = at.start + h.value_at()..at.end;
                match h.status {
                    0 => Ok(Got::Tcp(i, value)),
                    KEY_ENOENT => Ok(Got::Missing),
                    s => Err(bin_status("get", s, c.bytes(value))),
                }
            }
        }
    }

    fn set(&mut self, key: &[u8], v: &[u8]) -> Result<(), RawError> {
        let i = self.conn()?;
        let c = &mut self.conns[i];
        let limit = c.limit();
        match self.protocol {
            Protocol::Text => {
                c.wbuf.extend_from_slice(b"set ");
                c.wbuf.extend_from_slice(key);
                c.wbuf.extend_from_slice(b" 0 0 ");
                push_num(&mut c.wbuf, v.len());
                c.wbuf.extend_from_slice(b"\r\n");
                c.wbuf.extend_from_slice(v);
                c.wbuf.extend_from_slice(b"\r\n");
                c.send()?;
                answered(c, "set", text::stored)
            }
            Protocol::Binary => {
                binary::request(&mut c.wbuf, OP_SET, key, 8, v.len());
                c.wbuf.extend_from_slice(&[0; 8]); // flags, expiration
                c.wbuf.extend_from_slice(key);
                c.wbuf.extend_from_slice(v);
                c.send()?;
                let (h, at) = c.read_until(|b| binary::frame(b, OP_SET, key, limit))?;
                match h.status {
                    0 => Ok(()),
                    s => Err(bin_status(
                        "set",
                        s,
                        c.bytes(at.start + h.value_at()..at.end),
                    )),
                }
            }
        }
    }

    fn remove(&mut self, key: &[u8]) -> Result<(), RawError> {
        let i = self.conn()?;
        let c = &mut self.conns[i];
        let limit = c.limit();
        match self.protocol {
            Protocol::Text => {
                c.wbuf.extend_from_slice(b"delete ");
                c.wbuf.extend_from_slice(key);
                c.wbuf.extend_from_slice(b"\r\n");
                c.send()?;
                answered(c, "delete", text::deleted)
            }
            Protocol::Binary => {
                binary::request(&mut c.wbuf, OP_DELETE, key, 0, 0);
                c.wbuf.extend_from_slice(key);
                c.send()?;
                let (h, at) = c.read_until(|b| binary::frame(b, OP_DELETE, key, limit))?;
                match h.status {
                    0 | KEY_ENOENT => Ok(()),
                    s => Err(bin_status(
                        "delete",
                        s,
                        c.bytes(at.start + h.value_at()..at.end),
                    )),
                }
            }
        }
    }

    fn value(&self, g: &Got) -> &[u8] {
        match g {
            Got::Missing => &[],
            Got::Tcp(i, r) => self.conns[*i].bytes(r.clone()),
            Got::Udp(r) => &self.udp.as_ref().expect("udp").buf[r.clone()],
        }
    }

    #[cold]
    fn fail(&mut self, e: RawError) -> Status {
        self.last_error = Some(e.message);
        Status::Error {
            kind: e.kind,
            fatal: e.fatal,
        }
    }
}

impl RawKv for McSession {
    #[inline]
    fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>, RawError> {
        match self.fetch(key)? {
            Got::Missing => Ok(None),
            g => Ok(Some(self.value(&g))),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), RawError> {
        self.set(key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), RawError> {
        self.remove(key)
    }

    fn scan(&mut self, _: &[u8], _: usize, _: &mut ScanSink<'_>) -> Result<(), ScanError> {
        Err(ScanError::Store(RawError::new(
            ErrorKind::NotImplemented,
            false,
            "memcached cannot scan",
        )))
    }

    fn pipeline_depth(&self) -> usize {
        self.pipeline
    }

    fn queue(&mut self, op: Queued<'_>) -> bool {
        if self.protocol != Protocol::Text || self.udp.is_some() {
            return false;
        }
        if !matches!(op, Queued::Read(..) | Queued::Insert(..)) {
            return false;
        }
        if self.batch.is_none() {
            self.qbytes.clear();
            self.batch = Some(self.conn());
        }
        let Some(Ok(i)) = self.batch else {
            self.queued.push(McQueued::Set); // answered with the connection error
            return true;
        };
        let w = &mut self.conns[i].wbuf;
        match op {
            Queued::Read(key, fields) => {
                if !self.get_open {
                    w.extend_from_slice(b"get");
                    self.get_open = true;
                }
                w.push(b' ');
                w.extend_from_slice(key);
                let k = self.qbytes.len()..self.qbytes.len() + key.len();
                self.qbytes.extend_from_slice(key);
                let f = match fields {
                    Fields::All => None,
                    Fields::One(f) => {
                        let r = self.qbytes.len()..self.qbytes.len() + f.len();
                        self.qbytes.extend_from_slice(f);
                        Some(r)
                    }
                };
                self.queued.push(McQueued::Read(k, f));
            }
            Queued::Insert(key, values) => {
                if self.get_open {
                    w.extend_from_slice(b"\r\n");
                    self.get_open = false;
                }
                self.encoded.clear();
                values.encode_into(&mut self.encoded);
                w.extend_from_slice(b"set ");
                w.extend_from_slice(key);
                w.extend_from_slice(b" 0 0 ");
                push_num(w, self.encoded.len());
                w.extend_from_slice(b"\r\n");
                w.extend_from_slice(&self.encoded);
                w.extend_from_slice(b"\r\n");
                self.queued.push(McQueued::Set);
            }
            _ => unreachable!("checked above"),
        }
        true
    }

    fn flush(&mut self, done: &mut dyn FnMut(Status, u64)) -> Option<String> {
        let n = self.queued.len();
        let i = match self.batch.take() {
            None => return None,
            Some(Ok(i)) => i,
            Some(Err(e)) => {
                let st = self.fail(e);
                (0..n).for_each(|_| done(st, 0));
                self.queued.clear();
                return self.last_error.take();
            }
        };
        if self.get_open {
            self.conns[i].wbuf.extend_from_slice(b"\r\n");
            self.get_open = false;
        }
        let queued = std::mem::take(&mut self.queued);
        let mut answered = 0;
        let r = self.flush_replies(i, &queued, done, &mut answered);
        if let Err(e) = r {
            let st = Status::Error {
                kind: e.kind,
                fatal: e.fatal,
            };
            self.last_error = Some(e.message);
            // Every operation not answered yet gets the error.
            for _ in answered..n {
                done(st, 0);
            }
        }
        self.queued = queued;
        self.queued.clear();
        self.last_error.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// A fake UDP server (the real one is in tests/stores/conformance.rs): replies out of order,
    /// after a stale datagram of an earlier request, must come back whole.
    #[test]
    fn udp_reply_reassembled_in_sequence_order() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        let value: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let mut reply = b"VALUE k 0 3000\r\n".to_vec();
        reply.extend_from_slice(&value);
        reply.extend_from_slice(b"\r\nEND\r\n");
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let (n, peer) = server.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[8..n], b"get k\r\n");
            assert_eq!(&buf[2..8], &[0, 0, 0, 1, 0, 0], "frame header");
            let id = [buf[0], buf[1]];
            let chunks: Vec<&[u8]> = reply.chunks(1400).collect();
            let total = chunks.len() as u16;
            // A stale datagram with another request id first.
            let mut stale = vec![0xff, 0xff, 0, 0, 0, 1, 0, 0];
            stale.extend_from_slice(b"END\r\n");
            server.send_to(&stale, peer).unwrap();
            for seq in (0..chunks.len()).rev() {
                let mut d = id.to_vec();
                d.extend_from_slice(&(seq as u16).to_be_bytes());
                d.extend_from_slice(&total.to_be_bytes());
                d.extend_from_slice(&[0, 0]);
                d.extend_from_slice(chunks[seq]);
                server.send_to(&d, peer).unwrap();
            }
            // A miss: "END" only.
            let (_, peer) = server.recv_from(&mut buf).unwrap();
            let mut d = vec![buf[0], buf[1], 0, 0, 0, 1, 0, 0];
            d.extend_from_slice(b"END\r\n");
            server.send_to(&d, peer).unwrap();
        });
        let mut u = Udp::new(addr, Duration::from_secs(5), net::DEFAULT_MAX_REPLY).unwrap();
        let r = u.get(b"k").unwrap().expect("found");
        assert_eq!(&u.buf[r], &value[..]);
        assert!(u.get(b"k").unwrap().is_none());
        t.join().unwrap();
    }

    /// A reply whose datagrams keep coming (65,535 announced) ends at max_reply, and a VALUE
    /// line whose length would wrap around is malformed, not a panic.
    #[test]
    fn udp_reassembly_is_bounded() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let (_, peer) = server.recv_from(&mut buf).unwrap();
            let id = [buf[0], buf[1]];
            for seq in 0..200u16 {
                let mut d = id.to_vec();
                d.extend_from_slice(&seq.to_be_bytes());
                // The most datagrams a reply may span (`udp_frame::MAX_PARTS`).
                d.extend_from_slice(&4096u16.to_be_bytes());
                d.extend_from_slice(&[0, 0]);
                d.extend_from_slice(&[b'x'; 1400]);
                if server.send_to(&d, peer).is_err() {
                    return;
                }
            }
            let (_, peer) = server.recv_from(&mut buf).unwrap();
            let mut d = vec![buf[0], buf[1], 0, 0, 0, 1, 0, 0];
            d.extend_from_slice(b"VALUE k 0 18446744073709551615\r\nEND\r\n");
            server.send_to(&d, peer).unwrap();
        });
        let mut u = Udp::new(addr, Duration::from_secs(5), net::MIN_MAX_REPLY).unwrap();
        let e = u.get(b"k").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol, "{}", e.message);
        assert!(e.message.contains("max_reply"), "{}", e.message);
        let e = u.get(b"k").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol, "{}", e.message);
        t.join().unwrap();
    }

    #[test]
    fn value_line_and_binary_header() {
        assert_eq!(value_length(b"VALUE user1 0 1234"), Some(1234));
        assert_eq!(value_length(b"VALUE user1 0 12 99"), Some(12));
        assert_eq!(value_length(b"END"), None);
        let mut h = Vec::new();
        bin_header(&mut h, OP_SET, 5, 8, 100);
        // memcached's protocol_binary.h request header, written out by hand.
        assert_eq!(h.len(), 24);
        assert_eq!(&h[..8], &[0x80, 0x01, 0, 5, 8, 0, 0, 0]);
        assert_eq!(&h[8..12], &113u32.to_be_bytes());
    }
}
