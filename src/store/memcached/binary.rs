//! The binary protocol (memcached's protocol_binary.h): request headers, replies, statuses.

use super::super::kv::RawError;
use super::super::net::Conn;
use super::super::ErrorKind;
use super::text::desync;

pub(super) const OP_GET: u8 = 0x00;
pub(super) const OP_SET: u8 = 0x01;
pub(super) const OP_DELETE: u8 = 0x04;

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

/// (status, extras length, key length, body range).
pub(super) fn bin_reply(
    c: &mut Conn,
) -> Result<(u16, usize, usize, std::ops::Range<usize>), RawError> {
    let h = c.take(24)?;
    let hb = c.bytes(h);
    if hb[0] != 0x81 {
        return Err(desync(c, "reply"));
    }
    let keylen = u16::from_be_bytes([hb[2], hb[3]]) as usize;
    let extras = hb[4] as usize;
    let status = u16::from_be_bytes([hb[6], hb[7]]);
    let total = u32::from_be_bytes([hb[8], hb[9], hb[10], hb[11]]) as usize;
    if extras + keylen > total {
        return Err(desync(c, "reply"));
    }
    let body = c.take(total)?;
    Ok((status, extras, keylen, body))
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
