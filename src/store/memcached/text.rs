//! The text protocol's replies (memcached's protocol.txt), read in one place: a `get`'s
//! `VALUE <key> <flags> <bytes>` items and `END`, `set`'s and `delete`'s one-line answers, and
//! the server's own error lines. The blocking session (`mod.rs`, `pipeline.rs`, `udp.rs`) and
//! the engine's codec (`codec.rs`) both read replies with these, on whatever bytes have
//! arrived: `Ok(None)` until an item is whole, `Err(why)` when the bytes break the protocol.
//! A declared length is bounded by `max_reply` before it is trusted.

use super::super::kv::RawError;
use super::super::net::parse_usize;
use super::super::wire;
use super::super::ErrorKind;
use std::ops::Range;

/// Whether a reply line is the server's own error report (kept as it says; the connection
/// stays in step) rather than garbage.
pub(super) fn is_error_line(l: &[u8]) -> bool {
    l.starts_with(b"SERVER_ERROR") || l.starts_with(b"CLIENT_ERROR") || l.starts_with(b"ERROR")
}

#[cold]
pub(super) fn server_error(what: &str, l: &[u8]) -> RawError {
    let text = super::super::net::excerpt(l);
    let kind = if text.contains("out of memory") {
        ErrorKind::Busy
    } else {
        ErrorKind::Other
    };
    RawError::new(kind, false, format!("memcached {what}: {text}"))
}

/// "VALUE <key> <flags> <bytes> [<cas>]" → bytes.
pub(super) fn value_length(l: &[u8]) -> Option<usize> {
    let mut parts = l.split(|&b| b == b' ');
    if parts.next()? != b"VALUE" {
        return None;
    }
    parts.next()?;
    parts.next()?;
    parse_usize(parts.next()?)
}

/// One item of a `get`'s reply; ranges index the buffer it was read from.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Item {
    Value {
        key: Range<usize>,
        data: Range<usize>,
    },
    End,
    /// The server's error line (`SERVER_ERROR …`).
    Refused(Range<usize>),
}

/// The item at `buf[at..]` once it is whole, and where the next one starts.
#[inline]
pub(super) fn item(
    buf: &[u8],
    at: usize,
    max_reply: usize,
) -> Result<Option<(Item, usize)>, &'static str> {
    let Some((l, used)) = wire::line(&buf[at..])? else {
        return Ok(None);
    };
    let next = at + used;
    if l == b"END" {
        return Ok(Some((Item::End, next)));
    }
    let Some(n) = value_length(l) else {
        if is_error_line(l) {
            return Ok(Some((Item::Refused(at..at + l.len()), next)));
        }
        return Err("memcached get: malformed reply");
    };
    if n > max_reply {
        return Err("memcached get: a value longer than max_reply");
    }
    let key_len = l[6..].iter().position(|&b| b == b' ').unwrap_or(0);
    if buf.len() < next + n + 2 {
        return Ok(None);
    }
    if &buf[next + n..next + n + 2] != b"\r\n" {
        return Err("memcached get: malformed reply");
    }
    let key = at + 6..at + 6 + key_len;
    Ok(Some((
        Item::Value {
            key,
            data: next..next + n,
        },
        next + n + 2,
    )))
}

/// What a one-key `get` answered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Got {
    Value(Range<usize>),
    Missing,
    Refused(Range<usize>),
}

/// The whole reply to `get <key>` at the front of `buf`: its value and END, END alone, or the
/// server's error line. A value for another key means the connection is out of step.
#[inline]
pub(super) fn get_reply(
    buf: &[u8],
    key: &[u8],
    max_reply: usize,
) -> Result<Option<(Got, usize)>, &'static str> {
    let Some((first, next)) = item(buf, 0, max_reply)? else {
        return Ok(None);
    };
    match first {
        Item::End => Ok(Some((Got::Missing, next))),
        Item::Refused(r) => Ok(Some((Got::Refused(r), next))),
        Item::Value { key: k, data } => {
            if buf[k] != *key {
                return Err("memcached get: a reply for another key");
            }
            match item(buf, next, max_reply)? {
                None => Ok(None),
                Some((Item::End, end)) => Ok(Some((Got::Value(data), end))),
                Some(_) => Err("memcached get: malformed reply"),
            }
        }
    }
}

/// A one-line answer: done, the server's refusal, or garbage (the connection is out of step).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    Done,
    Refused,
    Garbage(&'static str),
}

/// What `set`'s reply line says.
#[inline]
pub(super) fn stored(l: &[u8]) -> Answer {
    match l {
        b"STORED" => Answer::Done,
        _ if is_error_line(l) || l == b"NOT_STORED" => Answer::Refused,
        _ => Answer::Garbage("memcached set: malformed reply"),
    }
}

/// What `delete`'s reply line says (a missing key is done: the key is not there).
#[inline]
pub(super) fn deleted(l: &[u8]) -> Answer {
    match l {
        b"DELETED" | b"NOT_FOUND" => Answer::Done,
        _ if is_error_line(l) => Answer::Refused,
        _ => Answer::Garbage("memcached delete: malformed reply"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_get_reply_is_whole_only_with_its_end_on_any_split() {
        let r = b"VALUE user1 0 5\r\nhello\r\nEND\r\nVALUE";
        let whole = r.len() - 5;
        for cut in 0..whole {
            assert_eq!(get_reply(&r[..cut], b"user1", 1 << 20), Ok(None), "{cut}");
        }
        let (got, used) = get_reply(r, b"user1", 1 << 20).unwrap().unwrap();
        assert_eq!(used, whole);
        let Got::Value(d) = got else {
            panic!("{got:?}")
        };
        assert_eq!(&r[d], b"hello");
        assert_eq!(get_reply(b"END\r\n", b"k", 64), Ok(Some((Got::Missing, 5))));
        assert!(get_reply(r, b"user2", 1 << 20).is_err());
        assert!(get_reply(b"VALUE user1 0 9999\r\n", b"user1", 64).is_err());
        assert!(get_reply(b"VALUE user1 0 1\r\nxy\r\nEND\r\n", b"user1", 64).is_err());
        assert!(get_reply(b"NONSENSE\r\n", b"user1", 64).is_err());
        let e = b"SERVER_ERROR out of memory\r\n";
        assert_eq!(
            get_reply(e, b"k", 64),
            Ok(Some((Got::Refused(0..26), e.len())))
        );
    }

    #[test]
    fn one_line_answers() {
        assert_eq!(stored(b"STORED"), Answer::Done);
        assert_eq!(stored(b"NOT_STORED"), Answer::Refused);
        assert_eq!(
            stored(b"SERVER_ERROR object too large for cache"),
            Answer::Refused
        );
        assert!(matches!(stored(b"DELETED"), Answer::Garbage(_)));
        assert_eq!(deleted(b"NOT_FOUND"), Answer::Done);
        assert!(matches!(deleted(b"STORED"), Answer::Garbage(_)));
    }
}
