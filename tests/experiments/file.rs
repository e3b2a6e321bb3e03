//! `kvmeter experiment FILE` end to end: the five paper presets run (smoke scale), a finding's
//! value equals the same figure computed here from the step's own summary.json, --resume after
//! a SIGKILL finishes without redoing completed steps, bad files are one line and exit 2
//! before anything is created, and a replay step replays its trace against memcached.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

const VERDICTS: [&str; 5] = [
    "reproduced",
    "not reproduced",
    "inconclusive",
    "cannot be tested here",
    "not measured",
];

/// The five presets, in paper order.
fn presets() -> Vec<PathBuf> {
    let mut presets: Vec<PathBuf> = std::fs::read_dir(repo("experiments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    presets.sort();
    assert_eq!(presets.len(), 5, "{presets:?}");
    presets
}

// One test per preset, so that the test harness's threads share them (one test running all
// five was the longest pole of the test run, 153 s of its 211).
#[test]
fn paper_000_preset_runs_end_to_end() {
    preset_runs_end_to_end(0);
}

#[test]
fn paper_001_preset_runs_end_to_end() {
    preset_runs_end_to_end(1);
}

#[test]
fn paper_002_preset_runs_end_to_end() {
    preset_runs_end_to_end(2);
}

#[test]
fn paper_003_preset_runs_end_to_end() {
    preset_runs_end_to_end(3);
}

#[test]
fn paper_004_preset_runs_end_to_end() {
    preset_runs_end_to_end(4);
}

/// Preset `i` runs at smoke scale: each step completes, findings.md has a row per finding
/// with a computed verdict, and report.html draws figures from the steps' data.
fn preset_runs_end_to_end(i: usize) {
    let dir = tempfile::tempdir().unwrap();
    let p = &presets()[i];
    let text = std::fs::read_to_string(p).unwrap();
    // The header names the paper, what it reproduces and the paper's values.
    assert!(
        text.starts_with(&format!("# papers/00{i} ")),
        "{}",
        p.display()
    );
    assert!(text.contains("# Reproduces") && text.contains("# Reference values"));
    let out = dir.path().join(format!("p{i}"));
    let o = kvmeter()
        .arg("experiment")
        .arg(p)
        .args(["--scale", "smoke", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}: {}",
        p.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let st = json(&out.join("experiment.json"));
    assert_eq!(st["status"], "completed", "{st}");
    assert_eq!(st["scale"], "smoke");
    for s in st["steps"].as_array().unwrap() {
        assert_eq!(s["status"], "completed", "{s}");
        assert!(out.join(s["dir"].as_str().unwrap()).is_dir());
    }
    let findings = json(&out.join("findings.json"));
    let findings = findings.as_array().unwrap();
    assert!(findings.len() >= 4, "{}", p.display());
    let md = std::fs::read_to_string(out.join("findings.md")).unwrap();
    for f in findings {
        let v = f["verdict"].as_str().unwrap();
        assert!(VERDICTS.contains(&v), "{f}");
        assert!(md.contains(&format!("**{v}**")));
        // What needs hardware this VM lacks is never passed or failed.
        if f["verdict"] == "cannot be tested here" {
            assert!(!f["why"].as_str().unwrap().is_empty());
        }
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("data-table=\"findings\""));
    assert!(
        html.matches("data-figure=").count() >= 2,
        "{}: too few figures",
        p.display()
    );
    // Offline: nothing is loaded from anywhere.
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    if i == 1 {
        the_stores_write_amplification_is_on_one_base(&out);
    }
}

/// papers/001's write-amplification findings divide each store's kernel bytes by the same
/// base: the bytes kvmeter sent, 30,000 records of ten "fieldN" names and 100-byte values at
/// smoke scale; the figure in results.json is the point's own summary.json's ratio.
fn the_stores_write_amplification_is_on_one_base(out: &Path) {
    let results = json(&out.join("results.json"));
    for store in ["rocksdb", "wiredtiger"] {
        let summary = json(&out.join(format!("steps/{store}/points/02-threads=2/r1/summary.json")));
        let io = &summary["phases"][0]["storage_io"];
        let sent = io["kvmeter_write_bytes"].as_u64().unwrap();
        assert!(sent.abs_diff(30_000 * 10 * (6 + 100)) <= 1, "{store}: {io}");
        // What reached the device: less what a deleted log cancelled before writeback.
        let device =
            io["write_bytes"].as_u64().unwrap() - io["cancelled_write_bytes"].as_u64().unwrap();
        let want = device as f64 / sent as f64;
        let figures = results["steps"][store]["figures"].as_array().unwrap();
        let got = figures
            .iter()
            .find(|f| f[0] == "threads=2/load.write_amplification_over_kvmeter_bytes")
            .unwrap_or_else(|| panic!("{store}: no same-base figure in {figures:?}"))[1]
            .as_f64()
            .unwrap();
        assert!(
            (got - want).abs() <= 1e-9 * want.max(1.0),
            "{store}: {got} {want}"
        );
    }
    let findings = std::fs::read_to_string(out.join("findings.md")).unwrap();
    for id in [
        "lsm-writes-more-per-byte",
        "lsm-traffic-is-compaction",
        "btree-rewrites-pages",
    ] {
        assert!(findings.contains(id), "{id} missing:\n{findings}");
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const SMALL: &str = r#"
[experiment]
name = "small"
title = "Small"
paper = "none"

[settings]
store = "null"
records = 1000
duration = "2s"
ops = 0
telemetry_interval = "0"
seed = 7

[[step]]
name = "first"
command = "run"
workload = "workloadc"
threads = 1

[[step]]
name = "second"
command = "run"
workload = "workloada"
threads = 1

[[step]]
name = "third"
command = "sweep"
workload = "workloadc"
repeat = 1
params = { threads = [1, 2] }

[[figure]]
id = "tput"
kind = "sweep"
steps = ["third"]
metrics = ["run.throughput_ops_per_s"]

[[finding]]
id = "ratio"
claim = "reads per second of the first run over the second"
paper = 1.0
value = "{first:run.ops.READ.ops_per_s} / {second:run.throughput_ops_per_s}"
expect = "> 0"

[[finding]]
id = "sweep"
claim = "two threads over one"
paper = 2.0
value = "last({third:*/run.throughput_ops_per_s}) / {third:threads=1/run.throughput_ops_per_s}"
expect = "> 0"
"#;

fn finding(out: &Path, id: &str) -> Value {
    json(&out.join("findings.json"))
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap()
        .clone()
}

/// `kvmeter experiment FILE --out OUT` in the background.
fn spawn(file: &Path, out: &Path, stderr: std::process::Stdio) -> std::process::Child {
    std::process::Command::new(bin())
        .arg("experiment")
        .arg(file)
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// `kvmeter experiment FILE --resume DIR`, to the end.
fn resume(file: &Path, out: &Path) -> std::process::Output {
    kvmeter()
        .arg("experiment")
        .arg(file)
        .arg("--resume")
        .arg(out)
        .output()
        .unwrap()
}

/// SIGKILL during the second step, then --resume: the first step is not run again, the cut
/// step is kept aside, and the result equals the figures in the steps' own files.
#[test]
fn resume_after_sigkill_finishes_the_rest_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "small.toml", SMALL);
    let out = dir.path().join("exp");
    let mut child = spawn(&file, &out, std::process::Stdio::null());
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "step two never started"
        );
        if let Ok(text) = std::fs::read_to_string(out.join("experiment.json")) {
            let st: Value = serde_json::from_str(&text).unwrap();
            if st["steps"][1]["status"] == "running"
                && out.join("steps/second/intervals.csv").is_file()
            {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(700));
    child.kill().unwrap();
    child.wait().unwrap();
    // No code of kvmeter's ran after the SIGKILL: its guard says what became of it.
    let st = sealed(&out.join("experiment.json"));
    assert_eq!(st["status"], "failed", "{st}");
    assert!(
        st["error"]
            .as_str()
            .unwrap()
            .starts_with("kvmeter ended without closing"),
        "{st}"
    );
    let steps: Vec<&Value> = st["steps"].as_array().unwrap().iter().collect();
    assert_eq!(
        steps
            .iter()
            .map(|s| s["status"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["completed", "failed", "pending"]
    );
    assert!(steps[1]["finished_at"].is_string());
    let first_summary = std::fs::read(out.join("steps/first/summary.json")).unwrap();
    let o = resume(&file, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let st = json(&out.join("experiment.json"));
    assert_eq!(st["status"], "completed");
    // The first step was not run again: its files are byte for byte the same.
    assert_eq!(
        std::fs::read(out.join("steps/first/summary.json")).unwrap(),
        first_summary
    );
    // The cut step's directory is kept, not deleted, and the step ran again whole.
    assert!(out.join("interrupted/second-1/intervals.csv").is_file());
    assert_eq!(
        json(&out.join("steps/second/summary.json"))["status"],
        "completed"
    );
    // Findings from the steps' own summaries, computed here.
    let s1 = json(&out.join("steps/first/summary.json"));
    let s2 = json(&out.join("steps/second/summary.json"));
    let reads = phase(&s1, "run")["ops"]["READ"]["ops_per_s"]
        .as_f64()
        .unwrap();
    let tput = phase(&s2, "run")["throughput_ops_per_s"].as_f64().unwrap();
    let f = finding(&out, "ratio");
    assert_eq!(f["verdict"], "reproduced");
    let v = f["value"].as_f64().unwrap();
    assert!(
        (v - reads / tput).abs() <= 1e-9 * v.abs(),
        "{v} vs {}",
        reads / tput
    );
    let sweep = json(&out.join("steps/third/sweep.json"));
    let mean = |i: usize| {
        sweep["points"][i]["phases"]["run"]["throughput_ops_per_s"]["mean"]
            .as_f64()
            .unwrap()
    };
    let v = finding(&out, "sweep")["value"].as_f64().unwrap();
    assert!((v - mean(1) / mean(0)).abs() < 1e-9 * v);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("data-figure=\"tput\""));
    // `kvmeter report` makes the same page again from the directory alone.
    let before = html.matches("data-value=").count();
    let o = kvmeter().arg("report").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let again = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(again.matches("data-value=").count(), before);
}

/// Ctrl-C stops the experiment with exit 130 and says how to resume; resuming a changed file
/// is refused.
#[test]
fn interrupt_then_resume_and_a_changed_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "small.toml", SMALL);
    let out = dir.path().join("exp");
    let child = spawn(&file, &out, std::process::Stdio::piped());
    let t0 = Instant::now();
    while !out.join("steps/first/intervals.csv").is_file() {
        assert!(t0.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--resume"), "{err}");
    let st = json(&out.join("experiment.json"));
    assert_eq!(st["status"], "interrupted");
    assert!(out.join("findings.md").is_file() && out.join("report.html").is_file());
    // The file changed: resuming would mix two experiments.
    let changed = write(
        dir.path(),
        "changed.toml",
        &SMALL.replace("threads = [1, 2]", "threads = [1, 4]"),
    );
    let o = resume(&changed, &out);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("step 'third' differs"), "{err}");
    let o = resume(&file, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(json(&out.join("experiment.json"))["status"], "completed");
}

#[test]
fn bad_experiment_files_are_one_line_and_exit_2_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        // (replace, with, expected start of the message after "error: <file>:")
        (
            "command = \"sweep\"",
            "command = \"swep\"",
            "29: step 'third': unknown step 'swep'",
        ),
        (
            "threads = 1\n\n[[step]]\nname = \"second\"",
            "thread = 1\n\n[[step]]\nname = \"second\"",
            "19: step 'first': unknown key 'thread'",
        ),
        (
            "params = { threads",
            "params = { thread",
            "32: step 'third': --param 'thread': unknown parameter",
        ),
        (
            "steps = [\"third\"]",
            "steps = [\"fourth\"]",
            "37: figure 'tput': refers to step 'fourth', which does not exist",
        ),
        (
            "duration = \"2s\"",
            "duration = \"2x\"",
            "10: step 'first': --duration",
        ),
    ];
    for (i, (from, to, want)) in cases.iter().enumerate() {
        assert!(SMALL.contains(from), "{from}");
        let file = write(
            dir.path(),
            &format!("bad{i}.toml"),
            &SMALL.replacen(from, to, 1),
        );
        let out = dir.path().join(format!("out{i}"));
        let o = kvmeter()
            .arg("experiment")
            .arg(&file)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "case {i}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        let prefix = format!("error: {}:{want}", file.display());
        assert!(err.starts_with(&prefix), "case {i}:\n{err}\nwant {prefix}");
        assert!(!out.exists(), "case {i}: created {}", out.display());
    }
    // A missing file, and a --resume of a directory that is not an experiment.
    let o = kvmeter()
        .args(["experiment", "/nonexistent/x.toml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let file = write(dir.path(), "ok.toml", SMALL);
    let o = kvmeter()
        .arg("experiment")
        .arg(&file)
        .arg("--resume")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no experiment here"));
}

/// `per_device` with two --data-dir: the step runs once on each device (its temporary data
/// directories made there and removed), a finding across devices is computed, and nothing the
/// user keeps in those directories is touched.
#[test]
fn per_device_steps_run_once_on_each_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("nvme"), dir.path().join("sata"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("mine.txt"), "the user's").unwrap();
    let file = write(
        dir.path(),
        "dev.toml",
        r#"
[experiment]
name = "dev"
title = "Devices"
paper = "none"

[[step]]
name = "load"
command = "run"
store = "lmdb"
phase = "load"
workload = "workloada"
records = 2000
telemetry_interval = "0"
per_device = true

[[finding]]
id = "ratio"
claim = "second device over first"
paper = 1.0
value = "{load@2:load.throughput_ops_per_s} / {load:load.throughput_ops_per_s}"
expect = "> 0"
needs = ["devices>=2"]
"#,
    );
    let out = dir.path().join("exp");
    let o = kvmeter()
        .arg("experiment")
        .arg(&file)
        .arg("--data-dir")
        .arg(&a)
        .arg("--data-dir")
        .arg(&b)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let st = json(&out.join("experiment.json"));
    let names: Vec<&str> = st["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["load", "load@2"]);
    for (step, dev) in [("load", &a), ("load@2", &b)] {
        let m =
            std::fs::read_to_string(out.join("steps").join(step).join("manifest.json")).unwrap();
        assert!(
            m.contains(&dev.join("kvmeter-data-").display().to_string()),
            "{step}: {m}"
        );
    }
    // The temporary data directories are gone; the user's file is as it was.
    assert_eq!(std::fs::read_dir(&b).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(&a).unwrap().count(), 1);
    assert_eq!(
        std::fs::read_to_string(a.join("mine.txt")).unwrap(),
        "the user's"
    );
    let f = finding(&out, "ratio");
    assert_eq!(f["verdict"], "reproduced", "{f}");
    let s1 = json(&out.join("steps/load/summary.json"));
    let s2 = json(&out.join("steps/load@2/summary.json"));
    let want = phase(&s2, "load")["throughput_ops_per_s"].as_f64().unwrap()
        / phase(&s1, "load")["throughput_ops_per_s"].as_f64().unwrap();
    assert!((f["value"].as_f64().unwrap() - want).abs() < 1e-9 * want);
}

/// `$cpus` stands for the CPUs online when the experiment started: started under one CPU
/// (`taskset -c 0`) and resumed under two, the experiment is the same one (it used to be
/// refused as changed, `threads` now reading 2) and its remaining step runs the one thread it
/// planned. The step left to run is made by marking it pending in experiment.json, as a
/// SIGKILL during it would leave it (that path is resume_after_sigkill_finishes_the_rest_only).
#[test]
fn resume_under_another_cpu_set_keeps_what_cpus_stood_for() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
[experiment]
name = "cpus"
title = "Threads per CPU"
paper = "none"

[settings]
store = "null"
ops = 2000
telemetry_interval = "0"

[[step]]
name = "first"
command = "run"
workload = "workloadc"
threads = "$cpus"

[[step]]
name = "second"
command = "run"
workload = "workloadc"
threads = "$cpus"
"#;
    let file = write(dir.path(), "cpus.toml", text);
    let out = dir.path().join("exp");
    let under = |cpus: &str, args: &[&std::ffi::OsStr]| {
        std::process::Command::new("taskset")
            .args(["-c", cpus])
            .arg(bin())
            .arg("experiment")
            .arg(&file)
            .args(args)
            .output()
            .expect("taskset is installed")
    };
    let o = under("0", &["--out".as_ref(), out.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let state_path = out.join("experiment.json");
    let mut state = json(&state_path);
    assert_eq!(state["cpus"], 1, "{state}");
    assert_eq!(state["steps"][1]["status"], "completed");
    state["steps"][1]["status"] = "pending".into();
    std::fs::write(&state_path, state.to_string()).unwrap();
    std::fs::remove_dir_all(out.join("steps/second")).unwrap();

    let o = under("0-1", &["--resume".as_ref(), out.as_os_str()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("no longer describes"), "{err}");
    let state = json(&state_path);
    assert_eq!(state["cpus"], 1, "{state}");
    assert_eq!(state["steps"][1]["status"], "completed", "{state}");
    let m = json(&out.join("steps/second/manifest.json"));
    assert_eq!(
        m["machine"]["cpu_affinity"].as_array().unwrap().len(),
        2,
        "{m}"
    );
    let s = json(&out.join("steps/second/summary.json"));
    let threads = s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "run")
        .map(|p| p["threads"].clone());
    assert_eq!(threads, Some(1.into()), "{s}");
}

/// A replay step (issue 32): the trace named relative to the experiment file, replayed against
/// memcached into steps/<name> like `kvmeter replay`; the replayed counts per op equal the
/// trace's (written here), and memcached's own `stats` count the same. The shared settings a
/// replay has no use for (`records`) are not given to it.
#[test]
fn a_replay_step_replays_its_trace_into_the_experiment() {
    let dir = tempfile::tempdir().unwrap();
    let (_mc, port) = common::servers::memcached(dir.path(), "mc", false);
    let files = dir.path().join("files");
    std::fs::create_dir_all(files.join("traces")).unwrap();
    // 90 records over 3 seconds: get, set, delete, get, incr (not replayable by kvmeter) in turn.
    let ops = ["get", "set", "delete", "get", "incr"];
    let mut text = String::new();
    let mut want: std::collections::BTreeMap<&str, u64> = Default::default();
    for i in 0..90u64 {
        let op = ops[(i % 5) as usize];
        let key = format!("k{}", i % 13);
        text += &format!(
            "{},{key},{},{},1,{op},0\n",
            1_600_000_000 + i / 30,
            key.len(),
            20 + i
        );
        *want.entry(op).or_insert(0) += 1;
    }
    std::fs::write(files.join("traces/t.csv"), text).unwrap();
    let file = write(
        &files,
        "replay.toml",
        &format!(
            r#"
[experiment]
name = "replay"
title = "A replay step"
paper = "none"

[settings]
store = "memcached"
store_opt = {{ addr = "127.0.0.1:{port}" }}
records = 1000
telemetry_interval = "0"

[[step]]
name = "warm"
command = "run"
workload = "workloadc"
phase = "load"
threads = 1

[[step]]
name = "trace"
command = "replay"
trace = "traces/t.csv"
speed = 20
threads = 2
"#
        ),
    );
    let before = common::servers::mc_stats(port);
    let out = dir.path().join("out");
    let o = kvmeter()
        .arg("experiment")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let after = common::servers::mc_stats(port);
    let step = out.join("steps/trace");
    let r = json(&step.join("replay.json"));
    let replayed: std::collections::BTreeMap<String, u64> = r["replayed_by_op"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    let expected: std::collections::BTreeMap<String, u64> = want
        .iter()
        .filter(|(op, _)| **op != "incr")
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    assert_eq!(replayed, expected, "{r}");
    assert_eq!(r["unreplayable_by_op"]["incr"], 18, "{r}");
    let p = phase(&json(&step.join("summary.json")), "replay").clone();
    assert_eq!(count(&p, "READ"), 36, "{p}");
    assert_eq!(count(&p, "INSERT"), 18, "{p}");
    assert_eq!(count(&p, "DELETE"), 18, "{p}");
    // memcached saw the load (1000 sets) and the replay: 36 gets, 18 sets, 18 deletes.
    let d = |k: &str| after[k] - before.get(k).copied().unwrap_or(0);
    assert_eq!(d("cmd_get"), 36);
    assert_eq!(d("cmd_set"), 1000 + 18);
    assert_eq!(d("delete_hits") + d("delete_misses"), 18);
    // Listed in experiment.json like the other steps, its command line naming the trace.
    let e = json(&out.join("experiment.json"));
    let s = &e["steps"][1];
    assert_eq!(s["name"], "trace");
    assert_eq!(s["command"], "replay");
    assert_eq!(s["status"], "completed");
    let trace = files.join("traces/t.csv").canonicalize().unwrap();
    let line = s["command_line"].as_str().unwrap();
    assert!(line.contains(&trace.display().to_string()), "{line}");
    assert!(!line.contains("--records"), "{line}");
    let m = json(&step.join("manifest.json"));
    assert_eq!(
        m["plan"]["phases"][0]["replay"]["trace"],
        trace.display().to_string()
    );
    // A bad replay step: one line naming the file, the step and the key; exit 2, nothing made.
    let text = std::fs::read_to_string(&file).unwrap();
    for (from, to, says) in [
        ("traces/t.csv", "traces/none.csv", "trace "),
        ("speed = 20", "speed = 20\nrate = 100", "--speed and --rate"),
        (
            "speed = 20",
            "trace_format = \"csv\"",
            "--trace-format 'csv'",
        ),
    ] {
        let bad = write(&files, "bad.toml", &text.replace(from, to));
        let out = dir.path().join("bad-out");
        let o = kvmeter()
            .arg("experiment")
            .arg(&bad)
            .arg("--out")
            .arg(&out)
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("bad.toml:"), "{err}");
        assert!(err.contains("step 'trace'"), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(!out.exists());
    }
}

/// Security review (minor): findings.md copied the experiment file's text verbatim, so HTML in
/// a claim or title reached a Markdown viewer as markup; report.html escaped it. Now both do.
#[test]
fn findings_md_escapes_html_from_the_experiment_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
[experiment]
name = "html"
title = "T <script>alert(1)</script>"
paper = "none"

[settings]
store = "null"
records = 100
ops = 1000
telemetry_interval = "0"

[[step]]
name = "only"
command = "run"
workload = "workloadc"
threads = 1

[[finding]]
id = "f"
claim = "reads <img src=x onerror=alert(1)> per second"
paper = 1.0
value = "{only:run.throughput_ops_per_s}"
expect = "> 0"
note = "see <a href=javascript:alert(1)>this</a>"
"#;
    let file = write(dir.path(), "html.toml", text);
    let out = dir.path().join("exp");
    let o = kvmeter()
        .arg("experiment")
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(out.join("findings.md")).unwrap();
    for tag in ["<script", "<img", "<a "] {
        assert!(!md.contains(tag), "findings.md holds {tag}:\n{md}");
    }
    assert!(md.contains("&lt;img src=x onerror=alert(1)>"), "{md}");
}
