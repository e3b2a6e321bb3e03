//! A replay phase's feed (`kvmeter replay`): the trace and each worker's bounded queue, and
//! the counts replay.json reports. Apart from the feeder and the workers' loop (`replay.rs`)
//! so that the worker loop (`worker.rs`), which holds the feed, and the replay, which drives
//! workers, do not import each other.

use crate::measure::Metric;
use crate::plan::replay::ReplayPlan;
use crate::trace::{Kind, TraceReader};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Mutex;

/// Records queued ahead per worker.
pub(super) const QUEUE: usize = 1024;
/// Key bytes queued ahead across all workers: the feeder waits past it, as for a full queue
/// (security review F6: 64-KiB keys at 1,024 records a worker held 1.26 GB at 16 threads).
pub(super) const QUEUE_BYTES: u64 = 64 << 20;
/// A spent key buffer larger than this is freed rather than kept for reuse, and a buffered
/// slot's key buffer larger than this is freed once a smaller key takes the slot.
pub(super) const KEEP_CAPACITY: usize = 256;
/// At most this many records of one whole second are held to spread them (and at most
/// `SPREAD_MAX_BYTES` of their keys); a fuller second is replayed at this many per second.
pub(super) const SPREAD_MAX: usize = 100_000;
pub(super) const SPREAD_MAX_BYTES: usize = 64 << 20;
/// The first record is due this long after the phase starts: time for the feeder to queue
/// ahead, so a record counted `behind` means the store (or the feeder) fell behind.
pub(super) const LEAD_NS: u64 = 10_000_000;
/// The name of a write's one field (values are generated to the record's value size).
pub(super) const FIELD: &[u8] = b"field0";

/// One record for a worker.
pub(super) struct Item {
    pub(super) key: Vec<u8>,
    pub(super) kind: Kind,
    pub(super) value_size: u64,
    pub(super) scan_len: u32,
    /// Intended start, clock ns.
    pub(super) intended: u64,
}

/// A worker's ends of its queue and of the channel its spent key buffers go back on.
pub(super) struct WorkerEnds {
    pub(super) rx: Receiver<Item>,
    pub(super) back: SyncSender<Vec<u8>>,
}

/// What the replay did, written to the run directory as replay.json.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ReplayCounts {
    /// Trace records read (good lines), including skipped and unreplayable ones.
    pub records_read: u64,
    /// Records left out by `--skip`.
    pub skipped: u64,
    /// Bad lines counted by `--skip-bad`, and the first few of them (file:line: why).
    pub bad_lines: u64,
    pub first_bad_lines: Vec<String>,
    /// Operations handed to the workers (after `--amplify`), by the trace's operation name.
    pub replayed_by_op: BTreeMap<String, u64>,
    /// Records not sent (operations kvmeter or this store does not have), by name.
    pub unreplayable_by_op: BTreeMap<String, u64>,
    /// Operations handed over but not sent because the phase stopped first.
    pub not_sent: u64,
    /// Operations sent after their intended start (their worker was busy when they were due).
    pub behind: u64,
    /// Whole seconds with more than the spreading bound's records.
    pub overfull_seconds: u64,
    /// Why feeding ended: "end of trace", "--ops", "--duration", "stopped".
    pub ended_by: String,
    /// Per operation of the measured window (summary.json's names): hits, misses and the hit
    /// ratio — a cache trace replayed is judged on them.
    pub answers: BTreeMap<String, Answers>,
}

/// How the store answered one operation's calls: with the value (hit) or "no such key" (miss).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Answers {
    pub hits: u64,
    pub misses: u64,
    /// hits / (hits + misses); null when there was neither.
    pub hit_ratio: Option<f64>,
}

/// The feeder's ends: the trace, each worker's queue, the spent key buffers coming back.
pub(super) struct FeederEnds {
    pub(super) reader: TraceReader,
    pub(super) senders: Vec<SyncSender<Item>>,
    pub(super) back: Receiver<Vec<u8>>,
}

/// The phase's replay: the trace, the workers' queue ends, and the counts.
pub struct Feed {
    pub(super) plan: ReplayPlan,
    pub(super) threads: usize,
    /// Records to hand over in all (`--ops`); 0 = the whole trace.
    pub(super) ops: u64,
    pub(super) can_scan: bool,
    /// The feeder's ends, taken once by the feeder thread.
    pub(super) reader: Mutex<Option<FeederEnds>>,
    pub(super) workers: Vec<Mutex<Option<WorkerEnds>>>,
    pub(super) behind: AtomicU64,
    pub(super) not_sent: AtomicU64,
    /// Key bytes handed to the workers and not yet taken (bounded by `QUEUE_BYTES`).
    pub(super) queued_bytes: AtomicU64,
    pub(super) counts: Mutex<ReplayCounts>,
}

/// Metrics a replay phase records.
pub(super) fn metrics() -> Vec<Metric> {
    vec![
        Metric::Read,
        Metric::Insert,
        Metric::Scan,
        Metric::Delete,
        Metric::Cleanup,
    ]
}

impl Feed {
    /// Opens the trace and makes each worker's queue (before the phase's clock starts).
    pub(super) fn open(
        plan: &ReplayPlan,
        threads: usize,
        ops: u64,
        can_scan: bool,
    ) -> anyhow::Result<Feed> {
        let reader = TraceReader::open(&plan.trace, plan.format)?;
        let (back_tx, back_rx) = mpsc::sync_channel(threads * (QUEUE + 2));
        let mut senders = Vec::with_capacity(threads);
        let mut workers = Vec::with_capacity(threads);
        for _ in 0..threads {
            let (tx, rx) = mpsc::sync_channel(QUEUE);
            senders.push(tx);
            workers.push(Mutex::new(Some(WorkerEnds {
                rx,
                back: back_tx.clone(),
            })));
        }
        Ok(Feed {
            plan: plan.clone(),
            threads,
            ops,
            can_scan,
            reader: Mutex::new(Some(FeederEnds {
                reader,
                senders,
                back: back_rx,
            })),
            workers,
            behind: AtomicU64::new(0),
            not_sent: AtomicU64::new(0),
            queued_bytes: AtomicU64::new(0),
            counts: Mutex::new(ReplayCounts::default()),
        })
    }

    /// replay.json: the feeder's counts, with each operation's hits, misses and hit ratio
    /// from the phase's summary.
    pub(super) fn counts_with(
        &self,
        ops: &BTreeMap<String, crate::report::OpSummary>,
    ) -> ReplayCounts {
        let mut c = self.counts();
        c.answers = ops
            .iter()
            .map(|(name, o)| {
                let a = Answers {
                    hits: o.hits,
                    misses: o.misses,
                    hit_ratio: o.hit_ratio,
                };
                (name.clone(), a)
            })
            .collect();
        c
    }

    /// The counts once the phase is over.
    pub(super) fn counts(&self) -> ReplayCounts {
        let mut c = self
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        c.behind = self.behind.load(Ordering::Relaxed);
        c.not_sent = self.not_sent.load(Ordering::Relaxed);
        c
    }
}
