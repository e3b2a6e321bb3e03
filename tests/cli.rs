//! End-to-end tests of the `kvmeter` binary: real runs, real run directories, bad input,
//! SIGINT and SIGKILL. Expected values come from the plan (operation counts, proportions,
//! rates), not from kvmeter's own output.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

mod common;
use common::*;

/// Reads an HDR interval log with the hdrhistogram crate's own reader; total count.
fn hlog_total(path: &Path) -> u64 {
    use base64::Engine;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    let bytes = std::fs::read(path).unwrap();
    let mut total = 0;
    let mut intervals = 0;
    for entry in IntervalLogIterator::new(&bytes) {
        if let LogEntry::Interval(h) = entry.unwrap_or_else(|e| panic!("{}: {e:?}", path.display()))
        {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(h.encoded_histogram())
                .unwrap();
            let hist: hdrhistogram::Histogram<u64> =
                Deserializer::new().deserialize(&mut &raw[..]).unwrap();
            total += hist.len();
            intervals += 1;
        }
    }
    assert!(intervals > 0, "{} has no intervals", path.display());
    total
}

#[test]
fn null_run_writes_a_complete_run_directory() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    kvmeter()
        .args([
            "run",
            "-P",
            "workloada",
            "--store",
            "null",
            "--records",
            "1000",
            "--ops",
            "40000",
        ])
        .args([
            "--seed",
            "7",
            "--format",
            "json",
            "--interval",
            "100ms",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let summary = json(&out.join("summary.json"));
    let manifest = json(&out.join("manifest.json"));
    validate("summary.schema.json", &summary);
    validate("manifest.schema.json", &manifest);
    assert_eq!(summary["status"], "completed");
    assert_eq!(manifest["status"], "completed");
    assert_eq!(manifest["seed"], 7);
    assert!(manifest["machine"]["logical_cpus"].as_u64().unwrap() >= 1);
    assert!(!manifest["machine"]["cpu_model"]
        .as_str()
        .unwrap()
        .is_empty());
    assert_eq!(manifest["store"]["name"], "null");
    assert_eq!(
        manifest["plan"]["phases"][1]["properties"]["readproportion"]["value"],
        "0.5"
    );

    let load = phase(&summary, "load");
    assert_eq!(count(load, "INSERT"), 1000);
    let run = phase(&summary, "run");
    let (r, u) = (count(run, "READ"), count(run, "UPDATE"));
    assert_eq!(r + u, 40_000, "every operation is counted exactly once");
    assert_eq!(run["operations"], 40_000);
    // 50/50 mix: 5 sigma of a binomial(40000, 0.5) is 500.
    assert!((r as i64 - 20_000).abs() < 500, "reads {r}");
    assert_eq!(run["errors"], 0);
    let lat = &run["ops"]["READ"]["latency_us"];
    let (p50, p99, max) = (
        lat["p50"].as_f64().unwrap(),
        lat["p99"].as_f64().unwrap(),
        lat["max"].as_f64().unwrap(),
    );
    assert!(p50 <= p99 && p99 <= max && p50 > 0.0);
    // Updates carry one 100-byte field plus its 6-byte name.
    let mb = run["ops"]["UPDATE"]["mb_per_s"].as_f64().unwrap();
    let secs = run["measured_seconds"].as_f64().unwrap();
    assert!((mb * 1e6 * secs / u as f64 - 106.0).abs() < 1.0, "{mb}");

    // intervals.csv: whole rows, and its counts add up to the summary's.
    let csv = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let mut reads = 0;
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), header.len(), "{l}");
        if f[0] == "run" && f[col("metric")] == "READ" {
            reads += f[col("count")].parse::<u64>().unwrap();
        }
    }
    assert_eq!(reads, r);

    // HDR logs readable by the hdrhistogram crate's reader, counts matching.
    assert_eq!(hlog_total(&out.join("latency/run.READ.hlog")), r);
    assert_eq!(hlog_total(&out.join("latency/load.INSERT.hlog")), 1000);

    // YCSB text report.
    let ycsb = std::fs::read_to_string(out.join("ycsb/run.txt")).unwrap();
    assert!(ycsb.starts_with("[OVERALL], RunTime(ms), "));
    assert!(ycsb.contains(&format!("[READ], Operations, {r}\n")));
    assert!(ycsb.contains(&format!("[READ], Return=OK, {r}\n")));
    assert!(ycsb.contains(&format!("[UPDATE], Return=OK, {u}\n")));
}

