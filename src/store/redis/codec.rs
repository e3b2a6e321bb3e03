//! RESP for the event-driven engine (`store::wire`): the commands the blocking session sends
//! (`HGETALL`/`HGET`, `HSET`, `DEL`+`HSET`(+`ZADD`) for an insert, `DEL`(+`ZREM`)), or with
//! `encoding=string` `GET`/`SET` of the serialized record (what redis-benchmark and memtier
//! send), each reply recognised in place at the front of the buffer once it is whole. Lengths
//! are bounded before they are trusted: a bulk past `max_reply`, an array with more elements
//! than `max_reply` bytes can hold, a negative length other than nil, is `Broken`.

use super::resp::{self, array_head, bulk, Elem, Reply};
use crate::record::{self, Span};
use crate::store::wire::{self, AfterError, Codec, EventTarget, Parsed, Sent};
use crate::store::{ErrorKind, Fields, Queued, Status};
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

const INDEX: &[u8] = super::INDEX;

pub(super) struct RedisTarget {
    /// With Sentinels: the primary they named last (asked again when a connection is lost).
    pub(super) primary: std::sync::Mutex<Option<SocketAddr>>,
    /// The session settings: the engine's connections are opened (AUTH, SELECT) as a
    /// session's are, then taken over.
    pub(super) s: super::server::Settings,
    pub(super) addr: SocketAddr,
}

impl RedisTarget {
    /// Where a new connection goes: the server given, or with Sentinels the primary they name
    /// now (after a failover, another server). A connection is opened at the start and after
    /// one is lost, never per request, so the lock is off the hot path.
    fn primary(&self) -> SocketAddr {
        if self.s.sentinels.is_empty() {
            return self.addr;
        }
        let mut known = self.primary.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = super::replication::ask_sentinels(&self.s.sentinels, self.s.timeout)
            .and_then(|a| crate::store::net::resolve(&a).ok())
        {
            super::server::warn_foreign(&self.s, "a Sentinel", a);
            *known = Some(a);
        }
        known.unwrap_or(self.addr)
    }

    /// A connection to `addr`, opened as a session's is (TLS, AUTH, SELECT), then handed over.
    fn open(&self, addr: SocketAddr) -> Result<wire::Link, String> {
        let c = super::server::connect(&self.s, addr).map_err(|e| e.message)?;
        let (s, tls) = c
            .into_parts()
            .ok_or_else(|| format!("Redis at {addr}: bytes left unread after the handshake"))?;
        let _ = s.set_nodelay(true);
        Ok(match tls {
            Some(t) => wire::Link::Tls(s, t),
            None => wire::Link::Tcp(s),
        })
    }
}

impl EventTarget for RedisTarget {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn wait(&self) -> crate::store::wait::Wait {
        self.s.reply_wait
    }

    fn connect(&self) -> Result<wire::Link, String> {
        self.open(self.primary())
    }

    fn codec(&self) -> Box<dyn Codec> {
        Box::new(RedisCodec {
            index: self.s.index,
            string: self.s.string,
            max_reply: self.s.max_reply,
            encoded: Vec::new(),
            last_error: None,
            demoted: false,
            sentinels: !self.s.sentinels.is_empty(),
            rerouted: false,
            redirect: None,
        })
    }

    fn whole_record_writes(&self) -> bool {
        self.s.string
    }

    fn timeout(&self) -> Duration {
        self.s.timeout
    }

    fn max_reply(&self) -> usize {
        self.s.max_reply
    }

    fn cluster_map(&self, known: &[SocketAddr]) -> Option<Result<wire::ClusterMap, String>> {
        (self.s.cluster > 0).then(|| super::cluster::engine_map(&self.s, known))
    }

    fn connect_to(&self, addr: SocketAddr) -> Result<wire::Link, String> {
        self.open(addr)
    }
}

pub(super) struct RedisCodec {
    pub(super) index: bool,
    pub(super) string: bool,
    pub(super) max_reply: usize,
    pub(super) encoded: Vec<u8>,
    pub(super) last_error: Option<String>,
    /// The latest error said READONLY with Sentinels watching: a demoted primary.
    pub(super) demoted: bool,
    pub(super) sentinels: bool,
    /// The latest error was MOVED, ASK or CLUSTERDOWN.
    pub(super) rerouted: bool,
    /// The latest error was MOVED or ASK (true) to this node.
    pub(super) redirect: Option<(std::net::SocketAddr, bool)>,
}

