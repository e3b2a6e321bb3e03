//! Tests of `net.rs`: lines and takes across reads, bounded lengths and lines, the deadline
//! of a request that drips, a connection not opened yet.

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

/// A server on loopback that writes `script` (pausing `gap` between its pieces) to the
/// first client, then keeps the connection open until the client closes it.
pub(crate) fn serve(script: Vec<Vec<u8>>, gap: Duration) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        for piece in script {
            if s.write_all(&piece).is_err() {
                return;
            }
            std::thread::sleep(gap);
        }
        let mut sink = [0u8; 4096];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    });
    addr
}

#[test]
fn declared_lengths_above_the_limit_are_protocol_errors_not_allocations() {
    let addr = serve(vec![b"abc".to_vec()], Duration::ZERO);
    let mut c = Conn::connect(addr, Duration::from_secs(5)).unwrap();
    c.set_limit(1 << 20);
    for n in [usize::MAX, usize::MAX - 1, 1 << 63, (1 << 20) + 1] {
        c.begin();
        let e = c.take(n).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol, "{n}: {}", e.message);
        assert!(e.message.contains("max_reply"), "{}", e.message);
        assert!(c.broken);
        assert!(c.buffer().len() <= 16 * 1024, "nothing allocated for {n}");
    }
    // Within the limit, but past it with what the request already read.
    c.begin();
    let r = c.take(3).unwrap();
    assert_eq!(c.bytes(r), b"abc");
    let e = c.take((1 << 20) - 2).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol);
    // The limit is clamped to the accepted range.
    c.set_limit(0);
    assert_eq!(c.limit(), MIN_MAX_REPLY);
    c.set_limit(usize::MAX);
    assert_eq!(c.limit(), MAX_MAX_REPLY);
}

#[test]
fn endless_lines_and_replies_end_at_the_limit() {
    // A line with no newline: an error once it passes MAX_LINE, not a growing buffer.
    let addr = serve(vec![vec![b'a'; 200 << 10]], Duration::ZERO);
    let mut c = Conn::connect(addr, Duration::from_secs(5)).unwrap();
    c.begin();
    let e = c.line().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol, "{}", e.message);
    assert!(e.message.contains("line longer"), "{}", e.message);
    assert!(c.buffer().len() <= 4 * MAX_LINE);
    // Short lines that never end: the request's replies pass the limit.
    let addr = serve(vec![b"x\r\n".repeat(100 << 10)], Duration::ZERO);
    let mut c = Conn::connect(addr, Duration::from_secs(5)).unwrap();
    c.set_limit(MIN_MAX_REPLY);
    c.begin();
    let e = loop {
        if let Err(e) = c.line() {
            break e;
        }
    };
    assert_eq!(e.kind, ErrorKind::Protocol, "{}", e.message);
    assert!(e.message.contains("pass"), "{}", e.message);
    assert!(c.buffer().len() <= MIN_MAX_REPLY);
}

#[test]
fn a_drip_ends_at_the_deadline_not_after_each_read() {
    // One byte every 100 ms: each read returns well within the 600 ms timeout, the
    // whole line never does.
    let script = (0..100).map(|_| b"a".to_vec()).collect();
    let addr = serve(script, Duration::from_millis(100));
    let mut c = Conn::connect(addr, Duration::from_millis(600)).unwrap();
    c.begin();
    c.wbuf.extend_from_slice(b"GET\r\n");
    let t = Instant::now();
    c.send().unwrap();
    let e = c.line().unwrap_err();
    let took = t.elapsed();
    assert_eq!(e.kind, ErrorKind::Timeout, "{}", e.message);
    assert!(c.broken);
    assert!(
        took >= Duration::from_millis(550) && took < Duration::from_millis(1200),
        "{took:?}"
    );
    // The next request gets the whole timeout again on a fresh connection.
    let addr = serve(vec![b"ok\r\n".to_vec()], Duration::ZERO);
    let mut c = Conn::connect(addr, Duration::from_millis(600)).unwrap();
    c.begin();
    c.send().unwrap();
    let r = c.line().unwrap();
    assert_eq!(c.bytes(r), b"ok");
}

#[test]
fn an_unconnected_conn_is_broken_until_replaced() {
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut c = Conn::unconnected(addr, Duration::from_secs(1));
    assert!(c.broken);
    assert!(c.buffer().is_empty());
    c.begin();
    c.wbuf.extend_from_slice(b"PING\r\n");
    assert_eq!(c.send().unwrap_err().kind, ErrorKind::Io);
    assert_eq!(c.line().unwrap_err().kind, ErrorKind::Io);
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