#[test]
fn same_seed_same_operation_mix() {
    let t = tempfile::tempdir().unwrap();
    let mut reads = vec![];
    for i in 0..2 {
        let out = t.path().join(format!("r{i}"));
        kvmeter()
            .args([
                "run",
                "-P",
                "workloadb",
                "--store",
                "null",
                "--ops",
                "20000",
                "--seed",
                "42",
                "--out",
            ])
            .arg(&out)
            .assert()
            .success();
        reads.push(count(
            phase(&json(&out.join("summary.json")), "run"),
            "READ",
        ));
    }
    assert_eq!(reads[0], reads[1]);
}

#[test]
fn suite_runs_the_papers_sequence() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("suite");
    kvmeter()
        .args([
            "suite",
            "--store",
            "null",
            "--records",
            "2000",
            "--duration",
            "1s",
            "--warmup",
            "200ms",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    let names: Vec<&str> = s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["load-a", "run-a", "run-b", "run-c", "run-f", "run-d", "clear", "load-e", "run-e"]
    );
    assert_eq!(count(phase(&s, "load-e"), "INSERT"), 2000);
    assert!(count(phase(&s, "run-e"), "SCAN") > 0);
    assert!(count(phase(&s, "run-f"), "READ-MODIFY-WRITE") > 0);
    let run_c = phase(&s, "run-c");
    assert!(
        (run_c["measured_seconds"].as_f64().unwrap() - 0.8).abs() < 0.15,
        "{}",
        run_c["measured_seconds"]
    );
    assert_eq!(count(run_c, "UPDATE"), 0);
    // Warm-up rows are kept in the series.
    let csv = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    assert!(csv
        .lines()
        .any(|l| l.starts_with("run-c,0,") && l.split(',').nth(4) == Some("1")));
}

