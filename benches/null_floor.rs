//! The floor of one operation on the null store: what kvmeter cannot skip for a YCSB operation
//! before any store is called, measured layer by layer in one tight loop (no session, no
//! driver, no other thread). Layers, each adding to the one before:
//!   keys    YCSB's exact next operation (`CoreWorkload::next_op`: the operation choice, the
//!           key — zipfian with `pow`, FNV scrambling, the decimal name — and, for writes,
//!           the field values, which kvmeter draws eagerly),
//!   clock   two reads of kvmeter's clock (`lfence; rdtsc` where the TSC is safe),
//!   record  the latency recorded in the per-worker histogram (`measure::Stats::record`).
//! `bench/compare.sh` (ceiling-floor-*) sets these beside `kvmeter run --store null` and YCSB's
//! BasicDB: the 3× ceiling needs kvmeter at a third of BasicDB's time per operation, and
//! the `record` layer is the least any harness timing every operation exactly can spend.
//!
//! Environment: WORKLOAD (c; any of YCSB's a–f), OPS (10000000 per layer), ROUNDS (3; the
//! fastest round of each layer is printed). Output: `<layer>_ns_per_op=<n>` per layer, then
//! `ops_per_sec=<n>` for the `record` layer.

use knobs::env;
use kvmeter::measure::clock::Clock;
use kvmeter::measure::{Metric, Stats};
use kvmeter::plan::Request;
use kvmeter::store::Status;
use kvmeter::workload::{CoreWorkload, Op, OpBuffers, Rng};
use std::hint::black_box;
use std::time::Instant;

#[path = "common/knobs.rs"]
#[allow(dead_code)] // no switches here
mod knobs;
#[path = "common/workload.rs"]
mod workload;

#[derive(Clone, Copy, PartialEq)]
enum Layer {
    Keys,
    Clock,
    Record,
}

fn metric(op: Op) -> Metric {
    match op {
        Op::Read => Metric::Read,
        Op::Update => Metric::Update,
        Op::Insert => Metric::Insert,
        Op::Scan => Metric::Scan,
        Op::ReadModifyWrite => Metric::ReadModifyWrite,
    }
}

/// Nanoseconds per operation of `ops` operations with the layers up to `layer`.
fn run(wl: &CoreWorkload, clock: &Clock, layer: Layer, ops: u64) -> f64 {
    let mut rng = Rng::for_worker(1, 0);
    let mut b = OpBuffers::default();
    let mut stats = Stats::new(&Metric::ALL, false);
    let start = Instant::now();
    for _ in 0..ops {
        let op = wl.next_op(&mut rng, &mut b);
        black_box(&b);
        if layer == Layer::Keys {
            continue;
        }
        let t0 = clock.now();
        black_box(op);
        let took = clock.now().saturating_sub(t0);
        if layer == Layer::Record {
            stats.record(metric(op), Status::Ok, took, took, 0);
        }
    }
    black_box(&stats);
    start.elapsed().as_nanos() as f64 / ops as f64
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let workload = std::env::var("WORKLOAD").unwrap_or_else(|_| "c".into());
    let ops = knobs::count("OPS", 10_000_000);
    let req = Request {
        command: "run".into(),
        workload_files: vec![format!("workload{workload}")],
        store: "null".into(),
        phase: Some("run".into()),
        ..Default::default()
    };
    let wl = workload::run_phase(&req, &format!("WORKLOAD={workload}"));
    let (clock, what) = Clock::auto(true);
    eprintln!("null_floor: workload{workload}, {ops} operations per layer, clock: {what}");
    let layers = [
        (Layer::Keys, "keys"),
        (Layer::Clock, "clock"),
        (Layer::Record, "record"),
    ];
    let mut best = [f64::MAX; 3];
    for _ in 0..env("ROUNDS", 3) {
        for (i, (layer, _)) in layers.iter().enumerate() {
            best[i] = best[i].min(run(&wl, &clock, *layer, ops));
        }
    }
    for (i, (_, name)) in layers.iter().enumerate() {
        println!("{name}_ns_per_op={:.1}", best[i]);
    }
    println!("ops_per_sec={:.0}", 1e9 / best[2]);
}
