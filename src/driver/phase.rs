//! One phase: open the store and one session per worker, start the workers and the phase's
//! companions (pressure scale, antagonists, the fault schedule and timeline), then the
//! interval loop on the calling thread (`intervals.rs`); at the end, the phase's summary.
//!
//! `run` reads as start / interval loop / finish; the loop's state lives in `Intervals`.

use super::arrivals::Arrivals;
use super::companion::Companion;
use super::ctx::{empty_summary, PhaseCtx};
use super::intervals::Intervals;
use super::test_panic;
use super::{antagonists, conclude, faults, metrics_for, pressure, worker};
use crate::measure::cpu::CpuTime;
use crate::measure::timeline::Timeline;
use crate::measure::{Collector, WorkerRecorder};
use crate::plan::{PhaseKind, PhasePlan, Plan};
use crate::report::rundir::RunDir;
use crate::report::{ErrorSample, PhaseSummary};
use crate::store::{Session, Store};
use crate::telemetry::counters::CounterFigures;
use crate::workload::{CoreWorkload, Op};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Runs one phase; returns its summary and, for load and run phases, YCSB's text report.
pub(super) fn run(
    ctx: &mut PhaseCtx,
    phase: &PhasePlan,
) -> anyhow::Result<(PhaseSummary, Option<String>)> {
    if phase.kind == PhaseKind::Clear {
        return clear(ctx, phase).map(|ps| (ps, None));
    }
    let mut ps = empty_summary(phase);
    let wall0 = Instant::now();
    // Start.
    let panics0 = crate::panics::count();
    let test = test_panic::from_env();
    let mut o = Opened::open(ctx, phase, &mut ps)?;
    let (threads, collector) = (o.threads, &o.collector);
    test_panic::sabotage_first(test, &mut o.sessions);
    let feed = open_feed(ctx, phase, threads)?;
    // Checked before anything starts; its origin is set when the phase does.
    let grid = phase_grid(phase, ctx.plan.interval, ctx.clock.now())?;
    if let Some(s) = ctx.sync.as_deref_mut() {
        s.before_phase(ctx.index, phase)?;
    }
    // Shared with the store's statistics thread (`store_stats`), which ends before the close.
    let store = std::sync::Arc::new(o.store);
    // The antagonists (and a profile's perf) are up before the clock starts: the phase
    // measures under them from its first interval, and starting them is not charged to it.
    let mut companions = start_companions(ctx, phase, collector, &store);
    let (t0, origin, wall_start) = start_clock(ctx);
    let grid = crate::measure::Grid { origin, ..grid };
    let timeline = timeline_for(ctx.plan, phase, origin, threads);
    let arrivals = phase
        .open_loop
        .as_ref()
        .map(|o| Arrivals::seeded(o, origin, phase.operations, ctx.plan.seed));
    let shared = shared(
        ctx,
        phase,
        Started {
            workload: &o.workload,
            arrivals: arrivals.as_ref(),
            replay: feed.as_ref(),
            timeline: timeline.as_ref(),
            t0,
            grid,
            threads,
        },
    );
    if let Some(t) = ctx.telemetry {
        t.begin(&phase.name, t0);
    }
    // The fault companion starts on the phase's clock, after the loads: its schedule and its
    // timeline count from t0 (`start_companions`).
    companions.extend(start_fault_companion(ctx, phase, timeline, origin, t0));
    test_panic::companion(test);
    ps.started_at = humantime::format_rfc3339_millis(wall_start).to_string();
    let mut iv = Intervals::new(phase, &shared, collector, wall_start, arrivals.as_ref());
    iv.watch_panics(panics0, test);
    // Stopping a server is a fault's experiment: the schedule and --duration bound it.
    iv.give_up_after(Some(ctx.plan.give_up_after).filter(|_| ctx.plan.faults.is_empty()));
    // The interval loop, while the workers run.
    let ended = run_workers(
        ctx,
        &shared,
        collector,
        &mut companions,
        &mut iv,
        Clients {
            sessions: o.sessions,
            engine: o.engine.as_mut(),
        },
        threads,
    )?;
    let cpu_end = CpuTime::now();
    if let Some(e) = &o.engine {
        ps.engine = Some(e.summary(threads, ctx.plan.seed, shared.stream_base));
    }
    // Finish.
    let sources = (&shared, feed.as_ref(), cpu_end);
    let last = finish_measuring(
        ctx, phase, &mut ps, &mut iv, collector, companions, ended, sources,
    )?;
    let close_result = close(store);
    ps.wall_seconds = wall0.elapsed().as_secs_f64();
    let late = Duration::from_nanos(last.saturating_sub(grid.deadline));
    let (paced, fatal) = (arrivals.is_some(), shared.fatal());
    let ycsb = conclude::conclude(
        ctx,
        phase,
        &mut ps,
        &iv,
        threads,
        paced,
        fatal,
        close_result,
        late,
    );
    if let Some(e) = &o.engine {
        conclude::engine_figures(e, phase, ctx.plan.seed, &mut ps);
    }
    Ok((ps, Some(ycsb)))
}

