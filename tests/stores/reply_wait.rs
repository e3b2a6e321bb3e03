//! `--store-opt reply_wait` (issue 45): `auto` polls for replies when the server shares
//! kvmeter's CPUs and blocks when it runs on others, as the manifest records; both ways every
//! request is answered, by the server's own count.

use crate::common;
use common::servers::{mc_stats, spawn_listening};
use common::*;
use std::process::{Command, Stdio};

/// kvmeter under `taskset -c CPUS`: its run directory's manifest, stderr, and summary.
fn pinned_run(cpus: &str, args: &[&str]) -> (serde_json::Value, String, serde_json::Value) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let o = Command::new("taskset")
        .args(["-c", cpus])
        .arg(bin())
        .args(args)
        .arg("--out")
        .arg(&out)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("taskset (util-linux) is installed");
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stderr}");
    (
        json(&out.join("manifest.json")),
        stderr,
        json(&out.join("summary.json")),
    )
}

#[test]
fn auto_spins_beside_the_server_blocks_apart_from_it_and_every_request_is_answered() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        cpus >= 2,
        "this test needs two CPUs (server and client apart)"
    );
    // memcached on CPU 0 only.
    let (_srv, port) = spawn_listening(|port| {
        let mut c = Command::new("taskset");
        c.args([
            "-c",
            "0",
            "memcached",
            "-u",
            "nobody",
            "-l",
            "127.0.0.1",
            "-t",
            "1",
            "-U",
            "0",
        ])
        .args(["-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        c
    });
    let addr = format!("addr=127.0.0.1:{port}");
    let base = [
        "run",
        "-P",
        "workloadc",
        "--store",
        "memcached",
        "--store-opt",
        &addr,
        "--records",
        "200",
        "-p",
        "fieldcount=1",
        "-p",
        "fieldlength=100",
    ];
    let load = [&base[..], &["--phase", "load"]].concat();
    pinned_run("0-1", &load);
    for (cpus, opt, want, why) in [
        ("1", None, "block", "runs on other CPUs than kvmeter"),
        ("0", None, "spin", "shares 1 of kvmeter's 1 CPUs"),
        ("0-1", None, "spin", "shares 1 of kvmeter's 2 CPUs"),
        ("1", Some("reply_wait=spin"), "spin", ""),
        ("0", Some("reply_wait=block"), "block", ""),
    ] {
        for engine in [false, true] {
            let before = mc_stats(port);
            let mut args = [&base[..], &["--phase", "run", "--ops", "3000"]].concat();
            if let Some(o) = opt {
                args.extend(["--store-opt", o]);
            }
            if engine {
                args.extend(["--connections", "2", "--depth", "1"]);
            }
            let (m, stderr, s) = pinned_run(cpus, &args);
            let case = format!("cpus {cpus}, {opt:?}, engine {engine}");
            assert_eq!(
                m["store"]["options"]["reply_wait"], want,
                "{case}: {stderr}"
            );
            if opt.is_none() {
                let line = stderr
                    .lines()
                    .find(|l| l.starts_with("reply_wait: "))
                    .unwrap_or("");
                assert!(
                    line.contains(&format!("reply_wait: {want} (")),
                    "{case}: {line}"
                );
                assert!(line.contains(why), "{case}: {line}");
            } else {
                assert!(
                    !stderr.contains("reply_wait: "),
                    "{case}: a choice given is not noted"
                );
            }
            // The server's own count: every request of the phase reached it and hit.
            let after = mc_stats(port);
            let run = &s["phases"][0];
            assert_eq!(run["name"], "run");
            assert_eq!(run["operations"], 3000, "{case}");
            assert_eq!(run["errors"], 0, "{case}");
            assert_eq!(after["get_hits"] - before["get_hits"], 3000, "{case}");
        }
    }
}

#[test]
fn a_reply_wait_that_is_not_a_choice_is_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let o = kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "redis",
            "--store-opt",
            "reply_wait=fast",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(
        e.contains("--store-opt reply_wait=fast: expected one of auto, spin, block"),
        "{e}"
    );
    assert!(!out.exists());
}
