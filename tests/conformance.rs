//! The store conformance suite: the same tests, run against every adapter (design.md "The store
//! contract"). Each test takes a store kind and its options, opens the real store in a fresh
//! directory, and checks YCSB semantics, including reopen-after-close for persistent stores.

// Without any data-keeping store compiled in, only the null-store test runs.
#![cfg_attr(not(feature = "rocksdb"), allow(dead_code))]

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

    // Empty and large values survive.
    let mut odd = Record::new();
    odd.push(b"field0", b"");
    odd.push(b"field1", &vec![0x7fu8; 100_000]);
    assert_eq!(sess.insert("usertable", b"user-odd", &odd), Status::Ok);
    assert_eq!(
        read(&mut sess, b"user-odd", Fields::All, &mut out),
        Status::Ok
    );
    assert_eq!(out.get(b"field0"), Some(&b""[..]));
    assert_eq!(out.get(b"field1").map(|v| v.len()), Some(100_000));

    assert_eq!(sess.close(), Status::Ok);
    s.close().unwrap();
}

fn scans(kind: &StoreKind, opts: &[&str]) {
    if !kind.capabilities.scan {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = open(kind, dir.path(), opts);
    let mut sess = s.session().unwrap();
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

fn unknown_option_rejected(kind: &StoreKind) {
    let e = StoreOptions::parse(kind.name, kind.options, &["no_such_option=1".into()]).unwrap_err();
    assert!(e.0.contains("no_such_option"), "{e}");
}

/// Runs the whole suite against one store configuration.
fn conformance(name: &str, opts: &[&str]) {
    let kind = store::find(name).unwrap_or_else(|| panic!("store {name} not compiled in"));
    assert!(
        kind.capabilities.stores_data,
        "{name} must store data to be checked"
    );
    (kind.probe)().unwrap_or_else(|e| panic!("{name} is not usable here: {e}"));
    crud(kind, opts);
    scans(kind, opts);
    concurrent_sessions(kind, opts);
    persistence(kind, opts);
    unknown_option_rejected(kind);
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
