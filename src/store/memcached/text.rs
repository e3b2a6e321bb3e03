//! The text protocol's reply lines: errors, and a VALUE line's length.

use super::super::kv::RawError;
use super::super::net::{parse_usize, Conn};
use super::super::ErrorKind;

/// Whether a reply line is the server's own error report (kept as it says; the connection
/// stays in step) rather than garbage.
pub(super) fn is_error_line(l: &[u8]) -> bool {
    l.starts_with(b"SERVER_ERROR") || l.starts_with(b"CLIENT_ERROR") || l.starts_with(b"ERROR")
}

/// A line where VALUE or END was expected: the server's error, or garbage (a `protocol`
/// error; the connection is reset).
#[cold]
pub(super) fn unexpected(c: &mut Conn, what: &str, l: std::ops::Range<usize>) -> RawError {
    match is_error_line(c.bytes(l.clone())) {
        true => server_error(what, c.bytes(l)),
        false => desync(c, what),
    }
}

#[cold]
pub(super) fn desync(c: &mut Conn, what: &str) -> RawError {
    c.protocol(format!(
        "memcached {what}: malformed reply (connection reset)"
    ))
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
