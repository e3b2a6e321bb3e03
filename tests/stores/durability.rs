//! `kvmeter durability` end to end against a real redis-server that the test starts, SIGKILLs
//! while the writes are under way, and restarts on the same port and data directory: without
//! persistence the acknowledged writes before the kill are lost (exit 1 with --fail-on-loss,
//! 0 without), with `appendfsync always` none are, and a server that never comes back makes
//! the check unavailable (exit 1), not "lost". The lost count is checked against the test's
//! own read-back (redis-cli --scan of the restarted server against the acknowledged writes in
//! writes-<w>.csv); every run leaves manifest.json and a report.html with the counts.
//! (tests/experiments/faults.rs covers the managed clusters' faults and the embedded stores' kills.)
//!
//! The test's files (the servers' data and kvmeter's run directory) live on tmpfs when
//! /dev/shm has room: a SIGKILL of the server process keeps what the kernel has been handed
//! whatever the disk, so the disk adds nothing to what is checked, while a CI disk busy writing
//! back the build's gigabytes made each `appendfsync always` write (and kvmeter's own fsync of
//! manifest.json) take seconds.

use crate::common;

use common::servers::{wait_exit, Launch, Proc};
use common::{bin, free_port, json};
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const WRITERS: usize = 2;

/// A temporary directory on tmpfs when /dev/shm has 512 MB free, else the default one.
fn scratch() -> tempfile::TempDir {
    let free_kib = Command::new("df")
        .args(["-P", "-k", "/dev/shm"])
        .output()
        .ok()
        .and_then(|o| {
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            out.lines()
                .nth(1)?
                .split_whitespace()
                .nth(3)?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    if free_kib >= 512 * 1024 {
        if let Ok(t) = tempfile::tempdir_in("/dev/shm") {
            return t;
        }
    }
    tempfile::tempdir().unwrap()
}

/// What kvmeter printed so far (its stdout and stderr go to files beside its run directory).
fn printed(t: &Path, name: &str) -> String {
    let read = |s: &str| std::fs::read_to_string(t.join(format!("{name}.{s}"))).unwrap_or_default();
    format!("{}{}", read("stdout"), read("stderr"))
}

fn redis_server(dir: &Path, port: u16, durable: bool) -> Proc {
    let (aof, fsync) = if durable {
        ("yes", "always")
    } else {
        ("no", "everysec")
    };
    // The last of a repeated flag wins: `Launch::redis` says `--appendonly no` first.
    Launch::redis(dir)
        .args(&["--appendonly", aof, "--appendfsync", fsync])
        .start_at(port)
}

struct Check {
    code: i32,
    stdout: String,
    /// What kvmeter printed (stdout and stderr), for the assertions' messages.
    said: String,
    out: PathBuf,
    port: u16,
    /// The restarted server (kept alive for the test's own read-back).
    _server: Option<Proc>,
}

/// Runs `kvmeter durability` on a server the test started; SIGKILLs the server once writes are
/// under way (writes-0.csv has its first block) and restarts it when `restart`.
fn durability(t: &Path, name: &str, durable: bool, restart: bool, extra: &[&str]) -> Check {
    let data = t.join(format!("{name}-data"));
    std::fs::create_dir_all(&data).unwrap();
    let port = free_port();
    let mut server = redis_server(&data, port, durable);
    let out = t.join(name);
    let mut child = Command::new(bin())
        .args(["durability", "--store", "redis", "--store-opt"])
        .arg(format!("addr=127.0.0.1:{port}"))
        .args(["--duration", "4s", "--writers", &WRITERS.to_string()])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .env("NO_COLOR", "1")
        .stdout(std::fs::File::create(t.join(format!("{name}.stdout"))).unwrap())
        .stderr(std::fs::File::create(t.join(format!("{name}.stderr"))).unwrap())
        .spawn()
        .unwrap();
    // The kill comes once writer 0 has logged 20 writes, or any write after 1.5 s, one of
    // them acknowledged: a disk whose fsync takes tens of ms (CI's) makes `appendfsync always`
    // that slow, and the 4 s of writes leave time after the restart either way.
    let started = Instant::now();
    let log = out.join("writes-0.csv");
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let logged = text.lines().count().saturating_sub(1);
        let acked = text.lines().any(|l| l.split(',').nth(1) == Some("ok"));
        if acked && (logged >= 20 || started.elapsed() > Duration::from_millis(1500)) {
            break;
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!(
                "kvmeter ended ({st}) before writer 0 logged a write:\n{}",
                printed(t, name)
            );
        }
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "no writes logged in 90 s; kvmeter printed:\n{}\nits directory: {:?}",
                printed(t, name),
                std::fs::read_dir(&out)
                    .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    server.0.kill().unwrap(); // SIGKILL
    server.0.wait().unwrap();
    drop(server);
    let killed_at = started.elapsed();
    let restarted = restart.then(|| redis_server(&data, port, durable));
    // A loaded CI host has taken tens of seconds to write the run's files: the limit is wide.
    let code = wait_exit(&mut child, Duration::from_secs(180));
    let stdout = std::fs::read_to_string(t.join(format!("{name}.stdout"))).unwrap();
    let said = format!(
        "{name}: server killed {:.2} s after the start; kvmeter exit {code} after {:.2} s, printed:\n{}",
        killed_at.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        printed(t, name)
    );
    eprintln!("{said}");
    Check {
        code,
        stdout,
        said,
        out,
        port,
        _server: restarted,
    }
}

/// The test's own count: acknowledged writes (from the writers' logs) and how many of their
/// keys the restarted server does not have (its keys listed with redis-cli --scan).
fn independent(c: &Check) -> (u64, u64) {
    let o = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &c.port.to_string()])
        .args(["--scan", "--pattern", "dur-*"])
        .output()
        .expect("redis-cli is installed");
    assert!(o.status.success());
    let present: HashSet<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let (mut acked, mut lost) = (0, 0);
    for w in 0..WRITERS {
        let log = std::fs::read_to_string(c.out.join(format!("writes-{w}.csv"))).unwrap();
        for l in log.lines().skip(1) {
            let f: Vec<&str> = l.split(',').collect();
            if f[1] == "ok" {
                acked += 1;
                let seq: u64 = f[0].parse().unwrap();
                if !present.contains(&format!("dur-{w:03}-{seq:012}")) {
                    lost += 1;
                }
            }
        }
    }
    (acked, lost)
}

