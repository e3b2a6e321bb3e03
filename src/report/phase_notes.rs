//! What a phase's or a run's summary says of itself beyond its figures: the calls that failed
//! (misses apart: for a cache a miss is an answer) and the warning a phase with many of them
//! gives, since its throughput counts them as YCSB's does; and the plan's phases a run that
//! ended early never started.

use super::{is_store_call, PhaseSummary, Summary};

impl PhaseSummary {
    /// Store calls of the measured window that failed, misses not counted (for a cache a miss
    /// is an answer), N/A operations left out as in `operations`.
    pub fn failed_calls(&self) -> u64 {
        self.ops
            .iter()
            .filter(|(name, _)| {
                crate::measure::Metric::ALL
                    .iter()
                    .any(|m| m.name() == name.as_str() && is_store_call(*m))
                    && !self.not_applicable.contains(name)
            })
            .map(|(_, o)| o.count - o.ok - o.misses)
            .sum()
    }

    /// A line for a phase of which 1 % or more of the calls failed: its throughput counts
    /// them, as YCSB's does, so it says what succeeded.
    pub fn failure_warning(&self) -> Option<String> {
        let failed = self.failed_calls();
        if self.operations == 0 || failed * 100 < self.operations {
            return None;
        }
        let share = failed as f64 / self.operations as f64 * 100.0;
        let ok_rate = if self.measured_seconds > 0.0 {
            (self.operations - failed) as f64 / self.measured_seconds
        } else {
            0.0
        };
        Some(format!(
            "phase {}: {failed} of {} calls failed ({share:.0} %, misses not counted); its throughput counts every call, as YCSB's does: {ok_rate:.0} ops/s succeeded",
            self.name, self.operations
        ))
    }
}

impl Summary {
    /// Fills `not_run` with the plan's phases that have no summary: what a run that ended
    /// early never started.
    pub fn note_not_run(&mut self, plan: &crate::plan::Plan) {
        let ran: Vec<&str> = self.phases.iter().map(|p| p.name.as_str()).collect();
        self.not_run = plan
            .phases
            .iter()
            .filter(|p| !ran.contains(&p.name.as_str()))
            .map(|p| p.name.clone())
            .collect();
    }
}
