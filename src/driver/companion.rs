//! What runs beside a phase's workers and acts at its interval boundaries: the pressure scale
//! (`pressure.rs`), the `--antagonist` loads (`antagonists.rs`) and the fault companion
//! (`faults.rs`: the `--fault` schedule and the `--timeline` buckets). The interval loop calls
//! every companion at the same three points, so a new one joins without touching the loop;
//! `phase.rs` starts them (the loads before the phase's clock, the fault companion on it) and
//! lists them in one vector.

use crate::measure::Stats;
use crate::report::rundir::RunDir;
use crate::report::PhaseSummary;
use std::time::Duration;

pub(super) trait Companion {
    /// An interval boundary `at` after the phase started, before that interval is closed.
    fn boundary(&mut self, _at: Duration) {}
    /// A closed interval after warm-up, which began `from` after the phase started.
    fn measured(&mut self, _from: Duration, _interval: &Stats) {}
    /// The workers ended at `end`: stop, and put what was measured into the summary.
    fn finish(
        self: Box<Self>,
        _end: Duration,
        _ps: &mut PhaseSummary,
        _rundir: &mut RunDir,
    ) -> anyhow::Result<()> {
        Ok(())
    }
}
