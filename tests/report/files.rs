//! `kvmeter report DIR` on an experiment directory reads the directory's files only (issue
//! 29): it never parses the experiment file again, plans no step, loads no plug-in, and judges
//! a finding's `needs` by what the steps recorded, not by the machine making the report. An
//! experiment with a plug-in step and a finding that needs two cores is made here; the
//! plug-in is then hidden and the report made again with one CPU visible (taskset), and the
//! findings and the page must be exactly what they were.

use crate::common;
use crate::plugin_build;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A null store and the example LMDB plug-in (`PLUGIN` is its path), a tiny capacity search
/// with a 5 s SLO, a figure of each, and findings far from their thresholds (the null store
/// serves millions of ops/s; both need only 10).
const FILE: &str = r#"
[experiment]
name = "files"
title = "report reads files"
paper = "none"

[settings]
records = 100
duration = "300ms"
warmup = "100ms"
workload = "workloadc"
telemetry_interval = "0"

[[step]]
name = "null"
command = "run"
store = "null"

[[step]]
name = "lmdb"
command = "run"
store = "plugin:PLUGIN"
store_opt = { sync = "nosync" }

[[step]]
name = "cap"
command = "capacity"
store = "null"
start_rate = 200
max_points = 1
slo = "mean<5s"

[[figure]]
id = "tput"
title = "throughput"
kind = "phases"
metric = "throughput_ops_per_s"
steps = ["null", "lmdb"]

[[figure]]
id = "curve"
title = "capacity"
kind = "capacity"
steps = ["cap"]

[[finding]]
id = "null-on-two-cores"
claim = "the null store serves more than 10 ops/s on two cores"
paper = 10
value = "{null:run.throughput_ops_per_s}"
expect = "> 10"
needs = ["cores>=2"]

[[finding]]
id = "lmdb-serves"
claim = "the plug-in serves more than 10 ops/s"
paper = 10
value = "{lmdb:run.throughput_ops_per_s}"
expect = "> 10"
"#;

const COST: &str = r#"
[demand]
ops_per_s = 1000000
dataset_gb = 1

[[machine]]
name = "reference"
capacity_ops_per_s = 100000
memory_gb = 64
power_load_w = 100
power_scope = "wall"
price_usd = 3000
"#;

/// The example plug-in, built by its Makefile into `dir` (this test renames it away).
fn plugin(dir: &Path) -> PathBuf {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let (o, lib) = plugin_build::make_example_copy(&dir.join("plug"), Some(&include), "-O2");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    lib
}

fn experiment(dir: &Path, lib: &Path) -> PathBuf {
    let file = dir.join("e.toml");
    std::fs::write(&file, FILE.replace("PLUGIN", &lib.display().to_string())).unwrap();
    let out = dir.join("out");
    let o = kvmeter()
        .arg("experiment")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// `kvmeter report DIR [ARGS]` with only CPU 0 visible.
fn report_on_one_cpu(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .args(["30", "taskset", "-c", "0"])
        .arg(bin())
        .arg("report")
        .arg(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// What the page says: its data cells (key = value) and its findings table.
fn page(dir: &Path) -> (Vec<String>, String) {
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    let cells = html
        .split("data-key=\"")
        .skip(1)
        .map(|s| s.split('>').next().unwrap().to_string())
        .collect();
    let table = html
        .split("<table data-table=\"findings\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no findings table:\n{html}"))
        .to_string();
    (cells, table)
}

fn verdicts(dir: &Path) -> Vec<(String, String, String)> {
    json(&dir.join("findings.json"))
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
            (s("id"), s("verdict"), s("why"))
        })
        .collect()
}

