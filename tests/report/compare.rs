//! `kvmeter compare` on real RocksDB runs (issue 28 item 4): a 10× difference with 4 runs a
//! side gets a verdict whose interval excludes 1; identical runs get none; a 0-vs-0 row is
//! left out of the family; 3 runs a side say how many a verdict needs; two calls in the same
//! second get two directories; a wrong --metric is one line and exit 2. The verdicts asserted
//! are certain by construction (a 1 MiB block cache with O_DIRECT reads against 256 MiB, or
//! the same run directories on both sides); rates (power, false alarms) are in
//! bench/compare-power.sh.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::Path;

/// RocksDB, 5,000 records flushed to 1 MiB SST files, 20,000 uniform reads; with
/// direct_reads a block-cache miss is a read from the disk, so 1 MiB of cache against 256 MiB
/// is about 10× in throughput.
fn rocks(dir: &Path, cache_mb: u32, seed: u32) {
    let o = kvmeter()
        .args(["run", "-P", "workloadc", "--store", "rocksdb"])
        .args(["--store-opt", &format!("block_cache_mb={cache_mb}")])
        .args(["--store-opt", "direct_reads=true"])
        .args(["--store-opt", "write_buffer_mb=1"])
        .args([
            "--records",
            "5000",
            "--ops",
            "20000",
            "--telemetry-interval",
            "0",
        ])
        .args(["--seed", &seed.to_string(), "--out"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn compare(cwd: &Path, a: &[&Path], b: &[&Path], extra: &[&str]) -> std::process::Output {
    kvmeter()
        .current_dir(cwd)
        .arg("compare")
        .args(a)
        .arg("--vs")
        .args(b)
        .args(extra)
        .output()
        .unwrap()
}

fn row<'a>(c: &'a Value, phase: &str, metric: &str) -> &'a Value {
    c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["phase"] == phase && r["metric"] == metric)
        .unwrap_or_else(|| panic!("no row {phase}.{metric}: {c}"))
}

/// The directory compare printed ("results: DIR"), relative to `cwd`.
fn results(cwd: &Path, o: &std::process::Output) -> std::path::PathBuf {
    let err = String::from_utf8_lossy(&o.stderr);
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("results: "))
        .unwrap_or_else(|| panic!("{err}"));
    cwd.join(line)
}

/// Tests whose figures need kvmeter to get a CPU when it wants one (here, a throughput
/// difference between two RocksDB block caches): `scripts/run-tests.sh` runs every `quiet`
/// module after the other tests, one test per CPU, as tests beside them would otherwise disturb
/// what they measure.
mod quiet {
    use super::*;

    #[test]
    fn compare_decides_on_what_is_asked_and_its_interval_agrees() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        // Interleaved, so drift hits both sides.
        let (mut small, mut large) = (vec![], vec![]);
        for i in 0..4 {
            small.push(d.join(format!("small/r{i}")));
            large.push(d.join(format!("large/r{i}")));
            rocks(&small[i], 1, i as u32);
            rocks(&large[i], 256, i as u32);
        }
        let small: Vec<&Path> = small.iter().map(|p| p.as_path()).collect();
        let large: Vec<&Path> = large.iter().map(|p| p.as_path()).collect();

