//! kvmeter's own CPU per operation (summary.json `kvmeter_cpu`, issue 16), checked against
//! what the run physically was: a closed loop keeps one worker busy for the whole measured
//! window, so its process spends at least most of that window on a CPU; a paced run sleeps
//! between operations, so it spends far less CPU per operation than time per operation.

use crate::common;
use common::*;

fn run_null(extra: &[&str]) -> serde_json::Value {
    let t = tempfile::tempdir().unwrap();
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
        ])
        .args(["--records", "1000", "--threads", "1", "--out"])
        .arg(&out)
        .args(extra)
        .assert()
        .success();
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    phase(&s, "run").clone()
}

fn cpu(run: &serde_json::Value) -> (f64, f64) {
    let c = &run["kvmeter_cpu"];
    let total = c["user_seconds"].as_f64().unwrap() + c["system_seconds"].as_f64().unwrap();
    (total, c["ns_per_op"].as_f64().unwrap())
}

/// Tests whose figures need kvmeter to get a CPU when it wants one (its CPU time, its pace, its
/// latency at a rate): `scripts/run-tests.sh` runs every `quiet` module after the other tests,
/// one test per CPU, as tests beside them would otherwise disturb what they measure.
mod quiet {
    use super::*;

    #[test]
    fn a_busy_closed_loop_costs_its_window_in_cpu() {
        let run = run_null(&["--duration", "2s", "--telemetry-interval", "0"]);
        let secs = run["measured_seconds"].as_f64().unwrap();
        let ops = run["operations"].as_f64().unwrap();
        let (total, per_op) = cpu(&run);
        // One worker never sleeps: at least 70 % of the window on a CPU (the machine is shared),
        // and no more than every CPU the process could use.
        let cpus = std::thread::available_parallelism().unwrap().get() as f64;
        assert!(total >= 0.7 * secs, "{total} s of CPU in a {secs} s window");
        assert!(
            total <= secs * cpus + 0.1,
            "{total} s of CPU in a {secs} s window"
        );
        assert!(
            (per_op * ops / 1e9 - total).abs() <= 1e-6 * total.max(1.0),
            "{per_op} ns × {ops} vs {total} s"
        );
    }

    #[test]
    fn a_paced_run_costs_far_less_cpu_than_its_time() {
        // 500 operations per second for 2 s: 2 ms apart, each costing microseconds.
        let run = run_null(&["--duration", "2s", "--target", "500"]);
        let ops = run["operations"].as_f64().unwrap();
        assert!((800.0..=1100.0).contains(&ops), "{ops} operations");
        let (_, per_op) = cpu(&run);
        let gap_ns = 1e9 / 500.0;
        assert!(
            per_op < gap_ns / 4.0,
            "{per_op} ns of CPU per op, {gap_ns} ns apart"
        );
    }
}
