//! The `/metrics` endpoint: a small HTTP/1.1 server on a thread of its own, written here
//! because it answers one GET with bytes already rendered — a crate (tiny_http) would bring
//! a thread pool and chunked bodies kvmeter does not need, and an async runtime is out of the
//! question. One thread serves every connection at once over mio (already the engine's poller),
//! `Connection: close`; `httparse` reads the request head. Each connection is bounded: its
//! request to 8 KiB and 64 header lines arriving within 2 s, its answer written within 5 s;
//! anything else is answered 400/404/405/408/431 and closed. At most `MAX_CONNECTIONS` are held: a new one past that closes the
//! oldest that has not yet sent its request, so neither slow clients nor thousands of idle
//! ones can keep a scraper out (security review F3). The run never waits on it: the body is an
//! `Arc` swapped in under a mutex held for a pointer copy, once per interval and once per
//! scrape.

use super::{proto, text};
use mio::net::{TcpListener as MioListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const MAX_REQUEST: usize = 8 * 1024;
pub const MAX_HEADERS: usize = 64;
pub const READ_DEADLINE: Duration = Duration::from_secs(2);
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Connections held at once; the memory they can hold is this times `MAX_REQUEST` plus the
/// shared bodies.
pub const MAX_CONNECTIONS: usize = 256;

/// One rendering of the exposition in both formats.
#[derive(Default)]
pub struct Bodies {
    /// Which rendering this is (1, 2, ...; 0 before the first).
    pub generation: u64,
    pub text: Vec<u8>,
    pub proto: Vec<u8>,
}

/// What the server thread shares with the exporter.
#[derive(Default)]
pub struct Shared {
    pub bodies: Mutex<Arc<Bodies>>,
    /// The newest generation a scrape has been sent in full.
    pub served: AtomicU64,
}

const LISTENER: Token = Token(usize::MAX);

/// One connection: reading its request head, then writing its answer.
struct Conn {
    stream: TcpStream,
    opened: u64,
    deadline: Instant,
    head: Vec<u8>,
    answer: Option<Answer>,
}

/// An answer being written: the head, then the body (shared, never copied).
struct Answer {
    head: Vec<u8>,
    body: Option<(Arc<Bodies>, bool)>,
    sent: usize,
}

impl Answer {
    fn body(&self) -> &[u8] {
        match &self.body {
            Some((b, true)) => &b.proto,
            Some((b, false)) => &b.text,
            None => &[],
        }
    }
    /// The generation to note as served once all is sent.
    fn generation(&self) -> Option<u64> {
        self.body.as_ref().map(|(b, _)| b.generation)
    }
}

/// Serves until the process ends.
pub fn serve(listener: TcpListener, shared: Arc<Shared>) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(mut poll) = Poll::new() else { return };
    let mut listener = MioListener::from_std(listener);
    if poll
        .registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .is_err()
    {
        return;
    }
    let mut events = Events::with_capacity(256);
    let mut conns: HashMap<usize, Conn> = HashMap::new();
    let mut next: u64 = 0;
    loop {
        let now = Instant::now();
        let wait = conns
            .values()
            .map(|c| c.deadline.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_secs(3600));
        if poll.poll(&mut events, Some(wait)).is_err() {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                accept(&poll, &mut listener, &mut conns, &mut next);
                continue;
            }
            let id = ev.token().0;
            let done = match conns.get_mut(&id) {
                Some(c) => progress(c, &shared),
                None => continue,
            };
            if done {
                if let Some(mut c) = conns.remove(&id) {
                    let _ = poll.registry().deregister(&mut c.stream);
                }
            }
        }
        // Deadlines: a request that has not arrived is answered 408; an answer not taken in
        // time is dropped.
        let now = Instant::now();
        let late: Vec<usize> = conns
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(k, _)| *k)
            .collect();
        for id in late {
            if let Some(mut c) = conns.remove(&id) {
                if c.answer.is_none() {
                    let _ = c.stream.write(&refusal(408));
                }
                let _ = poll.registry().deregister(&mut c.stream);
            }
        }
    }
}

