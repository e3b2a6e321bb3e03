//! `kvmeter agent`: one load generator of a distributed run. It takes its index from its flags
//! or the engine that placed it (`placement`), waits for the coordinator's plan in etcd,
//! resolves the same plan itself and compares hashes (a different kvmeter or different
//! workload files refuse, in one line, before anything runs), registers its index under its own
//! lease (a taken index is refused), then runs its share (`plan::apply_share`) as an ordinary
//! run with its own run directory, starting each phase on the coordinator's T0 and posting each
//! interval. Posting happens on a thread of its own (`post`): the interval is first written to
//! the run directory (`dist/intervals.jsonl` too), so neither the workers nor the interval loop
//! wait for etcd or the coordinator.

use super::keys::Coord;
use super::seal::{Seal, KEY_ENV};
use super::trust::{self, Local};
use super::{AgentRecord, IntervalPost, PhaseDone, Published, Registration};
use crate::driver::{IntervalRecord, PhaseSync};
use crate::error::{UsageError, EXIT_INTERRUPTED};
use crate::plan::{self, PhasePlan, Share};
use crate::report::PhaseSummary;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod post;
use post::{keepalive, open_relay, poster, Flags, Post};

/// `kvmeter agent`'s settings (cli/dist.rs maps its flags here).
pub struct Settings {
    pub coord: super::keys::CoordSpec,
    pub job: String,
    pub index: Option<usize>,
    pub count: Option<usize>,
    pub out: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    pub plan_hash: Option<String>,
    pub plan_key_file: Option<PathBuf>,
    pub wait: String,
    /// What this host decides itself (`trust`): meters, files, secrets, a plug-in's path.
    pub local: Local,
}

/// Bounds on a published plan's numbers (a coordinator never publishes others).
const MAX_AGENTS: usize = 1024;
const LEASE_TTL_S: std::ops::RangeInclusive<i64> = 2..=3600;
/// A start time further ahead than this is not a coordinator's (its --start-delay is bounded
/// well below it).
const MAX_START_AHEAD: Duration = Duration::from_secs(3600);

pub fn run(s: Settings) -> anyhow::Result<i32> {
    let placed = super::placement::resolve(s.index, s.count, |k| std::env::var(k).ok())?;
    let wait = plan::parse_duration("--wait", &s.wait)?;
    s.local.check_agent_flags()?;
    check_plan_hash(&s)?;
    let seal = Seal::load(s.plan_key_file.as_deref(), std::env::var(KEY_ENV).ok())?;
    let metrics = serve_metrics(&s.local)?;
    let interrupted = crate::driver::install_signals();
    let mut coord = Coord::connect(&s.coord, &s.job)?;
    coord.set_seal(seal.clone());
    let Some(published) = fetch_plan(&mut coord, &s, wait, &interrupted)? else {
        return Ok(EXIT_INTERRUPTED);
    };
    // Everything after the plan is sealed for this run alone.
    let run_seal = seal.for_run(&published.nonce);
    coord.set_seal(run_seal.clone());
    let (i, n) = (placed.index, published.agents);
    if i >= n {
        return Err(UsageError::new(format!(
            "{} {i}: out of range: the plan under {} has {n} agents (0..{})",
            placed.source,
            coord.prefix(),
            n - 1
        ))
        .into());
    }
    let lease_of_run = published.lease;
    let (plan, hash) = resolve(&mut coord, &s, &placed, &published)?;
    let threads = plan.phases.first().map_or(1, |p| p.threads);
    let (relay, reports) = open_relay(&published, &run_seal, coord.prefix(), i);
    let reg = Registration {
        index: i,
        count: n,
        placed_by: placed.source.clone(),
        hash,
        host: super::Host::here(),
        threads,
        reports,
    };
    let lease = register(&mut coord, &s, &reg, published.lease_ttl_s)?;
    let flags = Arc::new(Flags::default());
    let keeper = keepalive(&s, &run_seal, lease, published.lease_ttl_s, flags.clone())?;
    let (tx, poster) = poster(&s, &run_seal, lease_of_run, flags.clone(), relay)?;
    let mut sync = AgentSync {
        coord,
        index: i,
        wait,
        tx,
        flags,
        interrupted,
        record: AgentRecord {
            job: s.job.clone(),
            registration: reg,
            published,
            starts: vec![],
            bytes_to_etcd: 0,
            bytes_to_coordinator: 0,
            posts: 0,
        },
        dir: None,
        intervals: None,
        phases: None,
        phase_index: 0,
        late_ms: 0.0,
    };
    let result = crate::driver::execute_synced(plan, &mut sync);
    if let Err(e) = &result {
        // Setup failed here (a store this host cannot reach, a run directory it cannot
        // create): the coordinator stops the run with this agent's reason.
        let _ = sync.coord.put(
            &format!("refused/{i:04}"),
            &format!("agent {i} could not start: {e:#}"),
            Some(lease_of_run),
        );
    }
    sync.close(Background {
        poster,
        keeper,
        lease,
    });
    if let Some((e, linger)) = metrics {
        e.finish(linger, &crate::driver::install_signals());
    }
    result
}

