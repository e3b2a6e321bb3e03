//! The store conformance suite: the same tests, run against every adapter (design.md "The store
//! contract"). Each test takes a store kind and its options, opens the real store in a fresh
//! directory, and checks YCSB semantics, including reopen-after-close for persistent stores.

// Without any data-keeping store compiled in, only the null-store test runs.
#![cfg_attr(not(feature = "rocksdb"), allow(dead_code))]

use crate::common;
use crate::plugin_build;

use common::servers::tls_files;
use kvmeter::store::{self, Fields, Record, ScanOut, Session, Status, StoreKind, StoreOptions};
use std::path::Path;

fn open(kind: &StoreKind, dir: &Path, opts: &[&str]) -> Box<dyn store::Store> {
    let opts: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
    let o = StoreOptions::parse(kind.name, kind.options, &opts).unwrap();
    (kind.check)(&o).unwrap();
    (kind.open)(dir, &o).unwrap()
}

fn record(n: usize, tag: &str) -> Record {
    let mut r = Record::new();
    for f in 0..n {
        r.push(
            format!("field{f}").as_bytes(),
            format!("{tag}-value-{f}").as_bytes(),
        );
    }
    r
}

/// Reads through the zero-copy view and keeps a copy, so the test can look at it after the
/// session's next call.
fn read(sess: &mut Box<dyn Session>, key: &[u8], fields: Fields, out: &mut Record) -> Status {
    let (st, view) = sess.read("usertable", key, fields);
    out.copy_from(view);
    st
}

fn fields_of(r: &Record) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = r
        .iter()
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into(),
                String::from_utf8_lossy(v).into(),
            )
        })
        .collect();
    v.sort();
    v
}

