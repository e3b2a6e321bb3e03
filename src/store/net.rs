//! A blocking TCP connection with reusable buffers, shared by the server clients (memcached,
//! redis, etcd). Replies are parsed in place in the read buffer, so a read's value is a view
//! into it until the session's next call: no allocation per operation once the buffers have
//! grown to the largest reply.
//!
//! Written by hand rather than taken from the client crates: those allocate a value per reply
//! and hide when a request is written and when its reply has arrived, and both are what the
//! latency measurement is about.
//!
//! Nothing a server sends is trusted (docs/stores.md, "Hostile servers"): the replies to one
//! request may hold at most `limit` bytes (`max_reply`), a line at most `MAX_LINE`; a length
//! above that is a `protocol` error before anything is allocated for it. Each request and its
//! replies have one deadline, `timeout` after the request is sent: a server that drips one
//! byte a second ends the operation with `timeout` at the deadline, not after each read.

use super::kv::RawError;
use super::ErrorKind;
use std::io::{ErrorKind as IoKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The most bytes one request's replies may hold where nothing narrower is known (no workload
/// behind the options: readiness checks outside a run, `max_reply=auto` not filled in).
pub const DEFAULT_MAX_REPLY: usize = 64 << 20;
/// The least `max_reply` accepted: a server's version or INFO reply must fit.
pub const MIN_MAX_REPLY: usize = 64 << 10;
/// The most `max_reply` accepted (bounds every sum of lengths below `usize::MAX`).
pub const MAX_MAX_REPLY: usize = 1 << 40;
/// The longest line (RESP header, memcached reply line, HTTP header) a reply may hold.
pub const MAX_LINE: usize = 64 << 10;
/// The longest `timeout_ms` accepted: an hour (a deadline is an `Instant` plus it).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// Plain TCP, or TLS over it (rustls; Redis's `tls=true`).
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
    /// No socket yet (`Conn::unconnected`): connected on first use.
    None,
}

impl Read for Stream {
    #[inline]
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(b),
            Stream::Tls(s) => s.read(b),
            Stream::None => Err(IoKind::NotConnected.into()),
        }
    }
}

impl Stream {
    /// The socket under the stream (none before `Conn::unconnected` is connected).
    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Stream::Plain(s) => Some(s),
            Stream::Tls(s) => Some(&s.sock),
            Stream::None => None,
        }
    }

    /// Sets the socket's receive (or send) timeout; a failure leaves the earlier one, which
    /// still bounds a wait.
    fn set_timeout(&self, receive: bool, t: Duration) {
        if let Some(tcp) = self.tcp() {
            let _ = match receive {
                true => tcp.set_read_timeout(Some(t)),
                false => tcp.set_write_timeout(Some(t)),
            };
        }
    }
}

impl Write for Stream {
    #[inline]
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
            Stream::None => Err(IoKind::NotConnected.into()),
        }
    }
    #[inline]
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.write_all(b),
            Stream::Tls(s) => {
                s.write_all(b)?;
                s.flush()
            }
            Stream::None => Err(IoKind::NotConnected.into()),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
            Stream::None => Ok(()),
        }
    }
}

/// TLS settings for a client connection.
#[derive(Clone)]
pub struct Tls {
    pub config: std::sync::Arc<rustls::ClientConfig>,
    pub server_name: rustls::pki_types::ServerName<'static>,
}

impl Tls {
    /// A client trusting the CA certificates in `ca` (PEM), with an optional client
    /// certificate and key (PEM), for `server_name`.
    pub fn new(ca: &str, client: Option<(&str, &str)>, server_name: &str) -> Result<Tls, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        let mut roots = rustls::RootCertStore::empty();
        let certs = CertificateDer::pem_file_iter(ca)
            .map_err(|e| format!("tls_ca={ca}: {e}"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("tls_ca={ca}: {e}"))?;
        if certs.is_empty() {
            return Err(format!("tls_ca={ca}: no PEM certificate in it"));
        }
        for c in certs {
            roots.add(c).map_err(|e| format!("tls_ca={ca}: {e}"))?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .map_err(|e| format!("tls_cert={cert}: {e}"))?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("tls_cert={cert}: {e}"))?;
                let key =
                    PrivateKeyDer::from_pem_file(key).map_err(|e| format!("tls_key={key}: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("tls_cert/tls_key: {e}"))?
            }
        };
        let server_name = ServerName::try_from(server_name.to_string())
            .map_err(|e| format!("tls_server_name={server_name}: {e}"))?;
        Ok(Tls {
            config: std::sync::Arc::new(config),
            server_name,
        })
    }
}