/// The files every run leaves: manifest.json (finished, with the flag) and report.html with
/// the counts of durability.json.
fn files(c: &Check, fail_on_loss: bool, status: &str) -> (Value, String) {
    assert!(
        c.out.join("durability.json").is_file(),
        "no durability.json; {}",
        c.said
    );
    let d = json(&c.out.join("durability.json"));
    let m = json(&c.out.join("manifest.json"));
    assert_eq!(m["schema"], "kvmeter-durability-manifest/1", "{m}");
    assert_eq!(m["status"], status, "{m}\n{}", c.said);
    assert!(m["finished_at"].is_string(), "{m}");
    assert_eq!(m["store"]["name"], "redis");
    assert_eq!(m["settings"]["fail_on_loss"], fail_on_loss);
    let html = std::fs::read_to_string(c.out.join("report.html")).unwrap();
    for k in ["acknowledged", "lost", "unreadable", "indeterminate"] {
        let cell = format!(
            "data-key=\"durability.{k}\" data-value=\"{}\"",
            d["verdict"][k]
        );
        assert!(html.contains(&cell), "report.html lacks {cell}");
    }
    assert!(html.contains(d["result_text"].as_str().unwrap()));
    (d, html)
}

#[test]
fn redis_without_persistence_loses_what_it_acknowledged_before_the_kill() {
    let t = scratch();
    let c = durability(t.path(), "lossy", false, true, &["--fail-on-loss"]);
    let (acked, lost) = independent(&c);
    assert!(lost > 0 && lost < acked, "acked {acked}, lost {lost}");
    assert_eq!(c.code, 1, "--fail-on-loss with {lost} lost; {}", c.said);
    let (d, _) = files(&c, true, "completed");
    let v = &d["verdict"];
    assert_eq!(v["acknowledged"], acked, "{v}");
    assert_eq!(v["lost"], lost, "{v}");
    assert_eq!(v["unreadable"], 0, "{v}");
    assert_eq!(d["result"], "lost");
    assert!(
        c.stdout
            .contains(&format!("LOST {lost} of {acked} acknowledged writes")),
        "{}",
        c.stdout
    );
    // `kvmeter report DIR` makes the same page again from the files.
    std::fs::remove_file(c.out.join("report.html")).unwrap();
    let o = Command::new(bin())
        .arg("report")
        .arg(&c.out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    files(&c, true, "completed");

    // The same without --fail-on-loss: the figures are the result, exit 0.
    let c = durability(t.path(), "lossy-no-flag", false, true, &[]);
    let (acked, lost) = independent(&c);
    assert!(lost > 0);
    assert_eq!(c.code, 0, "{}", c.said);
    let (d, _) = files(&c, false, "completed");
    assert_eq!(d["verdict"]["acknowledged"], acked);
    assert_eq!(d["verdict"]["lost"], lost);
}

#[test]
fn redis_with_appendfsync_always_loses_nothing_and_passes_fail_on_loss() {
    let t = scratch();
    let c = durability(t.path(), "durable", true, true, &["--fail-on-loss"]);
    let (acked, lost) = independent(&c);
    assert!(acked >= 10, "acked {acked}");
    assert_eq!(lost, 0);
    assert_eq!(c.code, 0, "{}", c.said);
    let (d, _) = files(&c, true, "completed");
    assert_eq!(d["verdict"]["acknowledged"], acked);
    assert_eq!(d["verdict"]["lost"], 0);
    assert_eq!(d["result"], "none lost");
}

#[test]
fn a_server_that_does_not_come_back_is_unavailable_not_lost() {
    let t = scratch();
    let c = durability(t.path(), "gone", false, false, &[]);
    // Exit 1 without --fail-on-loss: the check could not be made.
    assert_eq!(c.code, 1, "{}", c.said);
    let (d, html) = files(&c, false, "failed");
    let v = &d["verdict"];
    assert_eq!(d["result"], "unavailable", "{d}\n{}", c.said);
    assert_eq!(v["lost"], 0, "{v}");
    assert!(v["acknowledged"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["unreadable"], v["writes"], "{v}");
    let why = d["result_text"].as_str().unwrap();
    assert!(why.starts_with("unavailable: "), "{why}");
    assert!(why.contains(&format!("127.0.0.1:{}", c.port)), "{why}");
    assert!(html.contains("unavailable"));
}
