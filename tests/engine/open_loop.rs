//! Open loop on the event-driven engine (`--rate` with `--connections`) against a real
//! memcached started by the test on loopback: a probe stream measured apart from the load; on
//! a server stopped for 500 ms the from-intended latency carries the stall while the
//! from-send latency does not, and how far behind the schedule was counts the arrivals the
//! loops held; `--send-slack` sends what fell due together and is declared. No timing is
//! asserted beyond the stall the test makes itself.

use crate::common;
use crate::{kvmeter_cmd, memcached};

use common::servers::{mc_stats, Launch};
use common::{count, json, kvmeter, phase};
use std::process::Stdio;
use std::time::Duration;

#[test]
fn a_probe_stream_is_measured_apart_from_the_load() {
    let t = tempfile::tempdir().unwrap();
    // Twice at most, and only when memcached itself is gone: twice in CI (stops 47 and 48) the
    // server this test started was not there when kvmeter first asked. What memcached said
    // then is printed, so the cause is on record; kvmeter must still succeed on a live one.
    let mut attempt = 0;
    let (_mc, port, out) = loop {
        attempt += 1;
        let log = t.path().join(format!("memcached-{attempt}.log"));
        let (mut mc, port) = Launch::memcached()
            .args(&["-c", "1024", "-v"])
            .log(&log)
            .start();
        let out = t.path().join(format!("run-{attempt}"));
        let o = kvmeter()
            .args(["run", "-P", "workloadc", "--store", "memcached"])
            .args(["--store-opt", &format!("addr=127.0.0.1:{port}")])
            .args(["--connections", "100", "--depth", "4", "--records", "1000"])
            .args(["--probe-rate", "200", "--probe-connections", "2"])
            .args(["--duration", "2s", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let gone = mc.0.try_wait().ok().flatten();
        let said = format!(
            "{}\nmemcached (pid {}, exited: {gone:?}) said:\n{}",
            String::from_utf8_lossy(&o.stderr),
            mc.0.id(),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        if o.status.success() {
            break (mc, port, out);
        }
        assert!(gone.is_some() && attempt == 1, "{said}");
        eprintln!("memcached was gone before kvmeter asked; once more:\n{said}");
    };
    let s = json(&out.join("summary.json"));
    let run = phase(&s, "run");
    let probe = &run["engine"]["probe"];
    assert_eq!(probe["connections"], 2);
    let probed = probe["ops"]["READ"]["count"].as_u64().unwrap();
    // ~400 Poisson arrivals in 2 s (3 sigma is 60); the load's own count leaves them out.
    assert!((250..600).contains(&probed), "{probe}");
    assert_eq!(
        probe["ops"]["READ"]["intended_latency_us"]["count"].as_u64(),
        Some(probed)
    );
    let loaded = count(run, "READ");
    assert!(loaded > 10 * probed, "{run}");
    let st = mc_stats(port);
    assert_eq!(st["cmd_get"], loaded + probed);
    assert_eq!(st["cmd_set"], 1000);
    common::validate("summary.schema.json", &s);
}

#[test]
fn on_a_stopped_server_from_intended_carries_the_stall_and_from_send_does_not() {
    let t = tempfile::tempdir().unwrap();
    let (mc, port) = memcached(1024);
    let out = t.path().join("run");
    let mut child = kvmeter_cmd()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "memcached",
            "--store-opt",
        ])
        .arg(format!("addr=127.0.0.1:{port}"))
        .args([
            "--connections",
            "16",
            "--rate",
            "2000",
            "--arrival",
            "fixed",
        ])
        .args([
            "--records",
            "500",
            "--duration",
            "3s",
            "--interval",
            "100ms",
        ])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::servers::wait_for_phase(&out, "run");
    let pid = mc.0.id() as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert!(child.wait().unwrap().success());
    let s = json(&out.join("summary.json"));
    let run = phase(&s, "run");
    let r = &run["ops"]["READ"];
    // Ground truth from the schedule: arrivals every 0.5 ms, 1,000 of them in the 500 ms stall,
    // each waiting until its end, out of ~6,000: 1 % of all waited longer than ~470 ms. Only
    // the 16 sent before the stop waited on the wire.
    let intended_p99 = r["intended_latency_us"]["p99"].as_f64().unwrap();
    let send_p99 = r["latency_us"]["p99"].as_f64().unwrap();
    assert!(intended_p99 > 250_000.0, "{r}");
    assert!(send_p99 < 100_000.0, "{r}");
    assert!(r["latency_us"]["max"].as_f64().unwrap() > 250_000.0, "{r}");
    let e = &run["engine"];
    assert!(e["queued"].as_u64().unwrap() > 500, "{e}");
    assert_eq!(e["when_full"], "queue");
    // The sends bunched after the stall: the run fails its own check of the arrival process
    // (evenly spaced asked for) and says the schedule was not kept.
    let ol = &run["open_loop"];
    assert_eq!(ol["arrivals_check"]["passed"], false, "{ol}");
    assert!(
        ol["arrivals_check"]["dispersion"].as_f64().unwrap() > 0.5,
        "{ol}"
    );
    assert_eq!(ol["kept_up"], false, "{ol}");
    assert!(
        ol["warning"].as_str().unwrap().contains("did not follow"),
        "{ol}"
    );
    // What held the arrivals back was the connections, and raising them is the advice.
    let w = ol["warning"].as_str().unwrap().to_lowercase();
    assert!(
        w.contains("all 16 connections × depth 1 were full")
            && w.contains("raise --connections")
            && !w.contains("raise --threads")
            && !w.contains("workers were busy"),
        "{w}"
    );
    // How far behind the schedule was: the loops took every due arrival into their backlogs,
    // and those count. A 100 ms interval ends at least 400 ms into the 500 ms stall, when the
    // oldest unsent arrival is about that old (it fell due once the 16 connections were full,
    // 8 ms after the stop); no arrival waited longer than the longest from-intended latency.
    let intended_max_ms = r["intended_latency_us"]["max"].as_f64().unwrap() / 1e3;
    let csv = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "behind_ms").unwrap();
    let behind = csv
        .lines()
        .filter(|l| l.starts_with("run,"))
        .map(|l| l.split(',').nth(col).unwrap().parse::<f64>().unwrap())
        .fold(0f64, f64::max);
    assert!(
        behind > 300.0 && behind <= intended_max_ms + 1.0,
        "largest behind_ms {behind}, longest from-intended latency {intended_max_ms} ms\n{csv}"
    );
    // intervals.csv rounds to the µs.
    assert!(
        (ol["max_behind_ms"].as_f64().unwrap() - behind).abs() < 0.001,
        "{ol}"
    );
    common::validate("summary.schema.json", &s);
}