impl RedisCodec {
    /// The element at `at` (RESP's one reader, `resp::elem`), and where the next one starts;
    /// `Ok(None)`: not whole yet.
    #[inline]
    fn elem(&self, buf: &[u8], at: usize) -> Elem {
        resp::elem(buf, at, self.max_reply)
    }

    #[cold]
    fn error(&mut self, buf: &[u8], r: Range<usize>) -> Status {
        let text = crate::store::net::excerpt(&buf[r]);
        let (kind, fatal) = resp::classify(&text);
        if self.sentinels && text.starts_with("READONLY") {
            self.demoted = true;
        }
        if resp::rerouted(&text) {
            self.rerouted = true;
            self.redirect = resp::redirect_of(&text);
        }
        self.last_error = Some(format!("Redis: {text}"));
        Status::Error { kind, fatal }
    }

    /// `n` replies that are each +OK or an integer (a write's): the first error is the status.
    fn writes(&mut self, buf: &[u8], n: usize) -> Parsed {
        let mut at = 0;
        let mut status = Status::Ok;
        for _ in 0..n {
            match self.elem(buf, at) {
                Ok(None) => return Parsed::More,
                Err(why) => return Parsed::Broken(why),
                Ok(Some((e, next))) => {
                    match e {
                        Reply::Simple(_) | Reply::Int(_) => {}
                        Reply::Error(r) => {
                            if status.is_ok() {
                                status = self.error(buf, r);
                            }
                        }
                        _ => return Parsed::Broken("Redis: a write answered with data"),
                    }
                    at = next;
                }
            }
        }
        Parsed::Reply {
            status,
            used: at,
            bytes: 0,
            view_base: 0,
        }
    }

    /// HGETALL's array of names and values, each a span over `buf`.
    fn hash(&mut self, buf: &[u8], n: usize, mut at: usize, spans: &mut Vec<Span>) -> Parsed {
        if n % 2 == 1 {
            return Parsed::Broken("Redis: HGETALL answered with an odd number of elements");
        }
        spans.clear();
        let mut bytes = 0u64;
        for _ in 0..n / 2 {
            let mut pair = [0..0, 0..0];
            for p in &mut pair {
                match self.elem(buf, at) {
                    Ok(None) => return Parsed::More,
                    Err(why) => return Parsed::Broken(why),
                    Ok(Some((Reply::Bulk(Some(r)), next))) => {
                        *p = r;
                        at = next;
                    }
                    Ok(Some(_)) => return Parsed::Broken("Redis: HGETALL element not a string"),
                }
            }
            bytes += (pair[0].len() + pair[1].len()) as u64;
            spans.push(Span::new(pair[0].clone(), pair[1].clone()));
        }
        let status = if n == 0 { Status::NotFound } else { Status::Ok };
        Parsed::Reply {
            status,
            used: at,
            bytes,
            view_base: 0,
        }
    }

    fn read(&mut self, all: bool, field: &[u8], buf: &[u8], spans: &mut Vec<Span>) -> Parsed {
        let (e, next) = match self.elem(buf, 0) {
            Ok(None) => return Parsed::More,
            Err(why) => return Parsed::Broken(why),
            Ok(Some(x)) => x,
        };
        let reply = |status, bytes, view_base| Parsed::Reply {
            status,
            used: next,
            bytes,
            view_base,
        };
        match e {
            Reply::Error(r) => reply(self.error(buf, r), 0, 0),
            Reply::Bulk(None) => reply(Status::NotFound, 0, 0),
            Reply::Array(n) if all && !self.string => self.hash(buf, n.unwrap_or(0), next, spans),
            Reply::Bulk(Some(r)) if self.string => {
                let want = if all { Fields::All } else { Fields::One(field) };
                match record::index_encoded(&buf[r.clone()], |nm| want.wants(nm), spans) {
                    Ok(()) => reply(
                        Status::Ok,
                        spans.iter().map(|s| s.data_len()).sum(),
                        r.start,
                    ),
                    Err(e) => {
                        self.last_error = Some(format!("stored record cannot be decoded: {}", e.0));
                        reply(Status::error(ErrorKind::Corruption), 0, r.start)
                    }
                }
            }
            // HGET: one value; its span has an empty name (the engine knows the field).
            Reply::Bulk(Some(r)) if !all => {
                spans.clear();
                spans.push(Span::new(r.start..r.start, r.clone()));
                reply(Status::Ok, (field.len() + r.len()) as u64, 0)
            }
            _ => Parsed::Broken("Redis: a read answered with the wrong type"),
        }
    }
}

