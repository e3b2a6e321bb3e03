//! Minimal loops that call WiredTiger and LMDB directly: the reference for kvmeter's own
//! overhead on those stores (BENCHMARKS.md; the stores issue asks for < 5 %). Like
//! `rocksdb_direct`, each loads the same keys and the same encoded record kvmeter writes (one
//! 1,000-byte field) and then does uniform random point reads from T threads with no latency
//! recording, no workload generator and no status handling beyond correctness.
//!
//! Both reopen the store between load and reads, as kvmeter's separate load and run phases do
//! (WiredTiger's cache starts empty; LMDB's map is the page cache either way).
//!
//! WiredTiger goes through the same thin C shim kvmeter uses (set_key, search, get_value,
//! reset); LMDB through lmdb-master-sys with one reused read transaction per thread
//! (reset/renew), the fastest read path LMDB offers.
//!
//! TIMED=1 adds kvmeter's clock and histogram around each read (benches/common/timed.rs): the
//! floor of a harness that times every operation exactly; with YCSB_KEYS=1 and DECODE=1 too,
//! the floor of a YCSB-exact harness (`*-direct-ycsb-*` in bench/compare.sh).
//!
//! Environment: STORE (wiredtiger|lmdb), RECORDS (100000), OPS (1000000, all threads),
//! THREADS (1), VALUE_SIZE (1000), CACHE_MB (256, WiredTiger), TIMED (0), TOUCH (0; 1: read
//! the value's first bytes, as kvmeter's record indexing does), YCSB_KEYS (0; 1: kvmeter's exact
//! key choice, benches/common/keys.rs), DECODE (0; 1: index the record as kvmeter's adapters
//! do, benches/common/decode.rs), DBB_KEYS (0; 1: db_bench's key content, loaded and read,
//! benches/common/keys.rs). Last lines:
//! `cpu_ns_per_op=<n>` (the process's user + system time over the read loop, per read) and
//! `ops_per_sec=<n>`.

use decode::Decode;
use knobs::env;
use kvmeter::measure::clock::Clock;
use kvmeter::measure::cpu::CpuTime;
use kvmeter::store::Record;
use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;
use std::time::Instant;
use timed::Timed;

#[path = "common/decode.rs"]
mod decode;
#[path = "common/keys.rs"]
mod keys;
#[path = "common/knobs.rs"]
mod knobs;
#[path = "common/timed.rs"]
mod timed;
#[path = "common/workload.rs"]
mod workload;

extern "C" {
    fn kvm_wt_open(home: *const c_char, config: *const c_char, conn: *mut *mut c_void) -> c_int;
    fn kvm_wt_create(conn: *mut c_void, uri: *const c_char, config: *const c_char) -> c_int;
    fn kvm_wt_session(
        conn: *mut c_void,
        uri: *const c_char,
        s: *mut *mut c_void,
        point: *mut *mut c_void,
        scan: *mut *mut c_void,
    ) -> c_int;
    fn kvm_wt_get(
        c: *mut c_void,
        k: *const u8,
        kl: usize,
        v: *mut *const u8,
        vl: *mut usize,
    ) -> c_int;
    fn kvm_wt_put(c: *mut c_void, k: *const u8, kl: usize, v: *const u8, vl: usize) -> c_int;
    fn kvm_wt_reset(c: *mut c_void) -> c_int;
    fn kvm_wt_checkpoint(conn: *mut c_void) -> c_int;
    fn kvm_wt_close(conn: *mut c_void, config: *const c_char) -> c_int;
}

struct Ptr(*mut c_void);
unsafe impl Send for Ptr {}
unsafe impl Sync for Ptr {}

/// What both loops do: the data set, the reads, and what is added to each read.
struct Loop {
    records: u64,
    ops: u64,
    threads: u64,
    /// The encoded record every key gets, and its one field's length.
    value: Vec<u8>,
    value_size: usize,
    clock: Option<Clock>,
    touch: bool,
}

/// What each reading thread carries: its share of the reads, its keys, and what is added to
/// each read (TIMED, DECODE).
struct PerThread {
    reads: u64,
    keys: keys::Keys,
    timed: Option<Timed>,
    decode: Option<Decode>,
}

impl Loop {
    /// Call on the reading thread `t` (its keys live on its own stack: benches/common/keys.rs).
    fn thread(&self, t: u64) -> PerThread {
        PerThread {
            reads: self.ops / self.threads + u64::from(t < self.ops % self.threads),
            keys: keys::Keys::for_thread(t, self.records, self.value_size, 1, false),
            timed: Timed::for_thread(&self.clock),
            decode: Decode::from_env(),
        }
    }
}

