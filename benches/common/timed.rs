//! TIMED=1 for the direct loops: what kvmeter's measured call cannot do without — two reads of
//! kvmeter's own clock around the store call and the latency recorded in its per-worker
//! histogram (`measure::Stats`), nothing else (no workload generator, session dispatch or
//! record decoding). A direct loop with TIMED=1 is the floor for a harness that times every
//! operation exactly; it splits kvmeter's gap to the bare loop into that floor and the rest.

use kvmeter::measure::clock::Clock;
use kvmeter::measure::{Metric, Stats};
use kvmeter::store::Status;

/// Per thread: kvmeter's clock and a histogram of reads; `None` when TIMED is off.
pub struct Timed {
    clock: Clock,
    stats: Stats,
}

impl Timed {
    pub fn for_thread(clock: &Option<Clock>) -> Option<Timed> {
        clock.as_ref().map(|c| Timed {
            clock: c.clone(),
            stats: Stats::new(&[Metric::Read], false),
        })
    }

    #[inline(always)]
    pub fn start(t: &Option<Timed>) -> u64 {
        t.as_ref().map_or(0, |t| t.clock.now())
    }

    #[inline(always)]
    pub fn end(t: &mut Option<Timed>, t0: u64, bytes: usize) {
        if let Some(t) = t {
            let took = t.clock.now().saturating_sub(t0);
            t.stats
                .record(Metric::Read, Status::Ok, took, took, bytes as u64);
        }
    }
}

/// The clock every thread copies: calibrated once, when TIMED=1.
pub fn clock_from_env() -> Option<Clock> {
    crate::knobs::flag("TIMED").then(|| Clock::auto(true).0)
}
