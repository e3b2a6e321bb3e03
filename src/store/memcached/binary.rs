//! The binary protocol (memcached's protocol_binary.h), read in one place: request headers,
//! and each reply framed and checked against the request it answers, for the blocking
//! session (`mod.rs`) and the engine's codec (`bincodec.rs`) alike.
//!
//! Each request's `opaque` is the 32-bit FNV-1a of its key, so a reader that is handed the
//! key recomputes it and needs no state per request. A reply must carry the 0x81 magic, the
//! request's opcode and that opaque, and a reply that names a key must name the one asked
//! for; otherwise the connection is out of step. The header's lengths are checked against
//! each other and against `max_reply` before any of them is trusted, so a hostile header
//! never makes a reader wait for (or buffer) bytes it would refuse. Reads are GETK rather than
//! GET: the reply carries the key, a second check beside the opaque at no cost to the server
//! (memcached counts both as `cmd_get`).

use super::super::kv::RawError;
use super::super::ErrorKind;

pub(super) const OP_SET: u8 = 0x01;
pub(super) const OP_DELETE: u8 = 0x04;
/// Get with the key in the reply (protocol_binary.h `PROTOCOL_BINARY_CMD_GETK`).
pub(super) const OP_GETK: u8 = 0x0c;
pub(super) const HEADER: usize = 24;
/// `PROTOCOL_BINARY_RESPONSE_KEY_ENOENT`.
pub(super) const KEY_ENOENT: u16 = 0x0001;
/// The most extras a reply to these requests carries (a GETK hit: its 4 bytes of flags).
const MAX_EXTRAS: usize = 4;

pub(super) fn bin_header(out: &mut Vec<u8>, op: u8, keylen: usize, extras: usize, value: usize) {
    out.push(0x80);
    out.push(op);
    out.extend_from_slice(&(keylen as u16).to_be_bytes());
    out.push(extras as u8);
    out.push(0); // data type
    out.extend_from_slice(&[0, 0]); // vbucket
    out.extend_from_slice(&((keylen + extras + value) as u32).to_be_bytes());
    out.extend_from_slice(&[0; 4]); // opaque
    out.extend_from_slice(&[0; 8]); // cas
}

/// The request's `opaque`: 32-bit FNV-1a of its key (the reply must echo it).
#[inline]
pub(super) fn opaque(key: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in key {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// A request header with the key's opaque; the extras, key and value are appended after it.
#[inline]
pub(super) fn request(out: &mut Vec<u8>, op: u8, key: &[u8], extras: usize, value: usize) {
    let at = out.len();
    bin_header(out, op, key.len(), extras, value);
    out[at + 12..at + 16].copy_from_slice(&opaque(key).to_be_bytes());
}

/// A reply header's fields, read once its 24 bytes are there.
pub(super) struct Header {
    opcode: u8,
    keylen: usize,
    extras: usize,
    pub(super) status: u16,
    total: usize,
    opaque: u32,
}

impl Header {
    #[inline]
    fn read(h: &[u8]) -> Result<Header, &'static str> {
        if h[0] != 0x81 {
            return Err("memcached binary: a reply without the 0x81 magic");
        }
        Ok(Header {
            opcode: h[1],
            keylen: u16::from_be_bytes([h[2], h[3]]) as usize,
            extras: h[4] as usize,
            status: u16::from_be_bytes([h[6], h[7]]),
            total: u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize,
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
        })
    }

    /// Where the value (or a refusal's text) starts, from the reply's first byte.
    #[inline]
    pub(super) fn value_at(&self) -> usize {
        HEADER + self.extras + self.keylen
    }

    /// The header checked against the request (`op`, `key`) and its lengths against each
    /// other and `max_reply`: plain integer compares, before any length is trusted.
    #[inline]
    fn check(&self, op: u8, key: &[u8], max_reply: usize) -> Result<(), &'static str> {
        if self.opcode != op {
            return Err("memcached binary: a reply to another opcode");
        }
        if self.opaque != opaque(key) {
            return Err("memcached binary: a reply to another request (its opaque)");
        }
        if self.extras > MAX_EXTRAS || self.extras + self.keylen > self.total {
            return Err("memcached binary: a reply whose lengths disagree");
        }
        if self.keylen != 0 && self.keylen != key.len() {
            return Err("memcached binary: a reply for another key");
        }
        if self.total - self.extras - self.keylen > max_reply {
            return Err("memcached binary: a body longer than max_reply");
        }
        Ok(())
    }
}

/// The reply to request `op` for `key` at the front of `buf`, once it is whole: its header and
/// its length (the value is `buf[header.value_at()..used]`).
#[inline]
pub(super) fn frame(
    buf: &[u8],
    op: u8,
    key: &[u8],
    max_reply: usize,
) -> Result<Option<(Header, usize)>, &'static str> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    let h = Header::read(&buf[..HEADER])?;
    h.check(op, key, max_reply)?;
    let used = HEADER + h.total;
    if buf.len() < used {
        return Ok(None);
    }
    if h.keylen != 0 && &buf[HEADER + h.extras..HEADER + h.extras + h.keylen] != key {
        return Err("memcached binary: a reply for another key");
    }
    Ok(Some((h, used)))
}

#[cold]
pub(super) fn bin_status(what: &str, status: u16, body: &[u8]) -> RawError {
    let kind = match status {
        0x82 => ErrorKind::Busy, // out of memory
        0x85 => ErrorKind::Busy, // temporary failure
        _ => ErrorKind::Other,
    };
    RawError::new(
        kind,
        false,
        format!(
            "memcached {what}: status 0x{status:04x} {}",
            super::super::net::excerpt(body)
        ),
    )
}
