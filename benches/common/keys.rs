//! YCSB_KEYS=1 for the direct loops (they include `common/workload.rs` as their `workload`):
//! each read's key chosen exactly as kvmeter chooses it (`CoreWorkload::next_op` of workload C
//! over the loop's records, uniform requests, each thread on kvmeter's own random stream for
//! its index) instead of the loop's xorshift. With TIMED=1 and DECODE=1 (`common/decode.rs`) it
//! is the floor of a YCSB-exact harness: what kvmeter adds beyond it is its driver alone
//! (session dispatch, status and view handling, the per-worker recorder, the interval tick).
//!
//! Each thread builds its own `CoreWorkload` on its own stack (about 0.1 ms, inside the
//! measured window: under 0.05 % of it). One shared copy on the main thread's stack made the
//! timed two-thread LMDB loop 10–15 % slower or not, depending only on where it landed (80 ns per
//! read more CPU, every function slower alike; a boxed copy moved it back): an artefact of memory
//! layout on this host, which a floor must not carry.

use kvmeter::plan::Request;
use kvmeter::workload::keys::build_key_name;
use kvmeter::workload::{CoreWorkload, Op, OpBuffers, Rng};

/// Workload C as `kvmeter run` builds it for the loop's data shape, when YCSB_KEYS=1.
fn workload_from_env(records: u64, value_size: usize, ordered: bool) -> Option<CoreWorkload> {
    if !crate::knobs::flag("YCSB_KEYS") {
        return None;
    }
    let mut props = vec![
        "fieldcount=1".to_string(),
        format!("fieldlength={value_size}"),
        "requestdistribution=uniform".to_string(),
    ];
    if ordered {
        props.extend(["insertorder=ordered".into(), "zeropadding=19".into()]);
    }
    let req = Request {
        command: "run".into(),
        workload_files: vec!["workloadc".into()],
        props,
        store: "null".into(),
        phase: Some("run".into()),
        records: Some(records as i64),
        seed: Some(1),
        ..Default::default()
    };
    Some(crate::workload::run_phase(&req, "YCSB_KEYS=1"))
}

/// DBB_KEYS=1: db_bench's key format instead of YCSB's, for the loops' load and reads — the
/// number's 8 bytes big-endian, then '0' up to 23 bytes (`db_bench_tool.cc`,
/// `GenerateKeyFromInt` with `--key_size=23`), loaded in order whatever ORDERED says. Against
/// rocksdb_direct's ORDERED=1 keys (`user` + 19 digits, loaded in order) only the content
/// differs: adjacent keys share 5-7 bytes instead of ~20, so blocks and index separators hold
/// other bytes. It measures what the key's content alone does to RocksDB's reads
/// (BENCHMARKS.md). Against embedded_direct's YCSB keys (hashed, of varying length, loaded in
/// hash order) the length and the load order differ too. kvmeter's keys are always YCSB's.
pub fn db_bench_keys() -> bool {
    let on = crate::knobs::flag("DBB_KEYS");
    if on && crate::knobs::flag("YCSB_KEYS") {
        // YCSB's key choice reads YCSB's keys: a load in db_bench's format would miss them all.
        crate::knobs::bad(
            "DBB_KEYS",
            "1",
            "0 with YCSB_KEYS=1 (the two key formats exclude each other)",
        );
    }
    on
}

/// Key `k` in the loop's format: db_bench's (`dbb`) or YCSB's.
#[inline(always)]
pub fn build(k: i64, padding: usize, ordered: bool, dbb: bool, out: &mut Vec<u8>) {
    if dbb {
        out.clear();
        out.extend_from_slice(&(k as u64).to_be_bytes());
        out.resize(23, b'0');
    } else {
        build_key_name(k, padding, ordered, out);
    }
}

/// One thread's keys: YCSB's when YCSB_KEYS=1, else the loop's own xorshift.
pub struct Keys {
    records: u64,
    padding: usize,
    ordered: bool,
    dbb: bool,
    x: u64,
    ycsb: Option<(CoreWorkload, Rng)>,
    bufs: OpBuffers,
}

impl Keys {
    /// Call on the thread that reads, and keep the result on its stack.
    pub fn for_thread(
        thread: u64,
        records: u64,
        value_size: usize,
        padding: usize,
        ordered: bool,
    ) -> Self {
        let wl = workload_from_env(records, value_size, ordered);
        Keys {
            records,
            padding,
            ordered,
            dbb: db_bench_keys(),
            x: 0x9E37_79B9_7F4A_7C15 ^ (thread + 1),
            // kvmeter's worker `thread` of a run with seed 1 (`driver::worker::run`).
            ycsb: wl.map(|w| (w, Rng::for_worker(1, thread))),
            bufs: OpBuffers::default(),
        }
    }

    #[inline(always)]
    pub fn next(&mut self) -> &[u8] {
        match &mut self.ycsb {
            Some((wl, rng)) => {
                let wl = &*wl;
                let op = wl.next_op(rng, &mut self.bufs);
                debug_assert!(op == Op::Read, "workload C only reads");
                std::hint::black_box(wl.read_fields(&self.bufs));
            }
            None => {
                let x = &mut self.x;
                *x ^= *x << 13;
                *x ^= *x >> 7;
                *x ^= *x << 17;
                build(
                    (*x % self.records) as i64,
                    self.padding,
                    self.ordered,
                    self.dbb,
                    &mut self.bufs.key,
                );
            }
        }
        &self.bufs.key
    }
}
