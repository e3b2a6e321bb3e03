//! A network store's requests and replies as bytes, for the event-driven engine
//! (`driver::engine`, issue 30): the engine owns sockets, buffers and time; a `Codec` only
//! writes a request into a buffer and recognises the reply at the front of another, so one
//! connection can carry `--depth` requests in flight and one thread can serve thousands of
//! connections. The blocking sessions (`Session`) stay for worker threads; both encode the same
//! commands (memcached text `get`/`set`/`delete`, binary GETK/SET/DELETE; Redis
//! `HGETALL`/`HGET`/`HSET`/`DEL`/`ZADD`, or `GET`/`SET` of the serialized record with
//! `encoding=string`).
//!
//! Parsing is incremental and bounded: `decode` never waits, looks at no more than the buffer,
//! and says `More` until the whole reply is there; a declared length past `max_reply` or a
//! reply that breaks the protocol is `Broken`, and the engine drops the connection (every
//! request on it counts as a protocol error) and opens another.

use super::{Fields, Queued, Status};
use crate::record::Span;
use std::net::SocketAddr;
use std::time::Duration;

/// What the engine remembers of a request it sent, to parse its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// A read of every field, or of one (its name kept beside the key).
    Read {
        all: bool,
    },
    Update,
    Insert,
    Delete,
}

impl Sent {
    pub fn of(op: &Queued<'_>) -> Sent {
        match op {
            Queued::Read(_, f) => Sent::Read {
                all: matches!(f, Fields::All),
            },
            Queued::Update(..) => Sent::Update,
            Queued::Insert(..) => Sent::Insert,
            Queued::Delete(_) => Sent::Delete,
        }
    }
}

/// The outcome of looking at the front of a connection's read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// The reply is not whole yet.
    More,
    /// A whole reply of `used` bytes: the request's status and the user bytes it returned.
    /// A read's fields are `spans`, relative to `buf[view_base..]` (for the data-integrity
    /// check); `view_base` is meaningless for other requests.
    Reply {
        status: Status,
        used: usize,
        bytes: u64,
        view_base: usize,
    },
    /// The reply breaks the protocol (garbage, a length past the limit, a reply to another
    /// key): the connection cannot be trusted any more.
    Broken(&'static str),
}

/// What an error reply asks of the engine beyond counting it (Redis's replicated and
/// clustered servers; every field is false or `None` for the other stores).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AfterError {
    /// The connection must be replaced: the server will not serve it any more (a primary
    /// Sentinels demoted answers READONLY; a new connection goes to the primary they name).
    pub replace_connection: bool,
    /// The store's routing changed (Redis Cluster's MOVED, ASK or CLUSTERDOWN): the slot map
    /// must be asked for again.
    pub rerouted: bool,
    /// Where the store redirected this one request (`MOVED slot addr`, or `ASK slot addr`:
    /// `true`), so the engine sends it there once, as the worker threads' session does.
    pub redirect: Option<(SocketAddr, bool)>,
}

