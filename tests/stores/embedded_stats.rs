//! LMDB's, SQLite's and LevelDB's own statistics (issue 43), each against a truth the test
//! computes or reads from the store itself after the run: the records it asked for, the
//! database file's own pages, the table files in LevelDB's directory.

use crate::common::*;
use serde_json::Value;
use std::path::Path;

fn run(store: &str, data: &Path, out: &Path, args: &[&str]) -> Value {
    let o = kvmeter()
        .args(["run", "-P", "workloada", "--store", store])
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&out.join("summary.json"));
    validate("summary.schema.json", &s);
    s
}

fn stat<'a>(s: &'a Value, phase_name: &str, name: &str) -> &'a Value {
    &phase(s, phase_name)["store_stats"]["stats"][name]
}

/// The last row of store_stats.csv: each column by name.
fn last_row(out: &Path) -> std::collections::BTreeMap<String, String> {
    let csv = std::fs::read_to_string(out.join("store_stats.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    let last = lines.last().unwrap();
    header
        .into_iter()
        .zip(last.split(',').map(String::from))
        .collect()
}

/// LMDB commits each write in a transaction of its own: loading 3,000 records and then
/// inserting 2,000 more leaves 5,000 entries, and each phase's write transactions are its
/// writes.
#[test]
fn lmdb_counts_its_entries_and_write_transactions() {
    let t = tempfile::tempdir().unwrap();
    let (data, out) = (t.path().join("data"), t.path().join("run"));
    let s = run(
        "lmdb",
        &data,
        &out,
        &[
            "--records",
            "3000",
            "-p",
            "operationcount=2000",
            "-p",
            "readproportion=0",
            "-p",
            "updateproportion=0",
            "-p",
            "insertproportion=1",
            "--store-opt",
            "sync=nosync",
        ],
    );
    assert_eq!(stat(&s, "load", "write_txns")["increase"], 3000);
    assert_eq!(stat(&s, "load", "entries")["end"], 3000);
    assert_eq!(stat(&s, "run", "write_txns")["increase"], 2000);
    assert_eq!(stat(&s, "run", "entries")["end"], 5000);
    let tree = stat(&s, "run", "tree_bytes")["end"].as_u64().unwrap();
    let used = stat(&s, "run", "map_used_bytes")["end"].as_u64().unwrap();
    // The tree is within the map's used pages, and the data file holds at least them.
    assert!(tree > 0 && tree <= used, "{tree} {used}");
    let file = std::fs::metadata(data.join("store/data.mdb"))
        .unwrap()
        .len();
    assert!(used <= file, "{used} > {file}");
    // LMDB counts no user bytes: the write amplification is the kernel's bytes over those
    // kvmeter sent, 3,000 records of YCSB's ten fields "field0".."field9" of 100 bytes.
    let io = &phase(&s, "load")["storage_io"];
    assert_eq!(io["user_write_bytes"], 3000 * 10 * (6 + 100), "{io}");
    let source = io["write_amplification_source"].as_str().unwrap();
    assert!(
        source.starts_with(
            "kernel's storage bytes written, less those deleted before writeback / kvmeter's bytes written"
        ),
        "{io}"
    );
    assert!(io["write_amplification"].as_f64().unwrap() > 0.0, "{io}");
}

/// Space amplification after a load into an empty store is the data directory's size on disk
/// (each file's allocated blocks, at most its length), as the test measures it after the run, over the values loaded (2,000 records of ten
/// "fieldN" names and 100-byte values); a second load into the same directory has none.
#[test]
fn lmdb_space_amplification_is_its_files_over_the_values_loaded() {
    let t = tempfile::tempdir().unwrap();
    let data = t.path().join("data");
    let load = |out: &str| {
        run(
            "lmdb",
            &data,
            &t.path().join(out),
            &[
                "--phase",
                "load",
                "--records",
                "2000",
                "--store-opt",
                "sync=full",
            ],
        )
    };
    let s = load("first");
    let mut blocks = 0u64;
    for e in std::fs::read_dir(data.join("store")).unwrap() {
        use std::os::unix::fs::MetadataExt;
        let m = e.unwrap().metadata().unwrap();
        blocks += (m.blocks() * 512).min(m.len());
    }
    let io = &phase(&s, "load")["storage_io"];
    assert_eq!(io["on_disk_bytes"], blocks, "{io}");
    let want = blocks as f64 / (2000 * 10 * (6 + 100)) as f64;
    let got = io["space_amplification"].as_f64().unwrap();
    assert!((got - want).abs() < 1e-9, "{got} {want} {io}");
    let s = load("second");
    let io = &phase(&s, "load")["storage_io"];
    assert!(io["space_amplification"].is_null(), "{io}");
    assert_eq!(
        io["space_amplification_source"],
        "unavailable: the data directory held a store before this run"
    );
}

/// SQLite's pages as the sampler saw them when the last phase's workers stopped are the
/// database's own pages, read by the test on a connection of its own after the run.
#[test]
fn sqlite_pages_are_the_databases_own() {
    let t = tempfile::tempdir().unwrap();
    let (data, out) = (t.path().join("data"), t.path().join("run"));
    let s = run(
        "sqlite",
        &data,
        &out,
        &["--records", "3000", "-p", "operationcount=1000"],
    );
    let c = rusqlite::Connection::open(data.join("store/kvmeter.sqlite")).unwrap();
    let pragma = |p: &str| -> u64 {
        c.query_row(&format!("PRAGMA {p}"), [], |r| r.get::<_, i64>(0))
            .unwrap() as u64
    };
    let row = last_row(&out);
    assert_eq!(row["phase"], "run");
    assert_eq!(row["pages"], pragma("page_count").to_string(), "{row:?}");
    assert_eq!(row["free_pages"], pragma("freelist_count").to_string());
    assert_eq!(
        stat(&s, "run", "db_bytes")["end"].as_u64(),
        Some(pragma("page_count") * pragma("page_size"))
    );
    // 3,000 records of 10 fields of 100 bytes: more than 3 MB of pages.
    assert!(stat(&s, "load", "db_bytes")["end"].as_u64().unwrap() > 3_000_000);
}

/// LevelDB with 1 MiB write buffers flushes and compacts while loading; reopened for a
/// 3-second phase that only reads, it finishes the compactions its reopening started (fewer
/// than 4 level-0 files at the end: nothing left to do). Its table files as the sampler last
/// saw them are then those LevelDB's own LOG counted after its last compaction ("compacted
/// to: files[ 0 4 6 0 0 0 0 ]"). The directory may hold more: a file a compaction made
/// obsolete stays until no iterator holds it and LevelDB next cleans up (a fresh-clone CI saw
/// 12 `.ldb` files for 10 live ones), so it bounds the count and the bytes from above.
#[test]
fn leveldb_table_files_are_those_its_log_counts() {
    let t = tempfile::tempdir().unwrap();
    let (data, out) = (t.path().join("data"), t.path().join("run"));
    let s = run(
        "leveldb",
        &data,
        &out,
        &[
            "-P",
            "workloadc",
            "--records",
            "20000",
            "--duration",
            "3s",
            "-p",
            "fieldcount=1",
            "-p",
            "fieldlength=1000",
            "--store-opt",
            "write_buffer_mb=1",
        ],
    );
    let tables: Vec<u64> = std::fs::read_dir(data.join("store/db"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "ldb"))
        .map(|e| e.metadata().unwrap().len())
        .collect();
    let row = last_row(&out);
    assert_eq!(row["phase"], "run");
    let l0: u64 = row["l0_files"].parse().unwrap();
    assert!(l0 < 4, "compactions still due at the end: {row:?}");
    let files: usize = row["files"].parse().unwrap();
    assert!(
        files >= 1 && files <= tables.len(),
        "{row:?}: {} in the directory",
        tables.len()
    );
    let seen: u64 = row["table_bytes"].parse().unwrap();
    let bytes: u64 = tables.iter().sum();
    assert!(
        seen <= bytes + 7 * (1 << 19),
        "{seen} against the directory's {bytes}"
    );
    // The run phase's LOG (LevelDB moves the load's to LOG.old when it reopens).
    let log = std::fs::read_to_string(data.join("store/db/LOG")).unwrap();
    let last = log.lines().rev().find_map(|l| l.split("files[ ").nth(1));
    match last {
        Some(counts) => {
            let counted: usize = counts
                .split_whitespace()
                .take_while(|w| *w != "]")
                .map(|n| n.parse::<usize>().unwrap())
                .sum();
            assert_eq!(files, counted, "{row:?}\n{log}");
        }
        None => eprintln!("no compaction in the run phase: the directory bounds the count"),
    }
    let load = &phase(&s, "load")["store_stats"];
    assert!(
        load["stats"]["compaction_write_bytes"]["increase"]
            .as_u64()
            .unwrap()
            > 0,
        "{load}"
    );
}

/// `--store-stats off` samples nothing of the store's own: no store_stats.csv, no
/// store_events.csv, no `store_stats` in the summary; the manifest says it was off. The
/// kernel's storage bytes stay (they are not the store's statistics).
#[test]
fn store_stats_off_samples_nothing_and_says_so() {
    let t = tempfile::tempdir().unwrap();
    let (data, out) = (t.path().join("data"), t.path().join("run"));
    let s = run(
        "rocksdb",
        &data,
        &out,
        &["--records", "2000", "--store-stats", "off"],
    );
    assert!(!out.join("store_stats.csv").exists());
    assert!(!out.join("store_events.csv").exists());
    for p in s["phases"].as_array().unwrap() {
        assert!(p.get("store_stats").is_none(), "{p}");
    }
    let m = json(&out.join("manifest.json"));
    validate("manifest.schema.json", &m);
    assert_eq!(m["plan"]["store_stats"], "off");
    let o = kvmeter()
        .args([
            "run",
            "-P",
            "workloada",
            "--records",
            "10",
            "--store-stats",
            "maybe",
        ])
        .arg("--out")
        .arg(t.path().join("never"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--store-stats"));
    assert!(!t.path().join("never").exists());
}

/// WiredTiger with an 8 MiB cache loading 30 MB: its cache is the size the test configured,
/// it must evict modified pages to take the data in (and read pages back to serve the run's
/// reads), and its block manager must have written all of the data but what the cache still
/// holds. With statistics=none it keeps no counters and kvmeter writes none.
#[test]
fn wiredtiger_evicts_and_writes_what_its_cache_cannot_hold() {
    let t = tempfile::tempdir().unwrap();
    let (data, out) = (t.path().join("data"), t.path().join("run"));
    let (records, cache) = (30_000u64, 8u64 << 20);
    let s = run(
        "wiredtiger",
        &data,
        &out,
        &[
            "--records",
            &records.to_string(),
            "-p",
            "operationcount=10000",
            "-p",
            "fieldcount=1",
            "-p",
            "fieldlength=1000",
            "--store-opt",
            "cache_mb=8",
        ],
    );
    let inc = |p: &str, n: &str| stat(&s, p, n)["increase"].as_u64().unwrap();
    assert_eq!(
        stat(&s, "load", "cache_max_bytes")["end"].as_u64(),
        Some(cache)
    );
    assert!(inc("load", "evicted_dirty") > 0);
    assert!(inc("load", "block_bytes_written") >= records * 1000 - cache);
    assert!(inc("run", "pages_read") > 0);
    assert!(stat(&s, "run", "cache_bytes")["max"].as_u64().unwrap() <= 2 * cache);

    let (data, out) = (t.path().join("data2"), t.path().join("run2"));
    let s = run(
        "wiredtiger",
        &data,
        &out,
        &["--records", "1000", "--store-opt", "statistics=none"],
    );
    assert!(!out.join("store_stats.csv").exists());
    assert!(phase(&s, "load").get("store_stats").is_none());
}
