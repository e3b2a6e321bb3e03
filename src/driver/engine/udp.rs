//! memcached's UDP for the engine (papers/003 measures GETs over UDP): each request goes out
//! as one datagram with the 8-byte frame header (request id, sequence 0, 1 datagram,
//! reserved), and the replies' datagrams — in any order, a reply's parts too, since any of
//! memcached's threads may answer — are put back in request order, so the codec reads one
//! ordered stream as over TCP.
//!
//! The codec marks where each request ends (a 4-byte length before it, `wire::UDP_FRAMED`);
//! the link numbers the requests. A reply is held until it is whole and its turn has come; a
//! reply's parts together hold at most `limit` bytes, a frame header that does not add up or a
//! request id not in flight breaks the link. A lost datagram leaves its request without a
//! reply: it times out (`timeout_ms`) and the connection is replaced, as for TCP.

use crate::store::udp_frame::{self, Filed, Reply};
use mio::net::UdpSocket;
use std::io;

pub(crate) struct UdpLink {
    pub(super) sock: UdpSocket,
    /// Requests sent and replies delivered, counted from 0 (the request id is the low 16 bits).
    sent: u64,
    delivered: u64,
    /// A reply per request in flight, at `number % slots.len()`.
    slots: Vec<Reply>,
    dgram: Vec<u8>,
    /// Whole replies in order, not yet read.
    ready: Vec<u8>,
    ready_at: usize,
    limit: usize,
}

impl UdpLink {
    pub(super) fn new(sock: UdpSocket, depth: usize) -> UdpLink {
        UdpLink {
            sock,
            sent: 0,
            delivered: 0,
            slots: (0..depth.max(1)).map(|_| Reply::default()).collect(),
            dgram: vec![0; 65_536],
            ready: Vec::new(),
            ready_at: 0,
            limit: usize::MAX,
        }
    }

