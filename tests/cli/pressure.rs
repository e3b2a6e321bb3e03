//! The papers' pressure scale, --antagonist loads on any run, and the memory-bandwidth share
//! that needs a calibration.

use super::*;
use serde_json::Value;

/// The pressure scale on RocksDB under updates (so it flushes and writes its WAL): the
/// schedule, the antagonists' I/O per step, and what the store did in each step.
#[test]
fn pressure_scale_runs_the_papers_schedule() {
    let t = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap(); // O_DIRECT needs a real filesystem
    let out = t.path().join("p");
    let data = t.path().join("data");
    let said = kvmeter()
        .args([
            "pressure",
            "-P",
            "workloada",
            "--store",
            "rocksdb",
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
    let said = String::from_utf8_lossy(&said.get_output().stdout).to_string();
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    let p = &phase(&s, "pressure-4k")["pressure"];
    // The terminal says what the store did under the read and the write steps.
    let means = |k: &str| p[k]["storage_write_mb_per_s"].as_f64().unwrap();
    let line = format!(
        "store (its own counters) read-only / with writes: wrote {:.1} MB/s / {:.1} MB/s",
        means("read_only_store"),
        means("write_store")
    );
    assert!(said.contains(&line), "{line}\n{said}");
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
    store_figures_per_step(&out, phase(&s, "pressure-4k"), &csv);
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

/// Each step's store figures are the difference of RocksDB's own counters sampled at the
/// step's two boundaries (store_stats.csv's rows at those times), the steps add up to the
/// phase, and the rates are those increases over the step's seconds.
fn store_figures_per_step(out: &Path, ph: &Value, pressure_csv: &str) {
    let stats = std::fs::read_to_string(out.join("store_stats.csv")).unwrap();
    let mut lines = stats.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let (t, wal, flush, compaction) = (
        col("t_s"),
        col("wal_bytes"),
        col("flush_bytes"),
        col("compaction_write_bytes"),
    );
    // t_s → (wal, flush + compaction) bytes so far, in the pressure phase.
    let rows: std::collections::HashMap<String, (u64, u64)> = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|r| r[0] == "pressure-4k")
        .map(|r| {
            let n = |i: usize| r[i].parse::<u64>().unwrap();
            (r[t].to_string(), (n(wal), n(flush) + n(compaction)))
        })
        .collect();
    let steps = ph["pressure"]["steps"].as_array().unwrap();
    let mut wal_sum = 0;
    let rates: Vec<&str> = pressure_csv.lines().skip(1).collect();
    for (i, st) in steps.iter().enumerate() {
        let (start, secs) = (
            st["start_s"].as_f64().unwrap(),
            st["seconds"].as_f64().unwrap(),
        );
        let at = |x: f64| rows[&format!("{x:.3}")];
        let (a, b) = (at(start), at(start + secs));
        let store = &st["store"];
        let wal_step = store["increase"]["wal_bytes"].as_u64().unwrap();
        assert_eq!(wal_step, b.0 - a.0, "w{i}: WAL bytes");
        assert!(wal_step > 0, "w{i}: updates write the WAL");
        wal_sum += wal_step;
        let mb_s = ((b.0 - a.0) + (b.1 - a.1)) as f64 / secs / 1e6;
        let got = store["storage_write_mb_per_s"].as_f64().unwrap();
        assert!(
            (got - mb_s).abs() <= 1e-6 * mb_s.max(1.0),
            "w{i}: {got} ≠ {mb_s}"
        );
        assert!(store["backlog_end"]["l0_files"].is_u64(), "w{i}: {store}");
        let stall = store["stall_s_per_s"].as_f64().unwrap();
        let csv_row: Vec<&str> = rates[i].split(',').collect();
        assert_eq!(
            csv_row[csv_row.len() - 1].parse::<f64>().unwrap(),
            (stall * 1e4).round() / 1e4
        );
    }
    let phase_wal = ph["store_stats"]["stats"]["wal_bytes"]["increase"]
        .as_u64()
        .unwrap();
    assert_eq!(wal_sum, phase_wal, "the steps cover the phase");
    let means = &ph["pressure"]["write_store"];
    assert!(
        means["storage_write_mb_per_s"].as_f64().unwrap() > 0.0,
        "{means}"
    );
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
