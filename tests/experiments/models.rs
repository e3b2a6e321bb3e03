//! Fitted workload models end to end (docs/workloads-models.md): db_bench's mixgraph on RocksDB
//! (the mix's proportions, the model and its sine in the manifest, a sine-paced open loop) and
//! Facebook ETC's key sizes, value sizes and inter-arrival gaps against a managed memcached.
//! The distributions themselves are checked by goodness-of-fit in the unit tests of
//! `workload::mixgraph`, `workload::fb` and `driver::arrivals` (fixed seeds, KS at α = 0.001,
//! CDFs written out there); here the binary must run them and report what it ran.

use crate::common;

use common::*;
use serde_json::Value;

/// |observed − n·p| within 5 binomial standard deviations (a 1-in-1.7-million miss at a
/// fixed seed: the expected answer is certain).
fn within_binomial(observed: u64, n: u64, p: f64) -> bool {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    (observed as f64 - mean).abs() <= 5.0 * sd
}

fn run_phase(m: &Value) -> &Value {
    m["plan"]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "run")
        .expect("a run phase in the plan")
}

#[test]
fn mixgraph_on_rocksdb_follows_the_mix() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let n = 12_000u64;
    kvmeter()
        .args(["run", "--store", "rocksdb", "-p", "workload=mixgraph"])
        .args(["-p", "mixgraph.mix_get_ratio=0.6"])
        .args(["-p", "mixgraph.mix_put_ratio=0.3"])
        .args(["-p", "mixgraph.mix_seek_ratio=0.1"])
        .args(["-p", "mixgraph.mix_max_scan_len=20"])
        .args(["-p", "mixgraph.key_dist_a=0.002312"])
        .args(["-p", "mixgraph.key_dist_b=0.3467"])
        .args([
            "-p",
            "mixgraph.value_k=0.1033",
            "-p",
            "mixgraph.value_sigma=39",
        ])
        .args(["--records", "2000", "--ops", &n.to_string(), "--seed", "5"])
        .args(["--threads", "2", "--telemetry-interval", "0", "--out"])
        .arg(&out)
        .assert()
        .success();
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    let run = phase(&s, "run");
    let (r, u, sc) = (count(run, "READ"), count(run, "UPDATE"), count(run, "SCAN"));
    assert_eq!(r + u + sc, n, "{}", run["ops"]);
    assert_eq!(count(run, "INSERT") + count(run, "READ-MODIFY-WRITE"), 0);
    assert!(within_binomial(r, n, 0.6), "gets {r} of {n}");
    assert!(within_binomial(u, n, 0.3), "puts {u} of {n}");
    assert!(within_binomial(sc, n, 0.1), "seeks {sc} of {n}");
    assert_eq!(run["errors"], 0);
    // The manifest records the model as it ran: db_bench's names, given and default.
    let m = json(&out.join("manifest.json"));
    validate("manifest.schema.json", &m);
    let w = &run_phase(&m)["workload"];
    assert_eq!(w["fieldlengthdistribution"], "mixgraph");
    assert_eq!(w["fieldcount"], 1);
    assert_eq!(w["mixgraph"]["value"]["k"], 0.1033);
    assert_eq!(w["mixgraph"]["value"]["sigma"], 39.0);
    assert_eq!(w["mixgraph"]["iter"]["k"], 2.517);
    assert_eq!(w["mixgraph"]["key_dist_b"], 0.3467);
    // The ratios normalized to YCSB's proportions (0.1 / (0.6 + 0.3 + 0.1) in floating point).
    assert!((w["scanproportion"].as_f64().unwrap() - 0.1).abs() < 1e-12);
}