/// This agent's own `--metrics-addr`, bound (a bad address or a port in use: exit 2 before
/// etcd is asked anything), with its `--metrics-linger`.
fn serve_metrics(
    local: &super::trust::Local,
) -> Result<Option<(Arc<crate::metrics::Exporter>, Duration)>, UsageError> {
    let linger = match &local.metrics_linger {
        Some(l) => plan::parse_duration("--metrics-linger", l)?,
        None => crate::metrics::DEFAULT_LINGER,
    };
    let Some(addr) = &local.metrics_addr else {
        if local.metrics_linger.is_some() {
            return Err(UsageError::new(
                "--metrics-linger: expected with --metrics-addr",
            ));
        }
        return Ok(None);
    };
    let e = crate::metrics::Exporter::bind(addr)?;
    crate::metrics::install(e.clone());
    Ok(Some((e, linger)))
}

/// `--plan-hash`, if given, is 64 hex digits.
fn check_plan_hash(s: &Settings) -> Result<(), UsageError> {
    match &s.plan_hash {
        Some(h) if h.len() != 64 || !h.chars().all(|c| c.is_ascii_hexdigit()) => {
            Err(UsageError::new(format!(
                "--plan-hash {h}: expected the 64 hex digits (SHA-256) 'kvmeter dist run' prints"
            )))
        }
        _ => Ok(()),
    }
}

/// Registers the agent's index under a lease of its own (returned): a key that another agent
/// of this run holds is refused, one written by something without the run's key is taken back.
fn register(
    coord: &mut Coord,
    s: &Settings,
    reg: &Registration,
    ttl_s: i64,
) -> anyhow::Result<i64> {
    let (i, prefix) = (reg.index, coord.prefix().to_string());
    let lease = coord
        .grant(ttl_s)
        .map_err(|e| UsageError::new(format!("--coord {}: {e}", s.coord)))?;
    let key = format!("agent/{i:04}");
    let reg_text = serde_json::to_string(reg)?;
    let mut created = coord.create(&key, &reg_text, Some(lease));
    if let Ok(Some(Err(why))) = &created {
        // Not another agent of this run: something without the key wrote there. Take the
        // index back (a writer to etcd can always delete keys; this only undoes a forgery).
        errln!("warning: agent {i}: replacing {prefix}{key}: {why}");
        let _ = coord.delete_all(&key);
        created = coord.create(&key, &reg_text, Some(lease));
    }
    match created {
        Ok(None) => Ok(lease),
        Ok(Some(other)) => {
            let other = other.unwrap_or_default();
            let _ = coord.revoke(lease);
            let who = serde_json::from_str::<Registration>(&other)
                .map(|r| format!("host {} pid {}", r.host.host, r.host.pid))
                .unwrap_or_else(|_| "another process".into());
            Err(UsageError::new(format!(
                "{} {i}: taken: {who} registered it under {prefix}; each agent needs its own index",
                reg.placed_by
            ))
            .into())
        }
        Err(e) => {
            let _ = coord.revoke(lease);
            Err(UsageError::new(format!("--coord {}: {e}", s.coord)).into())
        }
    }
}

