//! The measured call's books, one for the worker threads (`measured.rs`) and for the
//! event-driven engine (`engine/`), after YCSB's `DBWrapper` ("measures latencies and counts
//! return codes" in one place): once an operation's reply is in, its latency from its start
//! and from its intended start (spec §5, coordinated omission), the interval it completed in,
//! the recovery timeline and, for a failure, the phase's rule on fatal errors and one sample
//! of the store's words per metric and kind. A new per-operation figure is one edit here.
//!
//! Each caller keeps what differs: how it reads the clock around the call, and what it does
//! after a fatal error it tolerates (a worker thread waits 1 ms so a dead server is not
//! hammered; an event loop never sleeps). Hot path: no allocation, no lock; an error's sample
//! allocates once per metric and kind, out of line.

use super::worker::Shared;
use crate::measure::timeline::WorkerTimeline;
use crate::measure::Metric;
use crate::measure::WorkerRecorder;
use crate::report::ErrorSample;
use crate::store::{ErrorKind, Status};

/// One completed operation, its times on the run's clock (ns).
pub(super) struct Done {
    pub metric: Metric,
    pub status: Status,
    /// When the request left (or, for an operation that waited for nothing, its intended
    /// start): service time is measured from here.
    pub start: u64,
    /// When the operation should have started (open loop's schedule; closed loop: `start`).
    pub intended: u64,
    pub end: u64,
    pub bytes: u64,
}

/// Counts `d` in the interval it completed in, with both latencies, and on the recovery
/// timeline (`class`: the affected shard's or the rest's).
#[inline]
pub(super) fn record(
    rec: &mut WorkerRecorder,
    timeline: Option<&WorkerTimeline>,
    class: usize,
    d: &Done,
) {
    let service = d.end.saturating_sub(d.start);
    let from_intended = d.end.saturating_sub(d.intended);
    rec.at(d.end);
    rec.record(d.metric, d.status, service, from_intended, d.bytes);
    if let Some(t) = timeline {
        t.record(class, d.status, d.end, from_intended);
    }
}

/// A failed operation: a fatal error ends the phase (with results so far) unless the phase
/// tolerates them (a fault is expected to break connections), and the first error of each
/// metric and kind keeps the store's words. `true`: a fatal error the phase tolerated.
#[cold]
pub(super) fn failed(
    sh: &Shared,
    samples: &mut Vec<ErrorSample>,
    m: Metric,
    (kind, fatal): (ErrorKind, bool),
    message: Option<String>,
) -> bool {
    if fatal && !sh.tolerate_fatal {
        sh.fail(format!(
            "{} failed: {} error{}",
            m.name(),
            kind.name(),
            message
                .as_ref()
                .map(|t| format!(": {t}"))
                .unwrap_or_default()
        ));
    }
    if !samples
        .iter()
        .any(|s| s.metric == m.name() && s.kind == kind.name())
    {
        samples.push(ErrorSample {
            metric: m.name().to_string(),
            kind: kind.name().to_string(),
            message: message.unwrap_or_else(|| "(the store gave no message)".into()),
        });
    }
    fatal && sh.tolerate_fatal
}