/// Encodes requests and recognises their replies for one event-loop thread.
pub trait Codec: Send {
    /// Appends `op`'s request to `out`; `false`: this operation is not sent by the engine.
    fn encode(&mut self, op: Queued<'_>, out: &mut Vec<u8>) -> bool;
    /// Looks at the reply to `sent` (for `key`, and `field` when one was read) at the front of
    /// `buf`; a read's fields go to `spans`.
    fn decode(
        &mut self,
        sent: Sent,
        key: &[u8],
        field: &[u8],
        buf: &[u8],
        spans: &mut Vec<Span>,
    ) -> Parsed;
    /// Where the latest read reply's `spans` point when not into the read buffer: the codec's
    /// own decoded copy of the record (etcd's value is base64 inside JSON). `None`: the spans
    /// index the read buffer from `view_base` (memcached, Redis).
    fn decoded(&self) -> Option<&[u8]> {
        None
    }
    /// The server's words for the latest error status (taken: the next call starts afresh).
    fn last_error(&mut self) -> Option<String> {
        None
    }
    /// What the latest error reply asks of the engine beyond counting it (taken: the next
    /// call starts afresh). Stores that route nothing keep the default: nothing.
    fn after_error(&mut self) -> AfterError {
        AfterError::default()
    }
    /// Appends the command that lets the next one through on a node importing its slot (Redis
    /// Cluster's `ASKING`, answered `+OK`); `false`: the store has none.
    fn asking(&mut self, _out: &mut Vec<u8>) -> bool {
        false
    }
}

/// A store that spreads keys over nodes (Redis Cluster): the nodes, and which serves each
/// slot. The engine keeps one per loop and opens, for each of its connections, one socket per
/// node (memtier's cluster mode), so every request goes straight to its key's node.
#[derive(Clone, Debug)]
pub struct ClusterMap {
    pub nodes: Vec<SocketAddr>,
    /// Slot → index in `nodes`.
    pub slots: Vec<u16>,
    /// The slot of a key.
    pub slot_of: fn(&[u8]) -> usize,
    /// The shard (`master:i` when the cluster was made) of a slot, given the masters: the
    /// recovery timeline's affected/rest split.
    pub shard_of: fn(usize, usize) -> u16,
    pub masters: usize,
}

/// A connection a store opened for the engine, blocking, its handshake done (TLS, AUTH,
/// SELECT): the engine makes it non-blocking and takes it over.
pub enum Link {
    Tcp(std::net::TcpStream),
    /// TLS over TCP: the socket and rustls's state of the session on it.
    Tls(std::net::TcpStream, Box<rustls::ClientConnection>),
    /// memcached's UDP (a connected socket): the codec writes each request after a 4-byte
    /// little-endian length (`UDP_FRAMED`), and the engine sends it as one datagram with the
    /// frame header and reads the replies back in request order.
    Udp(std::net::UdpSocket),
}

/// Bytes before each request a codec writes for a `Link::Udp`: its length.
pub const UDP_FRAMED: usize = 4;

/// Where the engine connects, and how it talks there.
pub trait EventTarget: Send + Sync {
    fn addr(&self) -> SocketAddr;
    /// A new connection, ready for requests (authenticated, database chosen), made blocking
    /// within the request timeout; the engine makes it non-blocking.
    fn connect(&self) -> Result<Link, String>;
    fn codec(&self) -> Box<dyn Codec>;
    /// Whether the store keeps a record as one value (a partial update is then a read, a merge
    /// and a write of the whole record).
    fn whole_record_writes(&self) -> bool;
    /// The deadline of one request (`timeout_ms`): a reply not whole by then is a timeout and
    /// the connection is replaced.
    fn timeout(&self) -> Duration;
    /// The most bytes one reply may hold (`max_reply`).
    fn max_reply(&self) -> usize;
    /// How the engine waits when no socket is ready (`--store-opt reply_wait`): with `Spin`, epoll
    /// is polled (yielding the CPU between polls) up to `wait::SPIN_BUDGET` before it sleeps.
    fn wait(&self) -> super::wait::Wait {
        super::wait::Wait::Block
    }
    /// A cluster's map, asked of its nodes now (blocking; `known`: nodes to ask first). `None`:
    /// not a cluster.
    fn cluster_map(&self, _known: &[SocketAddr]) -> Option<Result<ClusterMap, String>> {
        None
    }
    /// A new connection to node `addr` of a cluster, ready for requests.
    fn connect_to(&self, _addr: SocketAddr) -> Result<Link, String> {
        self.connect()
    }
}

/// Connects to `addr` within `timeout`, with Nagle off (requests are written whole) and the
/// request timeout as the blocking deadline of what `connect` does next.
pub fn connect_tcp(addr: SocketAddr, timeout: Duration) -> Result<std::net::TcpStream, String> {
    let s = std::net::TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    Ok(s)
}

/// The position of the first `\r\n` in `b`, if any.
#[inline]
pub fn crlf(b: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = super::net::memchr(b'\r', &b[from..]) {
        let at = from + p;
        match b.get(at + 1) {
            Some(b'\n') => return Some(at),
            Some(_) => from = at + 1,
            None => return None,
        }
    }
    None
}

/// A line at the front of `buf` longer than this without its end is garbage (no reply line of
/// either protocol comes near it).
pub const MAX_LINE: usize = 1024;

/// The first line of `buf` (without `\r\n`) and the bytes it takes, `Ok(None)` when it is not
/// whole yet, `Err` when it is too long to be a reply line.
#[inline]
pub fn line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, &'static str> {
    match crlf(&buf[..buf.len().min(MAX_LINE + 2)]) {
        Some(p) => Ok(Some((&buf[..p], p + 2))),
        None if buf.len() > MAX_LINE => Err("a reply line longer than 1024 bytes"),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_found_whole_or_not_at_all() {
        assert_eq!(line(b"END\r\nrest"), Ok(Some((&b"END"[..], 5))));
        assert_eq!(line(b"EN"), Ok(None));
        assert_eq!(line(b"END\r"), Ok(None));
        assert_eq!(line(b"a\rb\r\n"), Ok(Some((&b"a\rb"[..], 5))));
        assert!(line(&[b'x'; 2000]).is_err());
    }
}
