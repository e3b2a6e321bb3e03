//! etcd for the event-driven engine (`store::wire`, issue 30): each engine connection is a
//! keep-alive HTTP/1.1 connection to etcd's JSON gateway with up to `--depth` requests
//! pipelined. etcd's Go `net/http` server reads a connection's requests one after another and
//! answers them in order (checked against etcd 3.4: puts, ranges and error replies pipelined on
//! one connection come back in the order sent), so the engine's in-order reply matching holds;
//! the depth overlaps the network and the client's work, not etcd's handling of one connection.
//!
//! The requests are the blocking session's (`mod.rs`): `range`, `put` of the whole encoded
//! record, `deleterange`, keys and values in base64; a partial update is a read, a merge and a
//! put (`whole_record_writes`). A read's value is base64 inside JSON, so the codec decodes it
//! into its own buffer and the record's spans index that (`Codec::decoded`), not the read
//! buffer. Every buffer is the codec's own and reused: nothing is allocated per request once
//! they have grown.
//!
//! Authentication: the target's `connect` takes the shared token (or authenticates, once for
//! all connections: `Http::refresh`) and publishes it; the codecs pick a new token up by a
//! generation counter (one atomic load per request, the lock only when it changed). A token
//! etcd refuses (expired, or older than a change to users or roles) breaks the connection; the
//! engine replaces it, and that connect authenticates again. Clusters: connections go to the
//! leader (found when the store opened, looked for again when it stops answering). TLS: the
//! connection is opened as the blocking client's (rustls, the handshake done) and handed to the
//! engine as a `Link::Tls`.

use super::auth::Access;
use super::frame;
use super::http::{http_error, leader_endpoint, token_refused, Http};
use super::json::{b64_field, find, is_range_reply, json_str, B64};
use crate::record::{self, Span};
use crate::store::net::push_num;
use crate::store::wire::{Codec, EventTarget, Link, Parsed, Sent};
use crate::store::{ErrorKind, Fields, Queued, Status};
use base64::Engine;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The token the engine's connections send, shared by the target and its codecs.
#[derive(Default)]
pub(super) struct Tokens {
    /// Raised each time `current` changes; a codec compares it with the one it copied.
    generation: AtomicU64,
    current: Mutex<Vec<u8>>,
    /// When `current` was published.
    published: Mutex<Option<Instant>>,
    /// The latest token etcd refused: the next connect authenticates rather than take it.
    refused: Mutex<Vec<u8>>,
}

