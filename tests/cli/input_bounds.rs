//! Regression tests for the security review's F4 and F10 (input-validation panics and memory
//! bombs from tiny inputs): each input below panicked, aborted or allocated gigabytes on
//! 079f4ba. Now every one is one line naming the flag, exit 2, nothing created — or, for a
//! run directory, a report that finishes under a 1 GiB address-space limit.

use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::common;
use common::*;

/// Runs kvmeter with `args`; asserts exit 2, one line on stderr containing `needle`, no panic.
fn refused(args: &[&str], needle: &str) {
    let out = kvmeter()
        .args(args)
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: expected '{needle}' in: {err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
}

const RUN: &[&str] = &[
    "run",
    "--store",
    "null",
    "-P",
    "workloadc",
    "--records",
    "10",
];

fn run_with(extra: &[&str], needle: &str) {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    let mut args = RUN.to_vec();
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--out", out.to_str().unwrap()]);
    refused(&args, needle);
    assert!(!out.exists(), "{extra:?}: the run directory was created");
}

#[test]
fn durations_that_overflow_are_one_line_and_exit_2() {
    for d in ["1e20", "1e19", "18446744073709551615s", "NaN", "inf", "-5"] {
        run_with(&[&format!("--duration={d}")], &format!("--duration '{d}'"));
    }
    run_with(
        &["--interval", "18446744073709551616"],
        "--interval '18446744073709551616'",
    );
    run_with(
        &["--warmup", "1e300", "--duration", "1s"],
        "--warmup '1e300'",
    );
    run_with(
        &["-p", "maxexecutiontime=9223372036854775807"],
        "maxexecutiontime",
    );
}

#[test]
fn a_fault_at_an_overflowing_time_is_one_line() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("run");
    refused(
        &[
            "run",
            "--store",
            "redis",
            "-P",
            "workloadc",
            "--records",
            "10",
            "--duration",
            "10s",
            "--fault",
            "at=18446744073709551615,kill=primary",
            "--out",
            out.to_str().unwrap(),
        ],
        "--fault at '18446744073709551615'",
    );
    assert!(!out.exists());
}

#[test]
fn an_experiment_duration_that_overflows_is_one_line() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("x.toml");
    std::fs::write(
        &f,
        "[experiment]\nname = \"x\"\ntitle = \"x\"\n\n[settings]\nstore = \"null\"\nrecords = 10\nduration = \"18446744073709551615\"\n\n[[step]]\nname = \"one\"\ncommand = \"run\"\nworkload = \"workloadc\"\n",
    )
    .unwrap();
    refused(
        &["experiment", f.to_str().unwrap(), "--dry-run"],
        "18446744073709551615",
    );
}

#[test]
fn an_agent_wait_that_overflows_is_one_line() {
    refused(
        &[
            "agent",
            "--coord",
            "http://127.0.0.1:9",
            "--job",
            "j",
            "--index",
            "0",
            "--count",
            "1",
            "--wait",
            "1e20",
        ],
        "--wait '1e20'",
    );
}

#[test]
fn insertstart_at_recordcount_without_insertcount_is_one_line() {
    run_with(&["-p", "insertstart=10"], "insertstart");
    run_with(
        &[
            "-p",
            "insertstart=9223372036854775807",
            "-p",
            "insertcount=10",
        ],
        "insertstart",
    );
}

#[test]
fn cpu_ranges_are_bounded_before_they_are_expanded() {
    for spec in ["cpu:cpus=0-18446744073709551615", "cpu:cpus=0-100000000"] {
        run_with(&["--antagonist", spec, "--duration", "1s"], "cpus=");
    }
    // Found by the fuzzer: many specs each pinned to 65,536 CPUs cost 512 KiB apiece.
    let many: Vec<&str> = (0..65)
        .flat_map(|_| ["--antagonist", "cpu:cpus=0-65535"])
        .collect();
    run_with(&many, "--antagonist: 65 given; at most 64");
    refused(
        &[
            "run",
            "--store",
            "memcached",
            "--store-opt",
            "cpus=0-100000000",
            "-P",
            "workloadc",
        ],
        "--store-opt cpus=0-100000000",
    );
}