/// The agent's threads beside the run, and the lease its registration lives under.
struct Background {
    poster: std::thread::JoinHandle<()>,
    keeper: std::thread::JoinHandle<()>,
    lease: i64,
}

/// The plan this agent runs, from the published one: refused (in one line, also written to
/// `refused/<i>`) unless it is for this agent count and kvmeter version, asks for nothing that
/// is this host's own, matches `--plan-hash`, and resolves to the published hash here. Nothing
/// is resolved, opened or loaded before the published request passed `trust::check_published`.
fn resolve(
    coord: &mut Coord,
    s: &Settings,
    placed: &super::placement::Placement,
    published: &Published,
) -> anyhow::Result<(plan::Plan, String)> {
    let (i, n) = (placed.index, published.agents);
    let prefix = coord.prefix().to_string();
    let lease_of_run = published.lease;
    let mut refuse = |msg: String| -> anyhow::Error {
        let _ = coord.put(&format!("refused/{i:04}"), &msg, Some(lease_of_run));
        UsageError::new(msg).into()
    };
    if let Some(c) = placed.count.filter(|c| *c != n) {
        return Err(refuse(format!(
            "agent {i}: --count {c}, but the plan under {prefix} has {n} agents"
        )));
    }
    if published.kvmeter_version != env!("CARGO_PKG_VERSION") {
        return Err(refuse(format!(
            "agent {i}: kvmeter {} here, {} at the coordinator: use the same version everywhere",
            env!("CARGO_PKG_VERSION"),
            published.kvmeter_version
        )));
    }
    // Nothing is resolved, opened or loaded before the published request passed these checks.
    if let Err(why) = trust::check_published(&published.request, &s.local) {
        return Err(refuse(format!("agent {i}: {why}")));
    }
    if s.plan_hash
        .as_ref()
        .is_some_and(|h| !h.eq_ignore_ascii_case(&published.hash))
    {
        return Err(refuse(format!(
            "agent {i}: --plan-hash: the plan published under {prefix} is not the one this agent was pinned to; it runs no other plan"
        )));
    }
    let mut req = trust::join(&published.request, &s.local);
    req.out = Some(
        s.out
            .clone()
            .unwrap_or_else(|| plan::default_out(&format!("agent{i}-{}", s.job), &req.store)),
    );
    req.data_dir = s.data_dir.clone();
    let mut plan = match plan::build(&req) {
        Ok(p) => p,
        Err(e) => {
            return Err(refuse(format!(
                "agent {i} cannot resolve the plan: {}",
                e.0
            )))
        }
    };
    let hash = plan::plan_hash(&plan);
    if hash != published.hash {
        // What this host computed stays here: the refusal in etcd does not echo it.
        errln!(
            "agent {i}: the plan resolves to {hash} here, {} at the coordinator",
            published.hash
        );
        return Err(refuse(format!(
            "agent {i}: the plan resolves differently on this host (another kvmeter build, or another version of the store plug-in?)"
        )));
    }
    plan::apply_share(&mut plan, Share { index: i, count: n });
    Ok((plan, hash))
}