pub struct Conn {
    stream: Stream,
    pub wbuf: Vec<u8>,
    buf: Vec<u8>,
    /// Bytes of `buf` holding data, and the first not yet consumed. `begin` moves what is left
    /// to the start, so `pos` and `end` also count the bytes of the current request's replies.
    end: usize,
    pos: usize,
    /// Set when the stream can no longer be trusted (a timeout left a reply in flight).
    pub broken: bool,
    pub addr: SocketAddr,
    /// The most bytes one request's replies may hold (`max_reply`).
    limit: usize,
    /// How long a request and its replies may take, and when the current one must be done
    /// (None: not started, or no request was sent since `begin`).
    timeout: Duration,
    deadline: Option<Instant>,
    /// The current request has already waited once (a partial write, or a read): later waits
    /// get only what is left until the deadline.
    waited: bool,
    /// The socket's receive and send timeouts were shortened to what was left of a deadline
    /// (restored by the next `begin`).
    short: [bool; 2],
    /// `reply_wait=spin`: how long a read polls before it blocks (None: it blocks at once).
    spin: Option<Duration>,
}

/// The `max_reply` option every network store declares, with its help text.
pub const MAX_REPLY_OPT: super::OptSpec = super::OptSpec {
    name: "max_reply",
    default: "auto",
    help: "most bytes the replies to one request may hold (e.g. 4MiB); a longer reply, or a length above it, is a 'protocol' error. auto: twice the largest records the workload reads in one request, at least 1 MiB",
};

/// `--store-opt timeout_ms`: 1 ms to an hour.
pub fn timeout(o: &super::StoreOptions) -> Result<Duration, crate::error::UsageError> {
    let ms = o.positive("timeout_ms")?;
    if ms > MAX_TIMEOUT_MS {
        return Err(crate::error::UsageError::new(format!(
            "--store-opt timeout_ms={ms}: expected 1 to {MAX_TIMEOUT_MS} (an hour)"
        )));
    }
    Ok(Duration::from_millis(ms))
}

/// `--store-opt max_reply`: a size (4MiB, 1g), or `auto`, which the plan replaces by what the
/// workload needs (`plan::fill_max_reply`); `auto` left as it is (no workload behind the
/// options) is `DEFAULT_MAX_REPLY`.
pub fn max_reply(o: &super::StoreOptions) -> Result<usize, crate::error::UsageError> {
    let v = o.str("max_reply");
    if v.is_empty() || v == "auto" {
        return Ok(DEFAULT_MAX_REPLY);
    }
    let n = crate::values::parse_size("--store-opt max_reply", v)?;
    if n < MIN_MAX_REPLY as u64 || n > MAX_MAX_REPLY as u64 {
        return Err(crate::error::UsageError::new(format!(
            "--store-opt max_reply={v}: expected auto or a size from 64KiB to 1TiB"
        )));
    }
    Ok(n as usize)
}

/// Resolves `host:port`, with a clear error.
pub fn resolve(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("'{addr}': {e} (expected host:port)"))?
        .next()
        .ok_or_else(|| format!("'{addr}' resolves to no address"))
}

/// A comma-separated address list ("h:p,h:p"), each resolved.
pub fn resolve_list(list: &str) -> Result<Vec<SocketAddr>, String> {
    let out = list
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(resolve)
        .collect::<Result<Vec<_>, _>>()?;
    if out.is_empty() {
        return Err(format!("'{list}': expected host:port[,host:port…]"));
    }
    Ok(out)
}

