//! The papers' pressure scale, --antagonist loads on any run, and the memory-bandwidth share
//! that needs a calibration.

use super::*;

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
