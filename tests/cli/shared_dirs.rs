//! Run and data directories in shared places (issue 27 item 5; review F8, F11): a link planted
//! in a run directory is never followed, a pre-created directory of another user (or one with
//! planted links) is refused in one line with exit 2 before anything is written, and
//! temporary data directories are private.

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common;
use common::*;

const ORIGINAL: &str = "ORIGINAL ROOT-ONLY CONTENT 1";

fn victim(dir: &Path) -> std::path::PathBuf {
    let v = dir.join("victim");
    std::fs::create_dir(&v).unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o700)).unwrap();
    let f = v.join("important.txt");
    std::fs::write(&f, ORIGINAL).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    f
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// The review's attack: once the run is going, links named like the files kvmeter writes
/// next (summary.json and its old temporary summary.tmp, report.html) point at a victim file.
/// The victim must be untouched and the results whole, regular files.
#[test]
fn links_planted_in_a_running_run_directory_are_never_followed() {
    let t = tempfile::tempdir().unwrap();
    let target = victim(t.path());
    let out = t.path().join("bench1");
    let child = std::process::Command::new(bin())
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "100",
        ])
        .args(["--duration", "2s", "--interval", "200ms", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !out.join("intervals.csv").exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no intervals.csv");
        std::thread::sleep(Duration::from_millis(10));
    }
    for name in ["summary.tmp", "summary.json", "report.html", "manifest.tmp"] {
        let _ = std::fs::remove_file(out.join(name));
        symlink(&target, out.join(name)).unwrap();
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), ORIGINAL);
    for name in ["summary.json", "report.html", "manifest.json"] {
        let m = std::fs::symlink_metadata(out.join(name)).unwrap();
        assert!(m.is_file(), "{name} is not a regular file");
    }
    assert_eq!(json(&out.join("summary.json"))["status"], "completed");
}

/// A pre-created --out holding a planted link is not empty: refused before anything is
/// written, the victim untouched.
#[test]
fn a_precreated_out_with_a_planted_link_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let target = victim(t.path());
    let out = t.path().join("shared");
    std::fs::create_dir(&out).unwrap();
    symlink(&target, out.join("summary.json")).unwrap();
    let o = kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "10",
            "--ops",
            "10",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("exists and is not empty"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), ORIGINAL);
    // A world-writable one, even empty: refused too.
    let open = t.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "10",
            "--ops",
            "10",
        ])
        .arg("--out")
        .arg(&open)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("other users may write in it"), "{err}");
    assert_eq!(std::fs::read_dir(&open).unwrap().count(), 0);
}

/// The default run directory's name is predictable to the second: one that exists (an
/// attacker's, with a link inside) is never used; the run takes the next name.
#[test]
fn a_predicted_default_run_directory_is_not_reused() {
    let t = tempfile::tempdir().unwrap();
    let target = victim(t.path());
    let work = t.path().join("work");
    std::fs::create_dir_all(work.join("kvmeter-runs")).unwrap();
    // Plant the names of the next few seconds, as the review's attacker did.
    let now = std::time::SystemTime::now();
    let mut planted = vec![];
    for s in 0..5 {
        let stamp = humantime::format_rfc3339_seconds(now + Duration::from_secs(s))
            .to_string()
            .replace(':', "");
        let d = work
            .join("kvmeter-runs")
            .join(format!("{}-run-null", stamp.trim_end_matches('Z')));
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        symlink(&target, d.join("summary.tmp")).unwrap();
        planted.push(d);
    }
    let o = kvmeter()
        .current_dir(&work)
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "10",
            "--ops",
            "100",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), ORIGINAL);
    let line = err.lines().find(|l| l.starts_with("results: ")).unwrap();
    let used = work.join(line.trim_start_matches("results: "));
    assert!(used.to_string_lossy().ends_with("-run-null-2"), "{line}");
    assert!(used.join("summary.json").is_file());
    for d in planted {
        assert!(!d.join("summary.json").exists(), "{} was used", d.display());
    }
}

#[test]
fn a_data_dir_of_another_user_is_refused() {
    if !is_root() {
        eprintln!("note: not root: cannot make a directory of another uid; skipped");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("kvdata");
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::chown(&data, Some(12345), Some(12345)).unwrap();
    let out = t.path().join("out");
    let o = kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "10",
            "--ops",
            "10",
        ])
        .arg("--data-dir")
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("owned by uid 12345"), "{err}");
    assert!(
        !out.exists(),
        "nothing is created before the input is accepted"
    );
    assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0);
    assert_eq!(std::fs::metadata(&data).unwrap().uid(), 12345);
}

/// The review's data-dir attack: a forged marker and `store -> victim directory`. RocksDB
/// must not create its files in the victim's directory.
#[test]
fn a_data_dir_with_a_planted_store_link_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let victim_dir = t.path().join("dbtarget");
    std::fs::create_dir(&victim_dir).unwrap();
    let data = t.path().join("kvdata");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join(".kvmeter-data"), "forged").unwrap();
    symlink(&victim_dir, data.join("store")).unwrap();
    let o = kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "10",
            "--ops",
            "10",
        ])
        .arg("--data-dir")
        .arg(&data)
        .arg("--out")
        .arg(t.path().join("out"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("store is a symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(&victim_dir).unwrap().count(), 0);
}