/// The phase's start: the deadline, the interval grid, the schedule and the timeline all count
/// from its instant and clock reading; report.html places the phase on the run's clock by its
/// wall-clock time.
fn start_clock(ctx: &PhaseCtx) -> (Instant, u64, SystemTime) {
    let t0 = Instant::now();
    let origin = ctx.clock.now();
    (t0, origin, SystemTime::now())
}

/// A replay's trace, opened and its queues made before the clock starts.
fn open_feed(
    ctx: &PhaseCtx,
    phase: &PhasePlan,
    threads: usize,
) -> anyhow::Result<Option<super::feed::Feed>> {
    let scan = ctx.adapter.capabilities.scan;
    phase
        .replay
        .as_ref()
        .map(|r| super::feed::Feed::open(r, threads, phase.operations, scan))
        .transpose()
}

/// The workers ended: closes the last interval and the companions, records the phase's measured
/// window (telemetry ends before the store closes: a close may flush) and a replay's counts.
/// Returns the last completion (clock ns after the phase's origin).
#[allow(clippy::too_many_arguments)]
fn finish_measuring(
    ctx: &mut PhaseCtx,
    phase: &PhasePlan,
    ps: &mut PhaseSummary,
    iv: &mut Intervals,
    collector: &Collector,
    mut companions: Vec<Box<dyn Companion + '_>>,
    ended: WorkerEnd,
    (shared, feed, cpu_end): (&worker::Shared, Option<&super::feed::Feed>, CpuTime),
) -> anyhow::Result<u64> {
    // The measured window ends at the deadline when it was reached (the calls in flight then
    // are counted in the last interval, `measure::Grid`).
    let last = shared.end_ns.load(Ordering::Relaxed);
    let end = Duration::from_nanos(last.min(shared.grid.deadline));
    let in_warmup = iv.close_last(ctx, collector, &mut companions, end)?;
    // Telemetry (and so the energy) ends with the workers, before the companions' last
    // readings: a store's final statistics sample can wait out its deadlines (a stalled
    // server), and energy over that wait divided by the window's operations misstated ops/J.
    let telemetry = ctx.telemetry.map(|t| t.end());
    finish_companions(companions, end, ps, ctx.rundir)?;
    let measured_from = if in_warmup {
        end
    } else {
        phase.warmup.min(end)
    };
    let window = Window {
        measured: end - measured_from,
        cpu_end,
        telemetry,
    };
    record(ctx, ps, iv, ended, window);
    if let Some(f) = feed {
        ctx.rundir
            .write_json("replay.json", &f.counts_with(&ps.ops))?;
    }
    Ok(last)
}

/// Closes the store, unless its statistics thread still holds it (a call that never
/// returned): then the phase says it was not closed.
fn close(store: std::sync::Arc<Box<dyn Store>>) -> anyhow::Result<()> {
    match std::sync::Arc::try_unwrap(store) {
        Ok(s) => s.close(),
        Err(_) => Err(anyhow::anyhow!(
            "the store was not closed: its statistics call had not returned by the phase's end"
        )),
    }
}

