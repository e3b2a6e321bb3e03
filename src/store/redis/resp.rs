//! RESP, Redis's wire protocol: commands as arrays of bulk strings, and replies parsed in
//! place from the connection's buffer.

use super::super::kv::RawError;
use super::super::net::{parse_usize, push_num, Conn};
use super::super::wire;
use super::super::ErrorKind;
use std::ops::Range;

/// Sends one command and expects a simple (+) or integer reply; returns its text.
pub(super) fn simple(c: &mut Conn, args: &[&[u8]]) -> Result<String, RawError> {
    c.begin();
    command(&mut c.wbuf, args);
    c.send()?;
    match reply(c)? {
        Reply::Simple(r) => Ok(String::from_utf8_lossy(c.bytes(r)).into_owned()),
        Reply::Int(i) => Ok(i.to_string()),
        Reply::Bulk(Some(r)) => Ok(String::from_utf8_lossy(c.bytes(r)).into_owned()),
        Reply::Error(r) => Err(redis_error(c.bytes(r))),
        _ => Err(RawError::new(
            ErrorKind::Other,
            false,
            "Redis: unexpected reply type",
        )),
    }
}

/// Appends a RESP command (an array of bulk strings).
#[inline]
pub(super) fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    push_num(out, args.len());
    out.extend_from_slice(b"\r\n");
    for a in args {
        bulk(out, a);
    }
}

#[inline]
pub(super) fn array_head(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    push_num(out, n);
    out.extend_from_slice(b"\r\n");
}

#[inline]
pub(super) fn bulk(out: &mut Vec<u8>, a: &[u8]) {
    out.push(b'$');
    push_num(out, a.len());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
}

/// One RESP element: its kind, and its bytes as ranges of the buffer it was read from (a
/// bulk's bytes included; an array's elements follow it).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Reply {
    Simple(Range<usize>),
    Error(Range<usize>),
    Int(i64),
    Bulk(Option<Range<usize>>),
    Array(Option<usize>),
}

impl Reply {
    /// The same element with its ranges moved `by` bytes on.
    fn shifted(self, by: usize) -> Reply {
        let m = |r: Range<usize>| r.start + by..r.end + by;
        match self {
            Reply::Simple(r) => Reply::Simple(m(r)),
            Reply::Error(r) => Reply::Error(m(r)),
            Reply::Bulk(Some(r)) => Reply::Bulk(Some(m(r))),
            other => other,
        }
    }
}

/// RESP's integers (`:n`, and the lengths of `$n` and `*n`): an optional minus and at most
/// 19 digits, within i64.
#[inline]
fn int(b: &[u8]) -> Option<i64> {
    match b.first() {
        Some(b'-') => parse_usize(&b[1..])
            .filter(|&n| n <= i64::MAX as usize)
            .map(|n| -(n as i64)),
        _ => parse_usize(b)
            .filter(|&n| n <= i64::MAX as usize)
            .map(|n| n as i64),
    }
}

/// What `elem` found at a position: the element and where the next one starts, `None` while
/// it is not whole, or why the bytes break RESP.
pub(super) type Elem = Result<Option<(Reply, usize)>, &'static str>;

/// The one reader of RESP replies: the element at `buf[at..]` once it is whole. Both the
/// blocking session (`reply`, through the connection's buffer) and the engine's codec
/// (`codec.rs`, on whatever bytes have arrived) read replies with it. Lengths come from the
/// server and are bounded before they are trusted: -1 is nil, any other negative length is
/// malformed, a bulk longer than `max_reply`, or an array with more elements than
/// `max_reply` bytes can hold (each takes at least 3), breaks the reply.
#[inline]
pub(super) fn elem(buf: &[u8], at: usize, max_reply: usize) -> Elem {
    let Some((l, used)) = wire::line(&buf[at..])? else {
        return Ok(None);
    };
    let next = at + used;
    let Some((&t, rest)) = l.split_first() else {
        return Err("Redis: malformed reply (an empty line)");
    };
    let number = || int(rest).ok_or("Redis: malformed reply (a bad integer or length)");
    Ok(Some(match t {
        b'+' => (Reply::Simple(at + 1..at + 1 + rest.len()), next),
        b'-' => (Reply::Error(at + 1..at + 1 + rest.len()), next),
        b':' => (Reply::Int(number()?), next),
        b'$' => match number()? {
            -1 => (Reply::Bulk(None), next),
            n if n < 0 => return Err("Redis: malformed reply (a negative length)"),
            n if n as u64 > max_reply as u64 => {
                return Err("Redis: a reply declares a bulk longer than max_reply")
            }
            n => {
                let n = n as usize;
                if buf.len() < next + n + 2 {
                    return Ok(None);
                }
                if &buf[next + n..next + n + 2] != b"\r\n" {
                    return Err("Redis: malformed reply (a bulk without its end)");
                }
                (Reply::Bulk(Some(next..next + n)), next + n + 2)
            }
        },
        b'*' => match number()? {
            -1 => (Reply::Array(None), next),
            n if n < 0 => return Err("Redis: malformed reply (a negative length)"),
            n if n as u64 > (max_reply / 3) as u64 => {
                return Err("Redis: a reply declares an array longer than max_reply bytes can hold")
            }
            n => (Reply::Array(Some(n as usize)), next),
        },
        _ => return Err("Redis: malformed reply (garbage where a reply was expected)"),
    }))
}

