//! Small hostile servers, written here and bound to 127.0.0.1 only, against the real binary
//! (review F5, issue 27 item 3): for each protocol kvmeter speaks — RESP, memcached text,
//! binary and UDP, etcd's JSON gateway — replies with huge or overflowing declared lengths,
//! replies that never end, and drips of one byte a second. The servers answer the readiness
//! ping sanely and turn hostile on the workload's reads (or, in the `ping_*` tests, on the
//! ping itself). Every run must end without a panic, within its duration plus the deadline
//! plus a margin, with its peak RSS bounded, and with a readable run directory whose summary
//! counts the reads as `protocol` or `timeout` errors (docs/stores.md, "Hostile servers").

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::servers::{s, wait_exit};
use common::*;

/// What a hostile server does with one request.
#[derive(Clone)]
enum Act {
    /// Writes the bytes, then waits for the next request (or the client's close).
    Say(Vec<u8>),
    /// Writes the bytes one at a time, `gap` apart.
    Drip(Vec<u8>, Duration),
    /// Writes the head, then the unit again and again until the client goes.
    Endless(Vec<u8>, Vec<u8>),
}

fn say(b: &[u8]) -> Act {
    Act::Say(b.to_vec())
}

fn drip(b: &[u8]) -> Act {
    Act::Drip(b.to_vec(), Duration::from_secs(1))
}

fn has(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A TCP server on 127.0.0.1 answering each request (one read) with `answer(request)`; each
/// connection in its own thread. Threads end when kvmeter closes its connections.
fn tcp_server(answer: fn(&[u8]) -> Act) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            std::thread::spawn(move || serve(s, answer));
        }
    });
    port
}

fn serve(mut s: TcpStream, answer: fn(&[u8]) -> Act) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        match answer(&buf[..n]) {
            Act::Say(b) => {
                if s.write_all(&b).is_err() {
                    return;
                }
            }
            Act::Drip(b, gap) => {
                for c in b {
                    if s.write_all(&[c]).is_err() {
                        return;
                    }
                    std::thread::sleep(gap);
                }
            }
            Act::Endless(head, unit) => {
                let unit = unit.repeat((64 << 10) / unit.len().max(1) + 1);
                if s.write_all(&head).is_err() {
                    return;
                }
                while s.write_all(&unit).is_ok() {}
                return;
            }
        }
    }
}