fn crud(kind: &StoreKind, opts: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let s = open(kind, dir.path(), opts);
    let mut sess = s.session().unwrap();
    let mut out = Record::new();

    // Missing key.
    assert_eq!(
        read(&mut sess, b"user-missing", Fields::All, &mut out),
        Status::NotFound
    );

    // Insert, then read all fields back exactly.
    let r = record(10, "a");
    assert_eq!(sess.insert("usertable", b"user1", &r), Status::Ok);
    assert_eq!(read(&mut sess, b"user1", Fields::All, &mut out), Status::Ok);
    assert_eq!(fields_of(&out), fields_of(&r));

    // One field only.
    assert_eq!(
        read(&mut sess, b"user1", Fields::One(b"field3"), &mut out),
        Status::Ok
    );
    assert_eq!(
        fields_of(&out),
        [("field3".to_string(), "a-value-3".to_string())]
    );

    // Update one field: it changes, the others stay.
    let mut up = Record::new();
    up.push(b"field3", b"changed");
    assert_eq!(sess.update("usertable", b"user1", &up), Status::Ok);
    assert_eq!(read(&mut sess, b"user1", Fields::All, &mut out), Status::Ok);
    assert_eq!(out.len(), 10);
    assert_eq!(out.get(b"field3"), Some(&b"changed"[..]));
    assert_eq!(out.get(b"field4"), Some(&b"a-value-4"[..]));

    // Update of a missing key: NOT_FOUND, or an upsert that is then readable.
    match sess.update("usertable", b"user-new", &up) {
        Status::NotFound => {}
        Status::Ok => {
            assert_eq!(
                read(&mut sess, b"user-new", Fields::All, &mut out),
                Status::Ok
            );
            assert_eq!(out.get(b"field3"), Some(&b"changed"[..]));
        }
        other => panic!("update of a missing key gave {other:?}"),
    }

    // Insert over an existing key replaces it.
    let r2 = record(2, "b");
    assert_eq!(sess.insert("usertable", b"user1", &r2), Status::Ok);
    assert_eq!(read(&mut sess, b"user1", Fields::All, &mut out), Status::Ok);
    assert_eq!(fields_of(&out), fields_of(&r2));

    // Delete.
    assert_eq!(sess.delete("usertable", b"user1"), Status::Ok);
    assert_eq!(
        read(&mut sess, b"user1", Fields::All, &mut out),
        Status::NotFound
    );

    // Empty and large values survive. 100 KB unless KVMETER_TEST_LARGE_VALUE says less, for a
    // plug-in whose store caps a value (Parallax: 4 KB; docs/plugins.md).
    let large: usize = std::env::var("KVMETER_TEST_LARGE_VALUE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let mut odd = Record::new();
    odd.push(b"field0", b"");
    odd.push(b"field1", &vec![0x7fu8; large]);
    assert_eq!(sess.insert("usertable", b"user-odd", &odd), Status::Ok);
    assert_eq!(
        read(&mut sess, b"user-odd", Fields::All, &mut out),
        Status::Ok
    );
    assert_eq!(out.get(b"field0"), Some(&b""[..]));
    assert_eq!(out.get(b"field1").map(|v| v.len()), Some(large));

    assert_eq!(sess.close(), Status::Ok);
    s.close().unwrap();
}

fn scans(kind: &StoreKind, opts: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let s = open(kind, dir.path(), opts);
    let mut sess = s.session().unwrap();
    let scan_off = !kind.capabilities.scan || opts.contains(&"scan_index=false");
    if scan_off {
        // A store that cannot scan says so (the driver reports SCAN as N/A).
        let mut out = ScanOut::default();
        assert_eq!(
            sess.scan("usertable", b"user", 5, Fields::All, &mut out),
            Status::Error {
                kind: kvmeter::store::ErrorKind::NotImplemented,
                fatal: false
            }
        );
        assert!(out.is_empty());
        return;
    }
    for i in 0..100 {
        let key = format!("user{i:03}");
        assert_eq!(
            sess.insert("usertable", key.as_bytes(), &record(3, &key)),
            Status::Ok
        );
    }
    let mut out = ScanOut::default();
    assert_eq!(
        sess.scan("usertable", b"user010", 5, Fields::All, &mut out),
        Status::Ok
    );
    let keys: Vec<String> = (0..out.len())
        .map(|i| String::from_utf8_lossy(out.get(i).0).into())
        .collect();
    assert_eq!(
        keys,
        ["user010", "user011", "user012", "user013", "user014"]
    );
    assert_eq!(out.get(2).1.get(b"field1"), Some(&b"user012-value-1"[..]));
    assert_eq!(out.get(0).1.len(), 3);

    // A start key between records, one field, running off the end.
    assert_eq!(
        sess.scan(
            "usertable",
            b"user0975",
            10,
            Fields::One(b"field2"),
            &mut out
        ),
        Status::Ok
    );
    let keys: Vec<String> = (0..out.len())
        .map(|i| String::from_utf8_lossy(out.get(i).0).into())
        .collect();
    assert_eq!(keys, ["user098", "user099"]);
    assert_eq!(out.get(0).1.len(), 1);
    assert_eq!(out.get(0).1.get(b"field2"), Some(&b"user098-value-2"[..]));
    s.close().unwrap();
}

fn concurrent_sessions(kind: &StoreKind, opts: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let s = open(kind, dir.path(), opts);
    std::thread::scope(|sc| {
        for t in 0..4 {
            let mut sess = s.session().unwrap();
            sc.spawn(move || {
                for i in 0..500 {
                    let key = format!("t{t}-{i}");
                    assert_eq!(
                        sess.insert("usertable", key.as_bytes(), &record(2, &key)),
                        Status::Ok
                    );
                }
            });
        }
    });
    let mut sess = s.session().unwrap();
    let mut out = Record::new();
    for t in 0..4 {
        for i in 0..500 {
            let key = format!("t{t}-{i}");
            assert_eq!(
                read(&mut sess, key.as_bytes(), Fields::All, &mut out),
                Status::Ok,
                "{key}"
            );
            assert_eq!(
                out.get(b"field1"),
                Some(format!("{key}-value-1").as_bytes())
            );
        }
    }
    s.close().unwrap();
}

fn persistence(kind: &StoreKind, opts: &[&str]) {
    if !kind.capabilities.persistent {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(kind, dir.path(), opts);
        let mut sess = s.session().unwrap();
        for i in 0..1000 {
            let key = format!("user{i}");
            assert_eq!(
                sess.insert("usertable", key.as_bytes(), &record(4, &key)),
                Status::Ok
            );
        }
        assert_eq!(sess.delete("usertable", b"user7"), Status::Ok);
        drop(sess);
        s.close().unwrap();
    }
    let s = open(kind, dir.path(), opts);
    let mut sess = s.session().unwrap();
    let mut out = Record::new();
    for i in 0..1000 {
        let key = format!("user{i}");
        let st = read(&mut sess, key.as_bytes(), Fields::All, &mut out);
        if i == 7 {
            assert_eq!(st, Status::NotFound);
        } else {
            assert_eq!(st, Status::Ok, "{key} after reopen");
            assert_eq!(
                out.get(b"field3"),
                Some(format!("{key}-value-3").as_bytes())
            );
        }
    }
    s.close().unwrap();
}

/// Starts `name`'s real server on loopback (kvmeter's managed mode) with `opts`.
fn start_server(name: &str, opts: &[String], dir: &Path) -> store::managed::Managed {
    let kind = store::find(name).unwrap();
    let o = StoreOptions::parse(name, kind.options, opts).unwrap();
    store::managed::Managed::start(
        kind.name,
        kind.server.unwrap(),
        &o,
        dir,
        &dir.join("server.log"),
        std::time::Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("cannot start the {name} server: {e:#}"))
}

fn unknown_option_rejected(kind: &StoreKind) {
    let e = StoreOptions::parse(kind.name, kind.options, &["no_such_option=1".into()]).unwrap_err();
    assert!(e.0.contains("no_such_option"), "{e}");
}

/// Inserts 4 KB records into an LMDB (built in or the example plug-in) with a 1 MiB map until
/// it is full: the status must be a fatal I/O error; returns the error's text.
fn fill_a_1_mib_lmdb_map(kind: &StoreKind) -> String {
    let dir = tempfile::tempdir().unwrap();
    let s = open(kind, dir.path(), &["map_size_mb=1", "sync=nosync"]);
    let mut sess = s.session().unwrap();
    let big = record(1, &"x".repeat(4000));
    let mut st = Status::Ok;
    for i in 0..1000 {
        st = sess.insert("usertable", format!("user{i}").as_bytes(), &big);
        if st != Status::Ok {
            break;
        }
    }
    assert_eq!(
        st,
        Status::Error {
            kind: store::ErrorKind::Io,
            fatal: true
        }
    );
    sess.last_error().unwrap()
}

/// Runs the whole suite against one store configuration. A server store's real server is
/// started on loopback (kvmeter's managed mode) and emptied between the checks.
fn conformance(name: &str, opts: &[&str]) {
    let kind = store::find(name).unwrap_or_else(|| panic!("store {name} not compiled in"));
    assert!(
        kind.capabilities.stores_data,
        "{name} must store data to be checked"
    );
    (kind.probe)().unwrap_or_else(|e| panic!("{name} is not usable here: {e}"));
    let server_dir = tempfile::tempdir().unwrap();
    let mut all: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
    let mut server = None;
    let mut parsed = StoreOptions::parse(kind.name, kind.options, &all).unwrap();
    if kind.server.is_some() {
        let m = start_server(name, &all, server_dir.path());
        all.push(format!("addr={}", m.addr));
        parsed.set("addr", &m.addr);
        server = Some(m);
    }
    let opts: Vec<&str> = all.iter().map(String::as_str).collect();
    let clear = || {
        if let Some(spec) = kind.server {
            (spec.clear)(&parsed).unwrap();
        }
    };
    crud(kind, &opts);
    clear();
    scans(kind, &opts);
    clear();
    concurrent_sessions(kind, &opts);
    clear();
    persistence(kind, &opts);
    unknown_option_rejected(kind);
    if let Some(mut m) = server {
        assert!(
            m.exited().is_none(),
            "the {name} server died during the checks:\n{}",
            m.last_lines(20)
        );
        m.stop().unwrap();
    }
}

#[cfg(feature = "wiredtiger")]
mod wiredtiger {
    #[test]
    fn wiredtiger_btree_defaults() {
        super::conformance("wiredtiger", &[]);
    }

    #[test]
    fn wiredtiger_lsm_log_off_small_cache() {
        super::conformance(
            "wiredtiger",
            &[
                "table_type=lsm",
                "log=false",
                "cache_mb=32",
                "checkpoint_s=1",
            ],
        );
    }

    #[test]
    fn wiredtiger_sync_log_direct_io_data() {
        super::conformance("wiredtiger", &["sync=true", "direct_io=data"]);
    }

    #[test]
    fn wiredtiger_bad_option_values() {
        let kind = kvmeter::store::find("wiredtiger").unwrap();
        for (opts, needle) in [
            (vec!["table_type=lsm", "cache_mb=16"], "needs cache_mb ≥ 32"),
            (vec!["sync=true", "log=false"], "needs log=true"),
            (vec!["direct_io=log"], "one of none, data"),
        ] {
            let opts: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
            let o = kvmeter::store::StoreOptions::parse("wiredtiger", kind.options, &opts).unwrap();
            let e = (kind.check)(&o).unwrap_err();
            assert!(e.0.contains(needle), "{opts:?}: {e}");
        }
    }
}

#[cfg(feature = "lmdb")]
mod lmdb {
    #[test]
    fn lmdb_defaults() {
        super::conformance("lmdb", &[]);
    }

    #[test]
    fn lmdb_writemap_mapasync_small_map() {
        super::conformance(
            "lmdb",
            &[
                "writemap=true",
                "sync=mapasync",
                "map_size_mb=256",
                "readahead=true",
            ],
        );
    }

    #[test]
    fn lmdb_map_full_is_an_io_error_with_a_hint() {
        let kind = kvmeter::store::find("lmdb").unwrap();
        let text = super::fill_a_1_mib_lmdb_map(kind);
        assert!(text.contains("map_size_mb"), "{text}");
    }
}

/// The example plug-in (examples/plugins/kvm_lmdb.c, built here with the system compiler):
/// the same suite as every built-in store, through the C ABI.
mod plugin {
    #[test]
    fn example_lmdb_plugin_defaults() {
        super::conformance(&super::plugin_build::lmdb_example(), &[]);
    }

    #[test]
    fn example_lmdb_plugin_applying_partial_updates_itself() {
        super::conformance(
            &super::plugin_build::lmdb_example_partial_updates(),
            &["sync=nosync"],
        );
    }

    #[test]
    fn example_lmdb_plugin_nosync_small_map() {
        super::conformance(
            &super::plugin_build::lmdb_example(),
            &["sync=nosync", "map_size_mb=64", "max_readers=16"],
        );
    }

    /// The suite against plug-ins of your own: KVMETER_TEST_PLUGINS="plugin:/a.so;plugin:/b.so"
    /// (each may carry options: "plugin:/a.so opt=v opt2=w"). Without it, nothing is checked.
    #[test]
    fn plugins_named_in_the_environment() {
        let Ok(list) = std::env::var("KVMETER_TEST_PLUGINS") else {
            return;
        };
        for item in list.split(';').filter(|s| !s.trim().is_empty()) {
            let mut words = item.split_whitespace();
            let spec = words.next().unwrap();
            let opts: Vec<&str> = words.collect();
            eprintln!("conformance: {spec} {opts:?}");
            super::conformance(spec, &opts);
        }
    }

    #[test]
    fn plugin_errors_keep_their_kind_and_text() {
        let spec = super::plugin_build::lmdb_example();
        let kind = kvmeter::store::find(&spec).unwrap();
        // kvm_lmdb.c maps MDB_MAP_FULL to KVM_ERROR_IO | KVM_FATAL, as the built-in adapter.
        let text = super::fill_a_1_mib_lmdb_map(kind);
        assert!(text.contains("MDB_MAP_FULL"), "{text}");
        // A value the plug-in's check refuses never reaches open.
        let o = kvmeter::store::StoreOptions::parse(
            kind.name,
            kind.options,
            &["sync=sometimes".into()],
        )
        .unwrap();
        let e = (kind.check)(&o).unwrap_err().to_string();
        assert!(
            e.contains("plug-in 'lmdb-example' refused its options: sync=sometimes: expected full, nometasync or nosync"),
            "{e}"
        );
    }
}

#[cfg(feature = "leveldb")]
mod leveldb {
    #[test]
    fn leveldb_defaults() {
        super::conformance("leveldb", &[]);
    }

    #[test]
    fn leveldb_sync_no_compression_no_cache() {
        super::conformance(
            "leveldb",
            &[
                "sync=true",
                "compression=none",
                "block_cache_mb=0",
                "bloom_bits=0",
                "write_buffer_mb=1",
            ],
        );
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    #[test]
    fn sqlite_wal_normal() {
        super::conformance("sqlite", &[]);
    }

    /// Four sessions writing at once take SQLite's one write lock in turn, each commit an fsync
    /// of the database and its journal. SQLite's busy handler is not fair: with three other
    /// tests' I/O beside it, one writer once waited past the default 5 s and its insert was
    /// (rightly) busy. What is checked here is that sessions work side by side, so the wait
    /// may be long.
    #[test]
    fn sqlite_rollback_journal_full_sync_mmap() {
        super::conformance(
            "sqlite",
            &[
                "journal_mode=delete",
                "synchronous=full",
                "busy_timeout_ms=60000",
                "mmap_mb=64",
                "cache_mb=1",
            ],
        );
    }
}

#[test]
fn memcached_text() {
    conformance("memcached", &[]);
}

#[test]
fn memcached_binary_two_connections() {
    conformance("memcached", &["protocol=binary", "connections=2"]);
}

#[test]
fn memcached_gets_over_udp() {
    // 100 kB values span ~75 datagrams: the reassembly is exercised by crud's large record.
    conformance("memcached", &["udp=true"]);
}

#[test]
fn redis_defaults() {
    conformance("redis", &[]);
}

/// String mode on worker threads: GET/SET of the serialized record, no key index (scans say
/// not implemented).
#[test]
fn redis_string_mode() {
    conformance("redis", &["encoding=string", "scan_index=false"]);
}

#[test]
fn redis_password_db_connections_no_index() {
    conformance(
        "redis",
        &[
            "password=s3cret",
            "db=3",
            "connections=3",
            "scan_index=false",
        ],
    );
}

#[test]
fn redis_wrong_password_is_a_clear_error() {
    let kind = store::find("redis").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut m = start_server("redis", &["password=right".into()], dir.path());
    let o = StoreOptions::parse(
        "redis",
        kind.options,
        &[format!("addr={}", m.addr), "password=wrong".into()],
    )
    .unwrap();
    let e = (kind.server.unwrap().ping)(&o, &m.addr).unwrap_err();
    assert!(e.contains("AUTH") && e.contains("WRONGPASS"), "{e}");
    m.stop().unwrap();
}

#[test]
fn etcd_v3() {
    conformance("etcd", &["connections=2"]);
}

#[cfg(feature = "rocksdb")]
mod rocksdb {
    #[test]
    fn rocksdb_default_options() {
        super::conformance("rocksdb", &[]);
    }

    #[test]
    fn rocksdb_four_databases_wal_off_lz4() {
        super::conformance(
            "rocksdb",
            &[
                "databases=4",
                "wal=false",
                "compression=lz4",
                "bloom_bits=0",
            ],
        );
    }

    /// The lock-free cache, small enough to evict while the conformance reads run from
    /// flushed files.
    #[test]
    fn rocksdb_hyper_clock_cache() {
        super::conformance(
            "rocksdb",
            &[
                "block_cache=hyper_clock",
                "block_cache_mb=1",
                "write_buffer_mb=1",
            ],
        );
    }

    /// The cache RocksDB itself reports in its LOG (an independent witness): LRU by
    /// default, the hyper clock cache when asked.
    #[test]
    fn rocksdb_block_cache_kind_reaches_rocksdb() {
        let kind = kvmeter::store::find("rocksdb").unwrap();
        for (opts, want) in [
            (&[][..], "block_cache_name: LRUCache"),
            (
                &["block_cache=hyper_clock"][..],
                "block_cache_name: AutoHyperClockCache",
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let s = super::open(kind, dir.path(), opts);
            s.close().unwrap();
            let log = std::fs::read_to_string(dir.path().join("db0/LOG")).unwrap();
            assert!(log.contains(want), "{opts:?}: no '{want}' in RocksDB's LOG");
        }
    }

    #[test]
    fn rocksdb_sync_wal_zstd_small_buffers() {
        super::conformance(
            "rocksdb",
            &[
                "sync=true",
                "compression=zstd",
                "write_buffer_mb=1",
                "block_cache_mb=1",
                "max_background_jobs=1",
            ],
        );
    }

    #[test]
    fn rocksdb_bad_option_values() {
        let kind = kvmeter::store::find("rocksdb").unwrap();
        for (opt, needle) in [
            ("compression=gzip", "one of none, snappy, lz4, zstd"),
            ("databases=0", "≥ 1"),
            ("wal=maybe", "true or false"),
        ] {
            let o = kvmeter::store::StoreOptions::parse("rocksdb", kind.options, &[opt.into()])
                .unwrap();
            let e = (kind.check)(&o).unwrap_err();
            assert!(e.0.contains(needle), "{opt}: {e}");
        }
        let o = kvmeter::store::StoreOptions::parse(
            "rocksdb",
            kind.options,
            &["sync=true".into(), "wal=false".into()],
        )
        .unwrap();
        assert!((kind.check)(&o).unwrap_err().0.contains("needs wal=true"));
    }
}

#[test]
fn null_store_answers_ok_and_keeps_nothing() {
    let kind = store::find("null").unwrap();
    assert!(!kind.capabilities.stores_data);
    let dir = tempfile::tempdir().unwrap();
    let s = open(kind, dir.path(), &[]);
    let mut sess = s.session().unwrap();
    let mut out = Record::new();
    assert_eq!(sess.insert("t", b"k", &record(3, "x")), Status::Ok);
    assert_eq!(read(&mut sess, b"k", Fields::All, &mut out), Status::Ok);
    assert!(out.is_empty());
    unknown_option_rejected(kind);
}

#[test]
fn redis_over_tls() {
    let d = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_files(d.path());
    let opts = [
        "tls=true".to_string(),
        format!("tls_ca={ca}"),
        format!("tls_cert={cert}"),
        format!("tls_key={key}"),
    ];
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    conformance("redis", &opts);
}

#[test]
fn redis_tls_with_an_untrusted_ca_fails_at_connect() {
    let d = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls_files(d.path());
    let other = tempfile::tempdir().unwrap();
    let (wrong_ca, _, _) = tls_files(other.path());
    let kind = store::find("redis").unwrap();
    let server_opts = [
        "tls=true".into(),
        format!("tls_ca={ca}"),
        format!("tls_cert={cert}"),
        format!("tls_key={key}"),
    ];
    let mut m = start_server("redis", &server_opts, d.path());
    let o = StoreOptions::parse(
        "redis",
        kind.options,
        &[
            "tls=true".into(),
            format!("tls_ca={wrong_ca}"),
            format!("addr={}", m.addr),
        ],
    )
    .unwrap();
    let e = (kind.server.unwrap().ping)(&o, &m.addr).unwrap_err();
    assert!(
        e.contains("TLS") && e.to_lowercase().contains("certificate"),
        "{e}"
    );
    // Without tls_ca: one clear line.
    let o = StoreOptions::parse("redis", kind.options, &["tls=true".into()]).unwrap();
    assert!((kind.check)(&o).unwrap_err().0.contains("needs tls_ca"));
    m.stop().unwrap();
}

#[test]
fn redis_pipelined_batches_answer_in_order() {
    use kvmeter::store::Queued;
    let kind = store::find("redis").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut m = start_server("redis", &[], dir.path());
    let s = open(
        kind,
        dir.path(),
        &["pipeline=4", &format!("addr={}", m.addr)],
    );
    let mut sess = s.session().unwrap();
    assert_eq!(sess.pipeline_depth(), 4);
    let recs: Vec<Record> = (0..3).map(|i| record(2, &format!("p{i}"))).collect();
    for (i, r) in recs.iter().enumerate() {
        sess.queue(Queued::Insert(format!("user{i}").as_bytes(), r));
    }
    let mut got = Vec::new();
    sess.flush(&mut |st, b| got.push((st, b)));
    assert_eq!(got, vec![(Status::Ok, 0); 3]);
    // Reads in one batch, one of them missing, one a single field; then an update and delete.
    let mut up = Record::new();
    up.push(b"field1", b"new");
    sess.queue(Queued::Read(b"user0", Fields::All));
    sess.queue(Queued::Read(b"nobody", Fields::All));
    sess.queue(Queued::Read(b"user2", Fields::One(b"field1")));
    sess.queue(Queued::Update(b"user1", &up));
    got.clear();
    sess.flush(&mut |st, b| got.push((st, b)));
    // Bytes returned, computed by hand: user0 has field0/field1 with "p0-value-N".
    let all0 = ("field0".len() + "p0-value-0".len() + "field1".len() + "p0-value-1".len()) as u64;
    assert_eq!(
        got,
        vec![
            (Status::Ok, all0),
            (Status::NotFound, 0),
            (Status::Ok, ("field1".len() + "p2-value-1".len()) as u64),
            (Status::Ok, 0)
        ]
    );
    sess.queue(Queued::Delete(b"user2"));
    got.clear();
    sess.flush(&mut |st, b| got.push((st, b)));
    assert_eq!(got, vec![(Status::Ok, 0)]);
    // What the batches did, read back one operation at a time.
    let mut out = Record::new();
    assert_eq!(read(&mut sess, b"user1", Fields::All, &mut out), Status::Ok);
    assert_eq!(out.get(b"field1"), Some(&b"new"[..]));
    assert_eq!(out.get(b"field0"), Some(&b"p1-value-0"[..]));
    assert_eq!(
        read(&mut sess, b"user2", Fields::All, &mut out),
        Status::NotFound
    );
    drop(sess);
    s.close().unwrap();
    m.stop().unwrap();
}

#[test]
fn memcached_pipelined_multi_get_and_sets() {
    use kvmeter::store::Queued;
    let kind = store::find("memcached").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut m = start_server("memcached", &[], dir.path());
    let s = open(
        kind,
        dir.path(),
        &["pipeline=8", &format!("addr={}", m.addr)],
    );
    let mut sess = s.session().unwrap();
    assert_eq!(sess.pipeline_depth(), 8);
    let recs: Vec<Record> = (0..3).map(|i| record(2, &format!("m{i}"))).collect();
    for (i, r) in recs.iter().enumerate() {
        assert!(sess.queue(Queued::Insert(format!("user{i}").as_bytes(), r)));
    }
    // Reads after sets in the same batch: the sets are answered first, then one multi-get
    // with a missing key in the middle and a one-field read.
    assert!(sess.queue(Queued::Read(b"user2", Fields::All)));
    assert!(sess.queue(Queued::Read(b"nobody", Fields::All)));
    assert!(sess.queue(Queued::Read(b"user0", Fields::One(b"field1"))));
    // Updates and deletes are not pipelined (read-merge-set): the caller runs them alone.
    let up = record(1, "u");
    assert!(!sess.queue(Queued::Update(b"user1", &up)));
    assert!(!sess.queue(Queued::Delete(b"user1")));
    let mut got = Vec::new();
    sess.flush(&mut |st, b| got.push((st, b)));
    let all2 = ("field0".len() + "m2-value-0".len() + "field1".len() + "m2-value-1".len()) as u64;
    assert_eq!(
        got,
        vec![
            (Status::Ok, 0),
            (Status::Ok, 0),
            (Status::Ok, 0),
            (Status::Ok, all2),
            (Status::NotFound, 0),
            (Status::Ok, ("field1".len() + "m0-value-1".len()) as u64),
        ]
    );
    let mut out = Record::new();
    assert_eq!(read(&mut sess, b"user1", Fields::All, &mut out), Status::Ok);
    assert_eq!(fields_of(&out), fields_of(&recs[1]));
    drop(sess);
    // The binary protocol and UDP do not pipeline: every queue call says so.
    let s2 = open(
        kind,
        dir.path(),
        &["pipeline=8", "protocol=binary", &format!("addr={}", m.addr)],
    );
    let mut b = s2.session().unwrap();
    assert!(!b.queue(Queued::Read(b"user0", Fields::All)));
    m.stop().unwrap();
}