/// A token published this recently is taken, not replaced, by a connection that saw one
/// refused: requests encoded before it was published are still in flight on other
/// connections, and a codec cannot tell which token such a request carried. Without this,
/// each of them would authenticate again (etcd hashes the password with bcrypt each time).
const FRESH_TOKEN: Duration = Duration::from_secs(1);

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Tokens {
    fn publish(&self, token: &[u8]) {
        let mut cur = locked(&self.current);
        if *cur != token {
            cur.clear();
            cur.extend_from_slice(token);
            *locked(&self.published) = Some(Instant::now());
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    /// The token a new connection holds before `Http::refresh`: the refused one (refresh then
    /// authenticates if the shared token is that one), or none when the shared token is fresh
    /// (refresh takes it).
    fn held_by_new_connection(&self) -> Vec<u8> {
        if locked(&self.published).is_some_and(|t| t.elapsed() < FRESH_TOKEN) {
            return Vec::new();
        }
        locked(&self.refused).clone()
    }
}

pub(super) struct EtcdTarget {
    /// Every member's client address.
    pub(super) endpoints: Arc<[SocketAddr]>,
    /// The member connections go to: the leader, as last found.
    pub(super) leader: AtomicUsize,
    pub(super) timeout: Duration,
    pub(super) max_reply: usize,
    pub(super) access: Arc<Access>,
    pub(super) tokens: Arc<Tokens>,
}

impl EtcdTarget {
    /// A connection to the leader; when it does not answer, to the leader found anew, else to
    /// each member in turn (as the blocking client's reconnect).
    fn open(&self) -> Result<Http, String> {
        let at = self.leader.load(Ordering::Relaxed);
        let first = Http::connect(self.endpoints[at], self.timeout, &self.access);
        let e = match first {
            Ok(h) => return Ok(h),
            Err(e) => e.message,
        };
        let n = self.endpoints.len();
        if n == 1 {
            return Err(e);
        }
        let from =
            leader_endpoint(&self.endpoints, self.timeout, &self.access).unwrap_or((at + 1) % n);
        let mut last = e;
        for k in 0..n {
            let i = (from + k) % n;
            match Http::connect(self.endpoints[i], self.timeout, &self.access) {
                Ok(h) => {
                    self.leader.store(i, Ordering::Relaxed);
                    return Ok(h);
                }
                Err(e) => last = e.message,
            }
        }
        Err(last)
    }
}

impl EventTarget for EtcdTarget {
    fn addr(&self) -> SocketAddr {
        self.endpoints[self.leader.load(Ordering::Relaxed)]
    }

    fn connect(&self) -> Result<Link, String> {
        let mut h = self.open()?;
        if self.access.user().is_some() {
            // `refresh` takes the shared token unless it is the one held, else authenticates
            // (once for every connection that finds it refused).
            h.token = self.tokens.held_by_new_connection();
            h.refresh().map_err(|e| self.access.explain(&e.message))?;
            self.tokens.publish(&h.token);
        }
        // Nothing of the authentication's reply is left unread (it had a Content-Length).
        match h.conn.into_parts() {
            Some((s, None)) => Ok(Link::Tcp(s)),
            Some((s, Some(tls))) => Ok(Link::Tls(s, tls)),
            None => Err("etcd: bytes left unread after authenticating".into()),
        }
    }

    fn codec(&self) -> Box<dyn Codec> {
        Box::new(EtcdCodec::new(self.max_reply, self.tokens.clone()))
    }

    fn whole_record_writes(&self) -> bool {
        true
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn max_reply(&self) -> usize {
        self.max_reply
    }
}

pub(super) struct EtcdCodec {
    max_reply: usize,
    /// The request's JSON, then the record's encoding (a put's value before base64).
    json: Vec<u8>,
    encoded: Vec<u8>,
    /// A chunked reply's body, joined.
    joined: Vec<u8>,
    /// The latest read's value, decoded from base64 (what `decoded` returns).
    value: Vec<u8>,
    /// The key asked for, in base64 (to match the reply's).
    key64: Vec<u8>,
    tokens: Arc<Tokens>,
    token: Vec<u8>,
    generation: u64,
    last_error: Option<String>,
}

impl EtcdCodec {
    pub(super) fn new(max_reply: usize, tokens: Arc<Tokens>) -> EtcdCodec {
        EtcdCodec {
            max_reply,
            json: Vec::new(),
            encoded: Vec::new(),
            joined: Vec::new(),
            value: Vec::new(),
            key64: Vec::new(),
            tokens,
            token: Vec::new(),
            generation: 0,
            last_error: None,
        }
    }

    /// Copies the shared token when another connect published a new one.
    #[cold]
    fn take_token(&mut self, generation: u64) {
        let cur = self
            .tokens
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.token.clone_from(&cur);
        self.generation = generation;
    }

    /// The request line, headers and `self.json` as its body.
    fn request(&mut self, path: &[u8], out: &mut Vec<u8>) {
        let g = self.tokens.generation.load(Ordering::Acquire);
        if g != self.generation {
            self.take_token(g);
        }
        out.extend_from_slice(b"POST ");
        out.extend_from_slice(path);
        out.extend_from_slice(b" HTTP/1.1\r\nHost: etcd\r\nContent-Type: application/json\r\n");
        if !self.token.is_empty() {
            out.extend_from_slice(b"Authorization: ");
            out.extend_from_slice(&self.token);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"Content-Length: ");
        push_num(out, self.json.len());
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(&self.json);
    }

    /// A reply other than 200: etcd's `{"error":...,"code":N}`, mapped as the blocking client
    /// maps it; a refused token breaks the connection (its replacement authenticates again).
    #[cold]
    fn refusal(&mut self, status: u16, body: &[u8], used: usize) -> Parsed {
        let e = http_error(status as usize, body);
        if token_refused(&e.message) {
            let mut r = self
                .tokens
                .refused
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            r.clone_from(&self.token);
            return Parsed::Broken(
                "etcd: the auth token was refused (expired, or older than a change to users or roles); the connection's replacement authenticates again",
            );
        }
        self.last_error = Some(e.message);
        reply(Status::error(e.kind), used, 0)
    }

    /// A range's reply: the record of the key asked for, or none.
    fn read(
        &mut self,
        all: bool,
        key: &[u8],
        field: &[u8],
        body: &[u8],
        used: usize,
        spans: &mut Vec<Span>,
    ) -> Parsed {
        let Some(at) = find(body, b"\"kvs\":[") else {
            if !is_range_reply(body) {
                self.last_error =
                    Some("etcd range: a 200 reply that is not a range response".into());
                return reply(Status::error(ErrorKind::Protocol), used, 0);
            }
            return reply(Status::NotFound, used, 0);
        };
        let kvs = &body[at..];
        self.key64.resize(key.len().div_ceil(3) * 4, 0);
        let n = B64
            .encode_slice(key, &mut self.key64)
            .expect("sized for base64");
        self.key64.truncate(n);
        match json_str(kvs, b"\"key\":\"") {
            Some(r) if kvs[r.clone()] == self.key64[..] => {}
            _ => return Parsed::Broken("etcd range: a reply for another key"),
        }
        let decoded = match json_str(kvs, b"\"value\":\"") {
            Some(r) => B64.decode_slice(&kvs[r.clone()], {
                self.value.resize(r.len() / 4 * 3 + 3, 0);
                &mut self.value[..]
            }),
            None => Ok(0), // etcd leaves an empty value out
        };
        match decoded {
            Ok(n) => self.value.truncate(n),
            Err(e) => {
                self.value.clear();
                self.last_error = Some(format!("etcd: undecodable base64 in reply: {e}"));
                return reply(Status::error(ErrorKind::Corruption), used, 0);
            }
        }
        let want = if all { Fields::All } else { Fields::One(field) };
        match record::index_encoded(&self.value, |nm| want.wants(nm), spans) {
            Ok(()) => {
                let bytes = spans.iter().map(|s| s.data_len()).sum();
                reply(Status::Ok, used, bytes)
            }
            Err(e) => {
                self.last_error = Some(format!("stored record cannot be decoded: {}", e.0));
                reply(Status::error(ErrorKind::Corruption), used, 0)
            }
        }
    }
}

fn reply(status: Status, used: usize, bytes: u64) -> Parsed {
    Parsed::Reply {
        status,
        used,
        bytes,
        view_base: 0,
    }
}

impl Codec for EtcdCodec {
    fn encode(&mut self, op: Queued<'_>, out: &mut Vec<u8>) -> bool {
        self.json.clear();
        self.json.push(b'{');
        let path: &[u8] = match op {
            Queued::Read(key, _) => {
                b64_field(&mut self.json, b"key", key);
                b"/v3/kv/range"
            }
            // A whole record: a partial update is chained as a read, a merge and this put.
            Queued::Insert(key, values) | Queued::Update(key, values) => {
                self.encoded.clear();
                values.encode_into(&mut self.encoded);
                b64_field(&mut self.json, b"key", key);
                self.json.push(b',');
                b64_field(&mut self.json, b"value", &self.encoded);
                b"/v3/kv/put"
            }
            Queued::Delete(key) => {
                b64_field(&mut self.json, b"key", key);
                b"/v3/kv/deleterange"
            }
        };
        self.json.push(b'}');
        self.request(path, out);
        true
    }

    fn decode(
        &mut self,
        sent: Sent,
        key: &[u8],
        field: &[u8],
        buf: &[u8],
        spans: &mut Vec<Span>,
    ) -> Parsed {
        let (status, used, at) = match frame::frame(buf, self.max_reply, &mut self.joined) {
            frame::Framed::More => return Parsed::More,
            frame::Framed::Broken(why) => return Parsed::Broken(why),
            frame::Framed::Whole {
                status, used, body, ..
            } => (status, used, body),
        };
        // The body, in the read buffer or (chunked) joined in the codec's own.
        let joined = std::mem::take(&mut self.joined);
        let body = match &at {
            Some(r) => &buf[r.clone()],
            None => &joined[..],
        };
        let p = if status != 200 {
            self.refusal(status, body, used)
        } else {
            match sent {
                Sent::Read { all } => self.read(all, key, field, body, used, spans),
                Sent::Update | Sent::Insert | Sent::Delete => reply(Status::Ok, used, 0),
            }
        };
        self.joined = joined;
        p
    }

    fn decoded(&self) -> Option<&[u8]> {
        Some(&self.value)
    }

    fn last_error(&mut self) -> Option<String> {
        self.last_error.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec() -> EtcdCodec {
        EtcdCodec::new(1 << 16, Arc::default())
    }

    fn rec() -> crate::record::Record {
        let mut r = crate::record::Record::new();
        r.push(b"field0", b"abc");
        r.push(b"field1", b"de");
        r
    }

    fn ok_reply(body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    /// etcd's range reply holding `value` under `key` (both base64, as etcd writes them).
    fn range_reply(key: &[u8], value: &[u8]) -> Vec<u8> {
        ok_reply(&format!(
            r#"{{"header":{{"revision":"7"}},"kvs":[{{"key":"{}","create_revision":"2","mod_revision":"7","version":"3","value":"{}"}}],"count":"1"}}"#,
            B64.encode(key),
            B64.encode(value)
        ))
    }

    #[test]
    fn requests_are_the_blocking_sessions_json_with_the_token_once_published() {
        let tokens = Arc::new(Tokens::default());
        let mut c = EtcdCodec::new(1 << 16, tokens.clone());
        let mut out = Vec::new();
        c.encode(Queued::Read(b"user1", Fields::All), &mut out);
        let body = r#"{"key":"dXNlcjE="}"#;
        let want = format!("POST /v3/kv/range HTTP/1.1\r\nHost: etcd\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        assert_eq!(String::from_utf8_lossy(&out), want);
        tokens.publish(b"tok.1");
        out.clear();
        c.encode(Queued::Delete(b"user1"), &mut out);
        let text = String::from_utf8_lossy(&out).into_owned();
        assert!(
            text.starts_with("POST /v3/kv/deleterange HTTP/1.1\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nAuthorization: tok.1\r\n"), "{text}");
        out.clear();
        c.encode(Queued::Insert(b"user2", &rec()), &mut out);
        let mut enc = Vec::new();
        rec().encode_into(&mut enc);
        let body = format!(
            r#"{{"key":"{}","value":"{}"}}"#,
            B64.encode("user2"),
            B64.encode(&enc)
        );
        let text = String::from_utf8_lossy(&out).into_owned();
        assert!(text.starts_with("POST /v3/kv/put HTTP/1.1\r\n"), "{text}");
        assert!(
            text.ends_with(&format!("Content-Length: {}\r\n\r\n{body}", body.len())),
            "{text}"
        );
    }

    #[test]
    fn a_read_is_whole_only_with_its_last_byte_and_decodes_the_record() {
        let mut c = codec();
        let mut enc = Vec::new();
        rec().encode_into(&mut enc);
        let mut buf = range_reply(b"user1", &enc);
        let whole = buf.len();
        buf.extend_from_slice(b"HTTP/1.1 200");
        let mut spans = vec![];
        let read = Sent::Read { all: true };
        for cut in 0..whole {
            assert_eq!(
                c.decode(read, b"user1", b"", &buf[..cut], &mut spans),
                Parsed::More,
                "{cut}"
            );
        }
        let p = c.decode(read, b"user1", b"", &buf, &mut spans);
        assert_eq!(
            p,
            Parsed::Reply {
                status: Status::Ok,
                used: whole,
                bytes: 17, // names and values, as memcached counts
                view_base: 0
            }
        );
        let view = crate::record::RecordView::new(c.decoded().unwrap(), &spans);
        assert_eq!(view.get(b"field0"), Some(&b"abc"[..]));
        assert_eq!(view.get(b"field1"), Some(&b"de"[..]));
        // One field asked for: only its span.
        let p = c.decode(
            Sent::Read { all: false },
            b"user1",
            b"field1",
            &buf,
            &mut spans,
        );
        assert!(
            matches!(
                p,
                Parsed::Reply {
                    status: Status::Ok,
                    bytes: 8,
                    ..
                }
            ),
            "{p:?}"
        );
        // Another key's record: out of step.
        assert!(matches!(
            c.decode(read, b"user2", b"", &buf, &mut spans),
            Parsed::Broken(_)
        ));
        // No kvs: not found.
        let none = ok_reply(r#"{"header":{"revision":"7"}}"#);
        let p = c.decode(read, b"user1", b"", &none, &mut spans);
        assert!(
            matches!(
                p,
                Parsed::Reply {
                    status: Status::NotFound,
                    ..
                }
            ),
            "{p:?}"
        );
        // A put's reply.
        let p = c.decode(Sent::Update, b"user1", b"", &none, &mut spans);
        assert!(
            matches!(
                p,
                Parsed::Reply {
                    status: Status::Ok,
                    ..
                }
            ),
            "{p:?}"
        );
    }

    fn chunked_error(status: &str, json: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nTrailer: Grpc-Trailer-Content-Type\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{json}\n\r\n0\r\nGrpc-Trailer-Content-Type: application/grpc\r\n\r\n",
            json.len() + 1
        )
        .into_bytes()
    }

    #[test]
    fn etcds_errors_map_as_the_blocking_client_and_a_refused_token_breaks() {
        let tokens = Arc::new(Tokens::default());
        let mut c = EtcdCodec::new(1 << 16, tokens.clone());
        let mut spans = vec![];
        let big = chunked_error(
            "429 Too Many Requests",
            r#"{"error":"grpc: received message larger than max (2097160 vs. 2097152)","code":8}"#,
        );
        // Split anywhere: more until the trailer's empty line.
        for cut in 0..big.len() {
            assert_eq!(
                c.decode(Sent::Insert, b"k", b"", &big[..cut], &mut spans),
                Parsed::More,
                "{cut}"
            );
        }
        let p = c.decode(Sent::Insert, b"k", b"", &big, &mut spans);
        assert_eq!(
            p,
            Parsed::Reply {
                status: Status::error(ErrorKind::Other),
                used: big.len(),
                bytes: 0,
                view_base: 0
            }
        );
        assert!(c.last_error().unwrap().contains("larger than max"));
        let quota = chunked_error(
            "400 Bad Request",
            r#"{"error":"etcdserver: mvcc: database space exceeded (space quota)","code":8}"#,
        );
        let p = c.decode(Sent::Insert, b"k", b"", &quota, &mut spans);
        assert!(
            matches!(
                p,
                Parsed::Reply {
                    status: Status::Error {
                        kind: ErrorKind::Io,
                        ..
                    },
                    ..
                }
            ),
            "{p:?}"
        );
        tokens.publish(b"old.1");
        let mut out = Vec::new();
        c.encode(Queued::Read(b"k", Fields::All), &mut out);
        let refused = chunked_error(
            "401 Unauthorized",
            r#"{"error":"etcdserver: invalid auth token","code":16}"#,
        );
        assert!(matches!(
            c.decode(Sent::Read { all: true }, b"k", b"", &refused, &mut spans),
            Parsed::Broken(_)
        ));
        // The next connect is told which token not to take again.
        assert_eq!(*tokens.refused.lock().unwrap(), b"old.1");
    }
}
