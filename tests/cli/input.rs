//! Bad input (one line, exit 2, nothing created), what kvmeter never overwrites or deletes,
//! and `kvmeter stores`.

use super::*;

#[test]
fn bad_input_is_one_clear_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--store", "null", "-p", "bogus=1"],
            "unknown property 'bogus'",
        ),
        (
            &["run", "--store", "null", "-p", "readproportion=0.3"],
            "add up to 0.35",
        ),
        (&["run", "--store", "null", "--records", "0"], "--records 0"),
        (&["run", "--store", "null", "--ops", "-5"], "--ops -5"),
        (
            &["run", "--store", "null", "-P", "/no/such/file"],
            "-P /no/such/file: cannot read",
        ),
        (
            &["run", "--store", "nosuch"],
            "--store 'nosuch': unknown store",
        ),
        (
            &["run", "--store", "null", "--store-opt", "x=1"],
            "unknown option for store 'null'",
        ),
        #[cfg(feature = "rocksdb")]
        (
            &[
                "run",
                "--store",
                "rocksdb",
                "--store-opt",
                "compression=gzip",
            ],
            "compression=gzip",
        ),
        #[cfg(feature = "rocksdb")]
        (
            &[
                "run",
                "--store",
                "rocksdb",
                "--store-opt",
                "block_cache=clock",
            ],
            "block_cache=clock",
        ),
        #[cfg(feature = "rocksdb")]
        (
            &[
                "run",
                "--store",
                "rocksdb",
                "--store-opt",
                "statistics=basic",
                "--store-opt",
                "statistics=timers",
            ],
            "--store-opt statistics: given twice (basic, then timers); give it once",
        ),
        (
            &["run", "--store", "null", "--duration", "abc"],
            "--duration 'abc'",
        ),
        (&["run", "--store", "null", "--target", "-3"], "--target -3"),
        (&["run", "--no-such-flag"], "--no-such-flag"),
    ];
    for (args, needle) in cases {
        let (code, err) = stderr_of(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
    }
}

#[test]
fn never_overwrites_or_deletes_what_it_does_not_own() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("taken");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("summary.json"), "mine").unwrap();
    let (code, err) = stderr_of(&["run", "--store", "null", "--out", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not empty"), "{err}");
    assert_eq!(
        std::fs::read_to_string(out.join("summary.json")).unwrap(),
        "mine"
    );

    let data = t.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("precious"), "x").unwrap();
    let (code, err) = stderr_of(&[
        "run",
        "--store",
        "null",
        "--data-dir",
        data.to_str().unwrap(),
        "--out",
        t.path().join("o").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("did not create"), "{err}");
    assert!(data.join("precious").is_file());
    assert!(
        !t.path().join("o").exists(),
        "nothing is created before the input is accepted"
    );

    let (code, err) = stderr_of(&[
        "run",
        "--store",
        "null",
        "--out",
        "/proc/kvmeter-cannot-write",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--out /proc/kvmeter-cannot-write"), "{err}");
}

#[test]
fn stores_lists_each_store_and_options() {
    let o = kvmeter().arg("stores").output().unwrap();
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("null"));
    #[cfg(feature = "rocksdb")]
    {
        assert!(text.contains("rocksdb"));
        assert!(text.contains("usable here"));
        assert!(text.contains("--store-opt block_cache_mb=64"));
    }
}

/// The suite's own warm-up is named as its default, not as a `--warmup 2s` the user never
/// typed (issue 40 item 11).
#[test]
fn the_suites_default_warmup_is_not_called_a_flag() {
    let (code, err) = stderr_of(&["suite", "--store", "null", "--duration", "1s"]);
    assert_eq!(code, 2, "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("the suite's default warm-up (2s; set it with --warmup)"),
        "{err}"
    );
    assert!(!err.contains("--warmup 2s"), "{err}");
}

/// With `addr=` the server is the user's own: an option that only sets up a server kvmeter
/// starts would configure nothing, so it is refused by name, before anything is created —
/// for a run and for the durability check alike. (The manifest side: stores/runs.rs
/// `a_users_own_memcached_via_addr`.)
#[test]
fn a_managed_servers_option_with_the_users_own_server_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("never");
    let out = out.to_str().unwrap();
    let cases = [
        ("memcached", "memory_mb=64"),
        ("memcached", "threads=8"),
        ("memcached", "cpus=0"),
        ("redis", "maxmemory_mb=5"),
        ("redis", "persistence=aof"),
        ("redis", "node_timeout_ms=500"),
        ("etcd", "quota_backend_mb=64"),
        ("etcd", "members=1"),
    ];
    for (store, opt) in cases {
        for command in ["run", "durability"] {
            let args = [command, "--store", store, "--store-opt", "addr=127.0.0.1:9"];
            let args = [&args[..], &["--store-opt", opt, "--out", out]].concat();
            let (code, err) = stderr_of(&args);
            assert_eq!(code, 2, "{args:?}: {err}");
            let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
            assert_eq!(lines.len(), 1, "{args:?}: {err}");
            assert!(
                lines[0].contains(&format!("--store-opt {opt}: sets up a server kvmeter starts, but addr=127.0.0.1:9 is your own")),
                "{args:?}: {err}"
            );
            assert!(!t.path().join("never").exists(), "{args:?}");
        }
    }
    // The same options without addr= are a managed server's settings and pass this check (the
    // run then fails only because --out names a file here, which proves the order).
    std::fs::write(t.path().join("file"), "x").unwrap();
    let file = t.path().join("file");
    let (code, err) = stderr_of(&[
        "run",
        "--store",
        "memcached",
        "--store-opt",
        "memory_mb=64",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("sets up a server"), "{err}");
    assert!(err.contains("--out "), "{err}");
}
