//! How the commands that hold runs end other than on time: a sweep, a capacity search and a
//! durability check say `running` in their own status file while they work, and a SIGKILL
//! leaves it `failed` with why (their guard process, `report::current::open_outer`), never
//! `running` nor — as sweep.json used to say mid-way — `completed`. Ctrl-C ends a durability
//! check `interrupted` (exit 130) with the writes made until then read back.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn(args: &[&str], out: &Path) -> Child {
    Command::new(bin())
        .args(args)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until `ready` holds, or fails after 60 s.
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ready() {
        assert!(t0.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn status_of(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

fn killed(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL: no code of kvmeter's runs after it
    child.wait().unwrap();
}

fn assert_abandoned(v: &Value, file: &str) {
    assert_eq!(v["status"], "failed", "{file}: {v}");
    let why = v["error"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("kvmeter ended without closing its run directory (killed by a signal"),
        "{file}: {why}"
    );
    assert!(v["finished_at"].is_string(), "{file}: {v}");
}

#[test]
fn a_killed_sweep_says_failed_with_the_points_it_finished() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    // Three points of one 1 s run each.
    let mut child = spawn(
        &[
            "sweep",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "100",
            "--param",
            "threads=1,2,3",
            "--repeat",
            "1",
            "--duration",
            "1s",
        ],
        &out,
    );
    let sweep = out.join("sweep.json");
    // In the second point: the first is in sweep.json, and the sweep is not over.
    wait_until("the second point", || {
        out.join("points/02-threads=2/r1/manifest.json").is_file()
    });
    let during = status_of(&sweep).expect("sweep.json exists while the sweep runs");
    assert_eq!(during["status"], "running", "{during}");
    assert_eq!(during["points"].as_array().unwrap().len(), 1, "{during}");
    killed(&mut child);
    let after = sealed(&sweep);
    assert_abandoned(&after, "sweep.json");
    assert_eq!(after["points"].as_array().unwrap().len(), 1);
    // The cut point's own run directory is sealed by its own guard.
    assert_eq!(
        sealed(&out.join("points/02-threads=2/r1/manifest.json"))["status"],
        "failed"
    );
}

#[test]
fn a_killed_capacity_search_says_failed_with_the_points_it_finished() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cap");
    let mut child = spawn(
        &[
            "capacity",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "100",
            "--slo",
            "p99<100ms",
            "--duration",
            "1500ms",
            "--warmup",
            "500ms",
        ],
        &out,
    );
    let cap = out.join("capacity.json");
    wait_until("capacity.json", || status_of(&cap).is_some());
    let first = status_of(&cap).unwrap();
    assert_eq!(first["status"], "running", "{first}");
    // Killed in its second run: the first run's point is in capacity.json.
    wait_until("the second run", || {
        status_of(&cap).is_some_and(|v| v["points"].as_array().is_some_and(|p| p.len() == 1))
    });
    let during = status_of(&cap).unwrap();
    assert_eq!(during["status"], "running", "{during}");
    assert!(
        during["note"]
            .as_str()
            .unwrap()
            .starts_with("the search is in progress: 1 run so far"),
        "{during}"
    );
    killed(&mut child);
    let after = sealed(&cap);
    assert_abandoned(&after, "capacity.json");
    assert_eq!(after["points"].as_array().unwrap().len(), 1, "{after}");
}

#[test]
fn a_durability_check_ends_interrupted_on_ctrl_c_and_failed_on_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["durability", "--store", "rocksdb", "--kills", "40"];
    // Ctrl-C after the first kill: the check stops, reads back what was written, and says so.
    let out = dir.path().join("int");
    let child = Command::new(bin())
        .args(args)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let writes = out.join("manifest.json");
    wait_until("the manifest", || status_of(&writes).is_some());
    std::thread::sleep(Duration::from_millis(2500));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted: the writes made until then were read back"),
        "{err}"
    );
    let m = json(&out.join("manifest.json"));
    assert_eq!(m["status"], "interrupted", "{m}");
    let d = json(&out.join("durability.json"));
    assert_eq!(d["interrupted"], true, "{d}");
    let rounds = d["rounds"].as_array().unwrap().len();
    assert!((1..40).contains(&rounds), "{rounds} rounds");
    assert_eq!(
        d["mode"],
        format!("process-crash: the writer SIGKILLed {rounds} of 40 times (interrupted)")
    );
    assert!(d["verdict"]["acknowledged"].as_u64().unwrap() > 0, "{d}");
    // SIGKILL: no code of kvmeter's runs; its guard marks the manifest.
    let out = dir.path().join("kill");
    let mut child = spawn(&args, &out);
    let manifest = out.join("manifest.json");
    wait_until("the manifest", || status_of(&manifest).is_some());
    std::thread::sleep(Duration::from_millis(1000));
    killed(&mut child);
    assert_abandoned(&sealed(&manifest), "manifest.json");
}
