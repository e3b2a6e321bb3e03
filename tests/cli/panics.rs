//! A panic anywhere ends the run cleanly (issue 27 item 4; review F5, F6): a worker, a thread
//! beside the workers, or the main thread panics on purpose (`KVMETER_TEST_PANIC`, a test-only
//! variable read once per phase, see src/driver/test_panic.rs), and the run must end within a
//! bound with exit 1 (101 for the main thread outside a phase), the panic's message in
//! summary.json and on stderr in one line, every interval so far in intervals.csv, and a
//! manifest that no longer says "running". Ctrl-C stops a run whose worker is stuck.

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use common::*;

/// A 3 s null run (two workers, 200 ms intervals) with `KVMETER_TEST_PANIC=what`.
fn spawn(out: &Path, what: &str, store: &[&str]) -> Child {
    std::process::Command::new(bin())
        .args([
            "run",
            "-P",
            "workloadc",
            "--phase",
            "run",
            "--records",
            "1000",
        ])
        .args(["--threads", "2", "--duration", "3s", "--interval", "200ms"])
        .args(store)
        .arg("--out")
        .arg(out)
        .env("KVMETER_TEST_PANIC", what)
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for the child at most `limit`; a hang fails the test (and the child is killed).
fn wait_bounded(mut child: Child, limit: Duration) -> (Output, Duration) {
    let t = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), t.elapsed());
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// intervals.csv is whole (every row as wide as the header) and has `phase`'s rows.
fn interval_rows(out: &Path, phase: &str) -> usize {
    let csv = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    let width = csv.lines().next().unwrap().split(',').count();
    for l in csv.lines() {
        assert_eq!(l.split(',').count(), width, "torn row: {l}");
    }
    csv.lines()
        .filter(|l| l.starts_with(&format!("{phase},")))
        .count()
}

/// The lines of stderr that report a panic: exactly one, on one line.
fn panic_line(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("panicked")).collect();
    assert!(!lines.is_empty(), "no panic line: {err}");
    assert!(
        lines[0].starts_with("error: thread '"),
        "not one error line: {err}"
    );
    assert!(!err.contains("note: run with `RUST_BACKTRACE"), "{err}");
    lines[0].to_string()
}

/// Exit 1, the phase failed with `message`, results written, manifest final.
fn assert_failed_with_results(out: &Path, o: &Output, message: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    assert_eq!(s["status"], "failed");
    let run = phase(&s, "run");
    assert_eq!(run["outcome"], "failed");
    let e = run["error"].as_str().unwrap();
    assert!(e.contains(message), "{e}");
    assert!(!e.contains('\n'), "{e}");
    assert!(count(run, "READ") > 0, "{run}");
    let m = json(&out.join("manifest.json"));
    validate("manifest.schema.json", &m);
    assert_eq!(m["status"], "failed");
    assert!(m["finished_at"].is_string());
    assert!(interval_rows(out, "run") >= 2, "too few interval rows");
}

#[test]
fn a_worker_panic_fails_the_phase_and_ends_the_run() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("worker");
    let child = spawn(&out, "worker:800", &["--store", "null"]);
    let (o, took) = wait_bounded(child, Duration::from_secs(15));
    assert!(
        took < Duration::from_secs(3),
        "took {took:?}: the panic did not stop the run"
    );
    let line = panic_line(&o);
    assert!(
        line.contains("thread 'kvm-worker-0' panicked at src/driver/test_panic.rs:"),
        "{line}"
    );
    assert_failed_with_results(&out, &o, "thread 'kvm-worker-0' panicked at");
    assert_failed_with_results(&out, &o, "a deliberate panic in worker 0's store call");
}

#[cfg(feature = "rocksdb")]
#[test]
fn a_worker_panic_over_rocksdb_closes_the_store_and_ends_the_run() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("rocks");
    let data = t.path().join("data");
    let child = spawn(
        &out,
        "worker:800",
        &["--store", "rocksdb", "--data-dir", data.to_str().unwrap()],
    );
    let (o, _) = wait_bounded(child, Duration::from_secs(15));
    panic_line(&o);
    assert_failed_with_results(&out, &o, "deliberate panic in worker 0's store call");
}