impl Codec for RedisCodec {
    fn encode(&mut self, op: Queued<'_>, out: &mut Vec<u8>) -> bool {
        match (op, self.string) {
            (Queued::Read(key, _), true) => {
                array_head(out, 2);
                bulk(out, b"GET");
                bulk(out, key);
            }
            (Queued::Read(key, Fields::All), false) => {
                array_head(out, 2);
                bulk(out, b"HGETALL");
                bulk(out, key);
            }
            (Queued::Read(key, Fields::One(f)), false) => {
                array_head(out, 3);
                bulk(out, b"HGET");
                bulk(out, key);
                bulk(out, f);
            }
            (Queued::Insert(key, values) | Queued::Update(key, values), true) => {
                self.encoded.clear();
                values.encode_into(&mut self.encoded);
                array_head(out, 3);
                bulk(out, b"SET");
                bulk(out, key);
                bulk(out, &self.encoded);
            }
            (Queued::Insert(key, values), false) => {
                array_head(out, 2);
                bulk(out, b"DEL");
                bulk(out, key);
                super::RedisSession::hset(out, key, values);
                if self.index {
                    index_cmd(out, b"ZADD", key);
                }
            }
            (Queued::Update(key, values), false) => super::RedisSession::hset(out, key, values),
            (Queued::Delete(key), _) => {
                array_head(out, 2);
                bulk(out, b"DEL");
                bulk(out, key);
                if self.index && !self.string {
                    index_cmd(out, b"ZREM", key);
                }
            }
        }
        true
    }

    fn decode(
        &mut self,
        sent: Sent,
        _key: &[u8],
        field: &[u8],
        buf: &[u8],
        spans: &mut Vec<Span>,
    ) -> Parsed {
        let indexed = usize::from(self.index && !self.string);
        match sent {
            Sent::Read { all } => self.read(all, field, buf, spans),
            Sent::Update => self.writes(buf, 1),
            Sent::Insert if self.string => self.writes(buf, 1),
            Sent::Insert => self.writes(buf, 2 + indexed),
            Sent::Delete => self.writes(buf, 1 + indexed),
        }
    }

    fn last_error(&mut self) -> Option<String> {
        self.last_error.take()
    }

    fn after_error(&mut self) -> AfterError {
        AfterError {
            replace_connection: std::mem::take(&mut self.demoted),
            rerouted: std::mem::take(&mut self.rerouted),
            redirect: self.redirect.take(),
        }
    }

    fn asking(&mut self, out: &mut Vec<u8>) -> bool {
        array_head(out, 1);
        bulk(out, b"ASKING");
        true
    }
}