#[test]
fn send_slack_sends_what_fell_due_together_and_is_declared() {
    let t = tempfile::tempdir().unwrap();
    let (_mc, port) = memcached(1024);
    let out = t.path().join("run");
    let o = kvmeter()
        .args(["run", "-P", "workloadc", "--store", "memcached"])
        .args(["--store-opt", &format!("addr=127.0.0.1:{port}")])
        .args(["--records", "200", "--connections", "16", "--rate", "1000"])
        .args([
            "--arrival",
            "fixed",
            "--send-slack",
            "20ms",
            "--duration",
            "2s",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = json(&out.join("manifest.json"));
    assert_eq!(m["plan"]["engine"]["send_slack_ns"], 20_000_000);
    common::validate("manifest.schema.json", &m);
    let s = json(&out.join("summary.json"));
    let ol = &phase(&s, "run")["open_loop"];
    // Arrivals every 1 ms, sent on a 20 ms grid: on average 10 ms late, never early; a loaded
    // machine only adds to it.
    assert!(
        ol["send_lag_us"]["p50"].as_f64().unwrap() >= 2_000.0,
        "{ol}"
    );
    assert!(ol["send_lag_us"]["min"].as_f64().unwrap() >= 0.0, "{ol}");
    // Without --rate, or without --connections, or past 100 ms: one line, exit 2, nothing made.
    for (args, says) in [
        (
            vec!["--connections", "4", "--send-slack", "1ms"],
            "goes with --rate",
        ),
        (
            vec!["--rate", "10", "--send-slack", "1ms"],
            "go with --connections",
        ),
        (
            vec!["--connections", "4", "--rate", "10", "--send-slack", "1s"],
            "at most 100ms",
        ),
        (
            vec!["--connections", "4", "--rate", "10", "--send-slack", "soon"],
            "--send-slack 'soon'",
        ),
    ] {
        let bad = t.path().join("bad");
        let o = kvmeter()
            .args(["run", "-P", "workloadc", "--store", "memcached"])
            .args(["--store-opt", &format!("addr=127.0.0.1:{port}")])
            .args(&args)
            .arg("--out")
            .arg(&bad)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!bad.exists());
    }
}