#[test]
fn paced_run_hits_target_and_reports_intended_latency() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("paced");
    let output = kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--phase",
            "run",
            "--threads",
            "2",
        ])
        .args([
            "--target",
            "2000",
            "--duration",
            "2s",
            "--format",
            "ycsb",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(output.status.success());
    let s = json(&out.join("summary.json"));
    let run = phase(&s, "run");
    let rate = run["throughput_ops_per_s"].as_f64().unwrap();
    assert!(
        (rate - 2000.0).abs() < 100.0,
        "achieved {rate} ops/s for a 2000 target"
    );
    assert!(
        run["ops"]["READ"]["intended_latency_us"]["count"]
            .as_u64()
            .unwrap()
            > 3000
    );
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("[Intended-READ], Operations, "), "{text}");
    assert!(out.join("latency/run.Intended-READ.hlog").exists());
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_load_then_run_with_data_integrity() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    // Split load: two halves into the same data directory (insertstart/insertcount).
    for (i, start) in [0, 1500].iter().enumerate() {
        kvmeter()
            .args([
                "run",
                "--phase",
                "load",
                "-P",
                "workloada",
                "-p",
                "recordcount=3000",
                "-p",
                "insertcount=1500",
            ])
            .arg("-p")
            .arg(format!("insertstart={start}"))
            .args(["-p", "dataintegrity=true", "--data-dir"])
            .arg(&data)
            .arg("--out")
            .arg(t.path().join(format!("load{i}")))
            .assert()
            .success();
    }
    let out = t.path().join("run");
    kvmeter()
        .args([
            "run",
            "--phase",
            "run",
            "-P",
            "workloada",
            "-p",
            "recordcount=3000",
            "--ops",
            "6000",
        ])
        .args([
            "-p",
            "dataintegrity=true",
            "-p",
            "requestdistribution=uniform",
            "--threads",
            "2",
            "--data-dir",
        ])
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let s = json(&out.join("summary.json"));
    let run = phase(&s, "run");
    assert_eq!(run["errors"], 0, "{run}");
    let reads = count(run, "READ");
    assert_eq!(reads + count(run, "UPDATE"), 6000);
    // Every read verified and every verification passed.
    assert_eq!(run["ops"]["VERIFY"]["count"].as_u64().unwrap(), reads);
    assert_eq!(run["ops"]["VERIFY"]["ok"].as_u64().unwrap(), reads);
    assert!(data.join(".kvmeter-data").is_file());
    let m = json(&out.join("manifest.json"));
    assert_eq!(m["store"]["name"], "rocksdb");
    assert_eq!(m["data_dir"]["reused"], true);
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_scan_workload_and_databases() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("e");
    kvmeter()
        .args([
            "run",
            "-P",
            "workloade",
            "--records",
            "2000",
            "--ops",
            "2000",
            "--store-opt",
            "databases=3",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let s = json(&out.join("summary.json"));
    let run = phase(&s, "run");
    assert_eq!(run["errors"], 0);
    assert!(count(run, "SCAN") > 1700);
    assert!(count(run, "INSERT") > 30);
}

fn stderr_of(args: &[&str]) -> (i32, String) {
    let o = kvmeter().args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn bad_input_is_one_clear_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--store", "null", "-p", "bogus=1"],
            "unknown property 'bogus'",
        ),
        (
            &["run", "--store", "null", "-p", "readproportion=0.3"],
            "add up to 0.35",
        ),
        (&["run", "--store", "null", "--records", "0"], "--records 0"),
        (&["run", "--store", "null", "--ops", "-5"], "--ops -5"),
        (
            &["run", "--store", "null", "-P", "/no/such/file"],
            "-P /no/such/file: cannot read",
        ),
        (
            &["run", "--store", "nosuch"],
            "--store 'nosuch': unknown store",
        ),
        (
            &["run", "--store", "null", "--store-opt", "x=1"],
            "unknown option for store 'null'",
        ),
        #[cfg(feature = "rocksdb")]
        (
            &[
                "run",
                "--store",
                "rocksdb",
                "--store-opt",
                "compression=gzip",
            ],
            "compression=gzip",
        ),
        #[cfg(feature = "rocksdb")]
        (
            &[
                "run",
                "--store",
                "rocksdb",
                "--store-opt",
                "block_cache=clock",
            ],
            "block_cache=clock",
        ),
        (
            &["run", "--store", "null", "--duration", "abc"],
            "--duration 'abc'",
        ),
        (&["run", "--store", "null", "--target", "-3"], "--target -3"),
        (&["run", "--no-such-flag"], "--no-such-flag"),
    ];
    for (args, needle) in cases {
        let (code, err) = stderr_of(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
    }
}

#[test]
fn never_overwrites_or_deletes_what_it_does_not_own() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("taken");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("summary.json"), "mine").unwrap();
    let (code, err) = stderr_of(&["run", "--store", "null", "--out", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not empty"), "{err}");
    assert_eq!(
        std::fs::read_to_string(out.join("summary.json")).unwrap(),
        "mine"
    );

    let data = t.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("precious"), "x").unwrap();
    let (code, err) = stderr_of(&[
        "run",
        "--store",
        "null",
        "--data-dir",
        data.to_str().unwrap(),
        "--out",
        t.path().join("o").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("did not create"), "{err}");
    assert!(data.join("precious").is_file());
    assert!(
        !t.path().join("o").exists(),
        "nothing is created before the input is accepted"
    );

    let (code, err) = stderr_of(&[
        "run",
        "--store",
        "null",
        "--out",
        "/proc/kvmeter-cannot-write",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--out /proc/kvmeter-cannot-write"), "{err}");
}

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
    let m = json(&out.join("manifest.json"));
    assert_eq!(m["status"], "running");
    validate("manifest.schema.json", &m);
    assert!(hlog_total(&out.join("latency/run.READ.hlog")) > 0);
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

#[test]
fn stores_lists_each_store_and_options() {
    let o = kvmeter().arg("stores").output().unwrap();
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("null"));
    #[cfg(feature = "rocksdb")]
    {
        assert!(text.contains("rocksdb"));
        assert!(text.contains("usable here"));
        assert!(text.contains("--store-opt block_cache_mb=64"));
    }
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
    .stdout(Stdio::null())
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
    // The run phase never started.
    assert!(s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["name"] != "run"));
    assert_eq!(json(&out.join("manifest.json"))["status"], "failed");
    complete_rows(&out);
}

#[test]
fn telemetry_series_and_phase_figures_in_a_real_run() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("tel");
    kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--phase",
            "run",
            "--duration",
            "1500ms",
        ])
        .args([
            "--warmup",
            "300ms",
            "--telemetry-interval",
            "50ms",
            "--counters",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    let tel = &phase(&s, "run")["telemetry"];
    // The window is the measured one: 1.2 s, not the whole 1.5 s phase.
    let secs = tel["seconds"].as_f64().unwrap();
    assert!((secs - 1.2).abs() < 0.15, "{secs}");
    assert!(tel["samples"].as_u64().unwrap() >= 15);
    let busy = tel["cpu"]["busy"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&busy));
    // One worker spinning on the null store keeps about one CPU busy.
    let worker = tel["process"]["cpu_pct_by_thread"]["kvm-worker"]
        .as_f64()
        .unwrap();
    assert!(worker > 50.0, "{tel}");
    // Software events always count; each hardware event is counted or says why not.
    assert!(tel["counters"]["counts"]["page-faults"].as_f64().is_some());
    for ev in [
        "cycles",
        "instructions",
        "branches",
        "branch-misses",
        "llc-references",
        "llc-misses",
    ] {
        let counted = tel["counters"]["counts"][ev].as_f64().is_some();
        let why = tel["unavailable"][format!("counters.{ev}")].as_str();
        assert!(counted != why.is_some(), "{ev}: {tel}");
        if let Some(w) = why {
            assert!(w.starts_with("unavailable: "), "{w}");
        }
    }
    assert_eq!(
        tel["counters"]["ipc"].is_null(),
        tel["counters"]["counts"]["cycles"].is_null()
    );
    let csv = std::fs::read_to_string(out.join("telemetry.csv")).unwrap();
    let width = csv.lines().next().unwrap().split(',').count();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert!(rows.len() >= 20, "{} rows", rows.len());
    assert!(rows.iter().all(|r| r.split(',').count() == width));
    assert!(rows.iter().any(|r| r.split(',').nth(1) == Some("run")));

    let off = t.path().join("off");
    kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--ops",
            "1000",
            "--telemetry-interval",
            "0",
            "--out",
        ])
        .arg(&off)
        .assert()
        .success();
    assert!(phase(&json(&off.join("summary.json")), "run")["telemetry"].is_null());
    assert!(!off.join("telemetry.csv").exists());
}