/// The next reply's element, read from the connection within its deadline (a bulk's bytes
/// too, as a range in the connection's buffer).
#[inline]
pub(super) fn reply(c: &mut Conn) -> Result<Reply, RawError> {
    let limit = c.limit();
    let (r, at) = c.read_until(|b| elem(b, 0, limit))?;
    Ok(r.shifted(at.start))
}

/// How deep arrays may nest in a reply kvmeter skips (Redis 7's CLUSTER SLOTS metadata is
/// one level; deeper is a hostile or broken server).
pub(super) const MAX_DEPTH: usize = 8;

/// Reads and drops `n` replies, arrays with their elements, nested at most `MAX_DEPTH` deep.
pub(super) fn skip(c: &mut Conn, n: usize) -> Result<(), RawError> {
    // Elements still to read at each open level; no recursion, so no stack to exhaust.
    let mut open = [0usize; MAX_DEPTH + 1];
    let mut depth = 0;
    open[0] = n;
    loop {
        while open[depth] == 0 {
            if depth == 0 {
                return Ok(());
            }
            depth -= 1;
        }
        open[depth] -= 1;
        if let Reply::Array(Some(k)) = reply(c)? {
            if depth == MAX_DEPTH {
                return Err(c.protocol(format!(
                    "Redis: a reply nests arrays more than {MAX_DEPTH} deep"
                )));
            }
            depth += 1;
            open[depth] = k;
        }
    }
}

#[cold]
pub(super) fn malformed(c: &mut Conn) -> RawError {
    c.protocol("Redis: malformed reply (connection reset)")
}

#[cold]
pub(super) fn redis_error(b: &[u8]) -> RawError {
    let text = super::super::net::excerpt(b);
    let (kind, fatal) = classify(&text);
    RawError::new(kind, fatal, format!("Redis: {text}"))
}

/// What an error reply's text means, the same on worker threads and on the engine: a server
/// that cannot take the command now (out of memory, busy with a script, loading its data,
/// or a cluster asking to try again while a slot moves) is `busy`; a refused login is fatal
/// (no later command on that connection can succeed); anything else is `error`.
#[cold]
pub(super) fn classify(text: &str) -> (ErrorKind, bool) {
    let starts = |ps: &[&str]| ps.iter().any(|p| text.starts_with(p));
    let kind = if starts(&["BUSY", "LOADING", "TRYAGAIN", "OOM"]) {
        ErrorKind::Busy
    } else {
        ErrorKind::Other
    };
    (kind, starts(&["NOAUTH", "WRONGPASS"]))
}

/// Whether an error reply's text says the cluster's routing changed (MOVED, ASK or
/// CLUSTERDOWN): the slot map must be asked for again.
#[cold]
pub(super) fn rerouted(text: &str) -> bool {
    ["MOVED ", "ASK ", "CLUSTERDOWN"]
        .iter()
        .any(|p| text.starts_with(p))
}

/// A MOVED or ASK error's target (`MOVED 3999 127.0.0.1:6381`; `true` for ASK): an address
/// literal only, on both paths. A name a server sends is never resolved (no lookup without
/// a deadline, nowhere a server did not give as an address); a cluster that announces host
/// names is followed through its slot map, which is asked for again after every redirect.
pub(super) fn redirect_of(text: &str) -> Option<(std::net::SocketAddr, bool)> {
    let mut words = text.split_ascii_whitespace();
    let asking = match words.next()? {
        "MOVED" => false,
        "ASK" => true,
        _ => return None,
    };
    let addr = words.nth(1)?.parse().ok()?;
    Some((addr, asking))
}

