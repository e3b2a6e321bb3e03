//! GETs over UDP as papers/003 measures them: the 8-byte frame header, and replies that span
//! several datagrams put back in order.
//!
//! A get has a deadline (`timeout_ms` from its request): datagrams of other requests, or a
//! reply's datagrams that keep coming, do not extend it; a reply's datagrams together hold at
//! most `max_reply` bytes.

use super::super::kv::RawError;
use super::super::net::{self};
use super::super::udp_frame::{self, Reply};
use super::super::ErrorKind;
use super::text::{self, server_error, Got};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// GETs over UDP: each request carries an 8-byte frame header (request id, sequence 0,
/// 1 datagram, reserved); the reply's datagrams carry the same request id, their sequence
/// number and the total count, and are put back in order (`store::udp_frame`).
pub(super) struct Udp {
    pub(super) sock: UdpSocket,
    pub(super) request_id: u16,
    /// The reassembled reply; a read's value is a range in it.
    pub(super) buf: Vec<u8>,
    pub(super) datagram: Vec<u8>,
    reply: Reply,
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
            reply: Reply::default(),
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
        self.buf.extend_from_slice(&udp_frame::request_header(id));
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
        self.reply.clear();
        let mut waited = false;
        while !self.reply.is_whole() {
            if waited {
                self.shorten(deadline)?;
            }
            waited = true;
            let n = self
                .sock
                .recv(&mut self.datagram)
                .map_err(|e| udp_error("receive", e))?;
            // Not this request's (a late reply to one that timed out), or not a frame: skipped.
            let Ok((got_id, seq, total)) = udp_frame::reply_header(&self.datagram[..n]) else {
                continue;
            };
            if got_id != id {
                continue;
            }
            let payload = &self.datagram[udp_frame::HEADER..n];
            if let Err(why) = self.reply.file(seq, total, payload, self.limit) {
                return Err(RawError::new(
                    ErrorKind::Protocol,
                    false,
                    format!(
                        "memcached UDP get: {why} ({} bytes is max_reply)",
                        self.limit
                    ),
                ));
            }
        }
        self.buf.clear();
        self.reply.join_into(&mut self.buf);
        // The reassembled reply, read as over TCP (`text.rs`): all of it, nothing after.
        match text::get_reply(&self.buf, key, self.limit) {
            Ok(Some((got, used))) if used == self.buf.len() => match got {
                Got::Value(r) => Ok(Some(r)),
                Got::Missing => Ok(None),
                Got::Refused(r) => Err(server_error("get (UDP)", &self.buf[r])),
            },
            _ => Err(udp_malformed(&self.buf)),
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