        // 4 + 4, fully separated: the one tested row (run.ops_per_s) is "better", its 95 %
        // interval excludes 1 and contains the estimate, and p is the smallest 4 + 4 can give.
        // error_rate (0 on both sides) was asked for too, and is left out: k stays 1.
        let o = compare(
            d,
            &small,
            &large,
            &["--metric", "ops_per_s", "--metric", "error_rate"],
        );
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let c = json(&results(d, &o).join("compare.json"));
        assert_eq!(
            c["family"],
            serde_json::json!(["run.ops_per_s", "run.error_rate"])
        );
        assert_eq!(c["family_tested"], 1, "{c}");
        assert_eq!(c["runs_needed"], 4, "{c}");
        let r = row(&c, "run", "ops_per_s");
        assert_eq!(r["verdict"], "better", "{c}");
        let (lo, hi, est) = (
            r["ratio_ci"][0].as_f64().unwrap(),
            r["ratio_ci"][1].as_f64().unwrap(),
            r["ratio"].as_f64().unwrap(),
        );
        assert!(1.0 < lo && lo <= est && est <= hi, "{r}");
        assert_eq!(r["ci_level"], 0.95);
        assert!((r["p"].as_f64().unwrap() - 2.0 / 70.0).abs() < 1e-9, "{r}");
        // With 4 + 4 fully separated, the interval is [min, max] of the 16 ratios b/a.
        let vals = |side: &str| -> Vec<f64> {
            r[side]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        };
        let ratios: Vec<f64> = vals("b")
            .iter()
            .flat_map(|b| vals("a").into_iter().map(move |a| b / a))
            .collect();
        let min = ratios.iter().cloned().fold(f64::INFINITY, f64::min);
        assert!((lo / min - 1.0).abs() < 1e-9, "{lo} {min}");
        let e = row(&c, "run", "error_rate");
        assert_eq!(e["verdict"], "not tested: 0 on both sides", "{e}");
        assert!(e["p"].is_null());
        // Rows not asked about are descriptive: no test, no verdict, whatever they show.
        let l = row(&c, "load", "ops_per_s");
        assert_eq!(
            (l["verdict"].as_str(), l["tested"].as_bool()),
            (Some("descriptive"), Some(false))
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("a verdict needs >= 4 runs a side"), "{out}");

