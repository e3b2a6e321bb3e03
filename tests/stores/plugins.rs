//! Store plug-ins end to end (docs/plugins.md): the example LMDB plug-in and the test fixture,
//! built with the system C compiler, loaded by the real binary. The conformance suite runs
//! against the example in tests/stores/conformance.rs.

use crate::common;
use crate::plugin_build;

use common::{count, json, kvmeter, phase, sealed};

#[test]
fn stores_lists_what_the_library_says_of_itself() {
    let spec = plugin_build::lmdb_example();
    let o = kvmeter().args(["stores", &spec]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    // The names, defaults and version are those written in examples/plugins/kvm_lmdb.c.
    for want in [
        "lmdb-example LMDB 0.9.",
        "plug-in ABI 1",
        "--store-opt map_size_mb=16384",
        "--store-opt sync=full",
        "--store-opt max_readers=1024",
        "scan: yes, persistent: yes",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // Without arguments the built-in stores are listed, with a pointer to plug-ins.
    let o = kvmeter().arg("stores").output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("--store plugin:/path/libfoo.so"));
}

/// examples/plugins/Makefile from a copy elsewhere: without KVMETER_INCLUDE it stops before
/// compiling, in one line saying what to set; with it, it builds a library kvmeter loads
/// (every test here loads the example built that way: plugin_build::lmdb_example).
#[test]
fn the_example_makefile_builds_from_a_copy_given_kvmeter_include() {
    let t = tempfile::tempdir().unwrap();
    let copy = t.path().join("my-plugin");
    let (o, lib) = plugin_build::make_example_copy(&copy, None, "-O2");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "built without the header?\n{err}");
    assert!(err.contains("kvmeter_store.h not found"), "{err}");
    assert!(err.contains("set KVMETER_INCLUDE"), "{err}");
    assert!(!lib.exists());
    let include = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let (o, lib) = plugin_build::make_example_copy(&copy, Some(&include), "-O2 -Wall -Werror");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let spec = format!("plugin:{}", lib.display());
    let o = kvmeter().args(["stores", &spec]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("lmdb-example LMDB 0.9."));
}