#[test]
fn mixgraph_sine_paces_the_open_loop() {
    // The sine is the offered load: its mean (sine_d) is the open loop's rate and the curve is
    // in the manifest; every scheduled arrival is served. The schedule's times against ∫rate
    // are checked in driver::arrivals' unit tests (no timing assertions here).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    kvmeter()
        .args(["run", "--store", "rocksdb", "-p", "workload=mixgraph"])
        .args(["-p", "mixgraph.sine_mix_rate=true"])
        .args(["-p", "mixgraph.sine_a=500", "-p", "mixgraph.sine_b=3"])
        .args([
            "-p",
            "mixgraph.sine_d=2000",
            "-p",
            "mixgraph.sine_mix_rate_noise=0.5",
        ])
        .args(["-p", "mixgraph.sine_mix_rate_interval_milliseconds=100"])
        .args([
            "-p",
            "mixgraph.mix_get_ratio=0.9",
            "-p",
            "mixgraph.mix_put_ratio=0.1",
        ])
        .args([
            "--records",
            "500",
            "--ops",
            "2000",
            "--telemetry-interval",
            "0",
        ])
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let m = json(&out.join("manifest.json"));
    validate("manifest.schema.json", &m);
    let ol = &run_phase(&m)["open_loop"];
    assert_eq!(ol["rate"], 2000.0);
    assert_eq!(ol["arrival"], "poisson");
    assert_eq!(ol["sine"]["a"], 500.0);
    assert_eq!(ol["sine"]["b"], 3.0);
    assert_eq!(ol["sine"]["noise"], 0.5);
    assert_eq!(ol["sine"]["interval_ms"], 100);
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    let run = phase(&s, "run");
    assert_eq!(count(run, "READ") + count(run, "UPDATE"), 2000);
    assert_eq!(run["open_loop"]["offered_ops_per_s"], 2000.0);
}

#[test]
fn facebook_etc_sizes_and_gaps_on_memcached() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    kvmeter()
        .args(["run", "-P", "workloadb", "--store", "memcached"])
        .args(["-p", "keysizedistribution=fb_key"])
        .args(["-p", "valuesizedistribution=fb_value", "-p", "fieldcount=1"])
        .args(["--arrival", "fb_ia", "--rate", "3000"])
        .args([
            "--records",
            "300",
            "--ops",
            "3000",
            "--telemetry-interval",
            "0",
        ])
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let m = json(&out.join("manifest.json"));
    validate("manifest.schema.json", &m);
    let p = run_phase(&m);
    assert_eq!(p["workload"]["keysizedistribution"], "fb_key");
    assert_eq!(p["workload"]["fieldlengthdistribution"], "fb_value");
    assert_eq!(p["open_loop"]["arrival"], "fb_ia");
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    let run = phase(&s, "run");
    assert_eq!(count(run, "READ") + count(run, "UPDATE"), 3000);
    assert_eq!(run["errors"], 0, "{}", run["ops"]);
    // Every key the load wrote is read back: fb_key names are stable per key.
    assert_eq!(count(phase(&s, "load"), "INSERT"), 300);
    assert!(
        run["ops"]["READ"]["errors"]["not_found"].is_null(),
        "{}",
        run["ops"]
    );
}

/// One clear line naming the property, exit 2, before anything runs.
fn refused(args: &[&str], names: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let a = kvmeter()
        .args(["run", "--store", "null", "--ops", "10"])
        .args(args)
        .arg("--out")
        .arg(&out)
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&a.get_output().stderr).to_string();
    assert!(err.contains(names), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!out.exists(), "nothing is created");
}

#[test]
fn bad_model_settings_are_refused_in_one_line() {
    refused(
        &["-p", "workload=mixgraph", "-p", "mixgraph.value_sigma=-1"],
        "mixgraph.value_sigma",
    );
    refused(&["-p", "mixgraph.value_k=0.2"], "workload=mixgraph");
    refused(
        &[
            "-p",
            "workload=mixgraph",
            "-p",
            "mixgraph.sine_mix_rate=true",
            "-p",
            "mixgraph.sine_d=10",
            "--rate",
            "100",
        ],
        "drop --rate",
    );
    refused(
        &[
            "-p",
            "workload=mixgraph",
            "-p",
            "mixgraph.sine_mix_rate=true",
            "-p",
            "mixgraph.sine_a=10",
            "-p",
            "mixgraph.sine_d=5",
        ],
        "stays positive",
    );
    refused(&["-p", "keysizedistribution=gev"], "keysizedistribution");
    refused(&["-p", "valuesizedistribution=fb"], "valuesizedistribution");
    refused(&["-p", "workload=mixgraph2"], "workload");
}
