//! memcached's UDP frame (protocol.txt, "UDP protocol"): an 8-byte header before each
//! datagram — request id, sequence number, datagram count, reserved — and a reply that spans
//! several datagrams, in any order, put back together. One module for the blocking session
//! (`memcached/udp.rs`, one get at a time) and the event-driven engine (`driver/engine/udp.rs`,
//! many in flight); each keeps its own rule for a datagram that is not its own (the session
//! skips a late reply to a request that timed out; the engine's link breaks).

/// Bytes of the frame header.
pub const HEADER: usize = 8;
/// The most datagrams one reply may span (memcached sends at most 1,400 bytes each).
pub const MAX_PARTS: usize = 4096;

/// The frame header of request `id`: sequence 0 of 1 datagram.
#[inline]
pub fn request_header(id: u16) -> [u8; HEADER] {
    let id = id.to_be_bytes();
    [id[0], id[1], 0, 0, 0, 1, 0, 0]
}

/// A reply datagram's (request id, sequence, count), when they add up.
#[inline]
pub fn reply_header(d: &[u8]) -> Result<(u16, u16, u16), &'static str> {
    if d.len() < HEADER {
        return Err("a datagram shorter than its frame header");
    }
    let h = |i: usize| u16::from_be_bytes([d[i], d[i + 1]]);
    let (id, seq, total) = (h(0), h(2), h(4));
    if total == 0 || seq >= total || total as usize > MAX_PARTS {
        return Err("a frame header whose sequence does not add up");
    }
    Ok((id, seq, total))
}

/// What filing a datagram did.
#[derive(Debug, PartialEq, Eq)]
pub enum Filed {
    /// The reply still waits for datagrams.
    More,
    /// Every datagram of the reply is in.
    Whole,
    /// A sequence number already filed (a duplicate datagram).
    Again,
}

/// One reply's datagrams, kept until all are in; buffers are reused.
#[derive(Default)]
pub struct Reply {
    total: u16,
    got: u16,
    /// Each datagram's sequence number and where its payload sits in `bytes`.
    seqs: Vec<(u16, usize, usize)>,
    bytes: Vec<u8>,
}

impl Reply {
    pub fn clear(&mut self) {
        self.total = 0;
        self.got = 0;
        self.seqs.clear();
        self.bytes.clear();
    }

    /// Whether no datagram was filed since `clear`.
    pub fn is_empty(&self) -> bool {
        self.got == 0
    }

    /// Whether every datagram of the reply is in.
    pub fn is_whole(&self) -> bool {
        self.got > 0 && self.got == self.total
    }

    /// Files datagram `seq` of `total` (its payload after the header). The reply's datagrams
    /// must agree on their count, and their payloads together hold at most `limit` bytes.
    pub fn file(
        &mut self,
        seq: u16,
        total: u16,
        payload: &[u8],
        limit: usize,
    ) -> Result<Filed, &'static str> {
        if self.got == 0 {
            self.total = total;
        } else if self.total != total {
            return Err("a reply's datagrams that disagree on their count");
        } else if self.seqs.iter().any(|s| s.0 == seq) {
            return Ok(Filed::Again);
        }
        if self.bytes.len() + payload.len() > limit {
            return Err("a reply larger than max_reply");
        }
        let at = self.bytes.len();
        self.bytes.extend_from_slice(payload);
        self.seqs.push((seq, at, payload.len()));
        self.got += 1;
        Ok(if self.got == self.total {
            Filed::Whole
        } else {
            Filed::More
        })
    }

    /// Appends the whole reply's payloads to `out` in sequence order, and clears it.
    pub fn join_into(&mut self, out: &mut Vec<u8>) {
        self.seqs.sort_unstable_by_key(|s| s.0);
        for &(_, at, len) in &self.seqs {
            out.extend_from_slice(&self.bytes[at..at + len]);
        }
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagrams_in_any_order_make_one_reply() {
        let mut r = Reply::default();
        assert_eq!(r.file(2, 3, b"c", 64), Ok(Filed::More));
        assert_eq!(r.file(0, 3, b"a", 64), Ok(Filed::More));
        assert_eq!(r.file(0, 3, b"a", 64), Ok(Filed::Again));
        assert!(r.file(1, 4, b"b", 64).is_err());
        assert_eq!(r.file(1, 3, b"b", 64), Ok(Filed::Whole));
        let mut out = vec![];
        r.join_into(&mut out);
        assert_eq!(out, b"abc");
        assert!(r.is_empty());
        assert!(r.file(0, 2, &[0; 65], 64).is_err());
    }

    #[test]
    fn headers_are_checked_before_they_are_used() {
        assert_eq!(request_header(0x0102), [1, 2, 0, 0, 0, 1, 0, 0]);
        assert_eq!(reply_header(&[0, 7, 0, 1, 0, 2, 0, 0]), Ok((7, 1, 2)));
        assert!(reply_header(&[0, 7, 0, 2, 0, 2, 0, 0]).is_err());
        assert!(reply_header(&[0, 7, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(reply_header(&[0, 7, 0, 0, 0x10, 1, 0, 0]).is_err());
        assert!(reply_header(&[0, 7, 0]).is_err());
    }
}
