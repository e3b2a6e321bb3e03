//! A phase's engine before and after its loops run: the descriptor limit raised, every
//! connection opened (before the phase's clock starts, as the worker sessions are) and split
//! over the loops, the loops spawned, and once they end the phase's `engine` figures and the
//! open-loop checks (`sends.rs`).

use super::super::worker::Shared;
use super::{run_guarded, sends, EngineStats, Handback, LoopShare};
use crate::measure::WorkerRecorder;
use crate::plan::engine::Engine;
use crate::store::wire::{ClusterMap, EventTarget, Link};
use std::sync::atomic::{AtomicU64, Ordering};

/// Opens `n` connections before the phase's clock starts (each ready for requests); with a
/// cluster, one socket per node for each, connection by connection.
pub fn connect_all(
    target: &dyn EventTarget,
    n: usize,
    map: Option<&ClusterMap>,
) -> anyhow::Result<Vec<Link>> {
    let nodes = map.map_or(1, |m| m.nodes.len());
    let mut v = Vec::with_capacity(n * nodes);
    for i in 0..n {
        for k in 0..nodes {
            let s = match map {
                Some(m) => target.connect_to(m.nodes[k]),
                None => target.connect(),
            };
            let s = s.map_err(|e| {
                anyhow::anyhow!("--connections {n}: connection {} of {n} failed: {e}", i + 1)
            })?;
            v.push(s);
        }
    }
    Ok(v)
}

/// A phase's engine, opened before its clock starts: the connections, split over the loops.
pub struct Opened {
    target: Box<dyn EventTarget>,
    socks: Vec<Vec<Link>>,
    /// A Redis Cluster's slot map, asked when the phase's connections were opened.
    map: Option<ClusterMap>,
    recs: Vec<WorkerRecorder>,
    pub stats: EngineStats,
    cfg: Engine,
    sends: Option<sends::Sends>,
    probe: Option<ProbeParts>,
}

/// The probe stream's connections, its own collector (its rows are not the phase's) and its
/// schedule, made when the phase starts.
struct ProbeParts {
    socks: Vec<Link>,
    collector: crate::measure::Collector,
    rec: Option<WorkerRecorder>,
    arrivals: Option<super::super::arrivals::Arrivals>,
    rate: f64,
}

impl Opened {
    /// Raises the descriptor limit, connects every connection and splits them over `loops`.
    pub fn open(
        cfg: &Engine,
        store: &dyn crate::store::Store,
        loops: usize,
        collector: &mut crate::measure::Collector,
        metrics: &[crate::measure::Metric],
        run_phase: bool,
    ) -> anyhow::Result<Opened> {
        let target = store
            .event_target()
            .ok_or_else(|| anyhow::anyhow!("this store has no event-driven client"))?;
        let map = match target.cluster_map(&[]) {
            Some(m) => Some(m.map_err(|e| anyhow::anyhow!("Redis Cluster: {e}"))?),
            None => None,
        };
        // A cluster's connections are one socket per node each.
        let nodes = map.as_ref().map_or(1, |m| m.nodes.len());
        let headroom = crate::plan::engine::FD_HEADROOM;
        let needed = (cfg.fds_needed - headroom) * nodes as u64 + headroom;
        let limit = crate::plan::engine::raise_fd_limit(needed);
        if limit < needed {
            anyhow::bail!(
                "--connections {}: the descriptor limit is {limit}, {needed} are needed",
                cfg.connections,
            );
        }
        let mut all = connect_all(target.as_ref(), cfg.connections, map.as_ref())?.into_iter();
        let socks = (0..loops)
            .map(|i| {
                let n = crate::plan::split_ops(cfg.connections as u64, loops, i) as usize;
                all.by_ref().take(n * nodes).collect()
            })
            .collect();
        let probe = match cfg.probe.filter(|_| run_phase) {
            Some(p) => {
                let socks = connect_all(target.as_ref(), p.connections, map.as_ref())?;
                let mut collector = crate::measure::Collector::new(metrics, true);
                let rec = Some(collector.worker());
                Some(ProbeParts {
                    socks,
                    collector,
                    rec,
                    arrivals: None,
                    rate: p.rate,
                })
            }
            None => None,
        };
        Ok(Opened {
            target,
            socks,
            map,
            recs: (0..loops).map(|_| collector.worker()).collect(),
            stats: EngineStats::default(),
            cfg: cfg.clone(),
            sends: None,
            probe,
        })
    }

    /// The phase's `engine` figures once its loops have ended.
    pub fn summary(
        &self,
        loops: usize,
        seed: u64,
        stream_base: u64,
    ) -> crate::report::EngineSummary {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        crate::report::EngineSummary {
            connections: self.cfg.connections,
            depth: self.cfg.depth,
            event_loops: loops,
            when_full: format!("{:?}", self.cfg.when_full).to_lowercase(),
            fd_limit: crate::plan::engine::fd_limits().0,
            reconnects: n(&self.stats.reconnects),
            moved: n(&self.stats.moved),
            asked: n(&self.stats.asked),
            queued: n(&self.stats.queued),
            skipped: n(&self.stats.skipped),
            max_backlog: n(&self.stats.max_backlog),
            abandoned: n(&self.stats.abandoned),
            streams: format!(
                "connection c draws its operations from Rng::for_worker(seed {seed}, stream {stream_base} + c)"
            ),
            probe: None,
        }
    }