/// Sends one command whose reply is an array of bulk strings (or nil); returns the strings.
pub(super) fn strings(c: &mut Conn, args: &[&[u8]]) -> Result<Vec<String>, RawError> {
    c.begin();
    command(&mut c.wbuf, args);
    c.send()?;
    match reply(c)? {
        Reply::Array(None) => Ok(vec![]),
        Reply::Array(Some(n)) => {
            // `n` is the server's: the capacity grows with what actually arrives.
            let mut out = Vec::with_capacity(n.min(16));
            for _ in 0..n {
                match reply(c)? {
                    Reply::Bulk(Some(r)) => {
                        out.push(String::from_utf8_lossy(c.bytes(r)).into_owned())
                    }
                    Reply::Array(Some(k)) => {
                        skip(c, k)?;
                        out.push(String::new())
                    }
                    _ => out.push(String::new()),
                }
            }
            Ok(out)
        }
        Reply::Error(r) => Err(redis_error(c.bytes(r))),
        _ => Err(malformed(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::net::tests::serve;
    use std::time::Duration;

    /// A connection to a server that answers `reply` (limit 1 MiB).
    fn conn(reply: &[u8]) -> Conn {
        let addr = serve(vec![reply.to_vec()], Duration::ZERO);
        let mut c = Conn::connect(addr, Duration::from_secs(5)).unwrap();
        c.set_limit(1 << 20);
        c.begin();
        c
    }

    fn err(reply: &[u8]) -> RawError {
        let mut c = conn(reply);
        match super::reply(&mut c) {
            Ok(_) => panic!("{}: accepted", String::from_utf8_lossy(reply)),
            Err(e) => {
                assert!(c.broken, "{}", e.message);
                e
            }
        }
    }

    #[test]
    fn hostile_lengths_are_protocol_errors() {
        for r in [
            &b"$9000000000000000000\r\n"[..],
            b"$999999999999\r\n",
            b"$1048577\r\n",
            b"*999999999999\r\n",
            b"*9000000000000000000\r\n",
        ] {
            let e = err(r);
            assert_eq!(e.kind, ErrorKind::Protocol, "{}", e.message);
            assert!(e.message.contains("max_reply"), "{}", e.message);
        }
        // Negative lengths other than nil's -1, and numbers RESP cannot hold: malformed.
        for r in [
            &b"$-2\r\n"[..],
            b"*-9000000000000000000\r\n",
            b"$99999999999999999999\r\n",
            b":9999999999999999999\r\n",
            b"$x\r\n",
            b"?\r\n",
        ] {
            let e = err(r);
            assert_eq!(e.kind, ErrorKind::Protocol, "{}", e.message);
            assert!(e.message.contains("malformed"), "{}", e.message);
        }
        let mut c = conn(b"$-1\r\n*-1\r\n:-9223372036854775807\r\n$3\r\nabc\r\n");
        assert!(matches!(reply(&mut c), Ok(Reply::Bulk(None))));
        assert!(matches!(reply(&mut c), Ok(Reply::Array(None))));
        assert!(matches!(
            reply(&mut c),
            Ok(Reply::Int(-9223372036854775807))
        ));
        let Ok(Reply::Bulk(Some(r))) = reply(&mut c) else {
            panic!("bulk")
        };
        assert_eq!(c.bytes(r), b"abc");
    }

    #[test]
    fn nesting_is_skipped_to_a_bound_depth() {
        // Two levels, then a plain reply after them.
        let mut c = conn(b"*2\r\n*1\r\n:1\r\n$1\r\na\r\n+after\r\n");
        skip(&mut c, 1).unwrap();
        assert!(matches!(reply(&mut c), Ok(Reply::Simple(_))));
        // Arrays inside arrays without end: refused at MAX_DEPTH.
        let mut c = conn(&b"*1\r\n".repeat(100));
        let e = skip(&mut c, 1).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol, "{}", e.message);
        assert!(e.message.contains("deep"), "{}", e.message);
    }

    #[test]
    fn strings_reserves_what_arrives_not_what_is_declared() {
        // 300,000 elements declared (within the limit's room), two sent, then silence: the
        // error is the deadline's, and nothing was reserved for the rest.
        let addr = serve(
            vec![b"*300000\r\n$1\r\na\r\n$1\r\nb\r\n".to_vec()],
            Duration::ZERO,
        );
        let mut c = Conn::connect(addr, Duration::from_millis(300)).unwrap();
        c.set_limit(1 << 20);
        let e = strings(&mut c, &[b"SENTINEL"]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout, "{}", e.message);
        let mut c = conn(b"*2\r\n*1\r\n$1\r\nx\r\n$1\r\ny\r\n");
        c.set_limit(1 << 20);
        assert_eq!(strings(&mut c, &[b"X"]).unwrap(), vec!["", "y"]);
    }
}