        // The same runs on both sides (copies): certain to be no difference, p = 1.
        for (i, p) in small.iter().enumerate() {
            copy_dir(p, &d.join(format!("copy/r{i}")));
        }
        let o = compare(d, &small, &[&d.join("copy")], &["--fail-on-regression"]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let c = json(&results(d, &o).join("compare.json"));
        let r = row(&c, "run", "ops_per_s");
        assert_eq!(
            (r["verdict"].as_str(), r["p"].as_f64()),
            (Some("no difference found"), Some(1.0)),
            "{r}"
        );
        let (lo, hi) = (
            r["ratio_ci"][0].as_f64().unwrap(),
            r["ratio_ci"][1].as_f64().unwrap(),
        );
        assert!(lo < 1.0 && 1.0 < hi, "{r}");

        // The same copies, but their runs did not complete (as a SIGKILLed run's guard leaves
        // them): the figures are compared, the gate does not pass, and it says why.
        for i in 0..small.len() {
            let r = d.join(format!("copy/r{i}"));
            for f in ["summary.json", "manifest.json"] {
                let mut v = json(&r.join(f));
                v["status"] = "failed".into();
                std::fs::write(r.join(f), serde_json::to_string_pretty(&v).unwrap()).unwrap();
            }
        }
        let o = compare(d, &small, &[&d.join("copy")], &["--fail-on-regression"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("--fail-on-regression: runs that did not complete:")
                && err.contains("(failed)"),
            "{err}"
        );
        let c = json(&results(d, &o).join("compare.json"));
        assert_eq!(
            c["unfinished"].as_array().unwrap().len(),
            small.len(),
            "{c}"
        );
        assert!(String::from_utf8_lossy(&o.stdout).contains("Runs that did not complete"));
        // Without the gate it is a warning in the table, and exit 0.
        let o = compare(d, &small, &[&d.join("copy")], &[]);
        assert_eq!(o.status.code(), Some(0));

        // 3 + 3 cannot reach 0.05 (2/20 = 0.1 at best): the table says what a verdict needs.
        let o = compare(d, &small[..3], &large[..3], &[]);
        assert_eq!(o.status.code(), Some(0));
        let c = json(&results(d, &o).join("compare.json"));
        let r = row(&c, "run", "ops_per_s");
        assert!(
            r["verdict"]
                .as_str()
                .unwrap()
                .starts_with("not tested: needs >= 4 runs a side"),
            "{r}"
        );
        assert!(String::from_utf8_lossy(&o.stdout).contains("needs >= 4 runs a side"));
        // No errors on A, half the calls failed on B: no ratio, but a difference, which is
        // tested and fails the gate (it was "not tested: a value is 0", whatever B said).
        for (i, r) in small.iter().enumerate() {
            let e = d.join(format!("errs/r{i}"));
            copy_dir(r, &e);
            let mut v = json(&e.join("summary.json"));
            for ph in v["phases"].as_array_mut().unwrap() {
                if ph["name"] == "run" {
                    ph["errors"] = (ph["operations"].as_u64().unwrap() / 2).into();
                }
            }
            std::fs::write(
                e.join("summary.json"),
                serde_json::to_string_pretty(&v).unwrap(),
            )
            .unwrap();
        }
        let errs: Vec<std::path::PathBuf> = (0..small.len())
            .map(|i| d.join(format!("errs/r{i}")))
            .collect();
        let errs: Vec<&Path> = errs.iter().map(|p| p.as_path()).collect();
        let o = compare(
            d,
            &small,
            &errs,
            &["--metric", "error_rate", "--fail-on-regression"],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        let c = json(&results(d, &o).join("compare.json"));
        let r = row(&c, "run", "error_rate");
        assert_eq!(r["verdict"], "worse", "{r}");
        assert!(r["test"].as_str().unwrap().contains("B - A +0.50"), "{r}");
        assert!(
            err.contains("run.error_rate is worse: exact Mann-Whitney"),
            "{err}"
        );

        // Two metrics with 4 runs a side: each is tested at 0.05 / 2, which 4 + 4 cannot reach
        // (2/70 = 0.029 at best); the rows say so, and not that 0.05 is out of reach.
        let o = compare(
            d,
            &small[..4],
            &large[..4],
            &["--metric", "ops_per_s", "--metric", "p99_us"],
        );
        let c = json(&results(d, &o).join("compare.json"));
        let r = row(&c, "run", "ops_per_s");
        assert_eq!(
            r["verdict"],
            "not tested: needs >= 5 runs a side (4 + 4 cannot reach p = 0.025, the level of a family of 2 metrics)",
            "{r}"
        );

        // Two calls in the same second: two directories, both complete, nothing overwritten.
        let spawn = || {
            std::process::Command::new(assert_cmd::cargo::cargo_bin("kvmeter"))
                .current_dir(d)
                .env("NO_COLOR", "1")
                .arg("compare")
                .args(&small)
                .arg("--vs")
                .args(&large)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (c1, c2) = (spawn(), spawn());
        let (o1, o2) = (
            c1.wait_with_output().unwrap(),
            c2.wait_with_output().unwrap(),
        );
        assert!(
            o1.status.success(),
            "{}",
            String::from_utf8_lossy(&o1.stderr)
        );
        assert!(
            o2.status.success(),
            "{}",
            String::from_utf8_lossy(&o2.stderr)
        );
        let (r1, r2) = (results(d, &o1), results(d, &o2));
        assert_ne!(r1, r2);
        for r in [r1, r2] {
            assert_eq!(json(&r.join("compare.json"))["rows"][0]["phase"], "load");
            assert!(r.join("compare.html").is_file());
        }

        // A metric that does not exist: one line naming it and the valid names, exit 2, nothing
        // written.
        let before = std::fs::read_dir(d.join("kvmeter-runs")).unwrap().count();
        let o = compare(d, &small, &large, &["--metric", "nosuch"]);
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains("--metric nosuch: unknown metric") && err.contains("ops_per_s, p50_us"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(d.join("kvmeter-runs")).unwrap().count(),
            before
        );
    }
}