#[test]
fn energy_from_a_command_meter_and_an_honest_estimate() {
    let t = tempfile::tempdir().unwrap();
    // A meter that always reads 50 W: energy must be 50 W × the window, ops/J = ops / energy.
    let out = t.path().join("cmd");
    kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--phase",
            "run",
            "--duration",
            "1500ms",
        ])
        .args([
            "--power",
            "cmd:echo 50",
            "--telemetry-interval",
            "50ms",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    let run = phase(&s, "run");
    let e = &run["energy"];
    assert_eq!(e["source"], "command");
    assert_eq!(e["estimate"], false);
    let secs = run["telemetry"]["seconds"].as_f64().unwrap();
    let joules = e["energy_j"].as_f64().unwrap();
    assert!(
        (joules - 50.0 * secs).abs() < 0.05 * 50.0 * secs,
        "{joules} J over {secs} s"
    );
    let ops = run["operations"].as_f64().unwrap();
    assert!((e["ops_per_joule"].as_f64().unwrap() - ops / joules).abs() < 1e-6 * ops);
    assert!((e["avg_w"].as_f64().unwrap() - 50.0).abs() < 2.5);
    let csv = std::fs::read_to_string(out.join("telemetry.csv")).unwrap();
    assert!(csv.lines().skip(2).any(|l| l.contains(",command,")));

    // No measured source here: auto falls back to the estimate, labelled everywhere.
    let est = t.path().join("est");
    let o = kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--phase",
            "run",
            "--duration",
            "1s",
        ])
        .args([
            "--power",
            "estimate",
            "--power-model",
            "idle=40,max=140",
            "--out",
        ])
        .arg(&est)
        .output()
        .unwrap();
    assert!(o.status.success());
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("power    ESTIMATE "), "{table}");
    // The estimate is said in one short line that points at 'kvmeter doctor' (issue 28 item
    // 12: it was a paragraph of four terminal lines).
    let err = String::from_utf8_lossy(&o.stderr);
    let power: Vec<&str> = err.lines().filter(|l| l.contains("power")).collect();
    assert_eq!(power.len(), 1, "{err}");
    assert!(
        power[0].starts_with("power: ESTIMATE (40-140 W utilisation model, not a measurement)")
            && power[0].contains("'kvmeter doctor'")
            && power[0].len() <= 130,
        "{err}"
    );
    let s = json(&est.join("summary.json"));
    let e = &phase(&s, "run")["energy"];
    assert_eq!(e["estimate"], true);
    assert_eq!(e["source"], "estimate");
    // One busy worker of two CPUs: about half busy, so about 40 + 100 × 0.5 W.
    let w = e["avg_w"].as_f64().unwrap();
    assert!((60.0..=140.0).contains(&w), "{w}");

    // A source that cannot measure is unavailable with its reason, never 0 W.
    let none = t.path().join("none");
    kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--ops",
            "1000",
            "--power",
            "rapl",
            "--out",
        ])
        .arg(&none)
        .assert()
        .success();
    let s = json(&none.join("summary.json"));
    let run = phase(&s, "run");
    assert!(run["energy"].is_null());
    let why = run["telemetry"]["unavailable"]["power"].as_str().unwrap();
    assert!(why.starts_with("unavailable: "), "{why}");

    let (code, err) = stderr_of(&["run", "--store", "null", "--power", "watts"]);
    assert_eq!(code, 2);
    assert!(err.contains("--power 'watts'"), "{err}");
}