    /// The most bytes one reply may hold (`max_reply`).
    pub(super) fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// Sends whole framed requests from `buf` (each a 4-byte little-endian length and the
    /// request); returns the bytes of those sent.
    pub(super) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut used = 0;
        while buf.len() - used >= 4 {
            let len = u32::from_le_bytes(buf[used..used + 4].try_into().expect("4 bytes")) as usize;
            let Some(req) = buf.get(used + 4..used + 4 + len) else {
                return Err(io::Error::other("a UDP request not framed whole"));
            };
            if len + 8 > self.dgram.len() {
                return Err(io::Error::other("a request larger than one datagram"));
            }
            if self.sent - self.delivered >= self.slots.len() as u64 {
                break;
            }
            let id = (self.sent & 0xFFFF) as u16;
            self.dgram[..8].copy_from_slice(&udp_frame::request_header(id));
            self.dgram[8..8 + len].copy_from_slice(req);
            match self.sock.send(&self.dgram[..8 + len]) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && used > 0 => break,
                Err(e) => return Err(e),
            }
            let slot = (self.sent % self.slots.len() as u64) as usize;
            self.slots[slot].clear();
            self.sent += 1;
            used += 4 + len;
        }
        if used == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(used)
    }

    /// Copies replies whose turn has come into `out`; `WouldBlock` when none has.
    pub(super) fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.ready_at < self.ready.len() {
                let n = out.len().min(self.ready.len() - self.ready_at);
                out[..n].copy_from_slice(&self.ready[self.ready_at..self.ready_at + n]);
                self.ready_at += n;
                if self.ready_at == self.ready.len() {
                    self.ready.clear();
                    self.ready_at = 0;
                }
                return Ok(n);
            }
            let n = self.sock.recv(&mut self.dgram)?;
            self.take(n)?;
        }
    }

    /// Files datagram `dgram[..n]` under its request, and moves the replies now whole and in
    /// turn to `ready`.
    fn take(&mut self, n: usize) -> io::Result<()> {
        let bad = |why: &str| Err(io::Error::other(format!("UDP: {why}")));
        let (id, seq, total) = match udp_frame::reply_header(&self.dgram[..n]) {
            Ok(h) => h,
            Err(why) => return bad(why),
        };
        // The request this answers: within the ones in flight, or it is not ours.
        let ahead = id.wrapping_sub((self.delivered & 0xFFFF) as u16) as u64;
        if ahead >= self.sent - self.delivered {
            return bad("a reply to a request id not in flight");
        }
        let slot = ((self.delivered + ahead) % self.slots.len() as u64) as usize;
        let payload = &self.dgram[udp_frame::HEADER..n];
        match self.slots[slot].file(seq, total, payload, self.limit) {
            Ok(Filed::More | Filed::Whole) => {}
            Ok(Filed::Again) => return bad("a reply's datagrams that disagree"),
            Err(why) => return bad(why),
        }
        while self.delivered < self.sent {
            let slot = (self.delivered % self.slots.len() as u64) as usize;
            let p = &mut self.slots[slot];
            if !p.is_whole() {
                break;
            }
            p.join_into(&mut self.ready);
            self.delivered += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(depth: usize) -> (UdpLink, std::net::UdpSocket) {
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let c = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        c.connect(server.local_addr().unwrap()).unwrap();
        server.connect(c.local_addr().unwrap()).unwrap();
        c.set_nonblocking(true).unwrap();
        (UdpLink::new(UdpSocket::from_std(c), depth), server)
    }

    fn framed(reqs: &[&[u8]]) -> Vec<u8> {
        let mut v = vec![];
        for r in reqs {
            v.extend_from_slice(&(r.len() as u32).to_le_bytes());
            v.extend_from_slice(r);
        }
        v
    }

    fn reply(server: &std::net::UdpSocket, id: u16, seq: u16, total: u16, body: &[u8]) {
        let mut d = vec![];
        for x in [id, seq, total, 0] {
            d.extend_from_slice(&x.to_be_bytes());
        }
        d.extend_from_slice(body);
        server.send(&d).unwrap();
    }

    fn read_all(l: &mut UdpLink) -> Vec<u8> {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut out = vec![];
        let mut b = [0u8; 7];
        loop {
            match l.read(&mut b) {
                Ok(n) => out.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return out,
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn requests_are_numbered_and_replies_come_back_in_request_order() {
        let (mut l, server) = pair(4);
        let buf = framed(&[b"get a\r\n", b"get b\r\n", b"get c\r\n"]);
        assert_eq!(l.write(&buf).unwrap(), buf.len());
        let mut d = [0u8; 64];
        for want in 0u16..3 {
            let n = server.recv(&mut d).unwrap();
            assert_eq!(u16::from_be_bytes([d[0], d[1]]), want);
            assert_eq!(&d[2..8], &[0, 0, 0, 1, 0, 0]);
            assert_eq!(n, 15);
        }
        // The third reply first, the second in two parts, second part first.
        reply(&server, 2, 0, 1, b"C;");
        reply(&server, 1, 1, 2, b"B2;");
        assert_eq!(read_all(&mut l), b"");
        reply(&server, 0, 0, 1, b"A;");
        assert_eq!(read_all(&mut l), b"A;");
        reply(&server, 1, 0, 2, b"B1,");
        assert_eq!(read_all(&mut l), b"B1,B2;C;");
    }

    #[test]
    fn no_more_requests_than_slots_are_in_flight() {
        let (mut l, _server) = pair(2);
        let buf = framed(&[b"x", b"y", b"z"]);
        assert_eq!(l.write(&buf).unwrap(), 10);
        assert_eq!(
            l.write(&buf[10..]).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    #[test]
    fn hostile_datagrams_break_the_link() {
        for (id, seq, total) in [(9u16, 0u16, 1u16), (0, 1, 1), (0, 0, 0)] {
            let (mut l, server) = pair(2);
            l.write(&framed(&[b"get a\r\n"])).unwrap();
            reply(&server, id, seq, total, b"x");
            std::thread::sleep(std::time::Duration::from_millis(20));
            let e = l.read(&mut [0u8; 16]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::Other, "{id} {seq} {total}");
        }
        let (mut l, server) = pair(2);
        l.set_limit(4);
        l.write(&framed(&[b"get a\r\n"])).unwrap();
        reply(&server, 0, 0, 2, b"abc");
        reply(&server, 0, 1, 2, b"de");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut b = [0u8; 16];
        let mut got = l.read(&mut b);
        if got
            .as_ref()
            .is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock)
        {
            got = l.read(&mut b);
        }
        assert!(got.unwrap_err().to_string().contains("max_reply"));
    }
}
