//! What every mechanism does per request, identically: format `get key:NNNNNNN\r\n` from a
//! per-connection xorshift stream, parse a memcached text reply (`VALUE <key> <flags> <len>\r\n`,
//! the data, `\r\nEND\r\n`; or a bare `END\r\n` for a miss), and per connection a ring of the
//! send instants of the requests in flight (replies come back in order on one connection).
//! Latency is timed from the send (the clock read just before the write that carried it)
//! to the read that completed the reply: two clock reads, one parse, one histogram record.

use std::time::Instant;

/// Widest request: "get key:" + 7 digits + "\r\n".
pub const MAX_REQ: usize = 17;
/// A reply larger than this is a protocol error (1 KiB values plus the header).
pub const MAX_REPLY: usize = 2048;

pub struct Stream {
    state: u64,
    keys: u64,
}

impl Stream {
    pub fn new(seed: u64, keys: u64) -> Stream {
        Stream {
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            keys,
        }
    }
    fn next_key(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        x % self.keys
    }
    /// Appends the next request to `out` (no allocation once `out` has its capacity).
    pub fn push_request(&mut self, out: &mut Vec<u8>) {
        let k = self.next_key();
        out.extend_from_slice(b"get key:");
        push_key(out, k);
        out.extend_from_slice(b"\r\n");
    }
}

/// Key `k` as 7 zero-padded digits (the key space is at most 10^7).
pub fn push_key(out: &mut Vec<u8>, k: u64) {
    let mut d = [b'0'; 7];
    let mut v = k;
    for i in (0..7).rev() {
        d[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out.extend_from_slice(&d);
}

pub enum Reply {
    /// A complete reply of this many bytes; `hit` false for a miss.
    Done {
        len: usize,
        hit: bool,
    },
    Partial,
    Bad,
}

/// Parses one reply at the start of `buf`.
pub fn parse(buf: &[u8]) -> Reply {
    if buf.len() >= 5 && &buf[..5] == b"END\r\n" {
        return Reply::Done { len: 5, hit: false };
    }
    let Some(nl) = buf.iter().take(MAX_REPLY).position(|&b| b == b'\n') else {
        return if buf.len() >= MAX_REPLY {
            Reply::Bad
        } else {
            Reply::Partial
        };
    };
    let line = &buf[..nl];
    if !line.starts_with(b"VALUE ") || line.last() != Some(&b'\r') {
        return Reply::Bad;
    }
    // The data length: the last field (a 4th, the CAS, is never sent for plain `get`).
    let fields = &line[..line.len() - 1];
    let start = fields.iter().rposition(|&b| b == b' ').map_or(0, |p| p + 1);
    let mut n: usize = 0;
    for &c in &fields[start..] {
        if !c.is_ascii_digit() || n > MAX_REPLY {
            return Reply::Bad;
        }
        n = n * 10 + (c - b'0') as usize;
    }
    let total = nl + 1 + n + 2 + 5;
    if total > MAX_REPLY {
        return Reply::Bad;
    }
    if buf.len() < total {
        return Reply::Partial;
    }
    if &buf[total - 7..total] != b"\r\nEND\r\n" {
        return Reply::Bad;
    }
    Reply::Done {
        len: total,
        hit: true,
    }
}

/// Send instants of the requests in flight on one connection, oldest first (depth <= 64).
pub struct InFlight {
    at: [Option<Instant>; 64],
    head: usize,
    len: usize,
}

impl InFlight {
    pub fn new() -> InFlight {
        InFlight {
            at: [None; 64],
            head: 0,
            len: 0,
        }
    }
    pub fn push(&mut self, t: Instant) {
        self.at[(self.head + self.len) % 64] = Some(t);
        self.len += 1;
    }
    pub fn pop(&mut self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        let t = self.at[self.head].take();
        self.head = (self.head + 1) % 64;
        self.len -= 1;
        t
    }
}

/// One loop's (or one runtime thread's) counts.
pub struct Tally {
    pub hist: hdrhistogram::Histogram<u64>,
    pub misses: u64,
    pub errors: u64,
}

impl Tally {
    pub fn new() -> Tally {
        // Nanoseconds, 1 us .. 60 s, 3 significant digits: kvmeter's precision.
        Tally {
            hist: hdrhistogram::Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap(),
            misses: 0,
            errors: 0,
        }
    }
    pub fn record(&mut self, sent: Instant, now: Instant, hit: bool) {
        let ns = now.saturating_duration_since(sent).as_nanos() as u64;
        self.hist.saturating_record(ns.max(1));
        if !hit {
            self.misses += 1;
        }
    }
    pub fn merge(&mut self, o: &Tally) {
        self.hist.add(&o.hist).unwrap();
        self.misses += o.misses;
        self.errors += o.errors;
    }
}

/// Consumes every complete reply at the front of `buf[..*filled]`: records each against its
/// send instant, appends a new request per reply to `out` (stamped `now` once written by the
/// caller: the caller pushes the instants after its write). Returns how many replies were
/// completed, or None on a protocol error.
pub fn consume(
    buf: &mut [u8],
    filled: &mut usize,
    inflight: &mut InFlight,
    tally: &mut Tally,
    now: Instant,
) -> Option<usize> {
    let mut off = 0;
    let mut done = 0;
    loop {
        match parse(&buf[off..*filled]) {
            Reply::Done { len, hit } => {
                let sent = inflight.pop()?;
                tally.record(sent, now, hit);
                off += len;
                done += 1;
            }
            Reply::Partial => break,
            Reply::Bad => return None,
        }
    }
    if off > 0 {
        buf.copy_within(off..*filled, 0);
        *filled -= off;
    }
    Some(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hit_miss_partial_bad() {
        // A 23-byte header line, 3 data bytes, CR LF, "END" CR LF: 33 bytes.
        let mut r = b"VALUE key:0000001 0 3\r\nabc\r\nEND\r\n".to_vec();
        assert!(matches!(parse(&r), Reply::Done { len: 33, hit: true }));
        assert!(matches!(parse(&r[..20]), Reply::Partial));
        assert!(matches!(
            parse(b"END\r\n"),
            Reply::Done { len: 5, hit: false }
        ));
        r[28] = b'X';
        assert!(matches!(parse(&r), Reply::Bad));
        assert!(matches!(parse(b"SERVER_ERROR x\r\n"), Reply::Bad));
    }

    #[test]
    fn request_format() {
        let mut s = Stream::new(1, 100);
        let mut v = Vec::new();
        s.push_request(&mut v);
        assert_eq!(v.len(), MAX_REQ);
        assert!(v.starts_with(b"get key:00000"));
    }
}
