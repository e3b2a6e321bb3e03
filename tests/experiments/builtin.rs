//! `kvmeter capacity` and `kvmeter sweep` end to end: the experiment's files, each point's own
//! run directory, and the aggregate figures recomputed here from the points' summaries.

use crate::common;

use common::*;
use serde_json::Value;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn capacity_checks_its_flags_before_creating_anything() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cap");
    for (args, needle) in [
        (vec!["--slo", "p42<1ms"], "--slo 'p42<1ms'"),
        (vec!["--rate", "100"], "--rate: kvmeter capacity chooses"),
        (
            vec!["--start-rate", "10", "--max-rate", "5"],
            "--max-rate 5",
        ),
        (vec!["--precision", "2"], "--precision 2"),
    ] {
        let o = kvmeter()
            .args(["capacity", "--store", "null"])
            .args(&args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!out.exists());
    }
}

/// Two points × three runs on the null store: index, per-run directories, and mean, stddev,
/// geometric mean and its 95 % CI on logarithms recomputed from the runs' own summaries
/// (t = 4.302653 for 2 degrees of freedom: R's qt(0.975, 2)).
#[test]
fn sweep_repeats_points_and_reports_confidence_intervals() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sw");
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    kvmeter()
        .args([
            "sweep",
            "--store",
            "null",
            "--ops",
            "20000",
            "--records",
            "100",
        ])
        .args([
            "--param",
            "threads-per-cpu=1,2",
            "--repeat",
            "3",
            "--seed",
            "9",
        ])
        .args(["--telemetry-interval", "0", "--out"])
        .arg(&out)
        .assert()
        .success();
    let index = std::fs::read_to_string(out.join("index.csv")).unwrap();
    assert_eq!(index.lines().count(), 7, "{index}");
    let s = json(&out.join("sweep.json"));
    let points = s["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for (k, p) in points.iter().enumerate() {
        let runs = p["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3);
        let mut tput = vec![];
        let mut seeds = vec![];
        for r in runs {
            let d = std::path::Path::new(r.as_str().unwrap());
            let sum = json(&d.join("summary.json"));
            let run = phase(&sum, "run");
            assert_eq!(run["threads"].as_u64().unwrap(), (k as u64 + 1) * cpus);
            tput.push(f(&run["throughput_ops_per_s"]));
            seeds.push(sum["seed"].as_u64().unwrap());
        }
        assert_eq!(seeds, [9, 10, 11], "each repetition its own seed");
        let mean = tput.iter().sum::<f64>() / 3.0;
        let sd = (tput.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
        let logs: Vec<f64> = tput.iter().map(|x| x.ln()).collect();
        let lmean = logs.iter().sum::<f64>() / 3.0;
        let lsd = (logs.iter().map(|x| (x - lmean).powi(2)).sum::<f64>() / 2.0).sqrt();
        let half = 4.302652729749464 * lsd / 3f64.sqrt();
        let got = &p["phases"]["run"]["throughput_ops_per_s"];
        assert_eq!(got["n"], 3);
        assert!((f(&got["mean"]) - mean).abs() <= 1e-6 * mean);
        assert!((f(&got["stddev"]) - sd).abs() <= 1e-6 * mean);
        assert!((f(&got["geomean"]) - lmean.exp()).abs() <= 1e-6 * mean);
        let (lo, hi) = ((lmean - half).exp(), (lmean + half).exp());
        assert!((f(&got["geomean_ci95_low"]) - lo).abs() <= 1e-6 * mean);
        assert!((f(&got["geomean_ci95_high"]) - hi).abs() <= 1e-6 * mean);
        assert!(lo > 0.0);
    }
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert!(csv.starts_with(
        "point,threads-per-cpu,phase,metric,n,mean,stddev,geomean,geomean_ci95_low,geomean_ci95_high"
    ));
    assert!(csv
        .lines()
        .any(|l| l.starts_with("2,2,run,throughput_ops_per_s,3,")));
}

#[test]
fn sweep_rejects_a_bad_parameter_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sw");
    for (param, needle) in [
        ("colour=red", "--param 'colour': unknown parameter"),
        ("threads=0", "--param threads=0: expected a whole number"),
        ("store-opt.nosuch=1", "unknown option for store 'null'"),
    ] {
        let o = kvmeter()
            .args(["sweep", "--store", "null", "--param", param, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{param}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(needle), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!out.exists());
    }
}

/// Issue 11: a store option's value is checked with the plan, before `--out` exists — a bad
/// value used to pass the pre-check and fail after `--out/points/` was created.
#[test]
fn bad_store_option_values_are_refused_before_anything_exists() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("exp");
    let cases: [&[&str]; 3] = [
        &[
            "sweep",
            "--store",
            "rocksdb",
            "--param",
            "store-opt.block_cache_mb=64,abc",
        ],
        &[
            "capacity",
            "--store",
            "rocksdb",
            "--store-opt",
            "block_cache_mb=abc",
        ],
        &[
            "run",
            "--store",
            "rocksdb",
            "--store-opt",
            "block_cache_mb=abc",
        ],
    ];
    for args in cases {
        let o = kvmeter()
            .args(args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("--store-opt block_cache_mb=abc: expected a size in MiB from 0"),
            "{err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!out.exists(), "{args:?} created {}", out.display());
    }
}

/// Issue 11: a point where no operation completed is a result. One fixed arrival per second:
/// the first is due at 0 s, inside the 0.5 s warm-up, and the next at 1 s, after the 0.9 s
/// phase, so the measured window holds no operation. The search reports that capacity is
/// below the lowest rate tried, with the (empty) point in its curve.
#[test]
fn capacity_reports_a_point_without_operations_as_a_miss() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cap");
    let o = kvmeter()
        .args([
            "capacity",
            "-P",
            "workloadc",
            "--store",
            "null",
            "--records",
            "10",
        ])
        .args(["--arrival", "fixed", "--start-rate", "1", "--max-rate", "1"])
        .args(["--duration", "900ms", "--warmup", "500ms", "--repeat", "1"])
        .args(["--telemetry-interval", "0", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("no operation completed"), "{stderr}");
    let c = json(&out.join("capacity.json"));
    assert_eq!(c["status"], "completed");
    assert!(c["capacity_ops_per_s"].is_null(), "{c}");
    assert_eq!(f(&c["upper_bound_ops_per_s"]), 1.0);
    // Even the lowest rate failed: only an upper bound.
    assert!(
        c["note"]
            .as_str()
            .unwrap()
            .starts_with("capacity ≤ 1 ops/s, an upper bound only"),
        "{c}"
    );
    assert_eq!(c["capacity_bound"], "upper");
    assert_eq!(c["capacity_text"], "≤ 1 ops/s");
    let points = c["points"].as_array().unwrap();
    assert_eq!(points.len(), 1);
    assert!(points[0]["mean_us"].is_null(), "{c}");
    let run = phase(
        &json(&std::path::Path::new(points[0]["run_dir"].as_str().unwrap()).join("summary.json")),
        "run",
    )
    .clone();
    assert_eq!(run["operations"], 0);
    let csv = std::fs::read_to_string(out.join("capacity.csv")).unwrap();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(row[0], "1");
    assert_eq!(&row[5..12], &["", "", "", "", "", "", ""], "{csv}");
}

/// Tests whose figures need kvmeter to get a CPU when it wants one (its CPU time, its pace, its
/// latency at a rate): `scripts/run-tests.sh` runs every `quiet` module after the other tests,
/// one test per CPU, as tests beside them would otherwise disturb what they measure.
mod quiet {
    use super::*;

    /// One worker against a managed memcached: a low rate meets mean < 1 ms, a rate one worker
    /// cannot serve misses it (its requests queue), so the search brackets a capacity.
    #[test]
    fn capacity_brackets_memcached_with_one_worker() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("cap");
        let o = kvmeter()
            .args(["capacity", "-P", "workloadc", "--store", "memcached"])
            .args(["--threads", "1", "--records", "1000", "--arrival", "fixed"])
            .args([
                "--start-rate",
                "2000",
                "--max-rate",
                "256000",
                "--precision",
                "0.5",
            ])
            .args(["--duration", "2s", "--warmup", "500ms", "--repeat", "1"])
            .args(["--telemetry-interval", "0", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{}\n{stdout}",
            String::from_utf8_lossy(&o.stderr)
        );
        let c = json(&out.join("capacity.json"));
        assert_eq!(c["status"], "completed");
        let points = c["points"].as_array().unwrap();
        assert!(points.len() >= 3, "{c}");
        // Recompute each verdict from the point's own run directory.
        let (mut best_pass, mut worst_fail) = (0f64, f64::INFINITY);
        for p in points {
            let s =
                json(&std::path::Path::new(p["run_dir"].as_str().unwrap()).join("summary.json"));
            validate("summary.schema.json", &s);
            let run = phase(&s, "run");
            let rate = f(&p["offered_ops_per_s"]);
            assert_eq!(f(&run["open_loop"]["offered_ops_per_s"]), rate);
            let mean = f(&run["all_ops"]["intended_latency_us"]["avg"]);
            assert_eq!(f(&p["mean_us"]), mean);
            if mean < 1000.0 {
                best_pass = best_pass.max(rate);
            } else {
                worst_fail = worst_fail.min(rate);
            }
        }
        assert_eq!(f(&c["capacity_ops_per_s"]), best_pass, "{c}");
        assert_eq!(f(&c["upper_bound_ops_per_s"]), worst_fail, "{c}");
        assert!(best_pass >= 2000.0 && best_pass < worst_fail);
        assert!((worst_fail - best_pass) / best_pass <= 0.5);
        assert!(
            f(&c["uncertainty_ops_per_s"]) == (worst_fail - best_pass) / 2.0,
            "{c}"
        );
        // The curve: CSV (a row per run) and SVG; printed with the capacity.
        let csv = std::fs::read_to_string(out.join("capacity.csv")).unwrap();
        assert_eq!(csv.lines().count(), points.len() + 1);
        let svg = std::fs::read_to_string(out.join("curve.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("polyline"));
        assert!(
            stdout.contains(&format!("capacity {best_pass} ops/s")),
            "{stdout}"
        );
    }
}