/// The value a store returned, as a slice (empty for length 0, whatever the pointer).
///
/// # Safety
/// For a non-zero `len`, `ptr` must be valid for reads of `len` bytes while the slice is used.
#[inline(always)]
unsafe fn raw_slice<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(ptr, len)
    }
}

/// TOUCH=1: the first bytes of the value read, as any client that looks at what it read does
/// (kvmeter reads the record's header to index its fields, inside its timed call). The bare
/// loop otherwise never touches the value's memory, only its length.
#[inline(always)]
unsafe fn header(touch: bool, v: *const u8) -> usize {
    if touch {
        usize::from(u16::from_le_bytes([*v, *v.add(1)]))
    } else {
        0
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let store = std::env::var("STORE").unwrap_or_else(|_| "wiredtiger".into());
    let records = knobs::count("RECORDS", 100_000);
    let ops = knobs::count("OPS", 1_000_000);
    let threads = knobs::count("THREADS", 1);
    let value_size = env("VALUE_SIZE", 1000) as usize;
    // Checked before anything is made (the loads read it again): a refused setting exits
    // without a store left behind.
    keys::db_bench_keys();
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Record::new();
    rec.push(b"field0", &vec![b'x'; value_size]);
    let mut value = Vec::new();
    rec.encode_into(&mut value);
    let p = Loop {
        records,
        ops,
        threads,
        value,
        value_size,
        clock: timed::clock_from_env(),
        touch: knobs::flag("TOUCH"),
    };
    let (secs, cpu0) = match store.as_str() {
        "wiredtiger" => wiredtiger(dir.path(), &p),
        "lmdb" => lmdb(dir.path(), &p),
        other => panic!("STORE={other}: expected wiredtiger or lmdb"),
    };
    let cpu = CpuTime::now().since(cpu0, ops).expect("OPS > 0");
    eprintln!("{store}_direct: {ops} reads, {threads} threads, {secs:.3} s");
    println!("cpu_ns_per_op={:.0}", cpu.ns_per_op);
    println!("ops_per_sec={:.0}", ops as f64 / secs);
}

fn wiredtiger(dir: &std::path::Path, p: &Loop) -> (f64, CpuTime) {
    let home = CString::new(dir.to_str().unwrap()).unwrap();
    // kvmeter's defaults: log on, no sync, 60 s checkpoints.
    let cfg = CString::new(format!(
        "create,cache_size={}M,session_max=1100,log=(enabled=true),transaction_sync=(enabled=false,method=fsync),checkpoint=(wait=60)",
        env("CACHE_MB", 256)
    ))
    .unwrap();
    let uri = c"table:usertable";
    let mut conn = ptr::null_mut();
    unsafe {
        assert_eq!(kvm_wt_open(home.as_ptr(), cfg.as_ptr(), &mut conn), 0);
        assert_eq!(
            kvm_wt_create(conn, uri.as_ptr(), c"key_format=u,value_format=u".as_ptr()),
            0
        );
        let (mut s, mut c, mut scan) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        assert_eq!(
            kvm_wt_session(conn, uri.as_ptr(), &mut s, &mut c, &mut scan),
            0
        );
        let mut key = Vec::new();
        let dbb = keys::db_bench_keys();
        for k in 0..p.records as i64 {
            keys::build(k, 1, false, dbb, &mut key);
            assert_eq!(
                kvm_wt_put(c, key.as_ptr(), key.len(), p.value.as_ptr(), p.value.len()),
                0
            );
        }
        assert_eq!(kvm_wt_checkpoint(conn), 0);
        // kvmeter opens the store per phase: the reads start after a close and reopen, with
        // WiredTiger's cache empty (the OS page cache still warm). Do the same.
        assert_eq!(kvm_wt_close(conn, ptr::null()), 0);
        assert_eq!(kvm_wt_open(home.as_ptr(), cfg.as_ptr(), &mut conn), 0);
    }
    let conn = Ptr(conn);
    let start = Instant::now();
    let cpu0 = CpuTime::now();
    std::thread::scope(|sc| {
        for t in 0..p.threads {
            let conn = &conn;
            sc.spawn(move || unsafe {
                let mut th = p.thread(t);
                let (mut s, mut c, mut scan) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
                assert_eq!(
                    kvm_wt_session(conn.0, uri.as_ptr(), &mut s, &mut c, &mut scan),
                    0
                );
                let mut bytes = 0usize;
                for _ in 0..th.reads {
                    let key = th.keys.next();
                    let (mut v, mut vl) = (ptr::null(), 0usize);
                    let t0 = Timed::start(&th.timed);
                    let rc = kvm_wt_get(c, key.as_ptr(), key.len(), &mut v, &mut vl);
                    assert_eq!(rc, 0);
                    bytes += vl + header(p.touch, v);
                    bytes += Decode::data_bytes(&mut th.decode, raw_slice(v, vl));
                    Timed::end(&mut th.timed, t0, vl);
                    kvm_wt_reset(c);
                }
                std::hint::black_box((bytes, &th.timed));
            });
        }
    });
    (start.elapsed().as_secs_f64(), cpu0)
}

fn lmdb(dir: &std::path::Path, p: &Loop) -> (f64, CpuTime) {
    use lmdb_master_sys as ffi;
    let path = CString::new(dir.to_str().unwrap()).unwrap();
    let val = |b: &[u8]| ffi::MDB_val {
        mv_size: b.len(),
        mv_data: b.as_ptr() as *mut _,
    };
    let mut env = ptr::null_mut();
    let mut dbi = 0;
    unsafe {
        assert_eq!(ffi::mdb_env_create(&mut env), 0);
        assert_eq!(ffi::mdb_env_set_mapsize(env, 16 << 30), 0);
        ffi::mdb_env_set_maxreaders(env, 1024);
        // kvmeter's defaults (NOTLS, NORDAHEAD) with sync=nosync, as bench/compare.sh runs
        // kvmeter: the load is not what is measured.
        let flags = ffi::MDB_NOTLS | ffi::MDB_NORDAHEAD | ffi::MDB_NOSYNC;
        assert_eq!(ffi::mdb_env_open(env, path.as_ptr(), flags, 0o644), 0);
        let mut txn = ptr::null_mut();
        assert_eq!(ffi::mdb_txn_begin(env, ptr::null_mut(), 0, &mut txn), 0);
        assert_eq!(
            ffi::mdb_dbi_open(txn, ptr::null(), ffi::MDB_CREATE, &mut dbi),
            0
        );
        assert_eq!(ffi::mdb_txn_commit(txn), 0);
        // One write transaction per record, as kvmeter's load does: the B-tree ends up with
        // the same shape (page fill and layout), which is what the reads then walk.
        let mut key = Vec::new();
        let dbb = keys::db_bench_keys();
        for k in 0..p.records as i64 {
            keys::build(k, 1, false, dbb, &mut key);
            let (mut kv, mut vv) = (val(&key), val(&p.value));
            assert_eq!(ffi::mdb_txn_begin(env, ptr::null_mut(), 0, &mut txn), 0);
            assert_eq!(ffi::mdb_put(txn, dbi, &mut kv, &mut vv, 0), 0);
            assert_eq!(ffi::mdb_txn_commit(txn), 0);
        }
        assert_eq!(ffi::mdb_env_sync(env, 1), 0);
    }
    let env = Ptr(env as *mut c_void);
    let start = Instant::now();
    let cpu0 = CpuTime::now();
    std::thread::scope(|sc| {
        for t in 0..p.threads {
            let env = &env;
            sc.spawn(move || unsafe {
                let mut th = p.thread(t);
                let env = env.0 as *mut ffi::MDB_env;
                let mut txn = ptr::null_mut();
                assert_eq!(
                    ffi::mdb_txn_begin(env, ptr::null_mut(), ffi::MDB_RDONLY, &mut txn),
                    0
                );
                ffi::mdb_txn_reset(txn);
                let mut bytes = 0usize;
                for _ in 0..th.reads {
                    let key = th.keys.next();
                    // Timed as kvmeter's read is: the renewal is inside its call.
                    let t0 = Timed::start(&th.timed);
                    assert_eq!(ffi::mdb_txn_renew(txn), 0);
                    let mut kv = val(key);
                    let mut v = ffi::MDB_val {
                        mv_size: 0,
                        mv_data: ptr::null_mut(),
                    };
                    let rc = ffi::mdb_get(txn, dbi, &mut kv, &mut v);
                    assert_eq!(rc, 0);
                    bytes += v.mv_size + header(p.touch, v.mv_data as *const u8);
                    bytes +=
                        Decode::data_bytes(&mut th.decode, raw_slice(v.mv_data as _, v.mv_size));
                    Timed::end(&mut th.timed, t0, v.mv_size);
                    ffi::mdb_txn_reset(txn);
                }
                ffi::mdb_txn_abort(txn);
                std::hint::black_box((bytes, &th.timed));
            });
        }
    });
    (start.elapsed().as_secs_f64(), cpu0)
}
