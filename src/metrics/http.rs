//! The `/metrics` endpoint: a small HTTP/1.1 server on a thread of its own, written here
//! because it answers one GET with bytes already rendered — a crate (tiny_http) would bring
//! a thread pool and chunked bodies kvmeter does not need, and an async runtime is out of the
//! question. One connection at a time, `Connection: close`; a request is bounded (8 KiB, 64
//! header lines, 2 s to arrive) and anything else is answered 400/404/405 and closed. The
//! run never waits on it: the body is an `Arc` swapped in under a mutex held for a pointer
//! copy, once per interval and once per scrape.

use super::{proto, text};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const MAX_REQUEST: usize = 8 * 1024;
pub const MAX_HEADERS: usize = 64;
pub const READ_DEADLINE: Duration = Duration::from_secs(2);

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

/// Serves until the process ends.
pub fn serve(listener: TcpListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else {
            // EMFILE and the like: back off rather than spin.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let _ = answer(conn, &shared);
    }
}

/// A parsed request: its method, path and whether it asked for protobuf.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub protobuf: bool,
}

/// Reads one request head within the bounds; `Err` with the status to answer otherwise.
fn read_head(conn: &mut TcpStream) -> Result<Vec<u8>, u16> {
    let deadline = Instant::now() + READ_DEADLINE;
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut len = 0;
    loop {
        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
            buf.truncate(len);
            return Ok(buf);
        }
        if len == buf.len() {
            return Err(431);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(408);
        }
        conn.set_read_timeout(Some(left)).map_err(|_| 500u16)?;
        match conn.read(&mut buf[len..]) {
            Ok(0) => return Err(400),
            Ok(n) => len += n,
            Err(_) => return Err(408),
        }
    }
}

/// Parses a request head (bounded already by `read_head`).
pub fn parse(head: &[u8]) -> Result<Request, u16> {
    let head = std::str::from_utf8(head).map_err(|_| 400u16)?;
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(400);
    };
    if !version.starts_with("HTTP/1.") {
        return Err(400);
    }
    let mut protobuf = false;
    let mut count = 0;
    for line in lines.take_while(|l| !l.is_empty()) {
        count += 1;
        if count > MAX_HEADERS {
            return Err(431);
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(400);
        };
        if name.trim().eq_ignore_ascii_case("accept")
            && value.contains("application/vnd.google.protobuf")
            && value.contains("io.prometheus.client.MetricFamily")
        {
            protobuf = true;
        }
    }
    let path = target.split('?').next().unwrap_or("").to_string();
    Ok(Request {
        method: method.to_string(),
        path,
        protobuf,
    })
}

fn answer(mut conn: TcpStream, shared: &Shared) -> std::io::Result<()> {
    conn.set_write_timeout(Some(Duration::from_secs(5)))?;
    let req = read_head(&mut conn).and_then(|h| parse(&h));
    let status = match &req {
        Ok(r) if r.path != "/metrics" => 404,
        Ok(r) if r.method != "GET" && r.method != "HEAD" => 405,
        Ok(_) => 200,
        Err(code) => *code,
    };
    let req = match req {
        Ok(r) if status == 200 => r,
        _ => {
            return refuse(&mut conn, status);
        }
    };
    respond(&mut conn, &req, shared)
}

/// Answers `status` with a one-line body and closes.
fn refuse(conn: &mut TcpStream, status: u16) -> std::io::Result<()> {
    let reason = match status {
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        _ => "Bad Request",
    };
    let body = format!("{status} {reason}: kvmeter serves GET /metrics\n");
    write!(
        conn,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()
}

/// Sends the newest rendering in the format asked for; notes its generation as read.
fn respond(conn: &mut TcpStream, req: &Request, shared: &Shared) -> std::io::Result<()> {
    let bodies = shared
        .bodies
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let (ctype, body) = if req.protobuf {
        (proto::CONTENT_TYPE, &bodies.proto)
    } else {
        (text::CONTENT_TYPE, &bodies.text)
    };
    write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if req.method == "GET" {
        conn.write_all(body)?;
    }
    conn.flush()?;
    if req.method == "GET" {
        shared.served.fetch_max(bodies.generation, Ordering::AcqRel);
    }
    Ok(())
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
}