impl Conn {
    pub fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<Conn> {
        Self::connect_with(addr, timeout, None)
    }

    /// Connects, with TLS when `tls` is given (the handshake completes here, so a certificate
    /// problem shows at connect time, not as the first operation's error). The handshake has
    /// the same deadline as a request.
    pub fn connect_with(
        addr: SocketAddr,
        timeout: Duration,
        tls: Option<&Tls>,
    ) -> std::io::Result<Conn> {
        let tcp = TcpStream::connect_timeout(&addr, timeout)?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(timeout))?;
        tcp.set_write_timeout(Some(timeout))?;
        let stream = match tls {
            None => Stream::Plain(tcp),
            Some(t) => {
                let mut conn =
                    rustls::ClientConnection::new(t.config.clone(), t.server_name.clone())
                        .map_err(std::io::Error::other)?;
                let mut tcp = tcp;
                let deadline = Instant::now() + timeout;
                while conn.is_handshaking() {
                    if Instant::now() >= deadline {
                        return Err(std::io::Error::new(
                            IoKind::TimedOut,
                            "the TLS handshake did not finish within the timeout",
                        ));
                    }
                    conn.complete_io(&mut tcp)?;
                }
                Stream::Tls(Box::new(rustls::StreamOwned::new(conn, tcp)))
            }
        };
        Ok(Conn {
            stream,
            wbuf: Vec::with_capacity(4096),
            buf: vec![0; 16 * 1024],
            broken: false,
            ..Self::unconnected(addr, timeout)
        })
    }

    /// The socket and, for TLS, rustls's session on it, once a handshake (TLS, AUTH, SELECT)
    /// is done and nothing of its replies is left unread: the event-driven engine takes them
    /// over (`store::wire::Link`). `None` with bytes pending.
    #[allow(clippy::type_complexity)]
    pub fn into_parts(self) -> Option<(TcpStream, Option<Box<rustls::ClientConnection>>)> {
        if self.pos != self.end {
            return None;
        }
        match self.stream {
            Stream::Plain(s) => Some((s, None)),
            Stream::Tls(s) => {
                let s = *s;
                let mut conn = s.conn;
                // Plaintext rustls decrypted and nobody read would be lost.
                let pending = conn
                    .process_new_packets()
                    .map(|st| st.plaintext_bytes_to_read())
                    .unwrap_or(1);
                (pending == 0).then(|| (s.sock, Some(Box::new(conn))))
            }
            Stream::None => None,
        }
    }

    /// A connection to `addr` not opened yet: `broken`, so the client opens it the first time
    /// it is used (a Redis Cluster node no key has been routed to costs no socket).
    pub fn unconnected(addr: SocketAddr, timeout: Duration) -> Conn {
        Conn {
            stream: Stream::None,
            wbuf: Vec::new(),
            buf: Vec::new(),
            end: 0,
            pos: 0,
            broken: true,
            addr,
            limit: DEFAULT_MAX_REPLY,
            timeout: timeout.min(Duration::from_millis(MAX_TIMEOUT_MS)),
            deadline: None,
            waited: false,
            short: [false; 2],
            spin: None,
        }
    }

    /// Sets the most bytes one request's replies may hold (clamped to the accepted range).
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.clamp(MIN_MAX_REPLY, MAX_MAX_REPLY);
    }

    /// How reads wait for replies (`--store-opt reply_wait`, resolved by the run).
    pub fn set_wait(&mut self, w: super::wait::Wait) {
        self.spin = w.budget();
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Starts a request: earlier replies' bytes are dropped (views into them end here).
    #[inline]
    pub fn begin(&mut self) {
        if self.pos == self.end {
            self.pos = 0;
            self.end = 0;
        } else if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        self.wbuf.clear();
        self.deadline = None;
        self.waited = false;
        if self.short != [false; 2] {
            self.restore_timeouts();
        }
    }

    /// Writes the request in `wbuf`; the request's deadline starts here. One clock read per
    /// request (vDSO, not a system call); the socket's timeouts change only when a request
    /// has to wait more than once.
    #[inline]
    pub fn send(&mut self) -> Result<(), RawError> {
        self.deadline = Some(Instant::now() + self.timeout);
        let mut at = 0;
        while at < self.wbuf.len() {
            if at > 0 {
                // A partial write: the rest within what is left of the deadline.
                self.waited = true;
                self.shorten(false)?;
            }
            match self.stream.write(&self.wbuf[at..]) {
                Ok(0) => return Err(self.io_error("send", IoKind::WriteZero.into())),
                Ok(n) => at += n,
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(e) => return Err(self.io_error("send", e)),
            }
        }
        if let Stream::Tls(_) = self.stream {
            let r = self.stream.flush();
            r.map_err(|e| self.io_error("send", e))?;
        }
        Ok(())
    }

    /// Reads more bytes; the buffer grows when full, up to the limit.
    fn fill(&mut self) -> Result<(), RawError> {
        if self.end == self.buf.len() {
            if self.end >= self.limit {
                let limit = self.limit;
                return Err(self.protocol(format!(
                    "the replies to one request pass {limit} bytes (max_reply)"
                )));
            }
            let n = (self.buf.len() * 2).clamp(4096, self.limit);
            self.buf.resize(n, 0);
        }
        if self.waited {
            self.shorten(true)?;
        }
        self.waited = true;
        // `reply_wait=spin`: poll first (plain TCP only: TLS may hold decrypted bytes already).
        if let (Some(budget), Stream::Plain(tcp)) = (self.spin, &self.stream) {
            use std::os::fd::AsRawFd;
            let fd = tcp.as_raw_fd();
            match super::wait::spin(fd, &mut self.buf[self.end..], budget) {
                Some(n) if n > 0 => {
                    self.end += n;
                    return Ok(());
                }
                // Closed, an error, or nothing in time: the blocking read says which.
                _ => {}
            }
        }
        match self.stream.read(&mut self.buf[self.end..]) {
            Ok(0) => {
                self.broken = true;
                Err(RawError::new(
                    ErrorKind::Io,
                    true,
                    format!("{}: the server closed the connection", self.addr),
                ))
            }
            Ok(n) => {
                self.end += n;
                Ok(())
            }
            Err(e) if e.kind() == IoKind::Interrupted => Ok(()),
            Err(e) => Err(self.io_error("receive", e)),
        }
    }

    /// Before a second wait in one request: the socket waits only what is left until the
    /// deadline, and a request past it ends with `timeout`.
    #[cold]
    fn shorten(&mut self, receive: bool) -> Result<(), RawError> {
        let now = Instant::now();
        let deadline = *self.deadline.get_or_insert(now + self.timeout);
        let left = deadline.saturating_duration_since(now);
        let what = if receive { "receive" } else { "send" };
        if left.is_zero() {
            return Err(self.io_error(what, IoKind::TimedOut.into()));
        }
        // One system call per extra wait: only the direction that waits.
        self.stream.set_timeout(receive, left);
        self.short[receive as usize] = true;
        Ok(())
    }

    #[cold]
    fn restore_timeouts(&mut self) {
        for receive in [false, true] {
            if std::mem::take(&mut self.short[receive as usize]) {
                self.stream.set_timeout(receive, self.timeout);
            }
        }
    }

    #[cold]
    fn io_error(&mut self, what: &str, e: std::io::Error) -> RawError {
        self.broken = true;
        match e.kind() {
            IoKind::WouldBlock | IoKind::TimedOut => RawError::new(
                ErrorKind::Timeout,
                false,
                format!(
                    "{}: no complete reply within {} ms ({what})",
                    self.addr,
                    self.timeout.as_millis()
                ),
            ),
            _ => RawError::new(ErrorKind::Io, true, format!("{}: {what}: {e}", self.addr)),
        }
    }

    /// A reply that breaks its protocol: the connection is dropped (opened again by the next
    /// request), and the error is of kind `protocol`.
    #[cold]
    pub fn protocol(&mut self, what: impl std::fmt::Display) -> RawError {
        self.broken = true;
        RawError::new(ErrorKind::Protocol, false, format!("{}: {what}", self.addr))
    }

    /// The next line (without CRLF) as a range into the buffer; consumed.
    #[inline]
    pub fn line(&mut self) -> Result<std::ops::Range<usize>, RawError> {
        let mut from = self.pos;
        loop {
            if let Some(i) = memchr(b'\n', &self.buf[from..self.end]) {
                let nl = from + i;
                let start = self.pos;
                self.pos = nl + 1;
                let stop = if nl > start && self.buf[nl - 1] == b'\r' {
                    nl - 1
                } else {
                    nl
                };
                return Ok(start..stop);
            }
            if self.end - self.pos > MAX_LINE {
                return Err(self.protocol(format!("a reply line longer than {MAX_LINE} bytes")));
            }
            from = self.end;
            self.fill()?;
        }
    }

    /// The next `n` bytes as a range into the buffer; consumed. `n` comes from the server: more
    /// than the limit allows is a `protocol` error, and nothing is allocated for it.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<std::ops::Range<usize>, RawError> {
        if n > self.limit.saturating_sub(self.pos) {
            let limit = self.limit;
            return Err(self.protocol(format!(
                "a reply declares {n} bytes, more than the {limit} one request's replies may hold (max_reply)"
            )));
        }
        while self.end - self.pos < n {
            if self.buf.len() - self.pos < n {
                // Make room: a value larger than the buffer (`pos + n` is within the limit).
                let need = self.pos + n;
                self.buf.resize(need.next_power_of_two().min(self.limit), 0);
            }
            self.fill()?;
        }
        let r = self.pos..self.pos + n;
        self.pos += n;
        Ok(r)
    }

    /// Reads until `decode`, shown the bytes not yet consumed, finds a whole reply: it answers
    /// `Ok(Some((value, used)))` for a reply of `used` bytes, `Ok(None)` while the reply is not
    /// whole, `Err(why)` when the bytes break the protocol (the connection is then dropped, a
    /// `protocol` error). The reply is consumed; its range in the buffer comes back with the
    /// value. This is how a blocking session drives the engine's incremental decoders, so each
    /// protocol's replies are parsed in one place, under this request's deadline and limit.
    #[inline]
    pub fn read_until<T>(
        &mut self,
        mut decode: impl FnMut(&[u8]) -> Result<Option<(T, usize)>, &'static str>,
    ) -> Result<(T, std::ops::Range<usize>), RawError> {
        loop {
            match decode(&self.buf[self.pos..self.end]) {
                Ok(Some((value, used))) => {
                    let r = self.pos..self.pos + used;
                    self.pos += used;
                    return Ok((value, r));
                }
                Ok(None) => self.fill()?,
                Err(why) => return Err(self.protocol(why)),
            }
        }
    }

    #[inline]
    pub fn bytes(&self, r: std::ops::Range<usize>) -> &[u8] {
        &self.buf[r]
    }

    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }
}

/// A server's text for an error message: at most 200 bytes, lossy UTF-8, control characters
/// as escapes (console::printable).
pub fn excerpt(b: &[u8]) -> String {
    let cut = b.len().min(200);
    let mut s = crate::console::printable(&String::from_utf8_lossy(&b[..cut])).into_owned();
    if cut < b.len() {
        s.push('…');
    }
    s
}

#[inline]
pub fn memchr(b: u8, s: &[u8]) -> Option<usize> {
    s.iter().position(|&c| c == b)
}

/// Parses a decimal number (no sign).
#[inline]
pub fn parse_usize(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut n = 0usize;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (c - b'0') as usize;
    }
    Some(n)
}

/// Appends a decimal number.
#[inline]
pub fn push_num(out: &mut Vec<u8>, n: usize) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(n).as_bytes());
}

#[cfg(test)]
#[path = "net_tests.rs"]
pub(crate) mod tests;