/// The recovery timeline of a run phase with `--timeline`, counting from `origin`.
fn timeline_for(plan: &Plan, phase: &PhasePlan, origin: u64, threads: usize) -> Option<Timeline> {
    let w = plan.timeline.filter(|_| phase.kind == PhaseKind::Run)?;
    // Each worker's ring covers two intervals, so the interval loop never misses a bucket.
    let ring = (2 * plan.interval.as_nanos() / w.as_nanos().max(1)) as usize + 8;
    Some(Timeline::new(w.as_nanos() as u64, origin, threads, ring))
}

/// The fault companion, when the phase has faults or a timeline: started at `t0`, the clock
/// reading `start_ns`.
fn start_fault_companion<'a>(
    ctx: &PhaseCtx<'a>,
    phase: &PhasePlan,
    timeline: Option<Timeline>,
    start_ns: u64,
    t0: Instant,
) -> Option<Box<dyn Companion + 'a>> {
    let start = faults::FaultStart {
        plan: ctx.plan,
        phase,
        cluster: ctx.cluster,
        root: ctx.rundir.root(),
        clock: ctx.clock,
        timeline,
        start_ns,
        t0,
        live: ctx.live,
    };
    faults::FaultCompanion::start(start).map(|f| Box::new(f) as Box<dyn Companion + 'a>)
}

/// Stops every companion, even when one before it failed to write its results.
fn finish_companions(
    companions: Vec<Box<dyn Companion + '_>>,
    end: Duration,
    ps: &mut PhaseSummary,
    rundir: &mut RunDir,
) -> anyhow::Result<()> {
    let mut finished = Ok(());
    for c in companions {
        let r = c.finish(end, ps, rundir);
        finished = finished.and(r);
    }
    finished
}

/// The phase's measured window and the readings taken at its end.
struct Window {
    measured: Duration,
    cpu_end: CpuTime,
    telemetry: Option<crate::telemetry::PhaseTelemetry>,
}

/// Puts the phase's measurements into its summary: telemetry, intervals, window, the
/// histograms' figures, kvmeter's own CPU, error samples and where requests went.
fn record(
    ctx: &PhaseCtx,
    ps: &mut PhaseSummary,
    iv: &Intervals,
    (samples, per_worker, sent): WorkerEnd,
    w: Window,
) {
    ps.telemetry = w.telemetry;
    if let Some(t) = ps.telemetry.as_mut() {
        t.counters_per_worker = per_worker;
    }
    ps.intervals = iv.index;
    ps.measured_seconds = w.measured.as_secs_f64();
    ps.fill(&iv.measured);
    ps.warmup_operations = iv.warmup_done;
    super::storage_io::derive(ctx, ps);
    ps.per_op = crate::report::per_op::derive(ps);
    ps.kvmeter_cpu = w.cpu_end.since(iv.cpu_start, ps.operations);
    ps.error_samples = samples;
    ps.sent_to = sent_by_member(ctx, &sent);
}

/// The suite's clear phase: the server's own clear, or the data directory emptied.
fn clear(ctx: &mut PhaseCtx, phase: &PhasePlan) -> anyhow::Result<PhaseSummary> {
    let mut ps = empty_summary(phase);
    let wall0 = Instant::now();
    match ctx.adapter.server {
        Some(spec) => (spec.clear)(ctx.opts)?,
        None => ctx.data.clear()?,
    }
    ps.wall_seconds = wall0.elapsed().as_secs_f64();
    Ok(ps)
}

/// What a phase has once its clock started: the workers' shared state is made from it.
struct Started<'a, 't> {
    workload: &'a CoreWorkload,
    arrivals: Option<&'a Arrivals>,
    replay: Option<&'a super::feed::Feed>,
    /// Only read for the workers' rings (the fault companion takes the timeline next).
    timeline: Option<&'t Timeline>,
    t0: Instant,
    /// The interval grid, its origin the clock reading at `t0`.
    grid: crate::measure::Grid,
    threads: usize,
}

