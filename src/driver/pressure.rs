//! The pressure scale inside a phase (papers/004): four O_DIRECT antagonists step through the
//! write ratios w0..w25 (`antagonist::schedule`), one step every `--step`, starting when
//! warm-up ends. The store's operations are summed per step, and the antagonists' own I/O is
//! sampled at each step boundary; at the end each step's throughput becomes its normalized
//! pressure and the steps are sorted into the scale. When the store reports statistics, each
//! step also says what the store wrote and how long its writers stalled, from the store's
//! samples at the step's two boundaries (`store_stats::Samples`, by the time each was asked
//! for; issue 43: papers/004 asks about compaction under interference).

use super::companion::Companion;
use super::store_stats::Samples;
use crate::antagonist::io::{IoAntagonists, Sample};
use crate::antagonist::schedule;
use crate::measure::{percentile, Stats};
use crate::plan::PressurePhase;
use crate::report::pressure::PressureStoreMeans;
use crate::report::rundir::RunDir;
use crate::report::{self, Outcome, PhaseSummary, PressureResult, PressureStep, PressureStore};
use crate::store::stats::StatSpec;
use std::collections::BTreeMap;
use std::time::Duration;

pub(super) struct PressureScale<'a> {
    plan: &'a PressurePhase,
    io: &'a IoAntagonists,
    warmup: Duration,
    random_ratio: f64,
    /// The store's operations per step (measured intervals only).
    steps: Vec<Stats>,
    /// The antagonists' counters at each step boundary, and when each step began.
    samples: Vec<Vec<Sample>>,
    starts: Vec<Duration>,
    /// The store's statistics and its samples, when it reports any.
    store: Option<(&'static [StatSpec], Samples)>,
    current: Option<usize>,
}

impl<'a> PressureScale<'a> {
    /// Starts the schedule (at once when there is no warm-up, else at its end).
    pub(super) fn start(
        plan: &'a PressurePhase,
        io: &'a IoAntagonists,
        warmup: Duration,
        random_ratio: f64,
        store: Option<(&'static [StatSpec], Samples)>,
        empty: impl Fn() -> Stats,
    ) -> Self {
        let mut p = PressureScale {
            plan,
            io,
            warmup,
            random_ratio,
            steps: (0..schedule::STEPS).map(|_| empty()).collect(),
            samples: vec![],
            starts: vec![],
            store,
            current: None,
        };
        p.boundary(Duration::ZERO);
        p
    }

    /// The step (w0..w25) in progress `t` after the phase started, if any.
    fn step_at(&self, t: Duration) -> Option<usize> {
        step_index(self.plan, self.warmup, t)
    }
}

/// The pressure step (w0..w25) in progress `t` after the phase started, if any.
fn step_index(pp: &PressurePhase, warmup: Duration, t: Duration) -> Option<usize> {
    let since = t.checked_sub(warmup)?;
    let w = (since.as_nanos() / pp.step.as_nanos().max(1)) as usize;
    (w < schedule::STEPS).then_some(w)
}

impl Companion for PressureScale<'_> {
    fn boundary(&mut self, at: Duration) {
        let Some(w) = self.step_at(at) else {
            return;
        };
        if self.current == Some(w) {
            return;
        }
        self.mark(at);
        for (i, wr) in schedule::step(w).iter().enumerate() {
            self.io.set(i, *wr, self.plan.block_size);
        }
        self.current = Some(w);
    }

    fn measured(&mut self, from: Duration, interval: &Stats) {
        if let Some(w) = self.step_at(from) {
            self.steps[w].add(interval);
        }
    }

    fn finish(
        mut self: Box<Self>,
        end: Duration,
        ps: &mut PhaseSummary,
        rundir: &mut RunDir,
    ) -> anyhow::Result<()> {
        self.mark(end);
        self.io.idle_all();
        let result = self.result();
        rundir.append_pressure(&ps.name, &result)?;
        ps.pressure = Some(result);
        if let Some(e) = self.io.error() {
            ps.outcome = Outcome::Failed;
            ps.error = Some(format!("an I/O antagonist failed: {e}"));
        }
        Ok(())
    }
}