fn index_cmd(out: &mut Vec<u8>, cmd: &[u8], key: &[u8]) {
    if cmd == b"ZADD" {
        array_head(out, 4);
        bulk(out, cmd);
        bulk(out, INDEX);
        bulk(out, b"0");
    } else {
        array_head(out, 3);
        bulk(out, cmd);
        bulk(out, INDEX);
    }
    bulk(out, key);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec(string: bool) -> RedisCodec {
        RedisCodec {
            index: true,
            string,
            max_reply: 1 << 20,
            encoded: vec![],
            last_error: None,
            demoted: false,
            sentinels: false,
            rerouted: false,
            redirect: None,
        }
    }

    #[test]
    fn hgetall_is_whole_only_at_its_last_byte() {
        let mut c = codec(false);
        let reply = b"*4\r\n$6\r\nfield0\r\n$3\r\nabc\r\n$6\r\nfield1\r\n$0\r\n\r\n+PONG\r\n";
        let whole = reply.len() - 7;
        let mut spans = vec![];
        let read = Sent::Read { all: true };
        for cut in 0..whole {
            assert_eq!(
                c.decode(read, b"k", b"", &reply[..cut], &mut spans),
                Parsed::More,
                "{cut}"
            );
        }
        let p = c.decode(read, b"k", b"", reply, &mut spans);
        assert_eq!(
            p,
            Parsed::Reply {
                status: Status::Ok,
                used: whole,
                bytes: 15,
                view_base: 0
            }
        );
        let v = crate::record::RecordView::new(reply, &spans);
        assert_eq!(v.get(b"field0"), Some(&b"abc"[..]));
        assert_eq!(v.get(b"field1"), Some(&b""[..]));
        assert!(matches!(
            c.decode(read, b"k", b"", b"*0\r\n", &mut spans),
            Parsed::Reply {
                status: Status::NotFound,
                used: 4,
                ..
            }
        ));
    }

    #[test]
    fn writes_count_every_reply_of_the_request() {
        let mut c = codec(false);
        let mut spans = vec![];
        // DEL, HSET, ZADD.
        assert_eq!(
            c.decode(Sent::Insert, b"k", b"", b":0\r\n:10\r\n", &mut spans),
            Parsed::More
        );
        let p = c.decode(
            Sent::Insert,
            b"k",
            b"",
            b":0\r\n-OOM no\r\n:1\r\n",
            &mut spans,
        );
        assert!(
            matches!(
                p,
                Parsed::Reply {
                    status: Status::Error {
                        kind: ErrorKind::Busy,
                        ..
                    },
                    used: 17,
                    ..
                }
            ),
            "{p:?}"
        );
        assert_eq!(c.last_error().as_deref(), Some("Redis: OOM no"));
        let mut s = codec(true);
        assert!(matches!(
            s.decode(Sent::Insert, b"k", b"", b"+OK\r\n", &mut spans),
            Parsed::Reply {
                status: Status::Ok,
                used: 5,
                ..
            }
        ));
    }

    #[test]
    fn hostile_lengths_are_broken() {
        let mut c = codec(true);
        let mut spans = vec![];
        let read = Sent::Read { all: true };
        for r in [
            &b"$99999999999\r\n"[..],
            b"$-2\r\n",
            b"*99999999\r\n",
            b"?\r\n",
            b":1x\r\n",
            b"$3\r\nabcXY",
        ] {
            assert!(
                matches!(c.decode(read, b"k", b"", r, &mut spans), Parsed::Broken(_)),
                "{r:?}"
            );
        }
        assert!(matches!(
            c.decode(Sent::Update, b"k", b"", b"$3\r\nabc\r\n", &mut spans),
            Parsed::Broken(_)
        ));
    }

    #[test]
    fn string_mode_sends_get_and_set_of_the_record() {
        let mut c = codec(true);
        let mut r = crate::record::Record::new();
        r.push(b"field0", b"abc");
        let mut out = vec![];
        c.encode(Queued::Read(b"user1", Fields::All), &mut out);
        c.encode(Queued::Insert(b"user1", &r), &mut out);
        let mut enc = vec![];
        r.encode_into(&mut enc);
        let mut want =
            b"*2\r\n$3\r\nGET\r\n$5\r\nuser1\r\n*3\r\n$3\r\nSET\r\n$5\r\nuser1\r\n$15\r\n".to_vec();
        want.extend_from_slice(&enc);
        want.extend_from_slice(b"\r\n");
        assert_eq!(out, want);
        let mut reply = b"$15\r\n".to_vec();
        reply.extend_from_slice(&enc);
        reply.extend_from_slice(b"\r\n");
        let mut spans = vec![];
        let p = c.decode(Sent::Read { all: true }, b"user1", b"", &reply, &mut spans);
        let Parsed::Reply {
            status: Status::Ok,
            used,
            bytes: 9,
            view_base: 5,
        } = p
        else {
            panic!("{p:?}")
        };
        assert_eq!(used, reply.len());
        assert_eq!(
            crate::record::RecordView::new(&reply[5..], &spans).get(b"field0"),
            Some(&b"abc"[..])
        );
    }

    #[test]
    fn moved_and_ask_name_their_node_and_nothing_else_redirects() {
        let mut c = codec(false);
        let mut spans = vec![];
        let a: std::net::SocketAddr = "127.0.0.1:6381".parse().unwrap();
        for (reply, want) in [
            (&b"-MOVED 3999 127.0.0.1:6381\r\n"[..], Some((a, false))),
            (b"-ASK 3999 127.0.0.1:6381\r\n", Some((a, true))),
            // A name, not an address: not followed (the map is asked again instead).
            (b"-MOVED 3999 redis-1.example:6381\r\n", None),
            (b"-ASK 3999\r\n", None),
            (b"-CLUSTERDOWN The cluster is down\r\n", None),
        ] {
            let p = c.decode(Sent::Update, b"k", b"", reply, &mut spans);
            assert!(matches!(p, Parsed::Reply { status, .. } if status != Status::Ok));
            let after = c.after_error();
            assert_eq!(after.redirect, want, "{}", String::from_utf8_lossy(reply));
            assert!(after.rerouted);
            assert_eq!(c.after_error(), AfterError::default(), "taken");
        }
        let mut out = vec![];
        assert!(c.asking(&mut out));
        assert_eq!(out, b"*1\r\n$6\r\nASKING\r\n");
    }
}