/// The outcome of one kvmeter run against a hostile server.
struct Outcome {
    code: i32,
    stderr: String,
    took: Duration,
    /// Peak resident set (VmHWM), KiB, as last seen while it ran.
    peak_kib: u64,
    out: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

const DURATION_S: u64 = 2;
const TIMEOUT_MS: u64 = 1000;
/// The run's duration, one deadline, and a margin for start and finish.
const BOUND: Duration = Duration::from_secs(DURATION_S + 1 + 10);
/// Peak RSS allowed: the hostile replies declare up to exabytes.
const RSS_KIB: u64 = 200 << 10;

/// `kvmeter run` of workload C's reads against the server at `port`.
fn run(store: &str, port: u16, extra: &[&str]) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let log = dir.path().join("stderr.txt");
    let mut args = s(&[
        "run",
        "--store",
        store,
        "--store-opt",
        &format!("addr=127.0.0.1:{port}"),
        "--store-opt",
        &format!("timeout_ms={TIMEOUT_MS}"),
        "-P",
        "workloadc",
        "--phase",
        "run",
        "--records",
        "10",
        "--duration",
        &format!("{DURATION_S}s"),
        "--threads",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    for e in extra {
        args.extend(["--store-opt".to_string(), e.to_string()]);
    }
    let t = Instant::now();
    let mut child = Command::new(bin())
        .args(&args)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut peak_kib = 0;
    let code = loop {
        if let Some(kib) = vm_hwm_kib(child.id()) {
            peak_kib = peak_kib.max(kib);
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st.code().unwrap_or(-1);
        }
        if t.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "kvmeter did not end within {BOUND:?}; stderr:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Outcome {
        code,
        stderr: std::fs::read_to_string(&log).unwrap(),
        took: t.elapsed(),
        peak_kib,
        out,
        _dir: dir,
    }
}

/// The common checks: no panic, in time, RSS bounded.
fn sane(o: &Outcome) {
    assert!(!o.stderr.contains("panicked"), "a panic:\n{}", o.stderr);
    assert!(o.took < BOUND, "took {:?}", o.took);
    assert!(
        o.peak_kib < RSS_KIB,
        "peak RSS {} KiB; stderr:\n{}",
        o.peak_kib,
        o.stderr
    );
}

/// A run whose reads all met the hostile reply: it ends (exit 0 with the errors counted, or 1
/// when the phase failed), its run directory is readable, and its reads failed with `kind`.
fn reads_failed(o: &Outcome, kind: &str) {
    sane(o);
    assert!(o.code == 0 || o.code == 1, "exit {}:\n{}", o.code, o.stderr);
    let summary = json(&o.out.join("summary.json"));
    validate("summary.schema.json", &summary);
    let p = phase(&summary, "run");
    let read = &p["ops"]["READ"];
    let errors = read["errors"][kind].as_u64().unwrap_or(0);
    assert!(
        errors > 0,
        "no '{kind}' errors: {}\nstderr:\n{}",
        read,
        o.stderr
    );
    assert_eq!(read["ok"].as_u64().unwrap_or(0), 0, "{read}");
    let intervals = std::fs::read_to_string(o.out.join("intervals.csv")).unwrap();
    assert!(intervals.lines().count() >= 1, "{intervals}");
}

/// The readiness ping met the hostile reply: one clear line, exit 2, nothing created.
fn ping_refused(o: &Outcome, why: &str) {
    sane(o);
    assert_eq!(o.code, 2, "{}", o.stderr);
    let lines: Vec<&str> = o.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{}", o.stderr);
    assert!(lines[0].contains("--store-opt addr="), "{}", lines[0]);
    assert!(lines[0].contains(why), "{}", lines[0]);
    assert!(!o.out.exists(), "a run directory was created");
}

// ---- Redis (RESP) ----

const INFO: &[u8] = b"$40\r\nredis_version:7.0.0\r\nloading:0\r\nrole:m\r\n\r\n";

/// Sane answers to the ping (INFO) and the connection setup; `hostile` to the reads.
macro_rules! redis {
    ($hostile:expr) => {{
        fn answer(req: &[u8]) -> Act {
            if has(req, b"INFO") {
                say(INFO)
            } else {
                $hostile
            }
        }
        tcp_server(answer)
    }};
}

#[test]
fn redis_bulk_length_past_i64() {
    let port = redis!(say(b"$9000000000000000000\r\n"));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_bulk_of_a_terabyte() {
    let port = redis!(say(b"$999999999999\r\n"));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_array_of_a_trillion() {
    let port = redis!(say(b"*999999999999\r\n"));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_gigabyte_bulk_then_silence() {
    // Above the workload's max_reply: refused before a byte is read.
    let port = redis!(say(b"$1000000000\r\n"));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_bulk_within_the_limit_then_silence() {
    // Within max_reply, and never sent: the deadline ends each read.
    let port = redis!(say(b"$1000000\r\nabc"));
    reads_failed(&run("redis", port, &[]), "timeout");
}

#[test]
fn redis_endless_reply() {
    let port = redis!(Act::Endless(
        b"*300000\r\n".to_vec(),
        b"$1\r\na\r\n".to_vec()
    ));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_line_without_newline() {
    let port = redis!(Act::Endless(b"+".to_vec(), b"a".to_vec()));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_one_byte_a_second() {
    let port = redis!(drip(b"*2\r\n$6\r\nfield0\r\n$3\r\nabc\r\n"));
    reads_failed(&run("redis", port, &[]), "timeout");
}

#[test]
fn redis_max_reply_option_bounds_a_valid_reply() {
    // A valid 100 KiB field: refused under max_reply=64KiB, read under the default.
    fn answer(req: &[u8]) -> Act {
        if has(req, b"INFO") {
            return say(INFO);
        }
        let mut r = b"*2\r\n$6\r\nfield0\r\n$102400\r\n".to_vec();
        r.extend(std::iter::repeat_n(b'v', 102400));
        r.extend_from_slice(b"\r\n");
        Act::Say(r)
    }
    let port = tcp_server(answer);
    reads_failed(&run("redis", port, &["max_reply=64KiB"]), "protocol");
    let o = run("redis", port, &[]);
    sane(&o);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let summary = json(&o.out.join("summary.json"));
    let read = &phase(&summary, "run")["ops"]["READ"];
    assert!(read["ok"].as_u64().unwrap() > 0, "{read}");
    assert!(read["errors"].get("protocol").is_none(), "{read}");
    // The bound the run used is in the manifest: derived from the workload.
    let manifest = json(&o.out.join("manifest.json"));
    let text = manifest.to_string();
    assert!(text.contains("\"max_reply\":\"1048576\""), "{text}");
}

#[test]
fn redis_bad_max_reply_is_a_usage_error() {
    let o = run("redis", free_port(), &["max_reply=12"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("max_reply=12"), "{}", o.stderr);
    let o = run("redis", free_port(), &["timeout_ms=99999999999999999"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("timeout_ms="), "{}", o.stderr);
}

#[test]
fn ping_redis_drip() {
    fn answer(_: &[u8]) -> Act {
        drip(INFO)
    }
    let o = run("redis", tcp_server(answer), &[]);
    ping_refused(&o, "no complete reply within 1000 ms");
}

#[test]
fn ping_redis_huge_bulk() {
    fn answer(_: &[u8]) -> Act {
        say(b"$9000000000000000000\r\n")
    }
    let o = run("redis", tcp_server(answer), &[]);
    ping_refused(&o, "max_reply");
}

// ---- memcached, text and binary ----

/// Sane answers to the ping (`version`, text even with protocol=binary); `hostile` to the
/// reads.
macro_rules! memcached {
    ($hostile:expr) => {{
        fn answer(req: &[u8]) -> Act {
            if req.starts_with(b"version") {
                say(b"VERSION 1.6.0\r\n")
            } else {
                $hostile
            }
        }
        tcp_server(answer)
    }};
}

#[test]
fn memcached_value_length_past_i64() {
    let port = memcached!(say(b"VALUE k 0 9000000000000000000\r\n"));
    reads_failed(&run("memcached", port, &[]), "protocol");
}

#[test]
fn memcached_value_length_past_u63() {
    let port = memcached!(say(b"VALUE k 0 9999999999999999999\r\n"));
    reads_failed(&run("memcached", port, &[]), "protocol");
}

#[test]
fn memcached_value_of_a_terabyte() {
    let port = memcached!(say(b"VALUE k 0 999999999999\r\n"));
    reads_failed(&run("memcached", port, &[]), "protocol");
}

#[test]
fn memcached_one_byte_a_second() {
    let port = memcached!(drip(b"VALUE k 0 5\r\nhello\r\nEND\r\n"));
    reads_failed(&run("memcached", port, &[]), "timeout");
}

#[test]
fn memcached_line_without_newline() {
    let port = memcached!(Act::Endless(b"VALUE ".to_vec(), b"k".to_vec()));
    reads_failed(&run("memcached", port, &[]), "protocol");
}

/// A binary reply header: magic 0x81, the opcode, status 0, and `total` body bytes.
fn bin_header(total: u32) -> Vec<u8> {
    let mut h = vec![0x81, 0x00, 0, 0, 0, 0, 0, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0; 12]);
    h
}

#[test]
fn memcached_binary_total_of_4_gib() {
    fn answer(req: &[u8]) -> Act {
        if req.starts_with(b"version") {
            return say(b"VERSION 1.6.0\r\n");
        }
        Act::Say(bin_header(0xFFFF_FFFF))
    }
    let o = run("memcached", tcp_server(answer), &["protocol=binary"]);
    reads_failed(&o, "protocol");
}

#[test]
fn memcached_binary_total_of_1_gib() {
    fn answer(req: &[u8]) -> Act {
        if req.starts_with(b"version") {
            return say(b"VERSION 1.6.0\r\n");
        }
        Act::Say(bin_header(0x4000_0000))
    }
    let o = run("memcached", tcp_server(answer), &["protocol=binary"]);
    reads_failed(&o, "protocol");
}

#[test]
fn memcached_binary_one_byte_a_second() {
    fn answer(req: &[u8]) -> Act {
        if req.starts_with(b"version") {
            return say(b"VERSION 1.6.0\r\n");
        }
        Act::Drip(bin_header(5), Duration::from_secs(1))
    }
    let o = run("memcached", tcp_server(answer), &["protocol=binary"]);
    reads_failed(&o, "timeout");
}

#[test]
fn memcached_udp_wrong_request_ids_forever() {
    // TCP answers the ping's `version`; UDP answers the ping's get, then sends datagrams of
    // another request id every 100 ms for as long as kvmeter asks.
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let udp = UdpSocket::bind(("127.0.0.1", port)).unwrap();
    std::thread::spawn(move || {
        for s in tcp.incoming() {
            let Ok(s) = s else { return };
            std::thread::spawn(move || {
                serve(s, |_| say(b"VERSION 1.6.0\r\n"));
            });
        }
    });
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        loop {
            let Ok((n, peer)) = udp.recv_from(&mut buf) else {
                return;
            };
            if n < 8 {
                continue;
            }
            let id = [buf[0], buf[1]];
            if has(&buf[8..n], b"kvmeter-ping") {
                let mut d = vec![id[0], id[1], 0, 0, 0, 1, 0, 0];
                d.extend_from_slice(b"END\r\n");
                let _ = udp.send_to(&d, peer);
                continue;
            }
            let wrong = u16::from_be_bytes(id).wrapping_add(7).to_be_bytes();
            let mut d = vec![wrong[0], wrong[1], 0, 0, 0, 1, 0, 0];
            d.extend_from_slice(b"END\r\n");
            // Ten stale datagrams a second for the next three seconds.
            let udp = udp.try_clone().unwrap();
            std::thread::spawn(move || {
                for _ in 0..30 {
                    if udp.send_to(&d, peer).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
    });
    let o = run("memcached", port, &["udp=true"]);
    reads_failed(&o, "timeout");
}

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

// ---- Redis Cluster: where a server sends kvmeter (F9) ----

/// The hostile node's own port, for its CLUSTER SLOTS reply (answers are plain functions).
static NODE_PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);

#[test]
fn redis_cluster_redirect_to_another_host_is_warned_about_once() {
    // The node owns every slot, then answers each read with MOVED to a host the options did
    // not name (nothing listens there: the run ends on that connection's error).
    fn answer(req: &[u8]) -> Act {
        if has(req, b"INFO") {
            say(INFO)
        } else if has(req, b"AUTH") {
            say(b"+OK\r\n")
        } else if has(req, b"SLOTS") {
            let port = NODE_PORT.load(std::sync::atomic::Ordering::Relaxed);
            Act::Say(
                format!("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:{port}\r\n")
                    .into_bytes(),
            )
        } else {
            say(b"-MOVED 3999 127.0.0.3:1\r\n")
        }
    }
    let port = tcp_server(answer);
    NODE_PORT.store(port, std::sync::atomic::Ordering::Relaxed);
    let o = run("redis", port, &["cluster=3", "password=S3cret"]);
    sane(&o);
    let warnings: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning: Redis:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", o.stderr);
    assert!(
        warnings[0].contains("a MOVED or ASK redirect sends kvmeter to 127.0.0.3:1")
            && warnings[0].contains("sends AUTH there"),
        "{}",
        warnings[0]
    );
    assert!(o.code == 0 || o.code == 1, "exit {}: {}", o.code, o.stderr);
    validate("summary.schema.json", &json(&o.out.join("summary.json")));
}

#[test]
fn redis_cluster_slots_naming_2000_nodes_is_refused() {
    fn answer(req: &[u8]) -> Act {
        if has(req, b"INFO") {
            return say(INFO);
        }
        let mut r = b"*2000\r\n".to_vec();
        for i in 0..2000u32 {
            r.extend(
                format!(
                    "*3\r\n:{i}\r\n:{i}\r\n*2\r\n$9\r\n127.0.0.2\r\n:{}\r\n",
                    20000 + i
                )
                .into_bytes(),
            );
        }
        Act::Say(r)
    }
    let o = run("redis", tcp_server(answer), &["cluster=3"]);
    sane(&o);
    assert!(o.code == 1 || o.code == 2, "exit {}: {}", o.code, o.stderr);
    assert!(
        o.stderr
            .contains("CLUSTER SLOTS names more than 1000 nodes"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("warning: Redis:"), "{}", o.stderr);
}

#[test]
fn redis_sentinel_naming_another_host_is_warned_about_once() {
    // The primary answers a read with garbage (a protocol error; the connection is reopened
    // through the Sentinels), and the Sentinel names a primary on a host the options did not
    // name (nothing listens there: the run ends on that connection's error).
    fn primary(req: &[u8]) -> Act {
        if has(req, b"INFO") {
            say(INFO)
        } else if has(req, b"AUTH") {
            say(b"+OK\r\n")
        } else {
            say(b"?garbage\r\n")
        }
    }
    fn sentinel(_: &[u8]) -> Act {
        say(b"*2\r\n$9\r\n127.0.0.4\r\n$1\r\n1\r\n")
    }
    let port = tcp_server(primary);
    let sentinel = format!("sentinel_addr=127.0.0.1:{}", tcp_server(sentinel));
    let o = run("redis", port, &[&sentinel, "password=S3cret"]);
    sane(&o);
    let warnings: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning: Redis:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", o.stderr);
    assert!(
        warnings[0].contains("a Sentinel sends kvmeter to 127.0.0.4:1"),
        "{}",
        warnings[0]
    );
    let summary = json(&o.out.join("summary.json"));
    let read = &phase(&summary, "run")["ops"]["READ"];
    assert!(
        read["errors"]["protocol"].as_u64().unwrap_or(0) > 0,
        "{read}"
    );
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
