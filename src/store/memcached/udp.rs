//! GETs over UDP as papers/003 measures them: the 8-byte frame header, and replies that span
//! several datagrams put back in order.
//!
//! A get has a deadline (`timeout_ms` from its request): datagrams of other requests, or a
//! reply's datagrams that keep coming, do not extend it; a reply's datagrams together hold at
//! most `max_reply` bytes.

use super::super::kv::RawError;
use super::super::net::{self};
use super::super::ErrorKind;
use super::text::{is_error_line, server_error, value_length};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

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
    timeout: Duration,
    limit: usize,
    /// The socket's timeout was shortened to what was left of a deadline.
    short: bool,
}

impl Udp {
    pub(super) fn new(addr: SocketAddr, timeout: Duration, limit: usize) -> std::io::Result<Udp> {
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
            timeout,
            limit: limit.clamp(net::MIN_MAX_REPLY, net::MAX_MAX_REPLY),
            short: false,
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
        if self.short {
            self.short = false;
            let _ = self.sock.set_read_timeout(Some(self.timeout));
        }
        // One clock read per get (vDSO); the socket's timeout changes only when a get waits
        // for more than one datagram.
        let deadline = Instant::now() + self.timeout;
        self.sock
            .send(&self.buf)
            .map_err(|e| udp_error("send", e))?;
        self.parts.clear();
        self.seen.clear();
        let mut total = usize::MAX;
        let mut got = 0;
        let mut waited = false;
        while got < total {
            if waited {
                self.shorten(deadline)?;
            }
            waited = true;
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
            if self.parts.len() + (n - 8) > self.limit {
                return Err(RawError::new(
                    ErrorKind::Protocol,
                    false,
                    format!(
                        "memcached UDP get: the reply's datagrams pass {} bytes (max_reply)",
                        self.limit
                    ),
                ));
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
        let Some(n) = value_length(line) else {
            return Err(match is_error_line(line) {
                true => server_error("get (UDP)", line),
                false => udp_malformed(b),
            });
        };
        let start = nl + 1;
        // `n` is the server's: the value and its trailer must be in what arrived.
        match start.checked_add(n) {
            Some(end) if b.len() >= end + 7 && &b[end..end + 7] == b"\r\nEND\r\n" => {
                Ok(Some(start..end))
            }
            _ => Err(udp_malformed(b)),
        }
    }

    /// Before waiting for another datagram: only what is left until the deadline.
    #[cold]
    fn shorten(&mut self, deadline: Instant) -> Result<(), RawError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(udp_error("receive", std::io::ErrorKind::TimedOut.into()));
        }
        let _ = self.sock.set_read_timeout(Some(left));
        self.short = true;
        Ok(())
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
        ErrorKind::Protocol,
        false,
        format!("memcached UDP get: malformed reply '{head}'"),
    )
}