/// The review's 56-character histogram whose header declares a 4 GiB payload.
const BOMB: &str = "HISTE/////8AAAAAAAAAAwAAAAAAAAABAAAAAAAAAAI/8AAAAAAAAA==";

/// A size in MiB is shifted into bytes: 2^44 MiB and more wrapped to a garbage cache size,
/// and RocksDB and LevelDB opened with it. Every `_mb` option is bounded at 1 PiB.
#[test]
fn sizes_in_mib_that_would_wrap_are_one_line() {
    let t = tempfile::tempdir().unwrap();
    for (store, opt) in [
        ("rocksdb", "block_cache_mb"),
        ("rocksdb", "write_buffer_mb"),
        ("leveldb", "block_cache_mb"),
        ("lmdb", "map_size_mb"),
        ("sqlite", "mmap_mb"),
        ("wiredtiger", "cache_mb"),
        ("memcached", "memory_mb"),
        ("redis", "maxmemory_mb"),
        ("etcd", "quota_backend_mb"),
    ] {
        let out = t.path().join(format!("{store}-{opt}"));
        for v in ["17592186044416", "1073741825"] {
            let given = format!("{opt}={v}");
            refused(
                &[
                    "run",
                    "--store",
                    store,
                    "--store-opt",
                    &given,
                    "-P",
                    "workloadc",
                    "--records",
                    "10",
                    "--out",
                    out.to_str().unwrap(),
                ],
                &format!("--store-opt {given}: expected a size in MiB from "),
            );
            assert!(!out.exists(), "{given}: the run directory was created");
        }
    }
    // SQLite's page cache is a 32-bit count of KiB: 2 TiB is its limit, said as such.
    refused(
        &[
            "run",
            "--store",
            "sqlite",
            "--store-opt",
            "cache_mb=2097152",
            "-P",
            "workloadc",
            "--records",
            "10",
            "--out",
            t.path().join("sqlite-cache").to_str().unwrap(),
        ],
        "--store-opt cache_mb=2097152: expected at most 2097151 (SQLite's cache_size",
    );
}

/// `kvmeter report` under RLIMIT_AS 1 GiB: exit status, or the signal that ended it.
fn report_limited(dir: &Path) -> (Option<i32>, String) {
    let mut cmd = std::process::Command::new(bin());
    cmd.arg("report").arg(dir).env("NO_COLOR", "1");
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_histogram_bomb_in_a_run_directory_costs_no_memory() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run");
    kvmeter()
        .args(RUN)
        .args(["--ops", "2000", "--interval", "100ms", "--out"])
        .arg(&dir)
        .assert()
        .success();
    // The limit itself is not what fails: the clean directory reports under it.
    let (code, err) = report_limited(&dir);
    assert_eq!(code, Some(0), "{err}");
    let hlog = dir.join("latency/run.READ.hlog");
    let text = std::fs::read_to_string(&hlog).unwrap();
    let bombed: String = text
        .lines()
        .map(|l| match l.rsplit_once(',') {
            Some((head, _)) if !l.starts_with('#') && !l.starts_with('"') => {
                format!("{head},{BOMB}\n")
            }
            _ => format!("{l}\n"),
        })
        .collect();
    assert!(bombed.contains(BOMB), "no interval line in {text}");
    std::fs::write(&hlog, bombed).unwrap();
    let t0 = std::time::Instant::now();
    let (code, err) = report_limited(&dir);
    // 079f4ba: "memory allocation of 4294967295 bytes failed", SIGABRT (no exit code).
    assert!(code.is_some(), "killed by a signal: {err}");
    assert!(!err.contains("memory allocation"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(20));
}
