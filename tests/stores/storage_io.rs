//! The kernel's storage figures as a storage researcher reads them (the new-user trial of
//! 2026-11-29 found each of these misleading): RocksDB's space amplification without the
//! write-ahead log's reservation, a scan's bytes among those RocksDB read, figures per operation
//! over the same phase as the kernel's bytes when a warm-up is left out of the rest, and a
//! Redis told to persist measured like any store that keeps data on disk.

use crate::common::*;

#[test]
fn rocksdb_space_scans_and_a_warmup_read_as_they_should() {
    let r = run_ok(&[
        "run",
        "--store",
        "rocksdb",
        "-P",
        "workloade",
        "--records",
        "3000",
        "-p",
        "fieldcount=1",
        "-p",
        "fieldlength=1000",
        "--duration",
        "3s",
        "--warmup",
        "1s",
    ]);
    // 3,000 values of 1,006 bytes with their field name, in a 64 MiB memtable's log: RocksDB
    // reserves 70 MiB for the log up front, which made this 24.
    let load = &phase(&r.summary, "load")["storage_io"];
    let space = load["space_amplification"].as_f64().unwrap();
    assert!((0.9..2.0).contains(&space), "{load}");

    // Scans return whole records (key and value); RocksDB counts what its iterators returned.
    let run = phase(&r.summary, "run");
    let io = &run["storage_io"];
    let store_read = io["user_read_bytes"].as_u64().unwrap();
    let kvmeter_read = run["ops"]["SCAN"]["mb_per_s"].as_f64().unwrap()
        * run["measured_seconds"].as_f64().unwrap()
        * 1e6;
    assert!(
        store_read as f64 >= kvmeter_read,
        "{store_read} < {kvmeter_read}: {io}"
    );
    assert!(
        !io["read_amplification_source"]
            .as_str()
            .unwrap()
            .starts_with("none"),
        "{io}"
    );

    // The kernel's bytes cover the warm-up too: per operation they are divided by the warm-up's
    // operations as well, and the table says whose phase its store lines are.
    let ops = run["operations"].as_u64().unwrap();
    let warm = run["warmup_operations"].as_u64().unwrap();
    assert!(warm > 0 && ops > 0, "{run}");
    let device =
        io["write_bytes"].as_u64().unwrap() - io["cancelled_write_bytes"].as_u64().unwrap();
    let per_op = run["per_op"]["storage_write_bytes"].as_f64().unwrap();
    let want = device as f64 / (ops + warm) as f64;
    assert!((per_op - want).abs() <= want * 1e-9, "{per_op} {want}");
    assert!(
        r.stdout.contains(&format!(
            "(store and storage: the whole phase, the warm-up's {} operations included)",
            group(warm)
        )),
        "{}",
        r.stdout
    );
}

/// 1234567 → "1,234,567", as the table prints counts.
fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Redis keeps nothing on disk unless told to; told to keep an append-only file, its
/// process's writes are the store's, at least the values it was sent.
#[test]
fn a_managed_redis_with_an_append_only_file_has_storage_figures() {
    let r = run_ok(&[
        "run",
        "--store",
        "redis",
        "--store-opt",
        "persistence=aof",
        "-P",
        "workloada",
        "--records",
        "2000",
        "--ops",
        "2000",
    ]);
    let io = &phase(&r.summary, "load")["storage_io"];
    let written = io["write_bytes"].as_u64().unwrap_or_else(|| panic!("{io}"));
    let sent = io["kvmeter_write_bytes"].as_u64().unwrap();
    assert_eq!(sent, 2000 * 10 * (6 + 100), "{io}");
    assert!(written >= sent, "{io}");
    assert!(
        io["source"]
            .as_str()
            .unwrap()
            .contains("the server's process"),
        "{io}"
    );
}
