//! Telemetry in a real run, energy from a command meter and the labelled estimate,
//! `kvmeter doctor` and `kvmeter calibrate`.

use super::*;

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

/// Tests whose figures need kvmeter, or the host, to have a CPU free (its CPU time, its pace, its
/// latency at a rate, the utilisation behind a power estimate): `scripts/run-tests.sh` runs every
/// `quiet` module after the other tests, one test per CPU, as tests beside them would otherwise
/// disturb what they measure.
mod quiet {
    use super::*;

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
        // The estimate is said in one line that names the model's origin and points at 'kvmeter
        // doctor' (issue 28 item 12: it was a paragraph of four terminal lines; issue 40 item 5).
        let err = String::from_utf8_lossy(&o.stderr);
        let power: Vec<&str> = err.lines().filter(|l| l.contains("power")).collect();
        assert_eq!(power.len(), 1, "{err}");
        assert!(
            power[0].starts_with("power: ESTIMATE, not a measurement")
                && power[0].contains("40-140 W utilisation model from --power-model")
                && power[0].contains("'kvmeter doctor'")
                && power[0].len() <= 200,
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
    fn telemetry_series_and_phase_figures_in_a_real_run() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("tel");
        let a = kvmeter()
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
        let stdout = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
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
        // The software counters per operation, on the terminal too; where the cycles could not
        // be counted, the per-op line says so rather than leaving them out in silence.
        let run = phase(&s, "run");
        let ops = run["operations"].as_f64().unwrap();
        let faults = tel["counters"]["counts"]["page-faults"].as_f64().unwrap();
        let per_op = run["per_op"]["page_faults"].as_f64().unwrap();
        assert!(
            (per_op - faults / ops).abs() <= 1e-12 * faults.max(1.0),
            "{per_op}"
        );
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with("per op"))
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(
            line.contains(" page faults, ") && line.contains(" CPU migrations"),
            "{line}"
        );
        assert_eq!(
            line.contains("cycles unavailable: "),
            tel["counters"]["counts"]["cycles"].is_null(),
            "{line}"
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
}
