//! Findings on bounds and noise (issue 28, item 3), end to end against kvmeter's embedded
//! null store: a capacity search that stops at its point limit with every rate passing is a
//! lower bound everywhere it appears (capacity.json, results.json, findings.md, the cost
//! table), and a finding comparing two such bounds is inconclusive; identical steps whose
//! results disagree make the comparisons on them inconclusive, naming the noise; a difference
//! far above the noise is still decided. Expected values are worked out here from the inputs.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::Path;

/// Two capacity searches capped at two points each, with an SLO (mean < 5 s) no point can
/// miss: 200 then 400 ops/s, 300 then 600 ops/s, both "≥", never bracketed.
const BOUNDS: &str = r#"
[experiment]
name = "bounds"
title = "capacities that are bounds"
paper = "papers/003"

[settings]
store = "null"
workload = "workloadc"
records = 100
duration = "300ms"
warmup = "100ms"
slo = "mean<5s"
max_points = 2

[[step]]
name = "cap-a"
command = "capacity"
start_rate = 200

[[step]]
name = "cap-b"
command = "capacity"
start_rate = 300

[[finding]]
id = "b-over-a"
claim = "B reaches a higher capacity than A"
paper = "higher"
value = "{cap-b:capacity_ops_per_s} / {cap-a:capacity_ops_per_s}"
expect = "> 1"

[[finding]]
id = "a-floor"
claim = "A serves more than 100 ops/s"
paper = 100
value = "{cap-a:capacity_ops_per_s}"
expect = "> 100"

[[finding]]
id = "a-median"
claim = "The median stays under a minute up to capacity"
paper = "< 60 s"
value = "{cap-a:max_p50_us_up_to_capacity}"
expect = "< 60000000"

[cost.demand]
ops_per_s = 1000000
dataset_gb = 1

[cost.site]
pue = 1
usd_per_kwh = 0.1
utilization = 1

[[cost.machine]]
name = "reference"
capacity_ops_per_s = 100000
memory_gb = 64
power_load_w = 100
power_scope = "wall"
price_usd = 3000

[[cost.machine]]
name = "here"
capacity_from = "steps/cap-a"
memory_gb = 64
power_load_w = 100
power_scope = "wall"
price_usd = 3000
"#;

fn run_experiment(text: &str, dir: &Path) -> String {
    let file = dir.join("e.toml");
    std::fs::write(&file, text).unwrap();
    let out = dir.join("out");
    let o = kvmeter()
        .arg("experiment")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn finding<'a>(f: &'a Value, id: &str) -> &'a Value {
    f.as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id}: {f}"))
}

#[test]
fn a_capacity_search_that_never_failed_is_a_lower_bound_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = run_experiment(BOUNDS, dir.path());
    let out = dir.path().join("out");
    // capacity.json: the highest rate tried, and that it is only a lower bound.
    let cap = json(&out.join("steps/cap-a/capacity.json"));
    assert_eq!(cap["status"], "stopped: --max-points reached", "{cap}");
    assert_eq!(cap["capacity_ops_per_s"], 400.0);
    assert!(cap["upper_bound_ops_per_s"].is_null());
    assert_eq!(cap["capacity_bound"], "lower");
    assert_eq!(cap["capacity_text"], "≥ 400 ops/s");
    assert!(cap["note"].as_str().unwrap().contains("lower bound"));
    // results.json: the flat figure with its interval [400, ∞) (null: open).
    let res = json(&out.join("results.json"));
    let b = res["steps"]["cap-a"]["bounds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["key"] == "capacity_ops_per_s")
        .expect("a bound on capacity_ops_per_s")
        .clone();
    assert_eq!(
        (b["low"].as_f64(), b["high"].is_null()),
        (Some(400.0), true)
    );
    // findings: 600 / 400 with both open above lies in [0, ∞): inconclusive, with why.
    let f = json(&out.join("findings.json"));
    let ratio = finding(&f, "b-over-a");
    assert_eq!(ratio["verdict"], "inconclusive", "{ratio}");
    assert!(ratio["why"]
        .as_str()
        .unwrap()
        .contains("only a lower bound"));
    // One bound can decide: ≥ 400 is > 100 whatever the capacity is.
    assert_eq!(finding(&f, "a-floor")["verdict"], "reproduced");
    // The loads above 400 were never tried: the highest median so far is only "≥" (a 300 ms
    // run's median is far below a minute, so only the bound leaves it open).
    assert_eq!(finding(&f, "a-median")["verdict"], "inconclusive");
    let md = std::fs::read_to_string(out.join("findings.md")).unwrap();
    assert!(md.contains("| ≥ 400 |"), "{md}");
    assert!(md.contains("**inconclusive**"));
    assert!(md.contains("Verdicts: 1 reproduced, 0 not reproduced, 2 inconclusive, 0 cannot be tested here, 0 not measured."), "{md}");
    assert!(stdout.contains("2 inconclusive"), "{stdout}");
    // The cost table: ceil(1e6 / 400) = 2500 nodes at most, ceil(1 GB / 64 GB) = 1 at least;
    // never one node count. Break-even: the reference's TCO R = 10 × (3000 + E) with one
    // node's energy E = 100 W × 3 × 8766 h × $0.1/kWh; over 1..2500 nodes, R/n − E runs from
    // negative to positive: inconclusive, no price.
    let cost = json(&out.join("cost.json"));
    let here = &cost[1];
    assert_eq!(here["capacity_bound"], "lower");
    assert_eq!(here["ranges"]["nodes"], serde_json::json!([1.0, 2500.0]));
    let e = 100.0 * 3.0 * 365.25 * 24.0 / 1000.0 * 0.1;
    let r = 10.0 * (3000.0 + e);
    assert!(r / 2500.0 - e < 0.0 && r - e > 0.0);
    assert!(here["break_even_price_usd"].is_null(), "{here}");
    assert!(here["break_even"]
        .as_str()
        .unwrap()
        .starts_with("inconclusive"));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("1–2500"), "the node count is a range");
    // `kvmeter report --cost` prints the same table.
    let cost_file = out.join("cost.toml");
    let cost_text = BOUNDS[BOUNDS.find("[cost.demand]").unwrap()..].replace("cost.", "");
    std::fs::write(&cost_file, cost_text).unwrap();
    let o = kvmeter()
        .arg("report")
        .arg(out.join("steps/cap-a"))
        .arg("--cost")
        .arg(&cost_file)
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("here "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.contains("1–2500") && row.contains("inconclusive"),
        "{row}"
    );
    assert!(!row.contains(" -"), "no negative figure: {row}");
}