#[test]
fn doctor_and_calibrate() {
    let o = kvmeter().arg("doctor").output().unwrap();
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    for source in [
        "latency clock",
        "cpu (/proc/stat)",
        "power: rapl",
        "power: perf",
        "power: estimate",
        "counter cycles",
        "counter context-switches",
    ] {
        assert!(text.contains(source), "{source}: {text}");
    }
    // Every line says ok, or why not.
    for l in text.lines() {
        assert!(
            l.starts_with("ok  ")
                || (l.starts_with("--  ") && (l.contains("unavailable: ") || l.contains("none: "))),
            "{l}"
        );
    }

    let t = tempfile::tempdir().unwrap();
    let cal = t.path().join("cal.json");
    kvmeter()
        .args(["calibrate", "--seconds", "1", "--calibration"])
        .arg(&cal)
        .assert()
        .success();
    let c = json(&cal);
    assert_eq!(c["schema"], "kvmeter-calibration/1");
    let bw = c["memory_bandwidth"].as_array().unwrap();
    assert!(bw[0]["threads"] == 1 && bw[0]["gb_per_s"].as_f64().unwrap() > 0.1);
    assert!(
        c["power_source"]
            .as_str()
            .unwrap()
            .starts_with("unavailable: ")
            || c["idle_w"].as_f64().is_some()
    );

    // A run records the calibration it used.
    let out = t.path().join("run");
    kvmeter()
        .args(["run", "--store", "null", "--ops", "1000", "--calibration"])
        .arg(&cal)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let m = json(&out.join("manifest.json"));
    validate("manifest.schema.json", &m);
    assert_eq!(m["calibration"]["memory_bandwidth"], c["memory_bandwidth"]);
    let (code, err) = stderr_of(&[
        "run",
        "--store",
        "null",
        "--calibration",
        "/no/such/cal.json",
        "--out",
        t.path().join("x").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--calibration"), "{err}");
    assert!(!t.path().join("x").exists());
}

#[test]
fn pressure_scale_runs_the_papers_schedule() {
    let t = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap(); // O_DIRECT needs a real filesystem
    let out = t.path().join("p");
    let data = t.path().join("data");
    kvmeter()
        .args([
            "pressure",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "1000",
            "--step",
            "1s",
        ])
        .args([
            "--interval",
            "500ms",
            "--block-sizes",
            "4",
            "--io-file-size",
            "8MiB",
            "--data-dir",
        ])
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    let p = &phase(&s, "pressure-4k")["pressure"];
    assert_eq!(p["block_size_kib"], 4);
    let steps = p["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 26);
    let rho0 = steps[0]["ops_per_s"].as_f64().unwrap();
    for (i, st) in steps.iter().enumerate() {
        assert_eq!(st["step"], format!("w{i}"));
        let wr: Vec<Option<f64>> = st["write_ratios"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64())
            .collect();
        let running = wr.iter().filter(|w| w.is_some()).count();
        assert_eq!(running, i.min(4), "w{i}: {wr:?}");
        let iops = st["antagonist_read_iops"].as_f64().unwrap()
            + st["antagonist_write_iops"].as_f64().unwrap();
        if i == 0 {
            assert_eq!(iops, 0.0, "no antagonist in w0");
        } else {
            assert!(iops > 0.0, "w{i} issued no I/O");
        }
        if i < 5 {
            assert_eq!(
                st["antagonist_write_iops"].as_f64().unwrap(),
                0.0,
                "w{i} is read-only"
            );
        }
        // Normalized pressure, recomputed here from the step's throughput.
        let rho = st["ops_per_s"].as_f64().unwrap();
        assert!((st["normalized_pressure"].as_f64().unwrap() - (rho0 - rho) / rho0).abs() < 1e-9);
    }
    assert_eq!(
        steps[25]["write_ratios"],
        serde_json::json!([1.0, 0.7, 0.7, 0.7])
    );
    assert!(steps[25]["antagonist_write_iops"].as_f64().unwrap() > 0.0);
    let scale: Vec<&str> = p["scale"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(scale.len(), 26);
    let np = |w: &str| {
        steps.iter().find(|s| s["step"] == w).unwrap()["normalized_pressure"]
            .as_f64()
            .unwrap()
    };
    assert!(scale.windows(2).all(|x| np(x[0]) >= np(x[1])));
    let csv = std::fs::read_to_string(out.join("pressure.csv")).unwrap();
    assert_eq!(csv.lines().count(), 27);
    // The antagonist files are gone; the data directory stays.
    assert!(data.join(".kvmeter-data").is_file());
    let left: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("kvmeter-antagonist")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn antagonists_on_any_run() {
    let t = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    let out = t.path().join("a");
    kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--phase",
            "run",
            "--duration",
            "1s",
        ])
        .args([
            "--antagonist",
            "cpu:duty=0.5",
            "--antagonist",
            "io:bs=16k,wr=0.5,n=1",
            "--io-file-size",
            "8MiB",
        ])
        .arg("--data-dir")
        .arg(t.path().join("d"))
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let s = json(&out.join("summary.json"));
    let a = phase(&s, "run")["antagonists"].as_array().unwrap().clone();
    assert_eq!(a.len(), 2);
    let cpu = a.iter().find(|x| x["kind"] == "cpu").unwrap();
    assert!(
        (cpu["report"]["achieved_cpus"].as_f64().unwrap() - 0.5).abs() < 0.2,
        "{cpu}"
    );
    let io = a.iter().find(|x| x["kind"] == "io").unwrap();
    assert!(
        io["achieved_read_iops"].as_f64().unwrap() > 0.0
            && io["achieved_write_iops"].as_f64().unwrap() > 0.0,
        "{io}"
    );
    let (code, err) = stderr_of(&["run", "--store", "null", "--antagonist", "disk:1"]);
    assert_eq!(code, 2);
    assert!(err.contains("--antagonist 'disk:1'"), "{err}");
}

#[test]
fn membw_share_needs_a_calibration_and_uses_it() {
    let t = tempfile::tempdir().unwrap();
    let (code, err) = stderr_of(&[
        "run",
        "--store",
        "null",
        "--antagonist",
        "membw:share=0.5",
        "--calibration",
        "/no/such/file",
        "--out",
        t.path().join("x").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(!t.path().join("x").exists());
    let cal = t.path().join("cal.json");
    kvmeter()
        .args(["calibrate", "--seconds", "1", "--calibration"])
        .arg(&cal)
        .assert()
        .success();
    let peak = json(&cal)["memory_bandwidth"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["gb_per_s"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let out = t.path().join("run");
    kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--phase",
            "run",
            "--duration",
            "1s",
        ])
        .args(["--antagonist", "membw:share=0.1,cpus=0", "--calibration"])
        .arg(&cal)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let summary = json(&out.join("summary.json"));
    let a = &phase(&summary, "run")["antagonists"][0]["report"];
    let target = a["target_gb_per_s"].as_f64().unwrap();
    assert!((target - 0.1 * peak).abs() < 1e-9, "{a}");
    let got = a["achieved_gb_per_s"].as_f64().unwrap();
    assert!((got - target).abs() < 0.35 * target, "{a}");
}

/// A disk that fills mid-run ends the run with exit 1 and what was written so far; it used to
/// leave the workers running with no interval loop to stop them (a hang that ignored SIGTERM).
/// Needs root to mount a 64 KiB tmpfs; CI runs as root.
#[test]
fn a_full_disk_ends_the_run_and_keeps_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&mnt)
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    }
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
    let _ = std::process::Command::new("umount").arg(&mnt).status();
    let status = status.expect("kvmeter did not end within 15 s after the disk filled");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // The load phase completed before the disk filled, and its summary is readable.
    let s: serde_json::Value = serde_json::from_str(&summary.unwrap()).unwrap();
    assert_eq!(s["phases"][0]["name"], "load");
    assert_eq!(s["phases"][0]["outcome"], "completed");
    assert_eq!(s["phases"][0]["operations"], 1000);
}
