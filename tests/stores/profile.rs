//! `--profile` end to end (issue 44), with the truth planted by the test: the example LMDB
//! plug-in built with a named busy loop in its read path, a managed memcached whose own code
//! must show under `server`, perf hidden, and costs per operation that add up.

use crate::common;
use crate::plugin_build;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// A folded file's stacks: (stack, samples), summed by the test from the file itself.
fn folded(path: &Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap();
            (stack.to_string(), n.parse().unwrap())
        })
        .collect()
}

fn group<'a>(run: &'a Value, name: &str) -> &'a Value {
    &run["telemetry"]["profile"]["groups"][name]
}

/// The samples a phase's busy workers must at least have: half of the 99 a second of CPU the
/// kernel gave them (per-thread clock ticks, from the telemetry), and 20 in all. A floor on the
/// wall clock fails when the host is shared: a null-store run of 2 s had 199 harness samples
/// alone and 56 beside six busy loops on the 2 CPUs, with 52 expected from its CPU time.
fn enough_for(run: &Value) -> u64 {
    let ops = run["operations"].as_f64().unwrap();
    let us = run["per_op"]["cpu_us_by_thread_group"]["kvm-worker"]
        .as_f64()
        .unwrap();
    ((0.5 * us * ops / 1e6 * 99.0) as u64).max(20)
}

/// A read-only phase on the plug-in with the busy loop: `kvm_lmdb_busy_read` is the store
/// foreground's top function, with most of its samples — counted by the test from the folded
/// file, whose counts add up to the summary's.
fn busy_loop_run(spec: &str) -> common::RunOk {
    common::run_ok(&[
        "run",
        "--store",
        spec,
        "--store-opt",
        "sync=nosync",
        "-P",
        "workloadc",
        "--records",
        "2000",
        "--threads",
        "1",
        "--duration",
        "3s",
        "--profile",
        "--interval",
        "200ms",
    ])
}

