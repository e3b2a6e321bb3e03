//! The report channel against an attacker without the key during a real run (issue 41; review
//! 2026-11-27 F1, F2): a module of tests/dist/security.rs, which was near its size bound.

use super::b64;
use crate::common::servers::*;
use crate::common::{json, phase};
use base64::Engine;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Review 2026-11-27 F1 and F2 (issue 41), without the key: the attacker keeps 40 idle
/// connections open to the report port from before the agents start (reopened as the
/// coordinator closes them; the old coordinator took agents + 8 connections, so the agents
/// were locked out and posted through etcd while their records still said "direct"), and
/// replays on the channel every sealed report it finds in etcd (the old channel accepted
/// them). The agents must keep the channel, and the merge must be the agents' own counts.
#[test]
fn idle_connections_and_replayed_etcd_reports_neither_lock_agents_out_nor_change_the_merge() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let job = "lockout";
    let pre = format!("/kvmeter/{job}/");
    let port = crate::common::free_port();
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = {
        let (url, pre, stop) = (url.clone(), pre.clone(), stop.clone());
        std::thread::spawn(move || {
            let addr = format!("127.0.0.1:{port}");
            let mut idle: Vec<TcpStream> = vec![];
            let (mut opened, mut replayed) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                // Drop the connections the coordinator closed, open new ones up to 40.
                idle.retain_mut(|s| {
                    s.set_nonblocking(true).unwrap();
                    let mut b = [0u8; 256];
                    loop {
                        match s.read(&mut b) {
                            Ok(0) => return false,
                            Ok(_) => continue,
                            Err(e) => return e.kind() == std::io::ErrorKind::WouldBlock,
                        }
                    }
                });
                while idle.len() < 40 {
                    match TcpStream::connect(&addr) {
                        Ok(s) => {
                            idle.push(s);
                            opened += 1;
                        }
                        Err(_) => break,
                    }
                }
                // Every sealed report in etcd, sent as a frame on some idle connections.
                let r = etcd_post(
                    &url,
                    "/v3/kv/range",
                    &format!(
                        r#"{{"key":"{}","range_end":"{}"}}"#,
                        b64(&format!("{pre}iv/")),
                        b64(&format!("{pre}iv0"))
                    ),
                );
                let kvs = r.as_ref().and_then(|r| r["kvs"].as_array().cloned());
                for kv in kvs.unwrap_or_default() {
                    let dec = |f: &str| {
                        base64::engine::general_purpose::STANDARD
                            .decode(kv[f].as_str().unwrap_or(""))
                            .unwrap_or_default()
                    };
                    let (k, v) = (dec("key"), dec("value"));
                    let k = &k[pre.len().min(k.len())..];
                    let mut f = vec![];
                    f.extend_from_slice(&(k.len() as u16).to_be_bytes());
                    f.extend_from_slice(&(v.len() as u32).to_be_bytes());
                    f.extend_from_slice(k);
                    f.extend_from_slice(&v);
                    for s in idle.iter_mut().take(4) {
                        let _ = s.write_all(&f.repeat(8));
                        replayed += 8;
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            (opened, replayed)
        })
    };
    // The idle connections are there before the agents: the coordinator listens, the
    // attacker fills the port, then the agents start.
    let run = s(&[
        "--store",
        "null",
        "-P",
        "workloadc",
        "--records",
        "1000",
        "--ops",
        "20000",
        "--threads",
        "1",
        "--interval",
        "200ms",
        "--telemetry-interval",
        "0",
        "--target",
        "10000",
    ]);
    let reports = format!("127.0.0.1:{port}");
    let mut d = Dist::start_with(&url, job, 2, &["--reports", reports.as_str()], &run, |_| {
        // Agents start once the port is full of idle connections.
        std::thread::sleep(Duration::from_millis(1500));
        vec![]
    });
    let code = d.finish();
    stop.store(true, Ordering::Relaxed);
    let (opened, replayed) = attacker.join().unwrap();
    let coord_log = d.log("coord.log");
    let logs = format!(
        "{coord_log}\n{}\n{}",
        d.log("agent0.log"),
        d.log("agent1.log")
    );
    assert_eq!(code, 0, "{logs}");
    assert!(opened >= 40, "the attacker opened {opened} connections");
    assert!(
        coord_log.contains("warning: dist: dropped a report connection from 127.0.0.1"),
        "{logs}"
    );
    // Both agents kept the channel: their records say so and they wrote no report to etcd.
    for i in 0..2 {
        let rec = json(&d.path(&format!("agent{i}/dist/agent.json")));
        assert_eq!(rec["registration"]["reports"], "direct", "{i}: {logs}");
        assert_eq!(rec["bytes_to_etcd"], 0, "{i}: {logs}");
        assert!(rec["bytes_to_coordinator"].as_u64().unwrap() > 0, "{i}");
    }
    assert!(!logs.contains("go through etcd"), "{logs}");
    assert_eq!(replayed, 0, "reports were found in etcd");
    // Exact: the merged counts are the agents' own, summed, and the plan's.
    let merged = json(&d.path("merged/summary.json"));
    assert_eq!(merged["status"], "completed", "{logs}");
    let agents: Vec<_> = (0..2)
        .map(|i| json(&d.path(&format!("agent{i}/summary.json"))))
        .collect();
    for (p, op, total) in [("load", "INSERT", 1000u64), ("run", "READ", 20000)] {
        let sum: u64 = agents.iter().map(|a| counts(phase(a, p))[op]).sum();
        assert_eq!(counts(phase(&merged, p))[op], sum, "{p}");
        assert_eq!(sum, total, "{p}");
    }
}

/// Issue 41 item 1, TLS: `--reports-tls-cert/--reports-tls-key` serve the report channel in
/// TLS; agents pin the certificate by the SHA-256 in the sealed plan (no flag on the agents).
/// The pin the run records is the one openssl computes; the merge is the agents' own counts;
/// the flags' misuse is one line, exit 2, nothing created.
#[test]
fn the_report_channel_in_tls_pins_the_coordinators_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let run_openssl = |args: &[&str]| {
        let o = std::process::Command::new("openssl")
            .args(args)
            .current_dir(tmp.path())
            .output()
            .expect("openssl is installed");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    run_openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=coordinator",
        "-keyout",
        "k.pem",
        "-out",
        "c.pem",
    ]);
    let fp = run_openssl(&["x509", "-noout", "-fingerprint", "-sha256", "-in", "c.pem"]);
    let pin = fp
        .trim()
        .rsplit('=')
        .next()
        .unwrap()
        .replace(':', "")
        .to_lowercase();
    let (cert, key) = (tmp.path().join("c.pem"), tmp.path().join("k.pem"));
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    // Misuse first: one line, exit 2, no --out.
    for (flags, says) in [
        (
            vec!["--reports-tls-cert", cert],
            "--reports-tls-cert and --reports-tls-key: give both",
        ),
        (
            vec![
                "--reports",
                "etcd",
                "--reports-tls-cert",
                cert,
                "--reports-tls-key",
                key,
            ],
            "--reports-tls-cert: --reports etcd has no report channel",
        ),
        (
            vec!["--reports-tls-cert", key, "--reports-tls-key", key],
            "--reports-tls-cert ",
        ),
    ] {
        let out = tmp.path().join("never");
        let o = crate::common::kvmeter()
            .args([
                "dist", "run", "--coord", &url, "--job", "tlsbad", "--agents", "1",
            ])
            .args(&flags)
            .args(["--store", "null", "-P", "workloadc", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!out.exists());
    }
    let run = s(&[
        "--store",
        "null",
        "-P",
        "workloadc",
        "--records",
        "500",
        "--ops",
        "5000",
        "--threads",
        "1",
        "--interval",
        "200ms",
        "--telemetry-interval",
        "0",
    ]);
    let flags = ["--reports-tls-cert", cert, "--reports-tls-key", key];
    let mut d = Dist::start_with(&url, "tls", 2, &flags, &run, |_| vec![]);
    let code = d.finish();
    let logs = format!("{}\n{}", d.log("coord.log"), d.log("agent0.log"));
    assert_eq!(code, 0, "{logs}");
    assert!(d.log("coord.log").contains(" in TLS (etcd keeps"), "{logs}");
    let info = json(&d.path("merged/dist.json"));
    let via = info["reports"].as_str().unwrap();
    assert!(
        via.starts_with("direct to 127.0.0.1:")
            && via.ends_with(&format!("in TLS (certificate SHA-256 {pin})")),
        "{via}"
    );
    for i in 0..2 {
        let rec = json(&d.path(&format!("agent{i}/dist/agent.json")));
        assert_eq!(rec["registration"]["reports"], "direct", "{i}: {logs}");
        assert_eq!(rec["bytes_to_etcd"], 0, "{i}: {logs}");
    }
    let merged = json(&d.path("merged/summary.json"));
    assert_eq!(merged["status"], "completed", "{logs}");
    let agents: Vec<_> = (0..2)
        .map(|i| json(&d.path(&format!("agent{i}/summary.json"))))
        .collect();
    let sum: u64 = agents.iter().map(|a| counts(phase(a, "run"))["READ"]).sum();
    assert_eq!(sum, 5000);
    assert_eq!(counts(phase(&merged, "run"))["READ"], sum);
}
