//! RESP, Redis's wire protocol: commands as arrays of bulk strings, and replies parsed in
//! place from the connection's buffer.

use super::super::kv::RawError;
use super::super::net::{parse_usize, push_num, Conn};
use super::super::ErrorKind;
use std::ops::Range;

/// Sends one command and expects a simple (+) or integer reply; returns its text.
pub(super) fn simple(c: &mut Conn, args: &[&[u8]]) -> Result<String, RawError> {
    c.begin();
    command(&mut c.wbuf, args);
    c.send()?;
    match reply(c)? {
        Reply::Simple(r) => Ok(String::from_utf8_lossy(c.bytes(r)).into_owned()),
        Reply::Int(i) => Ok(i.to_string()),
        Reply::Bulk(Some(r)) => Ok(String::from_utf8_lossy(c.bytes(r)).into_owned()),
        Reply::Error(r) => Err(redis_error(c.bytes(r))),
        _ => Err(RawError::new(
            ErrorKind::Other,
            false,
            "Redis: unexpected reply type",
        )),
    }
}

/// Appends a RESP command (an array of bulk strings).
#[inline]
pub(super) fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    push_num(out, args.len());
    out.extend_from_slice(b"\r\n");
    for a in args {
        bulk(out, a);
    }
}

#[inline]
pub(super) fn array_head(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    push_num(out, n);
    out.extend_from_slice(b"\r\n");
}

#[inline]
pub(super) fn bulk(out: &mut Vec<u8>, a: &[u8]) {
    out.push(b'$');
    push_num(out, a.len());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
}

pub(super) enum Reply {
    Simple(Range<usize>),
    Error(Range<usize>),
    Int(i64),
    Bulk(Option<Range<usize>>),
    Array(Option<usize>),
}

#[inline]
pub(super) fn reply(c: &mut Conn) -> Result<Reply, RawError> {
    let l = c.line()?;
    let b = c.bytes(l.clone());
    let Some(&t) = b.first() else {
        return Err(malformed(c));
    };
    let rest = l.start + 1..l.end;
    let num = |b: &[u8]| -> Option<i64> {
        match b.first() {
            Some(b'-') => parse_usize(&b[1..]).map(|n| -(n as i64)),
            _ => parse_usize(b).map(|n| n as i64),
        }
    };
    Ok(match t {
        b'+' => Reply::Simple(rest),
        b'-' => Reply::Error(rest),
        b':' => Reply::Int(num(&b[1..]).ok_or_else(|| malformed(c))?),
        b'$' => match num(&b[1..]).ok_or_else(|| malformed(c))? {
            n if n < 0 => Reply::Bulk(None),
            n => {
                let r = c.take(n as usize)?;
                let crlf = c.take(2)?;
                if c.bytes(crlf) != b"\r\n" {
                    return Err(malformed(c));
                }
                Reply::Bulk(Some(r))
            }
        },
        b'*' => match num(&b[1..]).ok_or_else(|| malformed(c))? {
            n if n < 0 => Reply::Array(None),
            n => Reply::Array(Some(n as usize)),
        },
        _ => return Err(malformed(c)),
    })
}

#[cold]
pub(super) fn malformed(c: &mut Conn) -> RawError {
    c.broken = true;
    RawError::new(
        ErrorKind::Other,
        false,
        "Redis: malformed reply (connection reset)",
    )
}

#[cold]
pub(super) fn redis_error(b: &[u8]) -> RawError {
    let text = String::from_utf8_lossy(b).into_owned();
    let kind = if text.starts_with("OOM") || text.starts_with("BUSY") || text.starts_with("LOADING")
    {
        ErrorKind::Busy
    } else {
        ErrorKind::Other
    };
    let fatal = text.starts_with("NOAUTH") || text.starts_with("WRONGPASS");
    RawError::new(kind, fatal, format!("Redis: {text}"))
}

/// Sends one command whose reply is an array of bulk strings (or nil); returns the strings.
pub(super) fn strings(c: &mut Conn, args: &[&[u8]]) -> Result<Vec<String>, RawError> {
    c.begin();
    command(&mut c.wbuf, args);
    c.send()?;
    match reply(c)? {
        Reply::Array(None) => Ok(vec![]),
        Reply::Array(Some(n)) => {
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                match reply(c)? {
                    Reply::Bulk(Some(r)) => {
                        out.push(String::from_utf8_lossy(c.bytes(r)).into_owned())
                    }
                    _ => out.push(String::new()),
                }
            }
            Ok(out)
        }
        Reply::Error(r) => Err(redis_error(c.bytes(r))),
        _ => Err(malformed(c)),
    }
}