/// perf missing: the run completes, one line says why, and the summary says the same.
#[test]
fn without_perf_the_run_goes_on_and_says_why_once() {
    let r = common::run_ok_with(
        &[
            "run",
            "--store",
            "null",
            "-P",
            "workloadc",
            "--records",
            "100",
            "--ops",
            "2000",
            "--profile",
        ],
        &[("KVMETER_PERF", "/nonexistent/perf")],
    );
    let lines: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("--profile"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(
        lines[0].contains("unavailable: no `/nonexistent/perf` program"),
        "{}",
        lines[0]
    );
    for p in ["load", "run"] {
        let why = common::phase(&r.summary, p)["telemetry"]["unavailable"]["profile"]
            .as_str()
            .unwrap();
        assert!(
            why.starts_with("unavailable: no `/nonexistent/perf`"),
            "{why}"
        );
    }
    assert!(!r.out.join("profile").exists());
    // A perf that refuses (exits at once): its exit said, the run complete.
    let r = common::run_ok_with(
        &[
            "run",
            "--store",
            "null",
            "--phase",
            "load",
            "--records",
            "100",
            "--profile",
        ],
        &[("KVMETER_PERF", "/bin/false")],
    );
    assert!(r.stderr.contains("perf record exited"), "{}", r.stderr);
    assert_eq!(r.summary["status"], "completed");
}

/// CPU per operation by thread group adds up to the process's CPU per operation, which agrees
/// with kvmeter's own getrusage figure over the same phase.
#[test]
fn cpu_per_operation_by_thread_group_adds_up_to_the_process() {
    let r = common::run_ok(&[
        "run",
        "--store",
        "rocksdb",
        // 1 MiB memtables: flushes (the rocksdb:high thread) in the run phase however few
        // operations a loaded host completes in it (one CI-like run had none at 64 MiB).
        "--store-opt",
        "write_buffer_mb=1",
        "-P",
        "workloada",
        "--records",
        "5000",
        "--threads",
        "2",
        "--duration",
        "2s",
    ]);
    let run = common::phase(&r.summary, "run");
    let c = &run["per_op"];
    let total = c["cpu_us"].as_f64().unwrap();
    let by: HashMap<String, f64> = c["cpu_us_by_thread_group"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
        .collect();
    assert!(by.contains_key("kvm-worker"), "{by:?}");
    assert!(by.contains_key("rocksdb:high"), "{by:?}");
    let sum: f64 = by.values().sum();
    assert!((sum - total).abs() <= total * 1e-9, "{sum} vs {total}");
    // What ended between samples (the workers at the phase's end) is small and named.
    assert!(
        by.get("unattributed").copied().unwrap_or(0.0) <= total * 0.1,
        "{by:?}"
    );
    // The telemetry's process CPU over its window, divided by the test.
    let t = &run["telemetry"];
    let ops = run["operations"].as_f64().unwrap();
    let cpu_s = t["process"]["cpu_pct"].as_f64().unwrap() / 100.0 * t["seconds"].as_f64().unwrap();
    assert!((cpu_s / ops * 1e6 - total).abs() < 1e-6 * total.max(1.0));
    // getrusage's figure over the measured window: clock ticks of 10 ms apart at most.
    let rusage_us = run["kvmeter_cpu"]["ns_per_op"].as_f64().unwrap() / 1000.0;
    let slack = 0.05 * rusage_us + 2.0 * 0.01 / ops * 1e6;
    assert!(
        (rusage_us - total).abs() <= slack,
        "rusage {rusage_us} µs, telemetry {total} µs"
    );
    assert!(c["context_switches"].as_f64().unwrap() > 0.0);
    assert!(r.stdout.contains("per op   CPU"), "{}", r.stdout);
}

/// Context switches per operation count every thread, kvmeter's and the server's: with
/// replies waited for in a blocking read, each operation's worker sleeps at least once, and
/// so does one of memcached's worker threads. /proc/PID/status, which counts the first thread
/// only, gave 0.0009 for kvmeter and 0 for memcached (its first thread only listens).
#[test]
fn context_switches_count_every_thread_of_kvmeter_and_of_the_server() {
    let r = common::run_ok(&[
        "run",
        "--store",
        "memcached",
        "--store-opt",
        "reply_wait=block",
        "-P",
        "workloadc",
        "--records",
        "2000",
        "--ops",
        "100000",
        "--threads",
        "2",
    ]);
    let c = &common::phase(&r.summary, "run")["per_op"];
    let own = c["context_switches"].as_f64().unwrap();
    let server = c["server_context_switches"].as_f64().unwrap();
    assert!((0.5..20.0).contains(&own), "kvmeter: {own} per op");
    assert!((0.5..20.0).contains(&server), "server: {server} per op");
}

/// Tests whose figures need the profiled process to get a CPU when it wants one (a number of
/// samples at 99 Hz: memcached's own code had 49 of at least 50 in 3 s with three tests beside it
/// in CI): `scripts/run-tests.sh` runs every `quiet` module after the other tests, one test per
/// CPU.
mod quiet {
    use super::*;

    #[test]
    fn a_busy_loop_in_the_plugins_read_path_holds_the_store_samples_and_compare_shows_it() {
        let busy = busy_loop_run(&plugin_build::lmdb_example_busy_read());
        let run = common::phase(&busy.summary, "run");
        let fg = group(run, "store-foreground");
        let samples = fg["samples"].as_u64().unwrap();
        // The worker runs the loop whenever it has a CPU, so its samples follow the CPU time
        // the kernel gave it, not the wall clock: alone, 287 expected and 297 sampled; beside
        // six busy loops on the 2 CPUs, 83 expected and 65 sampled (a timer restarted each
        // time the thread is put back on a CPU loses part of a period). In CI, beside another
        // quiet test on a shared host, 3 s once gave it too little CPU for the fixed floor of
        // 100 this had.
        assert!(
            samples >= enough_for(run),
            "{samples}: {}",
            run["telemetry"]["profile"]
        );
        let stacks = folded(&busy.out.join("profile/run.store-foreground.folded"));
        assert_eq!(stacks.iter().map(|s| s.1).sum::<u64>(), samples);
        let in_loop: u64 = stacks
            .iter()
            .filter(|(s, _)| s.ends_with(";kvm_lmdb_busy_read"))
            .map(|s| s.1)
            .sum();
        assert!(in_loop * 2 > samples, "{in_loop} of {samples}");
        assert!(stacks.iter().all(|(s, _)| s.starts_with("kvm-worker;")));
        assert_eq!(fg["top"][0]["function"], "kvm_lmdb_busy_read");
        let pct = fg["top"][0]["self_pct"].as_f64().unwrap();
        assert!((pct - in_loop as f64 / samples as f64 * 100.0).abs() < 1e-9);
        let svg =
            std::fs::read_to_string(busy.out.join("profile/run.store-foreground.svg")).unwrap();
        assert!(svg.contains("kvm_lmdb_busy_read"));
        // The terminal and report.html say it too.
        assert!(busy.stdout.contains("store-foreground"), "{}", busy.stdout);
        assert!(
            busy.stdout.contains("kvm_lmdb_busy_read"),
            "{}",
            busy.stdout
        );
        let html = std::fs::read_to_string(busy.out.join("report.html")).unwrap();
        assert!(html.contains("data-table=\"profile-run\""));
        // Per time slice (the 200 ms intervals): each group's `[all]` rows add up to its samples,
        // and report.html sets the worst intervals beside the whole phase.
        let slices = std::fs::read_to_string(busy.out.join("profile/run.slices.csv")).unwrap();
        let mut rows = slices.lines();
        assert_eq!(rows.next(), Some("start_s,end_s,group,function,samples"));
        let in_slices: u64 = rows
            .filter(|r| r.contains(",store-foreground,[all],"))
            .map(|r| r.rsplit(',').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(in_slices, samples);
        assert!(
            html.contains("data-table=\"profile-worst-run\""),
            "no worst-interval table"
        );

        // The same run without the loop, and compare B (no loop) against A (the loop).
        let plain = busy_loop_run(&plugin_build::lmdb_example());
        let out = busy.tmp.path().join("cmp");
        let o = common::kvmeter()
            .arg("compare")
            .arg(&busy.out)
            .arg("--vs")
            .arg(&plain.out)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(out
            .join("profile-diff/run.store-foreground.b.svg")
            .is_file());
        let diff =
            std::fs::read_to_string(out.join("profile-diff/run.store-foreground.a.svg")).unwrap();
        // On A's stacks, each frame carries the change of its share in B: the loop's is negative.
        let frame = diff
            .split("<title>")
            .find(|t| t.starts_with("kvm_lmdb_busy_read"))
            .unwrap_or_else(|| panic!("no busy-loop frame in the differential graph"));
        let change = frame.split("; ").nth(1).unwrap();
        assert!(change.starts_with('-'), "{frame}");
    }

    /// As root the profile samples every CPU and keeps kvmeter's own samples; as a user without
    /// permission for that (perf_event_paranoid 2 here) it attaches to kvmeter's threads and still
    /// has their user-space stacks. Root is needed to run as another user (CI runs as root).
    #[test]
    fn the_scope_follows_the_permission() {
        let r = common::run_ok(&[
            "run",
            "--store",
            "null",
            "-P",
            "workloadc",
            "--records",
            "1000",
            "--duration",
            "2s",
            "--profile",
        ]);
        let run = common::phase(&r.summary, "run");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert_eq!(run["telemetry"]["profile"]["scope"], "threads");
            return;
        }
        assert_eq!(run["telemetry"]["profile"]["scope"], "system-wide");
        let harness = group(run, "harness")["samples"].as_u64().unwrap();
        assert!(
            harness >= enough_for(run),
            "{harness}: {}",
            run["telemetry"]["profile"]
        );
        let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        if paranoid <= 0 {
            return; // every user may sample every CPU here
        }
        // The binary copied where `nobody` can run it, the run directory in a directory it owns.
        let dir = r.tmp.path().join("nobody");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let bin = dir.join("kvmeter");
        std::fs::copy(common::bin(), &bin).unwrap();
        std::fs::set_permissions(
            r.tmp.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let out = dir.join("run");
        let o = std::process::Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(&bin)
            .args([
                "run",
                "--store",
                "null",
                "-P",
                "workloadc",
                "--records",
                "1000",
            ])
            .args(["--duration", "2s", "--profile", "--out"])
            .arg(&out)
            .env("HOME", &dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s = common::json(&out.join("summary.json"));
        let run = common::phase(&s, "run");
        assert_eq!(run["telemetry"]["profile"]["scope"], "threads");
        let harness = folded(&out.join("profile/run.harness.folded"));
        assert!(
            harness.iter().map(|h| h.1).sum::<u64>() >= enough_for(run),
            "{harness:?}"
        );
    }

    /// A managed memcached under the engine: samples in memcached's own (stripped) code are the
    /// `server` group's, and the harness group holds kvmeter's event loop.
    #[test]
    fn a_managed_memcached_profile_has_the_server_and_the_event_loop() {
        let r = common::run_ok(&[
            "run",
            "--store",
            "memcached",
            "-P",
            "workloadc",
            "--records",
            "2000",
            "--connections",
            "8",
            "--threads",
            "1",
            "--duration",
            "3s",
            "--profile",
        ]);
        let run = common::phase(&r.summary, "run");
        // At least 30 % of the 99 a second of the CPU memcached had (its threads' clock ticks):
        // alone, 184 of 286 expected; beside six busy loops on the 2 CPUs, 33 of 58 (part of
        // its kernel time is loopback delivery, which perf charges to the sender).
        let server = group(run, "server")["samples"].as_u64().unwrap();
        let server_cpu_s = run["per_op"]["server_cpu_us"].as_f64().unwrap()
            * run["operations"].as_f64().unwrap()
            / 1e6;
        assert!(
            server >= ((0.3 * server_cpu_s * 99.0) as u64).max(15),
            "{server} for {server_cpu_s:.2} s of CPU: {}",
            run["telemetry"]["profile"]
        );
        let stacks = folded(&r.out.join("profile/run.server.folded"));
        let own: u64 = stacks
            .iter()
            .filter(|(s, _)| s.contains(";[memcached]"))
            .map(|s| s.1)
            .sum();
        assert!(own > 0, "{stacks:?}");
        assert!(stacks
            .iter()
            .all(|(s, _)| s.starts_with("memcached") || s.starts_with("mc-")));
        let harness = folded(&r.out.join("profile/run.harness.folded"));
        assert!(
            harness.iter().any(|(s, _)| s.starts_with("kvm-loop;")),
            "{harness:?}"
        );
        // Nothing of the server's is charged to kvmeter's groups.
        for g in ["harness", "store-foreground"] {
            let p = r.out.join(format!("profile/run.{g}.folded"));
            if p.exists() {
                assert!(folded(&p).iter().all(|(s, _)| !s.contains("[memcached]")));
            }
        }
    }

    /// A user's own memcached on loopback (`addr=`): found through the kernel's socket tables and
    /// profiled as `server`, like a managed one.
    #[test]
    fn a_users_own_server_on_this_host_is_profiled_too() {
        let (mc, port) = common::servers::Launch::memcached().start();
        let addr = format!("addr=127.0.0.1:{port}");
        let r = common::run_ok(&[
            "run",
            "--store",
            "memcached",
            "--store-opt",
            &addr,
            "-P",
            "workloadc",
            "--records",
            "2000",
            "--connections",
            "8",
            "--threads",
            "1",
            "--duration",
            "3s",
            "--profile",
        ]);
        let run = common::phase(&r.summary, "run");
        // Not its CPU time: a user's own server is not one kvmeter's telemetry reads. 295
        // samples alone here; 20 says it was found and sampled on a host shared with others.
        assert!(
            group(run, "server")["samples"].as_u64().unwrap() >= 20,
            "{}",
            r.stderr
        );
        let stacks = folded(&r.out.join("profile/run.server.folded"));
        assert!(
            stacks.iter().any(|(s, _)| s.contains(";[memcached]")),
            "{stacks:?}"
        );
        assert!(!r.stderr.contains("not profiled"), "{}", r.stderr);
        drop(mc);
    }
}
