//! How a run ends other than on time: SIGKILL, SIGINT, a fatal store error, a full disk, a
//! terminal that went away; every completed interval stays written.

use super::*;

fn spawn_long_run(out: &Path) -> std::process::Child {
    std::process::Command::new(bin())
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--phase",
            "run",
            "--duration",
            "60s",
            "--interval",
            "200ms",
        ])
        .arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn complete_rows(out: &Path) -> usize {
    let csv = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    let width = csv.lines().next().unwrap().split(',').count();
    for l in csv.lines() {
        assert_eq!(l.split(',').count(), width, "torn row: {l}");
    }
    assert!(csv.ends_with('\n'));
    csv.lines().count() - 1
}

#[test]
fn sigkill_keeps_every_completed_interval() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("killed");
    let mut child = spawn_long_run(&out);
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let rows = complete_rows(&out);
    assert!(rows >= 4, "only {rows} interval rows after 1.5 s at 200 ms");
    // No code runs in a SIGKILLed process: its guard process marks the directory.
    let m = sealed(&out.join("manifest.json"));
    assert_eq!(m["status"], "failed");
    assert!(m["finished_at"].is_string());
    validate("manifest.schema.json", &m);
    assert!(hlog_total(&out.join("latency/run.READ.hlog")) > 0);
}

/// `kvmeter run … 2>&1 | head -1`: the reader of its output goes away after one line. Printing
/// to a closed pipe used to panic (and the panic hook's own print aborted the process), which
/// left the run `running`; the run now ends as it would have, its lines dropped.
#[test]
fn a_closed_terminal_pipe_does_not_end_the_run() {
    use std::io::Read;
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("piped");
    let mut child = std::process::Command::new(bin())
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "1000",
            "--duration",
        ])
        .args(["1500ms", "--status-interval", "100ms", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // One line from stderr, then both pipes closed, as `head -1` does.
    let mut err = child.stderr.take().unwrap();
    let mut byte = [0u8; 1];
    while err.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {}
    drop(err);
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let s = json(&out.join("summary.json"));
    assert_eq!(s["status"], "completed");
    assert_eq!(phase(&s, "run")["outcome"], "completed");
    assert!(count(phase(&s, "run"), "READ") > 0);
    assert_eq!(json(&out.join("manifest.json"))["status"], "completed");
}

#[test]
fn sigint_ends_the_phase_with_results() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("int");
    let child = spawn_long_run(&out);
    std::thread::sleep(Duration::from_millis(1500));
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130));
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    assert_eq!(s["status"], "interrupted");
    let run = phase(&s, "run");
    assert_eq!(run["outcome"], "interrupted");
    assert!(count(run, "READ") > 0);
    assert!(run["measured_seconds"].as_f64().unwrap() < 5.0);
    assert_eq!(json(&out.join("manifest.json"))["status"], "interrupted");
    complete_rows(&out);
}

/// A real store failure mid-run: RocksDB's WAL hits a file-size limit (RLIMIT_FSIZE, with
/// SIGXFSZ ignored so the write fails with EFBIG, as on a full disk). The phase must end as
/// failed with the error reported, exit 1, and the results so far written.
#[cfg(feature = "rocksdb")]
#[test]
fn fatal_store_error_ends_the_phase_with_results() {
    use std::os::unix::process::CommandExt;
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("full");
    let mut cmd = std::process::Command::new(bin());
    cmd.args([
        "run",
        "-P",
        "workloada",
        "--records",
        "300000",
        "--ops",
        "1000",
        "--out",
    ])
    .arg(&out)
    .args(["--data-dir"])
    .arg(t.path().join("data"))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 16 << 20,
                rlim_max: 16 << 20,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("INSERT failed: io error"), "{err}");
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    assert_eq!(s["status"], "failed");
    let load = phase(&s, "load");
    assert_eq!(load["outcome"], "failed");
    assert!(
        load["error"].as_str().unwrap().contains("io error"),
        "{load}"
    );
    let inserted = load["ops"]["INSERT"]["ok"].as_u64().unwrap();
    // 16 MiB of WAL holds roughly 15,000 records of ~1.1 kB; some must have succeeded.
    assert!((5_000..300_000).contains(&inserted), "{inserted}");
    assert!(load["ops"]["INSERT"]["errors"]["io"].as_u64().unwrap() >= 1);
    assert!(load["error_samples"][0]["message"].as_str().unwrap().len() > 3);
    // The run phase never started, and the summary and the table say so.
    assert!(s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["name"] != "run"));
    assert_eq!(s["not_run"], serde_json::json!(["run"]));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("not run: run (the run ended at phase load, failed)"),
        "{table}"
    );
    assert_eq!(json(&out.join("manifest.json"))["status"], "failed");
    complete_rows(&out);
}

/// A tmpfs of `size` mounted at DIR/small, or None where mounting needs root we do not have.
fn small_disk(dir: &Path, size: &str) -> Option<std::path::PathBuf> {
    let mnt = dir.join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(&mnt)
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return None;
    }
    Some(mnt)
}