impl PressureScale<'_> {
    /// A step boundary at `at`: the antagonists' counters now (the store's sample at `at`
    /// is the sampler's, looked up at the end).
    fn mark(&mut self, at: Duration) {
        self.samples.push(self.io.sample());
        self.starts.push(at);
    }

    fn result(&self) -> PressureResult {
        let n = self.samples.len().saturating_sub(1).min(self.steps.len());
        let mut out: Vec<PressureStep> = (0..n).map(|w| self.step_result(w)).collect();
        let rho0 = out.first().map(|s| s.ops_per_s).unwrap_or(0.0);
        for s in &mut out {
            s.normalized_pressure = schedule::normalized_pressure(rho0, s.ops_per_s);
        }
        let pressures: Vec<f64> = out.iter().map(|s| s.normalized_pressure).collect();
        let mean = |r: std::ops::Range<usize>| -> f64 {
            let v: Vec<f64> = r.filter_map(|i| pressures.get(i).copied()).collect();
            if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        PressureResult {
            block_size_kib: self.plan.block_size / 1024,
            step_seconds: self.plan.step.as_secs_f64(),
            random_ratio: self.random_ratio,
            file_size_bytes: self.io.file_size,
            scale: schedule::scale(&pressures)
                .into_iter()
                .map(|i| format!("w{i}"))
                .collect(),
            read_only_mean_pressure: mean(1..5),
            write_mean_pressure: mean(5..schedule::STEPS),
            read_only_store: PressureStoreMeans::of(out.iter().skip(1).take(4)),
            write_store: PressureStoreMeans::of(out.iter().skip(5)),
            steps: out,
        }
    }

    /// Step `w`'s throughput, latency and antagonist I/O (normalized pressure filled later).
    fn step_result(&self, w: usize) -> PressureStep {
        let (starts, samples) = (&self.starts, &self.samples);
        let secs = (starts[w + 1].saturating_sub(starts[w]))
            .as_secs_f64()
            .max(1e-9);
        let st = &self.steps[w];
        let ops: u64 = st
            .metrics()
            .filter(|(m, _)| report::is_store_call(*m))
            .map(|(_, o)| o.count())
            .sum();
        let d = Sample::delta(&samples[w + 1], &samples[w], 0..schedule::INSTANCES);
        PressureStep {
            step: format!("w{w}"),
            start_s: starts[w].as_secs_f64(),
            seconds: secs,
            write_ratios: schedule::step(w).to_vec(),
            ops_per_s: ops as f64 / secs,
            normalized_pressure: 0.0,
            p50_us: percentiles(st, 50.0),
            p99_us: percentiles(st, 99.0),
            p99_9_us: percentiles(st, 99.9),
            antagonist_read_iops: d.reads as f64 / secs,
            antagonist_write_iops: d.writes as f64 / secs,
            antagonist_mb_per_s: d.bytes as f64 / secs / 1e6,
            antagonist_avg_latency_us: d.avg_latency_us(),
            // A boundary the sampler skipped (the store still answering) leaves the step
            // without the store's figures.
            store: self.store.as_ref().and_then(|(specs, samples)| {
                let samples = samples.borrow();
                let at = |i: usize| samples.get(&starts[i]).map(Vec::as_slice);
                PressureStore::between(specs, at(w)?, at(w + 1)?, secs, ops)
            }),
        }
    }
}

/// Percentile `p` of each store call's latency, µs.
fn percentiles(st: &Stats, p: f64) -> BTreeMap<String, f64> {
    st.metrics()
        .filter(|(m, _)| report::is_store_call(*m))
        .map(|(m, o)| {
            (
                m.name().to_string(),
                percentile::value_at(&o.ok, p) as f64 / 1000.0,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_start_after_warmup_and_end_after_26() {
        let pp = PressurePhase {
            block_size: 4096,
            step: Duration::from_secs(10),
        };
        let w = Duration::from_secs(5);
        assert_eq!(step_index(&pp, w, Duration::from_secs(4)), None);
        assert_eq!(step_index(&pp, w, Duration::from_secs(5)), Some(0));
        assert_eq!(step_index(&pp, w, Duration::from_secs(15)), Some(1));
        assert_eq!(step_index(&pp, w, Duration::from_secs(5 + 259)), Some(25));
        assert_eq!(step_index(&pp, w, Duration::from_secs(5 + 260)), None);
    }
}
