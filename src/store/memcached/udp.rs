//! GETs over UDP as papers/003 measures them: the 8-byte frame header, and replies that span
//! several datagrams put back in order.

use super::super::kv::RawError;
use super::super::net::{self};
use super::super::ErrorKind;
use super::text::{server_error, value_length};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// GETs over UDP: each request carries an 8-byte frame header (request id, sequence 0,
/// 1 datagram, reserved); the reply's datagrams carry the same request id, their sequence
/// number and the total count, and are put back in order here.
pub(super) struct Udp {
    pub(super) sock: UdpSocket,
    pub(super) request_id: u16,
    /// The reassembled reply; a read's value is a range in it.
    pub(super) buf: Vec<u8>,
    pub(super) datagram: Vec<u8>,
    /// Payload of each sequence number (start, length in `parts`), reused.
    pub(super) parts: Vec<u8>,
    pub(super) seen: Vec<(usize, usize)>,
}

impl Udp {
    pub(super) fn new(addr: SocketAddr, timeout: Duration) -> std::io::Result<Udp> {
        let sock = UdpSocket::bind(if addr.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        })?;
        sock.connect(addr)?;
        sock.set_read_timeout(Some(timeout))?;
        Ok(Udp {
            sock,
            request_id: 0,
            buf: Vec::with_capacity(4096),
            datagram: vec![0; 65536],
            parts: Vec::new(),
            seen: Vec::new(),
        })
    }

    /// The value's range in `buf`, or None when the key is missing.
    pub(super) fn get(&mut self, key: &[u8]) -> Result<Option<std::ops::Range<usize>>, RawError> {
        self.request_id = self.request_id.wrapping_add(1);
        let id = self.request_id;
        self.buf.clear();
        self.buf.extend_from_slice(&id.to_be_bytes());
        self.buf.extend_from_slice(&[0, 0, 0, 1, 0, 0]);
        self.buf.extend_from_slice(b"get ");
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(b"\r\n");
        self.sock
            .send(&self.buf)
            .map_err(|e| udp_error("send", e))?;
        self.parts.clear();
        self.seen.clear();
        let mut total = usize::MAX;
        let mut got = 0;
        while got < total {
            let n = self
                .sock
                .recv(&mut self.datagram)
                .map_err(|e| udp_error("receive", e))?;
            if n < 8 {
                continue;
            }
            let d = &self.datagram[..n];
            if u16::from_be_bytes([d[0], d[1]]) != id {
                continue; // a late reply to an earlier, timed-out request
            }
            let seq = u16::from_be_bytes([d[2], d[3]]) as usize;
            let count = u16::from_be_bytes([d[4], d[5]]) as usize;
            if total == usize::MAX {
                total = count.max(1);
                self.seen.resize(total, (0, usize::MAX));
            }
            if seq >= total || self.seen[seq].1 != usize::MAX {
                continue;
            }
            self.seen[seq] = (self.parts.len(), n - 8);
            self.parts.extend_from_slice(&d[8..]);
            got += 1;
        }
        self.buf.clear();
        for &(start, len) in &self.seen {
            self.buf.extend_from_slice(&self.parts[start..start + len]);
        }
        // "VALUE k f n\r\n<data>\r\nEND\r\n" or "END\r\n".
        let b = &self.buf;
        let nl = net::memchr(b'\n', b).ok_or_else(|| udp_malformed(b))?;
        let line = &b[..nl.saturating_sub(1)];
        if line == b"END" {
            return Ok(None);
        }
        let n = value_length(line).ok_or_else(|| server_error("get (UDP)", line))?;
        let start = nl + 1;
        if b.len() < start + n + 7 || &b[start + n..start + n + 7] != b"\r\nEND\r\n" {
            return Err(udp_malformed(b));
        }
        Ok(Some(start..start + n))
    }
}

#[cold]
pub(super) fn udp_error(what: &str, e: std::io::Error) -> RawError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => RawError::new(
            ErrorKind::Timeout,
            false,
            format!(
                "memcached UDP {what}: no complete reply within the timeout (a lost datagram?)"
            ),
        ),
        // ECONNREFUSED from an ICMP port-unreachable: nothing listens on UDP there.
        _ => RawError::new(ErrorKind::Io, true, format!("memcached UDP {what}: {e}")),
    }
}

#[cold]
pub(super) fn udp_malformed(b: &[u8]) -> RawError {
    let head = String::from_utf8_lossy(&b[..b.len().min(60)]).into_owned();
    RawError::new(
        ErrorKind::Other,
        false,
        format!("memcached UDP get: malformed reply '{head}'"),
    )
}