/// Accepts every waiting connection; past `MAX_CONNECTIONS` the oldest still reading its
/// request is closed for each new one.
fn accept(
    poll: &Poll,
    listener: &mut MioListener,
    conns: &mut HashMap<usize, Conn>,
    next: &mut u64,
) {
    loop {
        let mut stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => {
                // EMFILE and the like: make room rather than spin on the listener.
                evict_oldest(poll, conns);
                return;
            }
        };
        if conns.len() >= MAX_CONNECTIONS && !evict_oldest(poll, conns) {
            continue; // every slot is writing an answer: this one is dropped
        }
        *next += 1;
        let id = (*next as usize) % (usize::MAX - 1);
        if poll
            .registry()
            .register(
                &mut stream,
                Token(id),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            continue;
        }
        conns.insert(
            id,
            Conn {
                stream,
                opened: *next,
                deadline: Instant::now() + READ_DEADLINE,
                head: Vec::new(),
                answer: None,
            },
        );
    }
}

/// Closes the oldest connection still reading its request; false when there is none.
fn evict_oldest(poll: &Poll, conns: &mut HashMap<usize, Conn>) -> bool {
    let Some(id) = conns
        .iter()
        .filter(|(_, c)| c.answer.is_none())
        .min_by_key(|(_, c)| c.opened)
        .map(|(k, _)| *k)
    else {
        return false;
    };
    if let Some(mut c) = conns.remove(&id) {
        let _ = poll.registry().deregister(&mut c.stream);
    }
    true
}

/// Reads what has arrived and writes what can be sent; true when the connection is done.
fn progress(c: &mut Conn, shared: &Shared) -> bool {
    if c.answer.is_none() {
        let mut buf = [0u8; 2048];
        loop {
            match c.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(n) => {
                    let room = MAX_REQUEST - c.head.len();
                    c.head.extend_from_slice(&buf[..n.min(room)]);
                    if let Some(end) = c.head.windows(4).position(|w| w == b"\r\n\r\n") {
                        c.head.truncate(end + 4);
                        c.answer = Some(answer(&c.head, shared));
                        c.deadline = Instant::now() + WRITE_DEADLINE;
                        break;
                    }
                    if c.head.len() >= MAX_REQUEST {
                        c.answer = Some(Answer {
                            head: refusal(431),
                            body: None,
                            sent: 0,
                        });
                        c.deadline = Instant::now() + WRITE_DEADLINE;
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return true,
            }
        }
    }
    let Some(a) = c.answer.as_mut() else {
        return false;
    };
    loop {
        let total = a.head.len() + a.body().len();
        if a.sent >= total {
            if let Some(g) = a.generation() {
                shared.served.fetch_max(g, Ordering::AcqRel);
            }
            let _ = c.stream.flush();
            return true;
        }
        let r = if a.sent < a.head.len() {
            c.stream.write(&a.head[a.sent..])
        } else {
            let off = a.sent - a.head.len();
            c.stream.write(&a.body()[off..])
        };
        match r {
            Ok(0) => return true,
            Ok(n) => a.sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
    }
}

/// A parsed request: its method, path and whether it asked for protobuf.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub protobuf: bool,
}

/// Parses a request head (bounded already by `progress`) with `httparse`, into a fixed
/// array of `MAX_HEADERS`.
pub fn parse(head: &[u8]) -> Result<Request, u16> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(400),
        Err(httparse::Error::TooManyHeaders) => return Err(431),
        Err(_) => return Err(400),
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Err(400);
    };
    let protobuf = req.headers.iter().any(|h| {
        let v = h.value;
        let has = |needle: &[u8]| v.windows(needle.len()).any(|w| w == needle);
        h.name.eq_ignore_ascii_case("accept")
            && has(b"application/vnd.google.protobuf")
            && has(b"io.prometheus.client.MetricFamily")
    });
    let path = target.split('?').next().unwrap_or("").to_string();
    Ok(Request {
        method: method.to_string(),
        path,
        protobuf,
    })
}