/// A disk with too little room from the start: `--out` and `--data-dir` there are refused
/// with one line and exit 2, and nothing is left behind (the run directory's reserve for its
/// final files does not fit; the data directory's marker cannot be written). Needs root.
#[test]
fn a_full_disk_at_the_start_is_refused_and_nothing_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mnt) = small_disk(dir.path(), "64k") else {
        return;
    };
    // Leave about 24 KiB: room for the first files, not for the 64 KiB reserve.
    let fill = std::fs::write(mnt.join("filler"), vec![0u8; 40 << 10]);
    let run = |args: &[&str]| {
        kvmeter()
            .args(["run", "--store", "null", "--records", "100", "--ops", "100"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["--out", mnt.join("o").to_str().unwrap()]);
    let filled = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cat /dev/zero > {}/more 2>/dev/null",
            mnt.display()
        ))
        .status();
    let data = run(&[
        "--data-dir",
        mnt.join("a/b").to_str().unwrap(),
        "--out",
        dir.path().join("o2").to_str().unwrap(),
    ]);
    let left: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    fill.unwrap();
    filled.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no room for the run's results"), "{err}");
    assert!(
        err.contains("free some space or choose another --out"),
        "{err}"
    );
    let err = String::from_utf8_lossy(&data.stderr);
    assert_eq!(data.status.code(), Some(2), "{err}");
    assert!(err.contains("--data-dir"), "{err}");
    let mut left = left;
    left.sort();
    assert_eq!(left, ["filler", "more"], "left behind on the full disk");
}

/// A disk that fills mid-run ends the run with exit 1 and what was written so far; it used to
/// leave the workers running with no interval loop to stop them (a hang that ignored SIGTERM).
/// The final summary and manifest, `failed`, are written into the room the run directory kept
/// for them. Needs root to mount a small tmpfs; CI runs as root.
#[test]
fn a_full_disk_ends_the_run_and_keeps_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mnt) = small_disk(dir.path(), "160k") else {
        return;
    };
    let out = mnt.join("run");
    let mut child = std::process::Command::new(bin())
        .args([
            "run",
            "-P",
            "workloada",
            "--store",
            "null",
            "--duration",
            "20s",
        ])
        .args(["--interval", "100ms", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    use std::io::Read;
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    let leftovers: Vec<String> = std::fs::read_dir(&out)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default();
    let summary = std::fs::read_to_string(out.join("summary.json"));
    let manifest = sealed(&out.join("manifest.json"));
    let reserve = out.join(".kvmeter-reserve").exists();
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    let status = status.expect("kvmeter did not end within 15 s after the disk filled");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(!reserve, "the reserve was left in the run directory");
    // Both status files say how it ended; the load phase completed before the disk filled.
    assert_eq!(manifest["status"], "failed", "{manifest}");
    let s: serde_json::Value = serde_json::from_str(&summary.unwrap()).unwrap();
    assert_eq!(s["status"], "failed", "{s}");
    assert_eq!(s["phases"][0]["name"], "load");
    assert_eq!(s["phases"][0]["outcome"], "completed");
    assert_eq!(s["phases"][0]["operations"], 1000);
}

/// A server that stops answering (memcached frozen with SIGSTOP): every call times out, and
/// without a bound on the silence a phase of a million operations would wait out a million
/// deadlines. With `--give-up-after 2s` the phase fails once the store has answered nothing
/// for 2 s, on the worker threads and on the engine alike; what it measured before is kept.
#[test]
fn a_server_that_stops_answering_is_given_up_on() {
    use common::servers::{wait_exit, wait_for_phase, Launch};
    let t = tempfile::tempdir().unwrap();
    let (mc, port) = Launch::memcached().start();
    let addr = format!("addr=127.0.0.1:{port}");
    for (name, engine) in [
        ("workers", &[][..]),
        ("engine", &["--connections", "4"][..]),
    ] {
        let out = t.path().join(name);
        let mut child = std::process::Command::new(bin())
            .args(["run", "-P", "workloadc", "--store", "memcached"])
            .args(["--store-opt", &addr, "--store-opt", "timeout_ms=200"])
            .args(["--phase", "run", "--records", "100", "--ops", "1000000000"])
            .args(["--threads", "2", "--interval", "200ms"])
            .args(["--give-up-after", "2s", "--out"])
            .arg(&out)
            .args(engine)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_phase(&out, "run");
        let pid = mc.0.id() as i32;
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        let code = wait_exit(&mut child, Duration::from_secs(120));
        unsafe { libc::kill(pid, libc::SIGCONT) };
        assert_eq!(code, 1, "{name}: a phase given up on fails");
        let s = json(&out.join("summary.json"));
        validate("summary.schema.json", &s);
        assert_eq!(s["status"], "failed", "{name}");
        let run = phase(&s, "run");
        assert_eq!(run["outcome"], "failed", "{name}");
        let why = run["error"].as_str().unwrap();
        assert!(
            why.starts_with("gave up: the store answered nothing for ")
                && why.ends_with("--give-up-after 2s)"),
            "{name}: {why}"
        );
        // The silence it names is at least the limit, and made of timeouts only: the answers
        // (misses) came before it.
        let silent: f64 = why["gave up: the store answered nothing for ".len()..]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(silent >= 2.0, "{name}: {why}");
        let read = &run["ops"]["READ"];
        assert!(read["misses"].as_u64().unwrap() > 0, "{name}: {read}");
        assert!(
            read["errors"]["timeout"].as_u64().unwrap() > 0,
            "{name}: {read}"
        );
        assert!(count(run, "READ") < 1_000_000_000, "{name}");
    }
    drop(mc);
}
