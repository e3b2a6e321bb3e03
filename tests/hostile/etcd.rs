//! etcd's JSON gateway over HTTP/1.1: the etcd store and the coordination channel.

use super::*;

// ---- etcd (the JSON gateway over HTTP/1.1) ----

fn http(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sane answers to the ping (GET /version, a range of key "\0" with limit 1); `hostile` to
/// the reads.
macro_rules! etcd {
    ($hostile:expr) => {{
        fn answer(req: &[u8]) -> Act {
            if req.starts_with(b"GET /version") {
                say(&http(r#"{"etcdserver":"3.5.0","etcdcluster":"3.5.0"}"#))
            } else if has(req, br#"{"key":"AA==","limit":1}"#) {
                say(&http(r#"{"header":{"revision":"1"}}"#))
            } else {
                $hostile
            }
        }
        tcp_server(answer)
    }};
}

#[test]
fn etcd_content_length_past_u63() {
    let port = etcd!(say(
        b"HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999999\r\n\r\n{"
    ));
    reads_failed(&run("etcd", port, &[]), "protocol");
}

#[test]
fn etcd_content_length_of_a_terabyte() {
    let port = etcd!(say(
        b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n{"
    ));
    reads_failed(&run("etcd", port, &[]), "protocol");
}

#[test]
fn etcd_chunk_of_16_exabytes() {
    let port = etcd!(say(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{"
    ));
    reads_failed(&run("etcd", port, &[]), "protocol");
}

#[test]
fn etcd_chunk_of_2_pow_63() {
    let port = etcd!(say(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8000000000000000\r\n{"
    ));
    reads_failed(&run("etcd", port, &[]), "protocol");
}

#[test]
fn etcd_endless_chunks() {
    let port = etcd!(Act::Endless(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
        b"1\r\na\r\n".to_vec()
    ));
    reads_failed(&run("etcd", port, &[]), "protocol");
}

#[test]
fn etcd_endless_headers() {
    let port = etcd!(Act::Endless(
        b"HTTP/1.1 200 OK\r\n".to_vec(),
        b"X-A: b\r\n".to_vec()
    ));
    reads_failed(&run("etcd", port, &[]), "protocol");
}

#[test]
fn etcd_one_byte_a_second() {
    let port = etcd!(drip(&http(r#"{"kvs":[]}"#)));
    reads_failed(&run("etcd", port, &[]), "timeout");
}

#[test]
fn ping_etcd_content_length_past_u63() {
    fn answer(_: &[u8]) -> Act {
        say(b"HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999999\r\n\r\n")
    }
    let o = run("etcd", tcp_server(answer), &[]);
    ping_refused(&o, "max_reply");
}

#[test]
fn ping_etcd_drip() {
    fn answer(_: &[u8]) -> Act {
        drip(&http(r#"{"etcdserver":"3.5.0"}"#))
    }
    let o = run("etcd", tcp_server(answer), &[]);
    ping_refused(&o, "no complete reply within 1000 ms");
}

// ---- the coordination channel (`kvmeter agent --coord`), the same HTTP client ----

/// `kvmeter agent` against a hostile etcd: one line and exit 2, in time, no panic.
fn agent_refused(answer: fn(&[u8]) -> Act, why: &str, within: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let mut child = Command::new(bin())
        .args(s(&[
            "agent",
            "--coord",
            &format!("http://127.0.0.1:{}", tcp_server(answer)),
            "--index",
            "0",
            "--count",
            "1",
            "--wait",
            "5s",
            "--out",
            dir.path().join("agent").to_str().unwrap(),
        ]))
        .env("KVMETER_PLAN_KEY", crate::common::TEST_PLAN_KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let code = wait_exit(&mut child, within);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(why), "{stderr}");
    assert!(t.elapsed() < within);
}

#[test]
fn agent_etcd_content_length_past_u63() {
    fn answer(_: &[u8]) -> Act {
        say(b"HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999999\r\n\r\n{")
    }
    agent_refused(answer, "max_reply", Duration::from_secs(10));
}

#[test]
fn agent_etcd_chunk_of_16_exabytes() {
    fn answer(_: &[u8]) -> Act {
        say(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{")
    }
    agent_refused(answer, "max_reply", Duration::from_secs(10));
}

#[test]
fn agent_etcd_drip() {
    // Three tries of the coordination channel's 3 s deadline, not a hang.
    fn answer(_: &[u8]) -> Act {
        drip(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    }
    agent_refused(
        answer,
        "no complete reply within 3000 ms",
        Duration::from_secs(20),
    );
}

/// Security review (minor): a 200 answer to a range whose body is not etcd's range response
/// (an HTML page, or JSON nested 100,000 deep) is a `protocol` error, never a miss.
#[test]
fn etcd_200_that_is_not_a_range_response() {
    let port = etcd!(say(&http("<html>not etcd</html>")));
    let o = run("etcd", port, &[]);
    reads_failed(&o, "protocol");
    let port = etcd!(say(&http(&format!(
        "{}{}",
        "{\"a\":".repeat(100_000),
        "}".repeat(100_000)
    ))));
    reads_failed(&run("etcd", port, &[]), "protocol");
}

// ---- etcd's /metrics (issue 43: read on a connection of its own) ----

/// Sane answers to the ping and the reads (every key absent); `hostile` to GET /metrics.
macro_rules! etcd_metrics {
    ($hostile:expr) => {{
        fn answer(req: &[u8]) -> Act {
            if req.starts_with(b"GET /version") {
                say(&http(r#"{"etcdserver":"3.5.0","etcdcluster":"3.5.0"}"#))
            } else if req.starts_with(b"GET /metrics") {
                $hostile
            } else {
                say(&http(r#"{"header":{"revision":"1"}}"#))
            }
        }
        tcp_server(answer)
    }};
}

#[test]
fn etcd_metrics_endless() {
    let port = etcd_metrics!(Act::Endless(
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n".to_vec(),
        b"etcd_server_has_leader 1\n".to_vec()
    ));
    stats_unavailable(
        &run("etcd", port, &[]),
        "etcd: a Content-Length past max_reply",
    );
}

#[test]
fn etcd_metrics_one_byte_a_second() {
    let port = etcd_metrics!(drip(
        b"HTTP/1.1 200 OK\r\nContent-Length: 25\r\n\r\netcd_server_has_leader 1\n"
    ));
    stats_unavailable(&run("etcd", port, &[]), "no complete reply within 1000 ms");
}

#[test]
fn etcd_metrics_not_etcds() {
    let port = etcd_metrics!(say(
        b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world"
    ));
    stats_unavailable(
        &run("etcd", port, &[]),
        "GET /metrics: none of etcd's series in 11 bytes (is it etcd?)",
    );
}
