//! A load inserts every record unless the user bounds the load itself; a load that stops
//! short says so everywhere (issue 40 item 1). RocksDB, paced with --target so that a bound of
//! 1 s cannot let 2,000 records through on any machine: 1,000 ops/s on one thread.

use super::*;

fn load_run(out: &Path, extra: &[&str]) -> std::process::Output {
    kvmeter()
        .args([
            "run",
            "-P",
            "workloada",
            "--records",
            "2000",
            "--target",
            "1000",
        ])
        .args(["--seed", "3", "--interval", "200ms", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn inserted(load: &serde_json::Value) -> u64 {
    load["ops"]["INSERT"]["ok"].as_u64().unwrap()
}

/// `--duration` with a run phase after the load is the run phase's length: the load inserts
/// all 2,000 records (it used to stop at 1 s, ~1,000), and the run reads no missing key —
/// RocksDB's own answers (not_found) say every key the run asked for was there.
#[test]
fn duration_does_not_cut_a_load_short() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = load_run(&out, &["--duration", "1s"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    let load = phase(&s, "load");
    assert_eq!(load["outcome"], "completed", "{load}");
    assert_eq!(inserted(load), 2000);
    let run = phase(&s, "run");
    assert!(count(run, "READ") > 0);
    for op in ["READ", "UPDATE"] {
        assert!(
            run["ops"][op]["errors"].get("not_found").is_none(),
            "{op}: {run}"
        );
    }
    assert!(!err.contains("partly loaded"), "{err}");
}

/// A bound the user gave the load (YCSB's maxexecutiontime; `--duration` with `--phase load`)
/// stops it: outcome `truncated` in summary.json, the table, stderr and report.html, and the
/// run phase after it warns that it reads a partly loaded table — which RocksDB's not_found
/// answers confirm.
#[test]
fn a_bounded_load_is_truncated_and_says_so() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = load_run(&out, &["-p", "maxexecutiontime=1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    let table = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    let load = phase(&s, "load");
    assert_eq!(load["outcome"], "truncated", "{load}");
    let n = inserted(load);
    assert!((1..2000).contains(&n), "{n}");
    let why = load["truncated"].as_str().unwrap();
    assert!(
        why.starts_with(&format!("{n} of 2000 records inserted")),
        "{why}"
    );
    assert!(table.contains(&format!("truncated: {why}")), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("load ") && l.ends_with(" truncated")),
        "{table}"
    );
    assert!(
        err.contains(&format!("WARNING: phase load: truncated: {why}")),
        "{err}"
    );
    let partly: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("partly loaded"))
        .collect();
    assert_eq!(partly.len(), 1, "{err}");
    assert!(
        partly[0].starts_with("WARNING: phase run: reads a partly loaded table"),
        "{err}"
    );
    let warnings = s["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("partly loaded")),
        "{s}"
    );
    let run = phase(&s, "run");
    let missing: u64 = ["READ", "UPDATE"]
        .iter()
        .map(|op| run["ops"][op]["errors"]["not_found"].as_u64().unwrap_or(0))
        .sum();
    assert!(missing > 0, "{run}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("truncated"));

    // --duration bounds the load when the load is the only phase.
    let out = t.path().join("load");
    let o = load_run(&out, &["--phase", "load", "--duration", "1s"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let s = json(&out.join("summary.json"));
    let load = phase(&s, "load");
    assert_eq!(load["outcome"], "truncated", "{load}");
    assert!(inserted(load) < 2000, "{load}");
    assert!(err.contains("WARNING: phase load: truncated:"), "{err}");
}

/// A run phase on a data directory another load filled: with other key names (more records
/// than were loaded) or another store, its reads would miss without a word; it is warned, with
/// what was loaded and what it reads. The same settings are not.
#[test]
fn a_run_on_data_loaded_otherwise_is_warned() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let data = data.to_str().unwrap();
    let base = [
        "run",
        "-P",
        "workloadc",
        "--store",
        "rocksdb",
        "--data-dir",
        data,
    ];
    let load = run_ok(&[&base[..], &["--phase", "load", "--records", "200"]].concat());
    assert!(!load.stderr.contains("was loaded with"), "{}", load.stderr);
    let same = run_ok(
        &[
            &base[..],
            &["--phase", "run", "--records", "200", "--ops", "200"],
        ]
        .concat(),
    );
    assert!(!same.stderr.contains("was loaded with"), "{}", same.stderr);
    assert_eq!(phase(&same.summary, "run")["ops"]["READ"]["misses"], 0);
    let more = run_ok(
        &[
            &base[..],
            &["--phase", "run", "--records", "500", "--ops", "200"],
        ]
        .concat(),
    );
    assert!(
        more.stderr
            .contains("was loaded with store=rocksdb recordcount=200")
            && more
                .stderr
                .contains("this run has store=rocksdb recordcount=500"),
        "{}",
        more.stderr
    );
}
