//! The event-driven engine (`--connections`, `--depth`; issue 30) on memcached's binary
//! protocol (`--store-opt protocol=binary`): against a real memcached started by the test,
//! 1,000 connections × depth 4 of a workload A mix with partial updates (read-merge-set
//! chains) and `dataintegrity=true` complete with every value checked and kvmeter's counts
//! equal to the server's own `stats` deltas; against small hostile servers written here
//! (127.0.0.1 only) a reply with a wrong magic, a body length past `max_reply`, or another
//! request's opaque ends the run in time, without a panic, its reads counted as `protocol`
//! errors. No timing is asserted.

use crate::common;
use crate::memcached;

use common::servers::{mc_stats, wait_exit, Launch};
use common::{bin, count, json, kvmeter, phase};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn a_thousand_binary_connections_at_depth_4_match_memcacheds_own_counts() {
    let t = tempfile::tempdir().unwrap();
    let (_mc, port) = memcached(2048);
    let before = mc_stats(port);
    let out = t.path().join("run");
    let o = kvmeter()
        .args(["run", "-P", "workloada", "--store", "memcached"])
        .args(["--store-opt", "protocol=binary", "--store-opt"])
        .arg(format!("addr=127.0.0.1:{port}"))
        .args(["--connections", "1000", "--depth", "4", "--threads", "2"])
        .args(["--records", "2000", "--ops", "20000", "--seed", "11"])
        // Updates of one field of four: each is a get, a merge and a set of the whole record.
        .args(["-p", "fieldcount=4", "-p", "fieldlength=50"])
        .args(["-p", "writeallfields=false", "-p", "dataintegrity=true"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let s = json(&out.join("summary.json"));
    let (load, run) = (phase(&s, "load"), phase(&s, "run"));
    assert_eq!(count(load, "INSERT"), 2000);
    let (reads, updates) = (count(run, "READ"), count(run, "UPDATE"));
    assert_eq!(reads + updates, 20000);
    // Workload A is half updates: both kinds are there in numbers.
    assert!(reads > 5000 && updates > 5000, "{run}");
    assert_eq!(load["errors"], 0, "{load}");
    assert_eq!(run["errors"], 0, "{run}");
    // Every value read was the one last written under the key it asked for.
    assert_eq!(run["ops"]["VERIFY"]["ok"].as_u64(), Some(reads), "{run}");
    let e = &run["engine"];
    assert_eq!(
        (e["connections"].as_u64(), e["depth"].as_u64()),
        (Some(1000), Some(4))
    );
    assert_eq!(e["reconnects"], 0, "{e}");
    // The server's own counts: a get per read and per update (its merge read), a set per
    // insert and per update; two phases of 1,000 connections.
    let after = mc_stats(port);
    assert_eq!(after["cmd_get"] - before["cmd_get"], reads + updates);
    assert_eq!(after["cmd_set"] - before["cmd_set"], 2000 + updates);
    assert_eq!(after["get_hits"] - before["get_hits"], reads + updates);
    assert!(after["total_connections"] - before["total_connections"] >= 2000);
    common::validate("summary.schema.json", &s);
}

/// What the hostile server does to each reply.
#[derive(Clone, Copy)]
enum Lie {
    /// 0x80 (a request's magic) where 0x81 belongs.
    Magic,
    /// A GETK hit declaring one value byte more than `max_reply` (and sending none of it).
    PastMaxReply,
    /// A well-formed miss with another request's opaque.
    Opaque,
}

const MAX_REPLY: u32 = 64 << 10;

/// Replies to every whole binary request in `req` (the ping's text `version` is answered
/// sanely), each with `lie` in it.
fn answer(req: &[u8], lie: Lie, out: &mut Vec<u8>) -> usize {
    if req.starts_with(b"version") {
        out.extend_from_slice(b"VERSION 1.6.0\r\n");
        return req.len();
    }
    let mut at = 0;
    while req.len() - at >= 24 {
        let h = &req[at..at + 24];
        let total = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if req.len() - at < 24 + total {
            break;
        }
        let keylen = u16::from_be_bytes([h[2], h[3]]) as usize;
        let extras = h[4] as usize;
        let key = &req[at + 24 + extras..at + 24 + extras + keylen];
        let mut opaque = [h[12], h[13], h[14], h[15]];
        let (magic, status, body_len, rkey): (u8, u16, u32, &[u8]) = match lie {
            Lie::Magic => (0x80, 1, keylen as u32, key),
            Lie::PastMaxReply => (0x81, 0, 4 + keylen as u32 + MAX_REPLY + 1, key),
            Lie::Opaque => {
                opaque[3] ^= 1;
                (0x81, 1, keylen as u32, key)
            }
        };
        out.extend_from_slice(&[magic, h[1]]);
        out.extend_from_slice(&(rkey.len() as u16).to_be_bytes());
        out.push(if status == 0 { 4 } else { 0 });
        out.push(0);
        out.extend_from_slice(&status.to_be_bytes());
        out.extend_from_slice(&body_len.to_be_bytes());
        out.extend_from_slice(&opaque);
        out.extend_from_slice(&[0; 8]);
        if status == 0 {
            out.extend_from_slice(&[0; 4]);
        }
        out.extend_from_slice(rkey);
        at += 24 + total;
    }
    at
}

/// A server on 127.0.0.1 that lies as `lie` says; a thread per connection, each ending when
/// kvmeter closes it.
fn hostile(lie: Lie) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let (mut pending, mut buf, mut out) = (Vec::new(), vec![0u8; 64 << 10], vec![]);
                loop {
                    let n = match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    pending.extend_from_slice(&buf[..n]);
                    out.clear();
                    let used = answer(&pending, lie, &mut out);
                    pending.drain(..used);
                    if s.write_all(&out).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn hostile_binary_replies_are_protocol_errors_and_the_run_ends() {
    for (lie, says) in [
        (Lie::Magic, "magic"),
        (Lie::PastMaxReply, "max_reply"),
        (Lie::Opaque, "opaque"),
    ] {
        let port = hostile(lie);
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("run");
        let log = t.path().join("stderr.txt");
        let mut child = Command::new(bin())
            .args(["run", "--store", "memcached", "-P", "workloadc"])
            .args(["--store-opt", "protocol=binary", "--store-opt"])
            .arg(format!("addr=127.0.0.1:{port}"))
            .args(["--store-opt", "timeout_ms=1000", "--store-opt"])
            .arg(format!("max_reply={MAX_REPLY}"))
            .args(["--phase", "run", "--records", "10", "--duration", "2s"])
            .args(["--connections", "4", "--depth", "2", "--threads", "1"])
            .arg("--out")
            .arg(&out)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        // The run's 2 s, a deadline and a margin: past that it hangs (wait_exit kills it).
        let code = wait_exit(&mut child, Duration::from_secs(15));
        let stderr = std::fs::read_to_string(&log).unwrap();
        assert!(!stderr.contains("panicked"), "{says}: a panic:\n{stderr}");
        // As the hostile-server tests expect: exit 0 with the errors counted, or 1 when the
        // phase failed; never 2 (the ping was answered sanely) and never a signal.
        assert!(code == 0 || code == 1, "{says}: exit {code}:\n{stderr}");
        let s = json(&out.join("summary.json"));
        common::validate("summary.schema.json", &s);
        let run = phase(&s, "run");
        let read = &run["ops"]["READ"];
        let protocol = read["errors"]["protocol"].as_u64().unwrap_or(0);
        assert!(protocol > 0, "{says}: {read}\n{stderr}");
        assert_eq!(read["ok"].as_u64().unwrap_or(0), 0, "{says}: {read}");
        // Every failed read failed for the protocol (nothing waited into a timeout).
        assert_eq!(run["errors"].as_u64(), Some(protocol), "{says}: {run}");
        assert!(run["engine"]["reconnects"].as_u64().unwrap() > 0, "{says}");
        let samples = run["error_samples"].to_string();
        assert!(samples.contains(says), "{says}: {samples}");
    }
}

/// The test servers' own guard (common::servers::spawn_listening): a port that another
/// process listens on is told apart from the started server's, so a test never measures
/// another test's server (a port both picked at once).
#[test]
fn the_server_helper_tells_its_own_listener_from_anothers() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    assert_eq!(
        common::servers::listener_is(std::process::id(), port),
        Some(true)
    );
    let (mc, _) = Launch::memcached().start();
    assert_eq!(common::servers::listener_is(mc.0.id(), port), Some(false));
}