#[test]
fn a_companion_thread_panic_fails_the_phase_and_stops_the_workers() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("companion");
    let child = spawn(&out, "companion:800", &["--store", "null"]);
    let (o, took) = wait_bounded(child, Duration::from_secs(15));
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(panic_line(&o).contains("thread 'kvm-test-companion' panicked"));
    assert_failed_with_results(&out, &o, "a deliberate panic in a companion thread");
}

#[test]
fn a_panic_in_the_interval_loop_stops_the_workers_and_fails_the_phase() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("main");
    let child = spawn(&out, "main:800", &["--store", "null"]);
    let (o, took) = wait_bounded(child, Duration::from_secs(15));
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(panic_line(&o).contains("thread 'main' panicked"));
    assert_failed_with_results(&out, &o, "a deliberate panic in the interval loop");
}

#[test]
fn a_panic_while_finishing_leaves_the_manifest_failed_and_exits() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("finish");
    let child = spawn(&out, "finish", &["--store", "null"]);
    let (o, _) = wait_bounded(child, Duration::from_secs(15));
    assert_eq!(
        o.status.code(),
        Some(101),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(panic_line(&o).contains("a deliberate panic in Finish"));
    let m = json(&out.join("manifest.json"));
    assert_eq!(m["status"], "failed");
    let s = json(&out.join("summary.json"));
    assert_eq!(s["status"], "failed");
    assert!(
        s["error"].as_str().unwrap().contains("deliberate panic"),
        "{s}"
    );
    assert!(interval_rows(&out, "run") >= 10);
}

#[test]
fn sigint_ends_a_run_whose_worker_is_stuck_with_results() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("stuck");
    let child = std::process::Command::new(bin())
        .args([
            "run",
            "-P",
            "workloadc",
            "--phase",
            "run",
            "--store",
            "null",
        ])
        .args(["--threads", "2", "--duration", "60s", "--interval", "200ms"])
        .arg("--out")
        .arg(&out)
        .env("KVMETER_TEST_PANIC", "stuck:500")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    // One SIGINT: the run ends after the stop grace (5 s), not at the 60 s deadline.
    let (o, _) = wait_bounded(child, Duration::from_secs(15));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(sent.elapsed() < Duration::from_secs(10), "{err}");
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("1 of 2 workers did not stop"), "{err}");
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    assert_eq!(s["status"], "interrupted");
    let run = phase(&s, "run");
    assert_eq!(run["outcome"], "interrupted");
    assert!(count(run, "READ") > 0, "{run}");
    assert_eq!(json(&out.join("manifest.json"))["status"], "interrupted");
    assert!(interval_rows(&out, "run") >= 5);
}

/// Review F6: `--duration 1e19` passed parsing and then panicked on the main thread inside the
/// worker scope (`Instant + Duration` overflow), which waited forever for the workers. It must
/// end promptly: refused at parse time (exit 2, nothing created) or failed (exit 1, manifest
/// final), whichever layer catches it first.
#[test]
fn a_duration_beyond_the_clock_ends_promptly_and_never_stays_running() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("huge");
    let child = std::process::Command::new(bin())
        .args([
            "run",
            "-P",
            "workloadc",
            "--phase",
            "run",
            "--store",
            "null",
        ])
        .args(["--duration", "1e19", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (o, _) = wait_bounded(child, Duration::from_secs(15));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(matches!(o.status.code(), Some(1) | Some(2)), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    if out.join("manifest.json").exists() {
        assert_eq!(json(&out.join("manifest.json"))["status"], "failed");
        let s = json(&out.join("summary.json"));
        assert!(phase(&s, "run")["error"]
            .as_str()
            .unwrap()
            .contains("duration"));
    }
}
