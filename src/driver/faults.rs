//! The recovery companion of a run phase: the fault schedule (`fault::schedule`) and the
//! recovery timeline (`measure::timeline`) side by side. At every interval boundary it writes
//! the timeline buckets that are complete to `timeline.csv`; at the end it stops the
//! schedule, and reads the timeline around each fault (`fault::recovery`) into the summary.

use super::companion::Companion;
use super::phase::PhaseCtx;
use crate::fault::recovery;
use crate::fault::schedule::Schedule;
use crate::measure::clock::Clock;
use crate::measure::timeline::{Bucket, Timeline};
use crate::plan::{PhaseKind, PhasePlan};
use crate::report::fault_files::{TimelineCsv, TIMELINE_CSV};
use crate::report::rundir::RunDir;
use crate::report::PhaseSummary;
use std::time::{Duration, Instant};

pub(super) struct Recovery {
    timeline: Option<Timeline>,
    clock: Clock,
    start_ns: u64,
    csv: Option<TimelineCsv>,
    /// Buckets kept for the analysis (when there are faults).
    kept: Vec<Bucket>,
    schedule: Option<Schedule>,
    specs: Vec<String>,
    warmup_s: f64,
    /// Whether the cluster tells affected data from the rest.
    split: bool,
    /// How long after a bucket ends it is read (half an interval): a completion is placed by
    /// its own time but recorded a moment later, and a worker preempted in between (a loaded
    /// host) must not miss its bucket. One bucket of grace was too little at `--timeline 1ms`.
    /// The rings hold two intervals, so a bucket is still read long before its slot is reused.
    grace_ns: u64,
}

/// The shard the faults hit, where the cluster shards data by master (a Redis Cluster's
/// `master:i`): the first such target. Elsewhere every operation is on affected data.
pub(super) fn affected_shard(plan: &crate::plan::Plan) -> Option<u16> {
    if plan.store_options.u64("cluster").unwrap_or(0) == 0 {
        return None;
    }
    plan.faults.iter().find_map(|f| {
        f.target
            .strip_prefix("master:")
            .and_then(|i| i.parse().ok())
    })
}

impl Recovery {
    /// `None` when the phase has neither a timeline nor faults.
    /// `start_ns`: the clock reading the timeline counts from; `t0`: the phase's start.
    pub(super) fn start(
        ctx: &PhaseCtx,
        phase: &PhasePlan,
        timeline: Option<Timeline>,
        start_ns: u64,
        t0: Instant,
    ) -> Option<Recovery> {
        let (plan, rundir) = (ctx.plan, &*ctx.rundir);
        let cluster = ctx.cluster.filter(|_| phase.kind == PhaseKind::Run);
        if timeline.is_none() && (plan.faults.is_empty() || cluster.is_none()) {
            return None;
        }
        let split = affected_shard(plan).is_some();
        let csv = timeline.as_ref().and_then(|_| {
            TimelineCsv::open(rundir.root(), &phase.name, split)
                .map_err(|e| {
                    eprintln!(
                        "warning: {}: {e}",
                        rundir.root().join(TIMELINE_CSV).display()
                    )
                })
                .ok()
        });
        let schedule = match (cluster, plan.faults.is_empty()) {
            (Some(c), false) => Some(Schedule::start(
                plan.faults.clone(),
                c.clone(),
                t0,
                crate::report::fault_files::events_csv(rundir.root(), &phase.name),
            )),
            _ => None,
        };
        Some(Recovery {
            timeline,
            clock: ctx.clock.clone(),
            start_ns,
            csv,
            kept: vec![],
            schedule,
            specs: plan.faults.iter().map(|f| f.spec.clone()).collect(),
            warmup_s: phase.warmup.as_secs_f64(),
            split,
            grace_ns: (plan.interval.as_nanos() / 2).min(u64::MAX as u128) as u64,
        })
    }

    /// Writes (and keeps, with faults) the buckets complete by `now_ns` after the start.
    fn drain(&mut self, now_ns: u64, last: bool) {
        let Some(t) = self.timeline.as_mut() else {
            return;
        };
        let width = t.width_ns as f64 / 1e9;
        let buckets = t.take(now_ns, last);
        if let Some(f) = self.csv.as_mut() {
            let _ = f.write(&buckets, width);
        }
        if self.schedule.is_some() {
            self.kept.extend(buckets);
        }
    }
}

impl Companion for Recovery {
    fn boundary(&mut self, _at: Duration) {
        let now = self.clock.now().saturating_sub(self.start_ns);
        self.drain(now.saturating_sub(self.grace_ns), false);
    }

    fn finish(
        mut self: Box<Self>,
        end: Duration,
        ps: &mut PhaseSummary,
        _rundir: &mut RunDir,
    ) -> anyhow::Result<()> {
        self.drain(end.as_nanos() as u64, true);
        let Some(s) = self.schedule.take() else {
            return Ok(());
        };
        let events = s.finish();
        if let Some(t) = &self.timeline {
            ps.faults = recovery::analyse(
                &self.kept,
                t.width_ns as f64 / 1e9,
                &events,
                &self.specs,
                self.split,
                self.warmup_s,
            );
        }
        ps.fault_events = events;
        Ok(())
    }
}
