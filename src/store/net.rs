//! A blocking TCP connection with reusable buffers, shared by the server clients (memcached,
//! redis, etcd). Replies are parsed in place in the read buffer, so a read's value is a view
//! into it until the session's next call: no allocation per operation once the buffers have
//! grown to the largest reply.
//!
//! Written by hand rather than taken from the client crates: those allocate a value per reply
//! and hide when a request is written and when its reply has arrived, and both are what the
//! latency measurement is about.

use super::kv::RawError;
use super::ErrorKind;
use std::io::{ErrorKind as IoKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Plain TCP, or TLS over it (rustls; Redis's `tls=true`).
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    #[inline]
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(b),
            Stream::Tls(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    #[inline]
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
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
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
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
    /// Bytes of `buf` holding data, and the first not yet consumed.
    end: usize,
    pos: usize,
    /// Set when the stream can no longer be trusted (a timeout left a reply in flight).
    pub broken: bool,
    pub addr: SocketAddr,
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
    /// problem shows at connect time, not as the first operation's error).
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
                while conn.is_handshaking() {
                    conn.complete_io(&mut tcp)?;
                }
                Stream::Tls(Box::new(rustls::StreamOwned::new(conn, tcp)))
            }
        };
        Ok(Conn {
            stream,
            wbuf: Vec::with_capacity(4096),
            buf: vec![0; 16 * 1024],
            end: 0,
            pos: 0,
            broken: false,
            addr,
        })
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
    }

    /// Writes the request in `wbuf`.
    #[inline]
    pub fn send(&mut self) -> Result<(), RawError> {
        let r = self.stream.write_all(&self.wbuf);
        r.map_err(|e| self.io_error("send", e))
    }

    /// Reads more bytes; the buffer grows when full.
    fn fill(&mut self) -> Result<(), RawError> {
        if self.end == self.buf.len() {
            let n = self.buf.len() * 2;
            self.buf.resize(n, 0);
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

    #[cold]
    fn io_error(&mut self, what: &str, e: std::io::Error) -> RawError {
        self.broken = true;
        match e.kind() {
            IoKind::WouldBlock | IoKind::TimedOut => RawError::new(
                ErrorKind::Timeout,
                false,
                format!("{}: no reply within the timeout ({what})", self.addr),
            ),
            _ => RawError::new(ErrorKind::Io, true, format!("{}: {what}: {e}", self.addr)),
        }
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
            from = self.end;
            self.fill()?;
        }
    }

    /// The next `n` bytes as a range into the buffer; consumed.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<std::ops::Range<usize>, RawError> {
        while self.end - self.pos < n {
            if self.buf.len() - self.pos < n {
                // Make room: a value larger than the buffer.
                let need = self.pos + n;
                self.buf.resize(need.next_power_of_two(), 0);
            }
            self.fill()?;
        }
        let r = self.pos..self.pos + n;
        self.pos += n;
        Ok(r)
    }

    #[inline]
    pub fn bytes(&self, r: std::ops::Range<usize>) -> &[u8] {
        &self.buf[r]
    }

    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }
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
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn lines_and_takes_across_reads() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            // Split mid-line and mid-value, and a value bigger than the initial buffer.
            s.write_all(b"VAL").unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(b"UE 5\r\nhel").unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(b"lo\r\n").unwrap();
            let big = vec![b'x'; 40_000];
            s.write_all(&big).unwrap();
            s.write_all(b"END\r\n").unwrap();
        });
        let mut c = Conn::connect(addr, Duration::from_secs(5)).unwrap();
        c.begin();
        let r = c.line().unwrap();
        assert_eq!(c.bytes(r), b"VALUE 5");
        let r = c.take(5).unwrap();
        assert_eq!(c.bytes(r), b"hello");
        let r = c.line().unwrap();
        assert_eq!(c.bytes(r), b"");
        c.begin();
        let r = c.take(40_000).unwrap();
        assert!(c.bytes(r).iter().all(|&b| b == b'x'));
        let r = c.line().unwrap();
        assert_eq!(c.bytes(r), b"END");
        t.join().unwrap();
        c.begin();
        let e = c.line().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io);
        assert!(e.fatal);
        assert!(e.message.contains("closed the connection"), "{}", e.message);
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_usize(b"1234"), Some(1234));
        assert_eq!(parse_usize(b""), None);
        assert_eq!(parse_usize(b"12a"), None);
        let mut v = Vec::new();
        push_num(&mut v, 907);
        assert_eq!(v, b"907");
    }
}
