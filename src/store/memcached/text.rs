//! The text protocol's reply lines: errors, and a VALUE line's length.

use super::super::kv::RawError;
use super::super::net::{parse_usize, Conn};
use super::super::ErrorKind;

#[cold]
pub(super) fn unexpected(what: &str, l: &[u8]) -> RawError {
    server_error(what, l)
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
