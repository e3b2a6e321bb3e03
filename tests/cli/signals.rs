//! Interruptions as a shell or `timeout` sends them (issue 40 item 2): signals that arrive
//! together are one interruption — the phase's results are written and both files say
//! `interrupted` —, and even the exit at once of a later signal leaves manifest.json and
//! summary.json saying `interrupted`, never `running`. RocksDB, the embedded default store.

use super::*;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output};

const RUN: [&str; 10] = [
    "run",
    "-P",
    "workloada",
    "--records",
    "300",
    "--threads",
    "2",
    "--duration",
    "60s",
    "--interval",
];

/// kvmeter in a process group of its own (its pid is the group's id), as a shell runs a job.
fn spawn(out: &Path, stuck: bool) -> Child {
    let mut c = Command::new(bin());
    c.args(RUN)
        .args(["200ms", "--out"])
        .arg(out)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if stuck {
        // Worker 0's store call never returns: the graceful stop waits for it (5 s).
        c.env("KVMETER_TEST_PANIC", "stuck:1000");
    }
    c.spawn().unwrap()
}

/// Waits until phase `name` (any phase: None) has written interval `k`.
fn wait_for_interval(out: &Path, name: Option<&str>, k: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let csv = std::fs::read_to_string(out.join("intervals.csv")).unwrap_or_default();
        let reached = csv.lines().any(|l| {
            let mut f = l.split(',');
            let p = f.next();
            p.is_some_and(|p| p != "phase" && name.is_none_or(|n| n == p))
                && f.next().and_then(|i| i.parse::<usize>().ok()) >= Some(k)
        });
        if reached {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no interval {k}: {csv}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sigint_group(child: &Child) {
    // SAFETY: kill has no memory preconditions; a negative pid names the process group.
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGINT);
    }
}

/// Exit 130, and both files say `interrupted`, schema-valid.
fn assert_interrupted(out: &Path, o: &Output) -> serde_json::Value {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    let m = json(&out.join("manifest.json"));
    validate("manifest.schema.json", &m);
    assert_eq!(m["status"], "interrupted", "{err}");
    assert!(m["finished_at"].is_string(), "{m}");
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    assert_eq!(s["status"], "interrupted", "{err}");
    s
}

/// Two SIGINTs to the process group within microseconds (`kill -INT -PGID`, a terminal's
/// Ctrl-C reaching kvmeter twice) are one interruption: the run phase ends with its results
/// and the table is printed. It used to exit at once, leaving `running`, in 2 of 6 tries.
#[test]
fn two_sigints_at_once_are_one_interruption() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..4 {
        let out = t.path().join(format!("twice-{i}"));
        let child = spawn(&out, false);
        wait_for_interval(&out, Some("run"), 1);
        sigint_group(&child);
        sigint_group(&child);
        let o = child.wait_with_output().unwrap();
        let s = assert_interrupted(&out, &o);
        let run = phase(&s, "run");
        assert_eq!(run["outcome"], "interrupted", "try {i}");
        assert!(count(run, "READ") > 0, "try {i}: {run}");
        let table = String::from_utf8_lossy(&o.stdout);
        assert!(
            table.lines().any(|l| l.starts_with("run ")),
            "try {i}: {table}"
        );
    }
}

/// `timeout -s INT` signals kvmeter and then its whole process group: the same.
#[test]
fn timeout_s_int_ends_the_run_with_results() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..2 {
        let out = t.path().join(format!("timeout-{i}"));
        let o = Command::new("timeout")
            .args(["--preserve-status", "-s", "INT", "3"])
            .arg(bin())
            .args(RUN)
            .args(["200ms", "--out"])
            .arg(&out)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let s = assert_interrupted(&out, &o);
        let phases = s["phases"].as_array().unwrap();
        assert_eq!(
            phases.last().unwrap()["outcome"],
            "interrupted",
            "try {i}: {s}"
        );
        let table = String::from_utf8_lossy(&o.stdout);
        assert!(table.contains(" interrupted"), "try {i}: {table}");
    }
}

/// Two deliberate Ctrl-Cs, the second while the first is still stopping a worker stuck in a
/// store call: kvmeter exits at once (130), and the files it leaves say `interrupted`.
#[test]
fn a_second_ctrl_c_exits_at_once_and_leaves_interrupted() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("again");
    let child = spawn(&out, true);
    // Worker 0 is stuck 1 s into a phase (the load or the run); rows stop once it is (each
    // row waits for every worker), so: a few rows, then past that second.
    wait_for_interval(&out, None, 3);
    std::thread::sleep(Duration::from_millis(1000));
    sigint_group(&child);
    std::thread::sleep(Duration::from_millis(1500));
    sigint_group(&child);
    let o = child.wait_with_output().unwrap();
    assert_interrupted(&out, &o);
}