/// Waits for the coordinator's plan (it may start after its agents); `None` when interrupted.
/// A plan that does not verify with this agent's key, is oversized or out of bounds is
/// refused in one line here, with nothing written to etcd.
fn fetch_plan(
    coord: &mut Coord,
    s: &Settings,
    wait: Duration,
    interrupted: &AtomicBool,
) -> anyhow::Result<Option<Published>> {
    let prefix = coord.prefix().to_string();
    let deadline = Instant::now() + wait;
    let text = loop {
        match coord.get_checked("plan") {
            Ok(Some(Ok(text))) => break text,
            Ok(Some(Err(why))) => {
                return Err(UsageError::new(format!(
                    "{prefix}plan in etcd at {}: {why}; this agent runs only a plan sealed with its --plan-key-file (or {KEY_ENV}): refused, nothing was loaded or run",
                    s.coord
                ))
                .into())
            }
            Ok(None) => {}
            Err(e) => {
                return Err(UsageError::new(format!("--coord {}: {e}", s.coord)).into());
            }
        }
        if interrupted.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if Instant::now() >= deadline {
            return Err(UsageError::new(format!(
                "--wait {}: no plan was published under {prefix} in etcd at {} (start 'kvmeter dist run --coord {} --job {}' or wait longer)",
                s.wait, s.coord, s.coord, s.job
            ))
            .into());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let published: Published = serde_json::from_str(&text).map_err(|e| {
        UsageError::new(format!(
            "{prefix}plan is not a kvmeter plan ({e}); is --job shared with something else?"
        ))
    })?;
    let bad = |what: String| -> anyhow::Error {
        UsageError::new(format!(
            "{prefix}plan: {what}: refused, nothing was loaded or run"
        ))
        .into()
    };
    if !(1..=MAX_AGENTS).contains(&published.agents) {
        return Err(bad(format!(
            "{} agents (expected 1 to {MAX_AGENTS})",
            published.agents
        )));
    }
    if !LEASE_TTL_S.contains(&published.lease_ttl_s) {
        return Err(bad(format!(
            "a lease of {} s (expected 2 to 3600)",
            published.lease_ttl_s
        )));
    }
    if published.hash.len() != 64 || published.nonce.len() < 16 {
        return Err(bad("no SHA-256 plan hash or run nonce".into()));
    }
    if let Some(a) = &published.reports {
        super::relay::parse_published_addr(a)
            .map_err(|e| bad(format!("a report address that is not one ({e})")))?;
    }
    Ok(Some(published))
}

struct AgentSync {
    coord: Coord,
    index: usize,
    wait: Duration,
    tx: mpsc::Sender<Post>,
    flags: Arc<Flags>,
    interrupted: Arc<AtomicBool>,
    record: AgentRecord,
    dir: Option<PathBuf>,
    intervals: Option<BufWriter<File>>,
    phases: Option<BufWriter<File>>,
    phase_index: usize,
    late_ms: f64,
}

impl AgentSync {
    /// After the run: everything queued reaches etcd, the agent's record is written, a
    /// warning says how many reports etcd missed, then the threads end and the lease goes.
    fn close(mut self, bg: Background) {
        let flags = self.flags.clone();
        let (ack_tx, ack_rx) = mpsc::channel();
        let _ = self.tx.send(Post::Flush(ack_tx));
        let _ = ack_rx.recv_timeout(Duration::from_secs(10));
        flags.stop.store(true, Ordering::Relaxed);
        self.record.bytes_to_etcd = flags.bytes.load(Ordering::Relaxed);
        self.record.bytes_to_coordinator = flags.bytes_direct.load(Ordering::Relaxed);
        self.record.posts = flags.posts.load(Ordering::Relaxed);
        if let Some(why) = flags
            .fell_back
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            self.record.registration.reports = why;
        }
        self.write_record();
        let failed = flags.failed_posts.load(Ordering::Relaxed);
        if failed > 0 {
            let why = flags
                .last_error
                .lock()
                .map(|e| e.clone())
                .unwrap_or_default();
            errln!(
                "warning: {failed} reports did not reach etcd ({why}); this agent's run directory has them all ('kvmeter dist merge')"
            );
        }
        let AgentSync { mut coord, tx, .. } = self;
        drop(tx);
        let _ = bg.poster.join();
        let _ = bg.keeper.join();
        let _ = coord.revoke(bg.lease);
    }

    fn write_record(&self) {
        if let Some(d) = &self.dir {
            if let Ok(text) = serde_json::to_string_pretty(&self.record) {
                let _ = crate::report::rundir::write_atomic(
                    &d.join("agent.json"),
                    (text + "\n").as_bytes(),
                );
            }
        }
    }

    fn append(file: &mut Option<BufWriter<File>>, line: &str) -> anyhow::Result<()> {
        if let Some(f) = file.as_mut() {
            writeln!(f, "{line}")?;
            f.flush()?;
        }
        Ok(())
    }
}

impl PhaseSync for AgentSync {
    fn prepared(&mut self, rundir: &std::path::Path) {
        let d = rundir.join("dist");
        let open = |name: &str| {
            std::fs::create_dir_all(&d)
                .and_then(|_| crate::report::rundir::create_new(&d.join(name)))
                .map(BufWriter::new)
                .ok()
        };
        self.intervals = open("intervals.jsonl");
        self.phases = open("phases.jsonl");
        self.dir = Some(d);
        self.write_record();
        errln!(
            "agent {} of {}: registered under {}, plan {}",
            self.index,
            self.record.published.agents,
            self.coord.prefix(),
            self.record.published.hash
        );
    }

    fn before_phase(&mut self, index: usize, phase: &PhasePlan) -> anyhow::Result<()> {
        self.phase_index = index;
        self.late_ms = 0.0;
        let deadline = Instant::now() + self.wait;
        let t0: u64 = loop {
            if let Ok(Some(v)) = self.coord.get(&format!("start/{index}")) {
                if let Ok(t) = v.trim().parse::<u64>() {
                    let ahead = Duration::from_nanos(t.saturating_sub(super::unix_ns()));
                    if ahead > MAX_START_AHEAD {
                        anyhow::bail!(
                            "phase {}: the published start time is {} s ahead (more than {} s): not waiting for it",
                            phase.name,
                            ahead.as_secs(),
                            MAX_START_AHEAD.as_secs()
                        );
                    }
                    break t;
                }
            }
            if self.flags.abort.load(Ordering::Relaxed) {
                anyhow::bail!(
                    "the coordinator stopped the run before phase {}",
                    phase.name
                );
            }
            if self.flags.coordinator_gone.load(Ordering::Relaxed) {
                anyhow::bail!(
                    "the coordinator is gone (its plan expired from etcd) before phase {}; this run directory keeps every interval so far ('kvmeter dist merge')",
                    phase.name
                );
            }
            if self.interrupted.load(Ordering::Relaxed) {
                anyhow::bail!("interrupted before phase {}", phase.name);
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "no start time for phase {} within --wait {:?}",
                    phase.name,
                    self.wait
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // Sleep to just before T0, then yield to it: the workers start within microseconds of
        // it on this host's clock.
        loop {
            let now = super::unix_ns();
            if now >= t0 {
                break;
            }
            let left = t0 - now;
            if left > 2_000_000 {
                std::thread::sleep(Duration::from_nanos(left - 1_000_000));
            } else {
                std::thread::yield_now();
            }
        }
        self.late_ms = super::unix_ns().saturating_sub(t0) as f64 / 1e6;
        self.record.starts.push(t0);
        self.write_record();
        Ok(())
    }

    fn interval(&mut self, iv: &IntervalRecord) -> anyhow::Result<()> {
        let post = IntervalPost {
            agent: self.index,
            phase_index: self.phase_index,
            phase: iv.phase.to_string(),
            index: iv.index,
            start_s: iv.start_s,
            end_s: iv.end_s,
            warmup: iv.warmup,
            stats: iv.stats.to_wire(),
        };
        let line = serde_json::to_string(&post)?;
        Self::append(&mut self.intervals, &line)?;
        let key = format!("iv/{}/{:06}/{:04}", self.phase_index, iv.index, self.index);
        let _ = self.tx.send(Post::Put(key, line));
        Ok(())
    }

    fn after_phase(&mut self, index: usize, ps: &PhaseSummary) {
        let done = PhaseDone {
            agent: self.index,
            phase_index: index,
            phase: ps.name.clone(),
            intervals: ps.intervals,
            outcome: ps.outcome.name().to_string(),
            error: ps.error.clone(),
            threads: ps.threads,
            started_at: ps.started_at.clone(),
            wall_seconds: ps.wall_seconds,
            measured_seconds: ps.measured_seconds,
            late_ms: self.late_ms,
            operations: ps.operations,
            run_dir: self
                .dir
                .as_ref()
                .and_then(|d| d.parent())
                .map(|d| d.display().to_string()),
            store_stats: ps.store_stats.clone(),
            storage_io: ps.storage_io.clone(),
        };
        if let Ok(line) = serde_json::to_string(&done) {
            let _ = Self::append(&mut self.phases, &line);
            let key = format!("done/{index}/{:04}", self.index);
            let _ = self.tx.send(Post::Put(key, line));
        }
    }

    fn stop_requested(&self) -> bool {
        self.flags.abort.load(Ordering::Relaxed)
    }
}