#[test]
fn report_of_a_copied_experiment_needs_neither_its_plugin_nor_its_cpus() {
    let t = tempfile::tempdir().unwrap();
    let lib = plugin(t.path());
    let out = experiment(t.path(), &lib);
    // The machine that ran it: two CPUs here and in CI; the finding is judged by that.
    let cpus = json(&out.join("steps/null/manifest.json"))["machine"]["logical_cpus"]
        .as_u64()
        .unwrap();
    let before = verdicts(&out);
    let expected = if cpus >= 2 {
        "reproduced"
    } else {
        "cannot be tested here"
    };
    assert_eq!(before[0].0, "null-on-two-cores");
    assert_eq!(before[0].1, expected, "{before:?}");
    assert_eq!(before[1].1, "reproduced", "{before:?}");
    let md = std::fs::read_to_string(out.join("findings.md")).unwrap();
    let (cells, table) = page(&out);
    let svg = std::fs::read_to_string(out.join("figures/tput.svg")).unwrap();

    // Another machine: the plug-in is not there, and one CPU is.
    std::fs::rename(&lib, lib.with_extension("hidden")).unwrap();
    let n = Command::new("taskset")
        .args(["-c", "0", "nproc"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&n.stdout).trim(), "1");
    let o = report_on_one_cpu(&out, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(verdicts(&out), before);
    assert_eq!(
        std::fs::read_to_string(out.join("findings.md")).unwrap(),
        md
    );
    let (cells_after, table_after) = page(&out);
    assert_eq!(cells_after, cells);
    assert_eq!(table_after, table);
    assert!(table.contains(&format!("{expected}: ")), "{table}");
    assert_eq!(
        std::fs::read_to_string(out.join("figures/tput.svg")).unwrap(),
        svg
    );
    // The plug-in step's finding keeps its value.
    assert!(cells.iter().any(|c| c.starts_with("finding.lmdb-serves\"")));
    // The capacity figure marks the step's own SLO (one reference line), not a fixed 1 ms.
    let curve = std::fs::read_to_string(out.join("figures/curve.svg")).unwrap();
    assert!(curve.contains("SLO mean &lt; 5 s"), "{curve}");
    assert_eq!(
        curve.matches("<line class=\"reference\"").count(),
        1,
        "{curve}"
    );
}

#[test]
fn report_with_a_cost_model_remakes_the_findings_the_page_shows() {
    let t = tempfile::tempdir().unwrap();
    let lib = plugin(t.path());
    let out = experiment(t.path(), &lib);
    // The plug-in's run now reads 5 ops/s: "more than 10" is no longer reproduced.
    let summary = out.join("steps/lmdb/summary.json");
    let mut s: Value = json(&summary);
    for p in s["phases"].as_array_mut().unwrap() {
        if p["name"] == "run" {
            p["throughput_ops_per_s"] = serde_json::json!(5.0);
        }
    }
    std::fs::write(&summary, s.to_string()).unwrap();
    std::fs::rename(&lib, lib.with_extension("hidden")).unwrap();
    let cost = t.path().join("cost.toml");
    std::fs::write(&cost, COST).unwrap();
    let o = report_on_one_cpu(&out, &["--cost", cost.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = verdicts(&out);
    assert_eq!(v[1].0, "lmdb-serves");
    assert_eq!(v[1].1, "not reproduced", "{v:?}");
    let (cells, table) = page(&out);
    assert!(
        table.contains("not reproduced: 5.00 is not &gt; 10"),
        "{table}"
    );
    assert!(cells.iter().any(|c| c.starts_with("cost.reference.")));
    let md = std::fs::read_to_string(out.join("findings.md")).unwrap();
    assert!(md.contains("**not reproduced**: 5.00 is not > 10"), "{md}");
}

/// A directory an older kvmeter wrote (experiment.json schema 1, without the figures and
/// findings): `kvmeter report` records them once from its experiment.toml, then draws.
#[test]
fn an_older_experiment_directory_is_upgraded_once() {
    let t = tempfile::tempdir().unwrap();
    let lib = plugin(t.path());
    let out = experiment(t.path(), &lib);
    let before = verdicts(&out);
    let path = out.join("experiment.json");
    let mut st: Value = json(&path);
    let m = st.as_object_mut().unwrap();
    for k in [
        "figures",
        "findings",
        "about",
        "reproduces",
        "scale_about",
        "cost",
    ] {
        m.remove(k);
    }
    m.insert("schema".into(), "kvmeter-experiment/1".into());
    std::fs::write(&path, st.to_string()).unwrap();
    let o = kvmeter()
        .arg("report")
        .arg(&out)
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let st = json(&path);
    assert_eq!(st["schema"], "kvmeter-experiment/2");
    assert_eq!(st["figures"].as_array().unwrap().len(), 2);
    assert_eq!(st["findings"][0]["needs"][0], "cores>=2");
    assert_eq!(verdicts(&out), before);
}