/// The state every worker of the phase reads: its clock, deadline, pacing, schedule, streams,
/// timeline rings and how a fatal error is treated.
fn shared<'a>(ctx: &PhaseCtx, phase: &PhasePlan, s: Started<'a, '_>) -> worker::Shared<'a> {
    let is_run = phase.kind == PhaseKind::Run;
    worker::Shared {
        workload: s.workload,
        stop: AtomicBool::new(false),
        fatal: Mutex::new(None),
        finished: AtomicUsize::new(0),
        end_ns: AtomicU64::new(0),
        t0: s.t0,
        grid: s.grid,
        deadline_ns: s.grid.origin.saturating_add(s.grid.deadline),
        load: phase.kind == PhaseKind::Load,
        tick_ns: phase
            .target
            .map(|t| ((s.threads as f64) * 1e9 / t).max(1.0) as u64),
        arrivals: s.arrivals,
        replay: s.replay,
        seed: ctx.plan.seed,
        // Worker w of agent i draws stream i·T + w; the engine's connection c draws c
        // (counted across the run's agents).
        stream_base: match &ctx.plan.engine {
            Some(e) => e.first_conn,
            None => ctx
                .plan
                .share
                .map_or(0, |sh| (sh.index * phase.threads) as u64),
        },
        clock: ctx.clock.clone(),
        counters: ctx.plan.counters,
        timelines: s
            .timeline
            .map(|t| (0..s.threads).map(|i| t.worker(i)).collect())
            .unwrap_or_default(),
        tolerate_fatal: is_run && !ctx.plan.faults.is_empty(),
        affected_shard: ctx.plan.affected_shard(),
    }
}

/// The phase's interval grid from `origin` (clock ns) — the first boundary at the end of
/// warm-up, else one interval in, the last at the deadline (none without `--duration`). A
/// duration beyond the clock's range (1e19 s from an agent's plan) fails the phase here.
fn phase_grid(
    phase: &PhasePlan,
    interval: Duration,
    origin: u64,
) -> anyhow::Result<crate::measure::Grid> {
    let ns = |d: Duration, what: &str| {
        u64::try_from(d.as_nanos())
            .ok()
            .and_then(|n| origin.checked_add(n).map(|_| n))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "the phase's {what} ({} s) is beyond this clock's range",
                    d.as_secs_f64()
                )
            })
    };
    let width = ns(interval, "interval")?;
    let first = match phase.warmup.is_zero() {
        true => width,
        false => ns(phase.warmup, "warm-up")?,
    };
    let grid = crate::measure::Grid::new(origin, first, width);
    Ok(match phase.duration {
        Some(d) => grid.until(ns(d, "duration")?),
        None => grid,
    })
}

/// The phase's clients: a worker thread per session, or the event-driven engine's loops.
struct Clients<'e> {
    sessions: Vec<(Box<dyn Session>, WorkerRecorder)>,
    engine: Option<&'e mut super::engine::Opened>,
}

