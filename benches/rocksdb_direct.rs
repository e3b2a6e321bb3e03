//! A minimal loop that calls the bundled RocksDB directly: the reference against which
//! kvmeter's own overhead is measured (BENCHMARKS.md). It loads the same keys and the same
//! encoded record kvmeter's `rocksdb` store writes (one 1,000-byte field), then does uniform
//! random point reads from T threads, with no latency recording, no workload generator and no
//! status handling beyond what correctness needs. Its ratio to db_bench built from the same
//! RocksDB (bench/build-db_bench.sh) on db_bench's data shape (ORDERED=1) shows the binding's
//! cost; kvmeter's ratio to it shows the harness's cost.
//!
//! Environment: RECORDS (100000), OPS (1000000, all threads), THREADS (1), VALUE_SIZE (1000),
//! CACHE_MB (256), REOPEN=1 (reopen after the load), COLD=1 (reopen and skip the warming
//! pass), ORDERED=1 (keys loaded in order, db_bench's fillseq shape), TIMED=1 (kvmeter's clock
//! and histogram around each read: benches/common/timed.rs), YCSB_KEYS=1 (kvmeter's exact key
//! choice: benches/common/keys.rs), DECODE=1 (the record indexed as kvmeter's adapter does:
//! benches/common/decode.rs), DBB_KEYS=1 (db_bench's key content, loaded and read:
//! benches/common/keys.rs). Last lines: `cpu_ns_per_op=<n>` (the process's user + system time
//! over the read loop, per read) and `ops_per_sec=<n>`.

use decode::Decode;
use knobs::env;
use kvmeter::measure::cpu::CpuTime;
use kvmeter::store::Record;
use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, ReadOptions, DB};
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

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` and the test harness probe
    }
    let records = knobs::count("RECORDS", 100_000);
    let ops = knobs::count("OPS", 1_000_000);
    let threads = knobs::count("THREADS", 1);
    let value_size = env("VALUE_SIZE", 1000) as usize;
    let cache_mb = env("CACHE_MB", 256);
    let copy = knobs::flag("COPY");
    // ORDERED=1: db_bench's data shape — keys loaded in order ("user" + 19 digits, 23 bytes,
    // as YCSB's insertorder=ordered with zeropadding=19), so the flushed files do not overlap.
    let ordered = knobs::flag("ORDERED");
    let padding = if ordered { 19 } else { 1 };
    // Read before anything is made: a refused setting exits without a store left behind.
    let dbb = keys::db_bench_keys();
    let dir = tempfile::tempdir().unwrap();

    let cache = Cache::new_lru_cache((cache_mb as usize) << 20);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&cache);
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_compression_type(DBCompressionType::None);
    opts.set_block_based_table_factory(&table);
    let mut db = DB::open(&opts, dir.path()).unwrap();

    let mut rec = Record::new();
    rec.push(b"field0", &vec![b'x'; value_size]);
    let mut value = Vec::new();
    rec.encode_into(&mut value);
    let mut key = Vec::new();
    for k in 0..records as i64 {
        keys::build(k, padding, ordered, dbb, &mut key);
        db.put(&key, &value).unwrap();
    }
    db.flush().unwrap();
    // COLD=1: reopened and not warmed, as kvmeter's run phase starts (each phase opens the
    // store afresh, so its block cache starts empty).
    let cold = knobs::flag("COLD");
    if cold || knobs::flag("REOPEN") {
        // As kvmeter does between its load and run phases.
        drop(db);
        db = DB::open(&opts, dir.path()).unwrap();
    }
    // Warm the cache as a preceding load would.
    for k in (0..records as i64).filter(|_| !cold) {
        keys::build(k, padding, ordered, dbb, &mut key);
        assert!(db.get_pinned(&key).unwrap().is_some());
    }

    let clock = timed::clock_from_env();
    let clock = &clock;
    let start = Instant::now();
    let cpu0 = CpuTime::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let db = &db;
            let n = ops / threads + u64::from(t < ops % threads);
            s.spawn(move || {
                let mut timed = Timed::for_thread(clock);
                let mut decode = Decode::from_env();
                let ro = ReadOptions::default();
                let mut keys = keys::Keys::for_thread(t, records, value_size, padding, ordered);
                let mut bytes = 0usize;
                let mut owned: Vec<u8> = Vec::with_capacity(value_size + 64);
                for _ in 0..n {
                    let key = keys.next();
                    let t0 = Timed::start(&timed);
                    let v = db.get_pinned_opt(key, &ro).unwrap().expect("loaded key");
                    bytes += Decode::data_bytes(&mut decode, &v);
                    Timed::end(&mut timed, t0, v.len());
                    if copy {
                        // What a client does with the value: take it out of RocksDB's cache.
                        owned.clear();
                        owned.extend_from_slice(&v);
                        bytes += owned[owned.len() / 2] as usize;
                    } else {
                        bytes += v.len();
                    }
                }
                std::hint::black_box((bytes, &timed));
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let cpu = CpuTime::now().since(cpu0, ops).expect("OPS > 0");
    eprintln!("rocksdb_direct: {ops} reads, {threads} threads, {secs:.3} s");
    println!("cpu_ns_per_op={:.0}", cpu.ns_per_op);
    println!("ops_per_sec={:.0}", ops as f64 / secs);
}