/// A closed-loop step against two identical paced ones (`--target 100`, flags in another
/// order): the paced pair agree (100 ops/s each), and the unpaced one is far faster.
const NOISE: &str = r#"
[experiment]
name = "noise"
title = "identical steps"
paper = "papers/002"

[settings]
store = "null"
records = 100
duration = "500ms"
warmup = "100ms"

[[step]]
name = "fast"
command = "run"
workload = "workloadc"

[[step]]
name = "paced"
command = "run"
workload = "workloadc"
target = 100
threads = 1

[[step]]
name = "paced-again"
command = "run"
threads = 1
target = 100
workload = "workloadc"

[[finding]]
id = "fast-over-paced"
claim = "The unpaced run is far faster"
paper = "faster"
value = "{fast:run.throughput_ops_per_s} / {paced:run.throughput_ops_per_s}"
expect = "> 5"

[[finding]]
id = "paced-over-fast"
claim = "The paced run is faster"
paper = "faster"
value = "{paced:run.throughput_ops_per_s} / {fast:run.throughput_ops_per_s}"
expect = "> 1"
"#;

fn set_throughput(summary: &Path, factor: f64) -> f64 {
    let mut s: Value = json(summary);
    let run = s["phases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["name"] == "run")
        .unwrap();
    let v = run["throughput_ops_per_s"].as_f64().unwrap() * factor;
    run["throughput_ops_per_s"] = serde_json::json!(v);
    std::fs::write(summary, serde_json::to_string_pretty(&s).unwrap()).unwrap();
    v
}

#[test]
fn identical_steps_that_disagree_leave_comparisons_on_them_inconclusive() {
    let dir = tempfile::tempdir().unwrap();
    run_experiment(NOISE, dir.path());
    let out = dir.path().join("out");
    // Far above the noise: decided both ways, as before (fast runs unpaced against the null
    // store, thousands of times 100 ops/s).
    let f = json(&out.join("findings.json"));
    assert_eq!(finding(&f, "fast-over-paced")["verdict"], "reproduced");
    assert_eq!(finding(&f, "paced-over-fast")["verdict"], "not reproduced");
    let res = json(&out.join("results.json"));
    let same = &res["identical"][0];
    assert_eq!(same["steps"], serde_json::json!(["paced", "paced-again"]));
    // Made to disagree as papers/002's pair did (3,664 against 128,943 ops/s: 35×): the copy's
    // throughput × 35. The noise floor is 34 × paced's, so paced's interval holds zero and any
    // ratio over it is unbounded.
    let summary = out.join("steps/paced-again/summary.json");
    let paced = json(&out.join("steps/paced/summary.json"));
    let p = paced["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "run")
        .unwrap()["throughput_ops_per_s"]
        .as_f64()
        .unwrap();
    let again = set_throughput(&summary, 35.0 * p / set_throughput(&summary, 1.0));
    let o = kvmeter()
        .arg("report")
        .arg(&out)
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let f = json(&out.join("findings.json"));
    let x = finding(&f, "fast-over-paced");
    assert_eq!(x["verdict"], "inconclusive", "{x}");
    assert!(
        x["why"]
            .as_str()
            .unwrap()
            .contains("'paced' and 'paced-again' ran the same command"),
        "{x}"
    );
    // paced / fast: paced within p ± 34p, fast ≥ 1,000 × p, so the ratio is at most 0.035
    // anywhere in its interval: still decided, the noise is smaller than this difference.
    let x = finding(&f, "paced-over-fast");
    assert_eq!(x["verdict"], "not reproduced", "{x}");
    let (lo, hi) = (
        x["interval"][0].as_f64().unwrap(),
        x["interval"][1].as_f64().unwrap(),
    );
    assert!(lo < 0.0 && hi < 1.0, "{x}");
    let md = std::fs::read_to_string(out.join("findings.md")).unwrap();
    let line = md
        .lines()
        .find(|l| {
            l.starts_with("- identical steps 'paced' and 'paced-again'")
                && l.contains("run.throughput_ops_per_s")
        })
        .unwrap_or_else(|| panic!("{md}"));
    let pct = format!("{:.1} %", 100.0 * (again - p) / p);
    assert!(
        line.contains(&pct) && line.contains("NOISY"),
        "{line} ({pct})"
    );
}
