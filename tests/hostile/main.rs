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

#[path = "../common/mod.rs"]
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
    /// Waits, then writes the bytes.
    Late(Vec<u8>, Duration),
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
            Act::Late(b, wait) => {
                std::thread::sleep(wait);
                if s.write_all(&b).is_err() {
                    return;
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
    /// User and system CPU the process used, from the kernel's accounting at its exit.
    cpu: Duration,
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
    run_with_timeout(store, port, TIMEOUT_MS, extra)
}

/// `run` with the store's deadline `timeout_ms`.
// The child is reaped by `reap` (wait4, for its CPU time), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn run_with_timeout(store: &str, port: u16, timeout_ms: u64, extra: &[&str]) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let log = dir.path().join("stderr.txt");
    // A test's own deadline replaces this one (one option given twice is refused).
    let deadline = match extra.iter().find(|e| e.starts_with("timeout_ms=")) {
        Some(own) => own.to_string(),
        None => format!("timeout_ms={timeout_ms}"),
    };
    let extra: Vec<&str> = extra
        .iter()
        .copied()
        .filter(|e| !e.starts_with("timeout_ms="))
        .collect();
    let mut args = s(&[
        "run",
        "--store",
        store,
        "--store-opt",
        &format!("addr=127.0.0.1:{port}"),
        "--store-opt",
        &deadline,
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
    // Store options, or a flag with its value attached (`-pNAME=VALUE`).
    for e in extra {
        if e.starts_with('-') {
            args.push(e.to_string());
        } else {
            args.extend(["--store-opt".to_string(), e.to_string()]);
        }
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
    let (code, cpu) = loop {
        if let Some(kib) = vm_hwm_kib(child.id()) {
            peak_kib = peak_kib.max(kib);
        }
        if let Some(ended) = reap(child.id()) {
            break ended;
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
        cpu,
        stderr: std::fs::read_to_string(&log).unwrap(),
        took: t.elapsed(),
        peak_kib,
        out,
        _dir: dir,
    }
}

/// The exit code and CPU time (user + system) of child `pid` once it has ended, reaped here
/// with `wait4` for its resource usage; `None` while it runs.
fn reap(pid: u32) -> Option<(i32, Duration)> {
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter; pid is our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid as i32, &mut status, libc::WNOHANG, &mut ru) };
    if r != pid as i32 {
        return None;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Some((code, tv(ru.ru_utime) + tv(ru.ru_stime)))
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

/// A run whose reads all met the hostile reply: it ends, failed (exit 1: no call was
/// answered), its run directory is readable, and its reads failed with `kind`.
fn reads_failed(o: &Outcome, kind: &str) {
    sane(o);
    // No call answered: the phase measured no store, so it failed and kvmeter exits 1.
    assert_eq!(o.code, 1, "exit {}:\n{}", o.code, o.stderr);
    let summary = json(&o.out.join("summary.json"));
    validate("summary.schema.json", &summary);
    let p = phase(&summary, "run");
    assert_eq!(p["outcome"], "failed", "{p}");
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

/// A run whose server answered the operations sanely and its statistics (`stats`, `INFO`)
/// with the hostile reply: the run ends as usual, and its summary says why the statistics are
/// missing.
fn stats_unavailable(o: &Outcome, why: &str) {
    sane(o);
    assert!(o.code == 0 || o.code == 1, "exit {}:\n{}", o.code, o.stderr);
    let summary = json(&o.out.join("summary.json"));
    validate("summary.schema.json", &summary);
    let p = phase(&summary, "run");
    assert!(count(p, "READ") > 0, "{p}");
    let samples = p["store_stats"]["unavailable"]["samples"]
        .as_str()
        .unwrap_or("");
    assert!(samples.contains(why), "{}", p["store_stats"]);
    assert!(p["store_stats"]["stats"].as_object().unwrap().is_empty());
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

mod etcd;
mod memcached;
mod redis;
mod scale;
