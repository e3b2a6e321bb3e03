//! Experiment files: good ones become the same commands typed by hand; bad ones are one line
//! naming the file, the line and the key.

use super::*;

const GOOD: &str = r#"
[experiment]
name = "demo"
title = "A demo"
paper = "papers/000"

[scale.quick]
about = "minutes"

[settings]
store = "rocksdb"
records = { smoke = 100, quick = 1000, paper = 1000000 }
duration = "1s"
store_opt = { block_cache_mb = 8 }

[[step]]
name = "one"
command = "run"
workload = "workloadc"
threads = 2
store_opt = { wal = false }

[[step]]
name = "threads"
command = "sweep"
workload = "workloada"
params = { threads = { smoke = [1], quick = [1, 2] } }
repeat = 1

[[figure]]
id = "tput"
kind = "sweep"
steps = ["threads"]
metrics = ["run.throughput_ops_per_s"]

[[finding]]
id = "scales"
claim = "more threads, more throughput"
paper = 2.0
value = "last({threads:*/run.throughput_ops_per_s}) / {threads:threads=1/run.throughput_ops_per_s}"
expect = "> 1"
"#;

fn load_text(text: &str) -> Result<Experiment, UsageError> {
    from_text(Path::new("x.toml"), text, "quick", &[])
}

#[test]
fn steps_become_the_commands_typed_by_hand() {
    let e = load_text(GOOD).unwrap();
    assert_eq!(e.steps.len(), 2);
    let one = &e.steps[0];
    assert_eq!(one.command, "run");
    // Settings first, the step's own keys after; repeatable flags add up.
    assert_eq!(
        one.args,
        [
            "--store",
            "rocksdb",
            "--records",
            "1000",
            "--duration",
            "1s",
            "--store-opt",
            "block_cache_mb=8",
            "--store-opt",
            "wal=false",
            "-P",
            "workloadc",
            "--threads",
            "2"
        ]
    );
    assert_eq!(one.job.request().threads, Some(2));
    assert_eq!(one.job.request().records, Some(1000));
    let sweep = &e.steps[1];
    assert!(sweep
        .args
        .windows(2)
        .any(|w| w == ["--param", "threads=1,2"]));
    let smoke = from_text(Path::new("x.toml"), GOOD, "smoke", &[]).unwrap();
    assert!(smoke.steps[1]
        .args
        .windows(2)
        .any(|w| w == ["--param", "threads=1"]));
    assert_eq!(smoke.steps[0].job.request().records, Some(100));
}

fn err(old: &str, new: &str) -> String {
    assert!(GOOD.contains(old), "{old}");
    load_text(&GOOD.replacen(old, new, 1)).unwrap_err().0
}

#[test]
fn bad_steps_name_file_line_and_key() {
    // Unknown step command.
    assert_eq!(
        err("command = \"run\"", "command = \"runn\""),
        "x.toml:18: step 'one': unknown step 'runn' (known: run, suite, pressure, sweep, capacity, replay)"
    );
    // Unknown key in a step.
    let e = err("threads = 2", "thread = 2");
    assert!(
        e.starts_with("x.toml:20: step 'one': unknown key 'thread'"),
        "{e}"
    );
    // A sweep over an unknown parameter.
    let e = err(
        "{ threads = { smoke = [1], quick = [1, 2] } }",
        "{ threadz = { smoke = [1], quick = [1, 2] } }",
    );
    assert!(
        e.starts_with("x.toml:")
            && e.contains("step 'threads'")
            && e.contains("'threadz': unknown parameter"),
        "{e}"
    );
    // A value the command itself refuses.
    let e = err("threads = 2", "threads = -1");
    assert!(
        e.starts_with("x.toml:20: step 'one':") && e.contains("threads"),
        "{e}"
    );
    // Where results go is the experiment's business.
    let e = err("threads = 2", "out = \"x\"");
    assert!(e.contains("key 'out'"), "{e}");
}

#[test]
fn bad_references_name_the_figure_or_finding() {
    // A figure that refers to a step that does not exist.
    let e = err("steps = [\"threads\"]", "steps = [\"nope\"]");
    assert!(
        e.starts_with("x.toml:33: figure 'tput': refers to step 'nope', which does not exist"),
        "{e}"
    );
    // A finding over a sweep point that is not there.
    let e = err(
        "{threads:threads=1/run.throughput_ops_per_s}",
        "{threads:threads=3/run.throughput_ops_per_s}",
    );
    assert!(
        e.contains("finding 'scales': step 'threads' has no point 'threads=3'"),
        "{e}"
    );
    let e = err("expect = \"> 1\"", "expect = \"more\"");
    assert!(e.contains("expect: expected a comparison"), "{e}");
    let e = err("[[finding]]", "[[finding]]\nneeds = [\"gpu\"]");
    assert!(e.contains("needs: unknown 'gpu'"), "{e}");
}

#[test]
fn bad_tables_and_settings_name_file_line_and_key() {
    // Unknown top-level and table keys.
    assert!(err("[settings]", "[setings]").starts_with("x.toml:"));
    let e = err("title = \"A demo\"", "titel = \"A demo\"");
    assert!(
        e.starts_with("x.toml:4: [experiment]: unknown key 'titel'"),
        "{e}"
    );
    // A scale the value is not given for.
    let e = err("quick = [1, 2]", "paper = [1, 2]");
    assert!(e.contains("no value for scale 'quick'"), "{e}");
    // A setting no step takes.
    let e = err(
        "duration = \"1s\"",
        "duration = \"1s\"\nblock_sizes = \"4\"",
    );
    assert!(e.contains("[settings]: unknown key 'block_sizes'"), "{e}");
}

#[test]
fn a_steps_workload_replaces_the_shared_one() {
    let text = GOOD.replace(
        "duration = \"1s\"",
        "duration = \"1s\"\nworkload = \"workloadb\"",
    );
    let e = load_text(&text).unwrap();
    // Step 'one' names its own file: only that one is given.
    let p: Vec<&String> = e.steps[0]
        .args
        .windows(2)
        .filter(|w| w[0] == "-P")
        .map(|w| &w[1])
        .collect();
    assert_eq!(p, ["workloadc"]);
    assert_eq!(e.steps[0].job.request().workload_files, ["workloadc"]);
}

#[test]
fn a_replay_step_names_its_trace_relative_to_the_file() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("t.csv"), "0,k,1,10,1,get,0\n").unwrap();
    let file = d.path().join("e.toml");
    let text = r#"
[experiment]
name = "r"
title = "replay"
paper = "none"

[settings]
store = "null"
records = 10

[[step]]
name = "load"
command = "run"
workload = "workloadc"
phase = "load"

[[step]]
name = "rep"
command = "replay"
trace = "t.csv"
speed = 2
"#;
    let e = from_text(&file, text, "quick", &[]).unwrap();
    let rep = &e.steps[1];
    assert_eq!(rep.command, "replay");
    // The shared settings a replay refuses (records) are not given to it; the
    // trace comes last, absolute.
    let trace = d.path().canonicalize().unwrap().join("t.csv");
    assert_eq!(
        rep.args,
        [
            "--store",
            "null",
            "--speed",
            "2",
            &trace.display().to_string()
        ]
    );
    assert!(matches!(&rep.job, Job::Replay { replay, .. } if replay.trace == trace));
    // The run step still gets them.
    assert!(e.steps[0].args.contains(&"--records".to_string()));
}
