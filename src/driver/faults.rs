//! The fault companion of a run phase: the fault schedule (`fault::schedule`) and the
//! recovery timeline (`measure::timeline`) side by side. Its siblings are `PressureScale` and
//! `RunningAntagonists`; it starts with the phase's clock, they just before it. At every interval boundary it writes
//! the timeline buckets that are complete to `timeline.csv`; at the end it stops the
//! schedule, and reads the timeline around each fault (`fault::recovery`) into the summary.

use super::companion::Companion;
use crate::fault::recovery;
use crate::fault::schedule::Schedule;
use crate::measure::clock::Clock;
use crate::measure::timeline::{Bucket, Timeline};
use crate::plan::{PhaseKind, PhasePlan, Plan};
use crate::report::fault_files::{TimelineCsv, TIMELINE_CSV};
use crate::report::rundir::RunDir;
use crate::report::PhaseSummary;
use crate::store::cluster::Cluster;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(super) struct FaultCompanion {
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

/// What the fault companion starts from: the phase and its cluster, and the phase's start
/// (`t0`, and `start_ns`, the clock reading the timeline counts from).
pub(super) struct FaultStart<'a> {
    pub plan: &'a Plan,
    pub phase: &'a PhasePlan,
    /// The managed server or cluster the faults act on.
    pub cluster: Option<&'a Arc<Mutex<Cluster>>>,
    /// The run directory (timeline.csv, events.csv).
    pub root: &'a Path,
    pub clock: &'a Clock,
    pub timeline: Option<Timeline>,
    pub start_ns: u64,
    pub t0: Instant,
    /// The live metrics endpoint counts each event too.
    pub live: Option<&'a super::live::Live>,
}

impl FaultCompanion {
    /// `None` when the phase has neither a timeline nor faults.
    pub(super) fn start(s: FaultStart) -> Option<FaultCompanion> {
        let FaultStart {
            plan,
            phase,
            cluster,
            root,
            clock,
            timeline,
            start_ns,
            t0,
            live,
        } = s;
        let cluster = cluster.filter(|_| phase.kind == PhaseKind::Run);
        if timeline.is_none() && (plan.faults.is_empty() || cluster.is_none()) {
            return None;
        }
        let split = plan.affected_shard().is_some();
        let csv = timeline.as_ref().and_then(|_| {
            TimelineCsv::open(root, &phase.name, split)
                .map_err(|e| errln!("warning: {}: {e}", root.join(TIMELINE_CSV).display()))
                .ok()
        });
        let schedule = match (cluster, plan.faults.is_empty()) {
            (Some(c), false) => Some(Schedule::start(
                plan.faults.clone(),
                c.clone(),
                t0,
                match live {
                    Some(l) => l.fault_sink(
                        &phase.name,
                        crate::report::fault_files::events_csv(root, &phase.name),
                    ),
                    None => crate::report::fault_files::events_csv(root, &phase.name),
                },
            )),
            _ => None,
        };
        Some(FaultCompanion {
            timeline,
            clock: clock.clone(),
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

impl Companion for FaultCompanion {
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