#[test]
fn suite_runs_on_the_example_plugin_like_a_built_in_store() {
    let spec = plugin_build::lmdb_example();
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = kvmeter()
        .args(["run", "--store", &spec, "--store-opt", "sync=nosync"])
        .args(["-P", "workloads/workloada", "-p", "recordcount=2000"])
        .args(["-p", "operationcount=6000", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary = json(&out.join("summary.json"));
    assert_eq!(summary["status"], "completed");
    assert_eq!(count(phase(&summary, "load"), "INSERT"), 2000);
    let run = phase(&summary, "run");
    assert_eq!(count(run, "READ") + count(run, "UPDATE"), 6000);
    assert_eq!(run["ops"]["READ"]["errors"].as_u64().unwrap_or(0), 0);
    let m = json(&out.join("manifest.json"));
    assert_eq!(m["store"]["name"], spec.as_str());
    let version = m["store"]["version"].as_str().unwrap();
    assert!(version.starts_with("lmdb-example LMDB 0.9."), "{version}");
    assert_eq!(m["store"]["options"]["sync"], "nosync");
    // Data lands in the data directory kvmeter made and is removed with it.
    assert!(!std::path::Path::new(m["data_dir"]["path"].as_str().unwrap()).exists());
    assert!(out.join("report.html").exists());

    // Without --out the run directory is named after the library, not its path.
    let o = kvmeter()
        .current_dir(t.path())
        .args([
            "run",
            "--store",
            &spec,
            "--phase",
            "load",
            "-p",
            "recordcount=10",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let runs: Vec<String> = std::fs::read_dir(t.path().join("kvmeter-runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs[0].contains("-run-plugin-kvm_lmdb"), "{runs:?}");
}

/// The example's statistics are LMDB's own accounting, sampled through the optional ABI call:
/// loading 3,000 records and inserting 2,000 more (a write transaction each) leaves 5,000
/// entries. The same library built as a plug-in from before the calls runs the suite and says
/// it reports no statistics.
#[test]
fn the_example_plugins_statistics_are_lmdbs_own_and_an_older_plugin_still_runs() {
    let t = tempfile::tempdir().unwrap();
    let job = |spec: &str, out: &std::path::Path| {
        let o = kvmeter()
            .args(["run", "--store", spec, "--store-opt", "sync=nosync"])
            .args(["-P", "workloads/workloada", "-p", "recordcount=3000"])
            .args(["-p", "operationcount=2000", "-p", "readproportion=0"])
            .args(["-p", "updateproportion=0", "-p", "insertproportion=1"])
            .arg("--data-dir")
            .arg(t.path().join("data"))
            .arg("--out")
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let _ = std::fs::remove_dir_all(t.path().join("data"));
        json(&out.join("summary.json"))
    };
    let spec = plugin_build::lmdb_example();
    let s = job(&spec, &t.path().join("with"));
    let stat = |p: &str, name: &str, field: &str| {
        phase(&s, p)["store_stats"]["stats"][name][field].clone()
    };
    assert_eq!(stat("load", "write_txns", "increase"), 3000);
    assert_eq!(stat("load", "entries", "end"), 3000);
    assert_eq!(stat("run", "write_txns", "increase"), 2000);
    assert_eq!(stat("run", "entries", "end"), 5000);
    assert_eq!(stat("run", "write_txns", "unit"), "count");
    let csv = std::fs::read_to_string(t.path().join("with/store_stats.csv")).unwrap();
    assert!(
        csv.starts_with("phase,t_s,unix_us,write_txns,entries,depth,tree_bytes,map_used_bytes\n"),
        "{csv}"
    );
    // Write amplification of a plug-in: the kernel's bytes over those kvmeter sent.
    let io = &phase(&s, "load")["storage_io"];
    assert_eq!(io["user_write_bytes"], 3000 * 10 * (6 + 100), "{io}");
    let o = kvmeter().args(["stores", &spec]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("statistics (store_stats.csv): write_txns, entries, depth"),
        "{text}"
    );

    // The older plug-in runs the whole suite (Load A through Run E) without statistics.
    let older = plugin_build::lmdb_example_without_stats();
    let o = kvmeter()
        .args(["suite", "--store", &older, "--store-opt", "sync=nosync"])
        .args(["-p", "recordcount=500", "-p", "operationcount=500", "--out"])
        .arg(t.path().join("older"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&t.path().join("older/summary.json"));
    assert_eq!(s["status"], "completed");
    let phases = s["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 9, "{s}");
    assert_eq!(count(phase(&s, "load-a"), "INSERT"), 500);
    assert!(phases.iter().all(|p| p.get("store_stats").is_none()), "{s}");
    assert!(!t.path().join("older/store_stats.csv").exists());
    let o = kvmeter().args(["stores", &older]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("statistics: none (the plug-in exports no kvmeter_store_stats"),
        "{text}"
    );
}

#[test]
fn bad_plugins_are_one_line_and_exit_2_before_anything_is_created() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("never");
    let not_elf = t.path().join("libnot.so");
    std::fs::write(&not_elf, "not a library").unwrap();
    let example = plugin_build::lmdb_example();
    let cases: Vec<(String, Vec<&str>, String)> = vec![
        (
            "plugin:/nonexistent/libnothing.so".into(),
            vec![],
            "no such file '/nonexistent/libnothing.so'".into(),
        ),
        (
            format!("plugin:{}", not_elf.display()),
            vec![],
            "cannot load the library".into(),
        ),
        (
            plugin_build::fixture("noentry", &["-DFIXTURE_NO_ENTRY"]),
            vec![],
            "has no function 'kvmeter_store_plugin'".into(),
        ),
        (
            plugin_build::fixture("abi99", &["-DFIXTURE_ABI=99"]),
            vec![],
            "built against kvmeter store ABI version 99; this kvmeter loads version 1".into(),
        ),
        (
            plugin_build::fixture("noread", &["-DFIXTURE_NO_READ"]),
            vec![],
            "has no 'read' (NULL)".into(),
        ),
        (
            plugin_build::fixture("partial", &["-DFIXTURE_PARTIAL_WITHOUT_UPDATE"]),
            vec![],
            "has no 'update (the plug-in declares KVM_CAP_PARTIAL_UPDATE)' (NULL)".into(),
        ),
        (
            plugin_build::fixture("halfstats", &["-DFIXTURE_HALF_STATS"]),
            vec![],
            "exports only one of kvmeter_store_stats_declared and kvmeter_store_stats".into(),
        ),
        (
            plugin_build::fixture("badstat", &["-DFIXTURE_BAD_STAT"]),
            vec![],
            "statistic 'calls': unit 'furlongs': expected one of count, bytes".into(),
        ),
        (
            plugin_build::fixture("badrole", &["-DFIXTURE_BAD_ROLE"]),
            vec![],
            "statistic 'calls': role KVM_ROLE_UNWRITTEN: expected a gauge in bytes".into(),
        ),
        (
            plugin_build::fixture("plain", &[]),
            vec!["--store-opt", "reject=yes"],
            "plug-in 'fixture' refused its options: reject=yes: this fixture refuses it".into(),
        ),
        (
            example.clone(),
            vec!["--store-opt", "cache=1"],
            "--store-opt 'cache': unknown option for store".into(),
        ),
        (
            example,
            vec!["--store-opt", "map_size_mb=0"],
            "map_size_mb=0: expected a whole number >= 1".into(),
        ),
    ];
    for (spec, extra, want) in cases {
        let o = kvmeter()
            .args(["run", "--store", &spec])
            .args(&extra)
            .args(["-p", "recordcount=10", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{spec} {extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{spec}: {err}");
        assert!(err.contains(&want), "{spec}: want {want:?}, got {err}");
        assert!(!out.exists(), "{spec}: a run directory was created");
    }
}

/// A plug-in that segfaults mid-run: kvmeter dies of the signal (nothing can go on in a
/// process whose memory a plug-in broke), the run directory keeps every interval completed
/// before it, crash.txt says what happened, and the report shows it.
#[test]
fn a_crashing_plugin_leaves_its_completed_intervals_and_says_what_happened() {
    use std::os::unix::process::ExitStatusExt;
    let spec = plugin_build::fixture("crash", &[]);
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let o = std::process::Command::new(common::bin())
        .args([
            "run",
            "--store",
            &spec,
            "--store-opt",
            "crash_after_ms=1500",
        ])
        .args(["-P", "workloads/workloadc", "-p", "recordcount=100"])
        .args([
            "--target",
            "2000",
            "--duration",
            "10s",
            "--interval",
            "250ms",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGSEGV),
        "{:?} {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let crash = std::fs::read_to_string(out.join("crash.txt")).unwrap();
    assert!(
        crash.contains("signal: SIGSEGV (invalid memory access) at address 0x0"),
        "{crash}"
    );
    assert!(crash.contains(&spec), "{crash}");
    // The crash came 1.5 s after open (the load took milliseconds): the run phase's intervals
    // of 250 ms before it are on disk, at 2,000 ops/s each about 500 operations.
    let intervals = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    let reads: Vec<u64> = intervals
        .lines()
        .filter(|l| l.starts_with("run,") && l.contains(",READ,"))
        .map(|l| l.split(',').nth(6).unwrap().parse().unwrap())
        .collect();
    assert!(reads.len() >= 4, "{intervals}");
    let total: u64 = reads.iter().sum();
    assert!((1500..=3200).contains(&total), "{total} reads in {reads:?}");
    // The guard process marks what the crashed process could not, with the signal.
    let m = sealed(&out.join("manifest.json"));
    assert_eq!(m["status"], "failed");
    let s = json(&out.join("summary.json"));
    assert!(
        s["error"].as_str().unwrap_or_default().contains("SIGSEGV"),
        "{}",
        s["error"]
    );
    // The report is made from what is there and names the signal.
    let o = kvmeter().arg("report").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("SIGSEGV"),
        "the report does not say what happened"
    );
}