/// The answer to a request head: the newest rendering for GET (or its head for HEAD) of
/// /metrics, else a one-line refusal.
fn answer(head: &[u8], shared: &Shared) -> Answer {
    let req = parse(head);
    let status = match &req {
        Ok(r) if r.path != "/metrics" => 404,
        Ok(r) if r.method != "GET" && r.method != "HEAD" => 405,
        Ok(_) => 200,
        Err(code) => *code,
    };
    let req = match req {
        Ok(r) if status == 200 => r,
        _ => {
            return Answer {
                head: refusal(status),
                body: None,
                sent: 0,
            }
        }
    };
    let bodies = shared
        .bodies
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let (ctype, len) = if req.protobuf {
        (proto::CONTENT_TYPE, bodies.proto.len())
    } else {
        (text::CONTENT_TYPE, bodies.text.len())
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    Answer {
        head,
        body: (req.method == "GET").then_some((bodies, req.protobuf)),
        sent: 0,
    }
}

/// `status` with a one-line body.
fn refusal(status: u16) -> Vec<u8> {
    let reason = match status {
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Bad Request",
    };
    let body = format!("{status} {reason}: kvmeter serves GET /metrics\n");
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_parsed_and_bounded() {
        let r = parse(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;q=0.3\r\n\r\n").unwrap();
        assert_eq!(r.path, "/metrics");
        assert!(r.protobuf);
        let r = parse(b"GET /metrics HTTP/1.1\r\nAccept: text/plain\r\n\r\n").unwrap();
        assert!(!r.protobuf);
        assert_eq!(parse(b"GET /metrics\r\n\r\n"), Err(400));
        assert_eq!(parse(b"GET /metrics HTTP/1.1\r\nnocolon\r\n\r\n"), Err(400));
        let many = format!(
            "GET /metrics HTTP/1.1\r\n{}\r\n",
            "X: y\r\n".repeat(MAX_HEADERS + 1)
        );
        assert_eq!(parse(many.as_bytes()), Err(431));
    }

    /// Review F3: slow clients and hundreds of idle connections no longer keep a scraper out.
    /// Ten connections send part of a request and 400 more sit idle (more than
    /// `MAX_CONNECTIONS`); a scrape opened after them all is answered in full.
    #[test]
    fn slow_and_idle_clients_do_not_keep_a_scrape_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        *shared.bodies.lock().unwrap() = Arc::new(Bodies {
            generation: 7,
            text: b"kvmeter_up 1\n".to_vec(),
            proto: vec![],
        });
        let s = shared.clone();
        std::thread::spawn(move || serve(listener, s));
        let mut slow: Vec<std::net::TcpStream> = (0..10)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        for c in &mut slow {
            c.write_all(b"GET /met").unwrap();
        }
        let idle: Vec<std::net::TcpStream> = (0..400)
            .filter_map(|_| std::net::TcpStream::connect(addr).ok())
            .collect();
        assert!(
            idle.len() > MAX_CONNECTIONS,
            "only {} connected",
            idle.len()
        );
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert!(got.starts_with("HTTP/1.1 200 OK"), "{got:?}");
        assert!(got.ends_with("kvmeter_up 1\n"), "{got:?}");
        // The generation is noted once the body is sent (the linger's end).
        for _ in 0..100 {
            if shared.served.load(Ordering::Acquire) == 7 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(shared.served.load(Ordering::Acquire), 7);
        // A head past 8 KiB is refused 431, not read forever.
        let mut big = std::net::TcpStream::connect(addr).unwrap();
        big.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        // Exactly the bound, so nothing is left unread when the server closes (no reset).
        big.write_all(&vec![b'a'; MAX_REQUEST]).unwrap();
        let mut got = String::new();
        let _ = big.read_to_string(&mut got);
        assert!(got.starts_with("HTTP/1.1 431"), "{got:?}");
        drop((slow, idle));
    }
}
