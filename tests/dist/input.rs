//! Bad input to a distributed run: one line naming the flag, file or agent, exit 2, and
//! nothing left in etcd (docs/distributed.md), against a real etcd on loopback.

use crate::common;

use common::servers::*;
use common::{free_port, kvmeter};
use std::time::{Duration, Instant};

/// Runs kvmeter to completion; (exit code, stderr).
fn fails(args: &[String]) -> (i32, String) {
    let o = kvmeter().args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn one_error_line(err: &str) -> String {
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    lines[0].to_string()
}

#[test]
fn bad_input_is_one_line_and_exit_2_and_leaves_nothing_in_etcd() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = etcd(tmp.path(), 1);
    let (_m, port) = memcached(tmp.path(), "mc", false);
    let addr = format!("addr=127.0.0.1:{port}");
    let out = tmp.path().join("never");
    let run = |extra: &[&str]| {
        let mut v = s(&[
            "dist",
            "run",
            "--coord",
            &url,
            "--out",
            out.to_str().unwrap(),
            "--store",
            "memcached",
            "--store-opt",
            &addr,
            "-P",
            "workloadc",
            "--records",
            "100",
            "--ops",
            "100",
        ]);
        v.extend(s(extra));
        v
    };
    // Unreachable etcd, for the coordinator and for an agent.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let mut v = run(&["--agents", "2"]);
    v[3] = dead.clone();
    let (code, err) = fails(&v);
    assert_eq!(code, 2);
    assert!(one_error_line(&err).contains("cannot reach etcd"), "{err}");
    let (code, err) = fails(&s(&["agent", "--coord", &dead, "--index", "0"]));
    assert_eq!(code, 2);
    assert!(one_error_line(&err).contains("cannot reach etcd"), "{err}");
    // Flags checked before etcd is touched.
    for (extra, expect) in [
        (vec!["--agents", "0"], "--agents 0"),
        (vec!["--agents", "2", "--lease-ttl", "1s"], "--lease-ttl 1s"),
        (vec!["--agents", "2", "--job", "a/b"], "--job 'a/b'"),
    ] {
        let (code, err) = fails(&run(&extra));
        assert_eq!(code, 2, "{extra:?}");
        assert!(one_error_line(&err).contains(expect), "{extra:?}: {err}");
    }
    let (code, err) = fails(&s(&[
        "dist",
        "run",
        "--coord",
        &url,
        "--agents",
        "2",
        "--store",
        "memcached",
    ]));
    assert_eq!(code, 2);
    assert!(
        one_error_line(&err).contains("needs --store-opt addr="),
        "{err}"
    );
    let o = kvmeter()
        .args(["agent", "--coord", &url])
        .env("SLURM_PROCID", "x")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("SLURM_PROCID='x'"));
    // No agent within the timeout: nothing run, nothing left.
    let (code, err) = fails(&run(&["--agents", "2", "--register-timeout", "1s"]));
    assert_eq!(code, 2);
    assert!(
        one_error_line(&err).contains(
            "0 of 2 agents registered under /kvmeter/default/ (missing: 0, 1); nothing was run"
        ),
        "{err}"
    );
    assert!(!out.exists());
    assert_eq!(keys_left(&url), 0);
    // Issue 40 item 11: the hint says how the agents get the key, as this process got it.
    assert!(
        err.contains("with KVMETER_PLAN_KEY set to this run's key"),
        "{err}"
    );
    let keyf = tmp.path().join("plan.key");
    std::fs::write(&keyf, common::TEST_PLAN_KEY).unwrap();
    std::fs::set_permissions(&keyf, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut v = run(&[
        "--agents",
        "2",
        "--register-timeout",
        "1s",
        "--plan-key-file",
    ]);
    v.push(keyf.display().to_string());
    let (code, err) = fails(&v);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("--plan-key-file {}'", keyf.display())),
        "{err}"
    );
    assert_eq!(keys_left(&url), 0);
    // A coordinator waiting for 2 agents: one registers; an index out of range, a taken index
    // and a wrong plan hash are refused; the wrong hash stops the coordinator too.
    let log = tmp.path().join("coord.log");
    let mut coord = Proc(spawn(&run(&["--agents", "2", "--job", "bad"]), &log));
    let agent = |extra: &[&str]| {
        let mut v = s(&["agent", "--coord", &url, "--job", "bad", "--wait", "10s"]);
        v.extend(s(extra));
        v
    };
    let first = tmp.path().join("agent0");
    let mut a0 = Proc(spawn(
        &agent(&["--index", "0", "--out", first.to_str().unwrap()]),
        &tmp.path().join("agent0.log"),
    ));
    let t = Instant::now();
    while !std::fs::read_to_string(tmp.path().join("agent0.log"))
        .unwrap_or_default()
        .contains("registered")
        && !first.exists()
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "agent 0 never registered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, err) = fails(&agent(&["--index", "5"]));
    assert_eq!(code, 2);
    assert!(
        one_error_line(&err)
            .contains("--index 5: out of range: the plan under /kvmeter/bad/ has 2 agents (0..1)"),
        "{err}"
    );
    let (code, err) = fails(&agent(&["--index", "0"]));
    assert_eq!(code, 2);
    assert!(one_error_line(&err).contains("--index 0: taken"), "{err}");
    let (code, err) = fails(&agent(&["--index", "1", "--plan-hash", "0123456789abcdef"]));
    assert_eq!(code, 2);
    assert!(
        one_error_line(&err).contains("--plan-hash 0123456789abcdef: expected the 64 hex digits"),
        "{err}"
    );
    let (code, err) = fails(&agent(&["--index", "1", "--plan-hash", &"ab".repeat(32)]));
    assert_eq!(code, 2);
    assert!(
        one_error_line(&err).contains(
            "agent 1: --plan-hash: the plan published under /kvmeter/bad/ is not the one this agent was pinned to"
        ),
        "{err}"
    );
    assert_eq!(wait_exit(&mut coord.0, Duration::from_secs(20)), 2);
    let coord_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        one_error_line(&coord_log).contains("--plan-hash"),
        "{coord_log}"
    );
    assert!(!out.exists(), "the coordinator created its run directory");
    let code = wait_exit(&mut a0.0, Duration::from_secs(20));
    assert_ne!(code, 0, "agent 0 ran without a coordinator");
    assert_eq!(keys_left(&url), 0);
}
