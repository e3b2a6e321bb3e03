//! One HTTP/1.1 reply at the front of a buffer: the one reader of etcd's replies, for the
//! event-driven engine's codec (`codec.rs`), which hands it whatever bytes have arrived with
//! later pipelined replies behind, and for the blocking client (`mod.rs`), which reads into
//! its connection's buffer until the reply is whole (`Conn::read_until`). Every step is bounded before it is
//! trusted: the status line and header block together (`MAX_HEAD`), the declared length and
//! the chunks together (`max_reply`), each chunk-size line, and the trailers; anything else is
//! `Broken`, never waited for. etcd's gateway answers a success with `Content-Length` and an
//! error chunked, with a `Grpc-Trailer-Content-Type` trailer: both are read whole, so the next
//! pipelined reply starts where this one ends. The status line and headers are read by
//! `httparse` (into a fixed array of `MAX_HEADERS`); the bounds, the body's framing and the
//! trailers are this module's.

use crate::store::net::parse_usize;
use crate::store::wire;

/// The longest status line and header block (and, apart, trailer block) accepted. etcd's are
/// about 300 bytes.
pub(super) const MAX_HEAD: usize = 8 * 1024;

/// The most header lines a reply may have (etcd sends about six).
const MAX_HEADERS: usize = 64;

/// The outcome of looking for a whole reply.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Framed {
    More,
    Broken(&'static str),
    /// A whole reply of `used` bytes; its body is `buf[range]`, or, chunked, the chunks
    /// joined in the caller's buffer (`None`).
    Whole {
        status: u16,
        used: usize,
        body: Option<std::ops::Range<usize>>,
        /// The server said `Connection: close`: it closes the connection after this reply.
        close: bool,
    },
}