/// Starts one thread per session (or event loop) and runs the interval loop until they have
/// all finished.
fn run_workers(
    ctx: &mut PhaseCtx,
    shared: &worker::Shared,
    collector: &Collector,
    companions: &mut [Box<dyn Companion + '_>],
    iv: &mut Intervals,
    clients: Clients,
    threads: usize,
) -> anyhow::Result<WorkerEnd> {
    let phase = iv.phase;
    let Clients { sessions, engine } = clients;
    std::thread::scope(|s| -> anyhow::Result<WorkerEnd> {
        let mut handles: Vec<_> = match engine {
            Some(e) => e.spawn(s, shared, phase.operations),
            None => vec![],
        };
        handles.extend(sessions.into_iter().enumerate().map(|(i, (session, rec))| {
            // Open loop: the shared schedule counts the phase's operations.
            let my_ops = if phase.open_loop.is_some() || phase.replay.is_some() {
                0
            } else {
                crate::plan::split_ops(phase.operations, threads, i)
            };
            std::thread::Builder::new()
                .name(format!("kvm-worker-{i}"))
                .spawn_scoped(s, move || {
                    worker::run_guarded(shared, i, session, rec, my_ops)
                })
                .expect("spawn worker")
        }));
        // A replay's feeder (it catches its own panics, failing the phase).
        let feeder = shared.replay.map(|f| {
            std::thread::Builder::new()
                .name("kvm-replay-feeder".into())
                .spawn_scoped(s, move || f.feed(shared))
                .expect("spawn the replay feeder")
        });
        // A panic on this thread must not unwind into the scope: the scope would wait for
        // workers nobody told to stop (the run would hang at "running").
        let supervised = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            iv.supervise(ctx, shared, collector, companions, threads)
        }))
        .unwrap_or_else(|p| Err(anyhow::anyhow!("{}", crate::panics::message_of(p.as_ref()))));
        if let Err(e) = supervised {
            // An interval could not be written (a full disk) or the loop panicked: stop the
            // workers (or the scope would wait for them forever) and fail the phase, whose
            // summary still holds what was measured.
            shared.fail(format!("{e:#}"));
        }
        let mut end: WorkerEnd = (Vec::new(), Vec::new(), Vec::new());
        for h in handles {
            // Workers catch their own panics (`worker::run_guarded`); this is a last resort.
            let (s, c, sent) = h
                .join()
                .map_err(|_| anyhow::anyhow!("a worker thread panicked"))?;
            end.0.extend(s);
            end.1.extend(c);
            for (a, n) in sent {
                match end.2.iter_mut().find(|x| x.0 == a) {
                    Some(x) => x.1 += n,
                    None => end.2.push((a, n)),
                }
            }
        }
        if let Some(f) = feeder {
            f.join()
                .map_err(|_| anyhow::anyhow!("the replay feeder panicked"))?;
        }
        Ok(end)
    })
}

/// Requests sent by member label (`primary:0`, `member:2`), or by address for servers kvmeter
/// did not start; empty where every request went to one server.
fn sent_by_member(
    ctx: &PhaseCtx,
    sent: &[(std::net::SocketAddr, u64)],
) -> std::collections::BTreeMap<String, u64> {
    let labels: Vec<(String, String)> = ctx
        .cluster
        .map(|c| {
            let c = c.lock().unwrap_or_else(|p| p.into_inner());
            c.members
                .iter()
                .map(|m| (m.server.addr.clone(), m.label()))
                .collect()
        })
        .unwrap_or_default();
    sent.iter()
        .map(|(a, n)| {
            let addr = a.to_string();
            let name = labels
                .iter()
                .find(|(x, _)| *x == addr)
                .map(|(_, l)| l.clone())
                .unwrap_or(addr);
            (name, *n)
        })
        .collect()
}

/// What the workers hand back: error samples, each worker's own counters, and requests sent
/// by server address.
type WorkerEnd = (
    Vec<ErrorSample>,
    Vec<CounterFigures>,
    Vec<(std::net::SocketAddr, u64)>,
);

/// A load or run phase's store, workload and worker sessions, opened before the clock starts.
struct Opened {
    store: Box<dyn Store>,
    workload: CoreWorkload,
    collector: Collector,
    sessions: Vec<(Box<dyn Session>, WorkerRecorder)>,
    threads: usize,
    /// The event-driven engine's connections (`--connections`), instead of sessions.
    engine: Option<super::engine::Opened>,
}

