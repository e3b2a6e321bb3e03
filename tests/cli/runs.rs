//! Real runs and their run directories: the files, the operation mix by seed, the suite,
//! pacing, RocksDB load/run with data integrity, scans.

use super::*;

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

/// The progress line counts store calls as the table does (it used to add each worker's
/// CLEANUP call), and a property warning is said once, not once per phase (issue 40 item 11).
#[test]
fn progress_counts_what_the_table_counts_and_warnings_are_said_once() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = kvmeter()
        .args([
            "run",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "100",
        ])
        .args(["--ops", "1000", "--threads", "2", "--status-interval", "0"])
        .args([
            "-p",
            "readallfields=yes",
            "-p",
            "measurementtype=histogram",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // The last progress line of each phase: every operation done, as planned.
    let last = |tag: &str| {
        err.lines()
            .rfind(|l| l.starts_with(tag))
            .unwrap_or_else(|| panic!("no {tag} line: {err}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    let load = last("[1/2] load");
    assert_eq!(&load[3..5], ["100", "ops"], "{err}");
    let run = last("[2/2] run");
    assert_eq!(&run[3..5], ["1000", "ops"], "{err}");
    let s = json(&out.join("summary.json"));
    assert_eq!(phase(&s, "run")["operations"], 1000);
    for w in [
        "'readallfields'='yes' is read as false",
        "'measurementtype' is ignored",
    ] {
        assert_eq!(err.matches(w).count(), 1, "{w}: {err}");
    }
}