    /// Open loop: judges the process the sends made over the measured window and the sends'
    /// lateness (the loops take every due arrival and hold the ones with no free slot in
    /// their backlog, whose oldest each publishes for `max_behind_ms`), marking a schedule
    /// not kept.
    pub fn judge_open_loop(
        &self,
        ps: &mut crate::report::PhaseSummary,
        arrival: crate::plan::Arrival,
        expected_by: &dyn Fn(f64) -> f64,
    ) {
        let (from, to) = (ps.warmup_seconds, ps.warmup_seconds + ps.measured_seconds);
        let Some(ol) = ps.open_loop.as_mut() else {
            return;
        };
        ol.arrivals_check = self
            .sends
            .as_ref()
            .and_then(|s| s.check(arrival, expected_by, from, to));
        let mut why = vec![];
        if let Some(c) = ol.arrivals_check.as_ref().filter(|c| !c.passed) {
            why.push(format!(
                "the sends did not follow the {} process asked for (dispersion {:.2} over {} windows of {} ms, expected {} ± {:.2})",
                ol.arrival, c.dispersion, c.windows, c.window_ms, c.expected, c.tolerance
            ));
        }
        if let Some(lag) = ol
            .send_lag_us
            .p99
            .filter(|l| *l > crate::report::LATE_SENDS_P99_US)
        {
            why.push(format!(
                "sends were late by {:.1} ms at p99 (the loops' backlog reached {} arrivals)",
                lag / 1000.0,
                self.stats.max_backlog.load(Ordering::Relaxed)
            ));
        }
        if !why.is_empty() {
            ol.kept_up = false;
            let text = format!(
                "the event-driven engine's checks failed: {}",
                why.join("; ")
            );
            ol.warning = Some(match ol.warning.take() {
                Some(w) => format!("{w} {text}"),
                None => text,
            });
        }
    }

    /// Starts one thread per loop in scope `s`.
    pub fn spawn<'scope, 'env>(
        &'env mut self,
        s: &'scope std::thread::Scope<'scope, 'env>,
        sh: &'env Shared<'env>,
        ops: u64,
    ) -> Vec<std::thread::ScopedJoinHandle<'scope, Handback>> {
        let loops = self.socks.len();
        let mut first = 0u64;
        let socks = std::mem::take(&mut self.socks);
        let recs = std::mem::take(&mut self.recs);
        if sh.arrivals.is_some() {
            let secs = sh.grid.deadline.min(3_600_000_000_000) as f64 / 1e9;
            self.sends = Some(sends::Sends::new(sh.grid.origin, secs));
        }
        let mut probe_socks = vec![];
        let mut probe_rec = None;
        if let Some(p) = self.probe.as_mut() {
            let o = crate::plan::OpenLoop {
                arrival: crate::plan::Arrival::Poisson,
                rate: p.rate,
                offset_gaps: 0.0,
                sine: None,
            };
            p.arrivals = Some(super::super::arrivals::Arrivals::new(&o, sh.grid.origin, 0));
            probe_socks = std::mem::take(&mut p.socks);
            probe_rec = p.rec.take();
        }
        let (target, cfg, stats) = (&*self.target, &self.cfg, &self.stats);
        let map = self.map.as_ref();
        let nodes = map.map_or(1, |m| m.nodes.len());
        let sends = self.sends.as_ref();
        let probe_arrivals = self.probe.as_ref().and_then(|p| p.arrivals.as_ref());
        let mut handles: Vec<_> = socks
            .into_iter()
            .zip(recs)
            .enumerate()
            .map(|(i, (socks, rec))| {
                let share = LoopShare {
                    index: i,
                    first_conn: first,
                    ops: if sh.arrivals.is_some() {
                        0
                    } else {
                        crate::plan::split_ops(ops, loops, i)
                    },
                    socks,
                    target,
                    cfg,
                    stats,
                    sends,
                    arrivals: sh.arrivals,
                    probe: false,
                    main_loops: loops,
                    map,
                };
                first += (share.socks.len() / nodes) as u64;
                std::thread::Builder::new()
                    .name(format!("kvm-loop-{i}"))
                    .spawn_scoped(s, move || run_guarded(sh, share, rec))
                    .expect("spawn event loop")
            })
            .collect();
        if let (Some(rec), Some(arrivals)) = (probe_rec, probe_arrivals) {
            // The probe's connections are numbered after the load's: their own streams.
            let share = LoopShare {
                index: loops,
                first_conn: cfg.connections as u64,
                ops: 0,
                socks: probe_socks,
                target,
                cfg,
                stats,
                sends: None,
                arrivals: Some(arrivals),
                probe: true,
                main_loops: loops,
                map,
            };
            handles.push(
                std::thread::Builder::new()
                    .name("kvm-probe".into())
                    .spawn_scoped(s, move || run_guarded(sh, share, rec))
                    .expect("spawn the probe loop"),
            );
        }
        handles
    }

    /// The probe stream's figures over the measured window (its rows after warm-up).
    pub fn probe_summary(&self, warmup: bool, seconds: f64) -> Option<crate::report::ProbeSummary> {
        let p = self.probe.as_ref()?;
        let mut total = p.collector.empty_stats();
        let last = p.collector.last_with_data().unwrap_or(0);
        while let Some((k, st)) = p.collector.next_row_at_end(last) {
            if !(warmup && k == 0) {
                total.add(&st);
            }
        }
        Some(crate::report::ProbeSummary {
            rate: p.rate,
            connections: self.cfg.probe.map_or(0, |q| q.connections),
            ops: total
                .metrics()
                .filter(|(m, _)| *m != crate::measure::Metric::Cleanup)
                .map(|(m, o)| {
                    (
                        m.name().to_string(),
                        crate::report::OpSummary::of(m.name(), o, seconds),
                    )
                })
                .collect(),
        })
    }
}