impl Opened {
    fn open(ctx: &PhaseCtx, phase: &PhasePlan, ps: &mut PhaseSummary) -> anyhow::Result<Self> {
        let cfg = phase
            .workload
            .clone()
            .expect("load/run phases have a workload");
        let load = phase.kind == PhaseKind::Load;
        let store = (ctx.adapter.open)(&ctx.data.store_dir()?, ctx.opts)?;
        let workload = CoreWorkload::new(cfg);
        let ops = if load {
            vec![Op::Insert]
        } else {
            workload.ops()
        };
        let pipeline = ctx.opts.str("pipeline");
        if workload.cfg.dataintegrity && !matches!(pipeline, "" | "1") {
            errln!(
                "warning: phase {}: dataintegrity=true checks every read's value, so pipeline={pipeline} is not used (each operation waits for its reply)",
                phase.name,
            );
        }
        if !ctx.adapter.capabilities.scan && ops.contains(&Op::Scan) {
            ps.not_applicable.push("SCAN".into());
        }
        // Threads never outnumber operations (§8.2); the rate is computed after that clamp
        // (quirk 16: YCSB computes it before and undershoots the target).
        let threads = if phase.operations > 0 {
            phase.threads.min(phase.operations as usize)
        } else {
            phase.threads
        };
        ps.threads = threads;
        // The engine records from-intended and from-send latency for every request.
        let paced = phase.target.is_some()
            || phase.open_loop.is_some()
            || phase.replay.is_some()
            || ctx.plan.engine.is_some();
        let metrics = match phase.replay {
            Some(_) => super::feed::metrics(),
            None => metrics_for(load, &ops, workload.cfg.dataintegrity),
        };
        let mut collector = Collector::new(&metrics, paced);
        let mut sessions = Vec::with_capacity(threads);
        let engine = match &ctx.plan.engine {
            Some(cfg) => Some(super::engine::Opened::open(
                cfg,
                store.as_ref(),
                threads,
                &mut collector,
                &metrics_for(load, &ops, workload.cfg.dataintegrity),
                phase.kind == PhaseKind::Run,
            )?),
            None => {
                for _ in 0..threads {
                    sessions.push((store.session()?, collector.worker()));
                }
                None
            }
        };
        Ok(Opened {
            store,
            workload,
            collector,
            sessions,
            threads,
            engine,
        })
    }
}

/// The store's statistics sampler (every phase whose store declares statistics), then the
/// companions that load the machine: the pressure scale (run phases of `kvmeter pressure`)
/// and the `--antagonist` loads (every run phase), in the order they finish. They
/// start before the phase's clock, so the phase measures under them from its first interval
/// and starting them is not charged to it; the third companion, `faults::FaultCompanion` (the
/// `--fault` schedule and the `--timeline` buckets), starts on the clock, since both count from
/// the phase's start, and finishes after them.
fn start_companions<'a: 's, 's>(
    ctx: &PhaseCtx<'a>,
    phase: &'a PhasePlan,
    collector: &Collector,
    store: &std::sync::Arc<Box<dyn Store>>,
) -> Vec<Box<dyn Companion + 's>> {
    let mut out: Vec<Box<dyn Companion + 's>> = vec![];
    // A profile's perf attaches before the clock (`--profile`; the first phase starts it).
    if let Some(t) = ctx.telemetry {
        t.prepare_phase();
    }
    // The store's own statistics (every phase): the first sample before the phase's clock.
    let mut shared = None;
    if ctx.plan.store_stats == crate::plan::StoreStatsChoice::On {
        let sampler =
            super::store_stats::StoreSampler::start(store, ctx.rundir, &phase.name, ctx.live);
        if let Some(mut s) = sampler {
            if phase.pressure.is_some() {
                shared = Some(s.share());
            }
            out.push(Box::new(s));
        }
    }
    // The kernel's storage bytes: after the sampler, whose figures it divides by.
    if let Some(s) = super::storage_io::StorageIoCompanion::start(ctx) {
        out.push(Box::new(s));
    }
    if phase.kind != PhaseKind::Run {
        return out;
    }
    if let (Some(pp), Some(io)) = (&phase.pressure, ctx.io) {
        out.push(Box::new(pressure::PressureScale::start(
            pp,
            io,
            phase.warmup,
            ctx.plan.random_ratio,
            shared,
            || collector.empty_stats(),
        )));
    }
    out.push(Box::new(antagonists::RunningAntagonists::start(
        ctx.plan,
        ctx.io,
        ctx.peak_gbps,
    )));
    out
}
