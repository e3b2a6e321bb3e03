//! What a connection of the engine reads and writes through: plain TCP, TLS over TCP (rustls,
//! driven by hand so the socket stays non-blocking and edge-triggered), or memcached's UDP
//! (each request one datagram with the 8-byte frame header, replies put back in request order).
//!
//! rustls has no non-blocking stream of its own (its `Stream` blocks on the socket); its
//! `ClientConnection` takes ciphertext (`read_tls`/`write_tls`) and gives plaintext, which is
//! all an event loop needs. A TLS link differs from a plain one in two ways the connection
//! must know: a short read does not mean the socket is empty (records arrive whole or not at
//! all), and bytes taken from the write buffer may still sit in rustls (`flush`) — a request's
//! send time is stamped only once the socket took its last ciphertext byte.

use crate::store::wire::Link as Opened;
use mio::event::Source;
use mio::net::{TcpStream, UdpSocket};
use mio::{Interest, Registry, Token};
use std::io::{self, Read, Write};

pub(super) use super::udp::UdpLink;

pub(super) enum Link {
    Tcp(TcpStream),
    Tls(Box<TlsLink>),
    Udp(Box<UdpLink>),
}

pub(super) struct TlsLink {
    sock: TcpStream,
    tls: rustls::ClientConnection,
}

impl Link {
    /// Takes over a connection the store opened (blocking, handshake done): non-blocking now.
    pub(super) fn from_opened(o: Opened, depth: usize, max_reply: usize) -> io::Result<Link> {
        Ok(match o {
            Opened::Tcp(s) => {
                s.set_nonblocking(true)?;
                Link::Tcp(TcpStream::from_std(s))
            }
            Opened::Tls(s, tls) => {
                s.set_nonblocking(true)?;
                Link::Tls(Box::new(TlsLink {
                    sock: TcpStream::from_std(s),
                    tls: *tls,
                }))
            }
            Opened::Udp(s) => {
                s.set_nonblocking(true)?;
                let mut u = UdpLink::new(UdpSocket::from_std(s), depth);
                u.set_limit(max_reply);
                Link::Udp(Box::new(u))
            }
        })
    }

    /// Whether a read shorter than the room offered means the socket is empty (edge-triggered
    /// readiness is then re-armed by new data). Not so for TLS (a record not yet whole) or
    /// datagrams (one per read).
    #[inline]
    pub(super) fn short_read_drains(&self) -> bool {
        matches!(self, Link::Tcp(_))
    }

    /// Sends what the link still holds of earlier writes; `Ok(true)`: nothing is left.
    #[inline]
    pub(super) fn flush(&mut self) -> io::Result<bool> {
        match self {
            Link::Tls(t) => t.flush_tls(),
            _ => Ok(true),
        }
    }
}

impl TlsLink {
    fn flush_tls(&mut self) -> io::Result<bool> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                // No plaintext buffered: take more ciphertext.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: a close, as for plain TCP.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            match self.tls.read_tls(&mut self.sock) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    self.tls
                        .process_new_packets()
                        .map_err(|e| io::Error::other(format!("TLS: {e}")))?;
                    if self.tls.wants_write() {
                        // Alerts and key updates; what does not go now goes with the next write.
                        self.flush_tls()?;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Earlier ciphertext first: rustls's buffer stays one write deep.
        if !self.flush_tls()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.tls.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.flush_tls()?;
        Ok(n)
    }
}

impl Read for Link {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Tcp(s) => s.read(buf),
            Link::Tls(t) => t.read(buf),
            Link::Udp(u) => u.read(buf),
        }
    }
}

impl Write for Link {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Link::Tcp(s) => s.write(buf),
            Link::Tls(t) => t.write(buf),
            Link::Udp(u) => u.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for Link {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Link::Tcp(s) => s.register(r, t, i),
            Link::Tls(l) => l.sock.register(r, t, i),
            Link::Udp(u) => u.sock.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Link::Tcp(s) => s.reregister(r, t, i),
            Link::Tls(l) => l.sock.reregister(r, t, i),
            Link::Udp(u) => u.sock.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Link::Tcp(s) => s.deregister(r),
            Link::Tls(l) => l.sock.deregister(r),
            Link::Udp(u) => u.sock.deregister(r),
        }
    }
}