/// The reply at the front of `buf`; a chunked body is joined into `joined` (reused).
pub(super) fn frame(buf: &[u8], max_reply: usize, joined: &mut Vec<u8>) -> Framed {
    const PREFIX: &[u8] = b"HTTP/1.";
    let n = buf.len().min(PREFIX.len());
    if buf[..n] != PREFIX[..n] {
        return Framed::Broken("etcd: a reply that is not HTTP/1.x (garbage status line)");
    }
    let head = &buf[..buf.len().min(MAX_HEAD)];
    // Parsed as far as it has come, so a bad status line or header is refused at once; a
    // block that never ends is refused at MAX_HEAD, one of too many lines at MAX_HEADERS.
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut reply = httparse::Response::new(&mut headers);
    let at = match reply.parse(head) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return more_head(buf),
        Err(httparse::Error::TooManyHeaders) => {
            return Framed::Broken("etcd: more than 64 HTTP headers")
        }
        Err(httparse::Error::Status | httparse::Error::Version) => {
            return Framed::Broken("etcd: malformed HTTP status line")
        }
        Err(_) => return Framed::Broken("etcd: a malformed HTTP header"),
    };
    let Some(status) = reply.code else {
        return Framed::Broken("etcd: malformed HTTP status line");
    };
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut close = false;
    for h in reply.headers.iter() {
        let v = h.value.trim_ascii();
        if h.name.eq_ignore_ascii_case("content-length") {
            let Some(n) = parse_usize(v) else {
                return Framed::Broken("etcd: a Content-Length that is not a number");
            };
            if length.is_some_and(|l| l != n) {
                return Framed::Broken("etcd: two different Content-Length headers");
            }
            if n > max_reply {
                return Framed::Broken("etcd: a Content-Length past max_reply");
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if !v.eq_ignore_ascii_case(b"chunked") {
                return Framed::Broken("etcd: a transfer encoding other than chunked");
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            close = v.eq_ignore_ascii_case(b"close");
        }
    }
    match (length, chunked) {
        (Some(n), false) => {
            if buf.len() - at < n {
                return Framed::More;
            }
            Framed::Whole {
                status,
                used: at + n,
                body: Some(at..at + n),
                close,
            }
        }
        (None, true) => chunks(buf, at, max_reply, joined, (status, close)),
        (Some(_), true) => Framed::Broken("etcd: both Content-Length and chunked encoding"),
        (None, false) => {
            Framed::Broken("etcd: a reply with neither Content-Length nor chunked encoding")
        }
    }
}

#[cold]
fn more_head(buf: &[u8]) -> Framed {
    if buf.len() >= MAX_HEAD {
        Framed::Broken("etcd: an HTTP header block past 8 KiB")
    } else {
        Framed::More
    }
}

/// A chunked body from `at`: the chunks joined into `joined` (their total within
/// `max_reply`), then trailers up to an empty line (within `MAX_HEAD`).
#[cold]
fn chunks(
    buf: &[u8],
    mut at: usize,
    max_reply: usize,
    joined: &mut Vec<u8>,
    head: (u16, bool),
) -> Framed {
    joined.clear();
    loop {
        let (l, used) = match wire::line(&buf[at..]) {
            Ok(Some(x)) => x,
            Ok(None) => return Framed::More,
            Err(_) => return Framed::Broken("etcd: a chunk-size line past 1024 bytes"),
        };
        let hex = l[..crate::store::net::memchr(b';', l).unwrap_or(l.len())].trim_ascii();
        if hex.is_empty() || !hex.iter().all(u8::is_ascii_hexdigit) {
            return Framed::Broken("etcd: malformed chunk size");
        }
        if hex.len() > 15 {
            return Framed::Broken("etcd: a chunk size past max_reply");
        }
        let n = usize::from_str_radix(std::str::from_utf8(hex).unwrap_or("x"), 16)
            .unwrap_or(usize::MAX);
        if n > max_reply - joined.len().min(max_reply) {
            return Framed::Broken("etcd: a chunked body past max_reply");
        }
        at += used;
        if n == 0 {
            return trailers(buf, at, head);
        }
        if buf.len() - at < n + 2 {
            return Framed::More;
        }
        if &buf[at + n..at + n + 2] != b"\r\n" {
            return Framed::Broken("etcd: a chunk not ended by CRLF");
        }
        joined.extend_from_slice(&buf[at..at + n]);
        at += n + 2;
    }
}

/// Trailer lines after the last chunk, up to the empty line.
fn trailers(buf: &[u8], start: usize, (status, close): (u16, bool)) -> Framed {
    let mut at = start;
    loop {
        let room = &buf[at..buf.len().min(start + MAX_HEAD)];
        let Some(e) = wire::crlf(room) else {
            return if buf.len() >= start + MAX_HEAD {
                Framed::Broken("etcd: HTTP trailers past 8 KiB")
            } else {
                Framed::More
            };
        };
        at += e + 2;
        if e == 0 {
            return Framed::Whole {
                status,
                used: at,
                body: None,
                close,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1";
    const ERR: &[u8] = b"HTTP/1.1 401 Unauthorized\r\nTrailer: Grpc-Trailer-Content-Type\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n3\r\n1}\n\r\n0\r\nGrpc-Trailer-Content-Type: application/grpc\r\n\r\nHTTP";

    #[test]
    fn a_reply_is_whole_only_with_its_last_byte_on_any_split() {
        let mut j = Vec::new();
        for (reply, tail) in [(OK, 8), (ERR, 4)] {
            let whole = reply.len() - tail;
            for cut in 0..whole {
                assert_eq!(frame(&reply[..cut], 100, &mut j), Framed::More, "{cut}");
            }
            for cut in whole..=reply.len() {
                let f = frame(&reply[..cut], 100, &mut j);
                let Framed::Whole { used, body, .. } = f else {
                    panic!("{f:?}")
                };
                assert_eq!(used, whole);
                match body {
                    Some(r) => assert_eq!(&reply[r], b"hello"),
                    None => assert_eq!(j, b"{\"a\":1}\n"),
                }
            }
        }
        assert!(matches!(
            frame(ERR, 100, &mut j),
            Framed::Whole { status: 401, .. }
        ));
    }

    #[test]
    fn hostile_replies_are_broken_not_waited_for() {
        let mut j = Vec::new();
        let broken = |b: &[u8], max| matches!(frame(b, max, &mut Vec::new()), Framed::Broken(_));
        assert!(broken(b"SSH-2.0", 100));
        assert!(broken(b"HTTP/1.1 2x0 OK\r\n", 100));
        assert!(broken(
            b"HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n",
            100
        ));
        assert!(broken(
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            100
        ));
        assert!(broken(
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            100
        ));
        assert!(broken(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            100
        ));
        assert!(broken(b"HTTP/1.1 200 OK\r\n\r\n", 100));
        assert!(broken(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            100
        ));
        assert!(broken(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n",
            100
        ));
        assert!(broken(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n",
            100
        ));
        assert!(broken(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
            100
        ));
        // Chunks that each fit but together pass the limit.
        let mut many = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..11 {
            many.extend_from_slice(b"a\r\n0123456789\r\n");
        }
        assert!(broken(&many, 100));
        // A header block that never ends (of long lines: fewer than MAX_HEADERS).
        let mut endless = b"HTTP/1.1 200 OK\r\n".to_vec();
        let line = [b"X-A: ".as_slice(), &[b'b'; 200], b"\r\n"].concat();
        while endless.len() < MAX_HEAD - line.len() {
            endless.extend_from_slice(&line);
        }
        assert_eq!(frame(&endless, 100, &mut j), Framed::More);
        endless.extend_from_slice(&line);
        assert!(broken(&endless, 100));
        // More header lines than MAX_HEADERS, however short.
        let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
        for _ in 0..=MAX_HEADERS {
            many.extend_from_slice(b"X-A: b\r\n");
        }
        assert_eq!(
            frame(&many, 100, &mut j),
            Framed::Broken("etcd: more than 64 HTTP headers")
        );
        // Endless trailers.
        let mut t = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n".to_vec();
        t.extend_from_slice(&vec![b'y'; MAX_HEAD + 1]);
        assert!(broken(&t, 100));
    }
}
