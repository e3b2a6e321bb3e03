//! Simulated agents for a distributed run at scale (issue 33; bench/dist-scale.sh drives it).
//!
//! A thousand `kvmeter agent` processes do not fit on one machine, but what the coordinator and
//! etcd see of an agent is small: a registration under the agent's own lease kept alive, then
//! per phase one report per interval and a phase end. `dist_sim run` plays N such agents from a
//! few threads of one process, against a real `kvmeter dist run` and a real etcd, through the
//! same library code the agent uses (`Coord`, `Seal`): it waits for the plan and verifies its
//! seal with the key, registers each agent with the plan's hash, waits for each `start/<p>`,
//! then posts real-content interval reports taken from a recorded agent run directory
//! (`--from DIR`: its dist/intervals.jsonl, cycled), agent and interval indices rewritten,
//! one per agent every `--every` ms, for `--intervals K`, then each agent's phase end.
//!
//! Time is compressed when `--every` is shorter than the recorded interval: interval k spans
//! [k·every, (k+1)·every) on the phase's grid (start_s/end_s are rewritten so), while its
//! content is a recorded 1-s interval. `--kill I@K`: agent I posts nothing from interval K on
//! and lets its lease lapse (the coordinator must detect a lost agent).
//!
//! Where reports go follows the plan, as for `kvmeter agent`: with a report address published
//! (`dist run --reports`), each simulated agent holds its own channel to the coordinator
//! (`relay::Sender`); without one, its reports are etcd puts under the coordinator's lease.
//!
//! `dist_sim bench-merge --from DIR --agents N` times the coordinator's merge of N reports of
//! that content (one interval), on one thread and on several, and the whole
//! `Merger::interval` call; no etcd involved.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use kvmeter::distributed::keys::{Coord, CoordFlags, CoordSpec};
use kvmeter::distributed::relay::Sender;
use kvmeter::distributed::seal::{Seal, KEY_ENV};
use kvmeter::distributed::{IntervalPost, PhaseDone, Published, Registration};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(about = "Simulated kvmeter agents (issue 33)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// N simulated agents against a running `kvmeter dist run`.
    Run(RunArgs),
    /// Times the merge of N reports (one interval) in this process.
    BenchMerge(BenchArgs),
}

#[derive(clap::Args, Clone)]
struct RunArgs {
    #[arg(long)]
    coord: String,
    #[arg(long)]
    job: String,
    /// Simulated agents (the plan's --agents).
    #[arg(long)]
    agents: usize,
    /// A recorded agent run directory: its dist/intervals.jsonl gives the reports' content.
    #[arg(long)]
    from: PathBuf,
    /// Milliseconds between an agent's reports (compressed time when under the recording's).
    #[arg(long, default_value_t = 1000)]
    every: u64,
    /// Intervals each agent posts per phase.
    #[arg(long)]
    intervals: usize,
    /// Threads that play the agents (agent i on thread i mod T).
    #[arg(long, default_value_t = 16)]
    threads: usize,
    /// I@K: agent I stops at interval K and lets its lease lapse.
    #[arg(long)]
    kill: Option<String>,
    #[arg(long)]
    plan_key_file: Option<PathBuf>,
    /// How long to wait for the plan and for each phase's start.
    #[arg(long, default_value_t = 120)]
    wait_s: u64,
}

#[derive(clap::Args)]
struct BenchArgs {
    #[arg(long)]
    from: PathBuf,
    #[arg(long, default_value_t = 1000)]
    agents: usize,
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Time only the coordinator's sum on one thread (for a profiler's view of it alone).
    #[arg(long)]
    only_sum: bool,
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Run(a) => run(a),
        Cmd::BenchMerge(a) => bench_merge(a),
    };
    if let Err(e) = r {
        eprintln!("dist_sim: {e:#}");
        std::process::exit(1);
    }
}

/// The recorded reports of the longest phase of an agent run directory, in order.
fn recorded(dir: &Path) -> anyhow::Result<Vec<IntervalPost>> {
    let path = dir.join("dist/intervals.jsonl");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let all: Vec<IntervalPost> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .with_context(|| path.display().to_string())?;
    let longest = (0..=all.iter().map(|p| p.phase_index).max().unwrap_or(0))
        .max_by_key(|p| all.iter().filter(|x| x.phase_index == *p).count())
        .unwrap_or(0);
    let posts: Vec<IntervalPost> = all
        .into_iter()
        .filter(|p| p.phase_index == longest)
        .collect();
    if posts.is_empty() {
        bail!("{}: no interval reports", path.display());
    }
    Ok(posts)
}

/// Recorded report `k + agent` (cycled) as agent `agent`'s interval `k` of phase `p`, on the
/// compressed grid.
fn report(
    rec: &[IntervalPost],
    agent: usize,
    p: (usize, &str),
    k: usize,
    every_s: f64,
) -> IntervalPost {
    let mut post = rec[(k + agent) % rec.len()].clone();
    post.agent = agent;
    post.phase_index = p.0;
    post.phase = p.1.to_string();
    post.index = k;
    post.start_s = k as f64 * every_s;
    post.end_s = (k + 1) as f64 * every_s;
    post.warmup = false;
    post
}

// ---------------------------------------------------------------------------------------------
// bench-merge

fn bench_merge(a: BenchArgs) -> anyhow::Result<()> {
    use kvmeter::distributed::merge::{sum, DistInfo, Merger};
    let rec = recorded(&a.from)?;
    let posts: Vec<IntervalPost> = (0..a.agents)
        .map(|i| report(&rec, i, (0, "run"), 0, 1.0))
        .collect();
    let refs: Vec<&IntervalPost> = posts.iter().collect();
    let bytes: usize = posts
        .iter()
        .map(|p| serde_json::to_string(p).map(|s| s.len()).unwrap_or(0))
        .sum();
    println!(
        "{} reports of {} (mean {:.0} B of JSON), {} rounds; ms per interval merged: min / median",
        a.agents,
        a.from.display(),
        bytes as f64 / a.agents as f64,
        a.rounds
    );
    let time = |f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<(f64, f64)> {
        let mut ms = Vec::new();
        for _ in 0..a.rounds {
            let t = Instant::now();
            f()?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        Ok((ms[0], ms[ms.len() / 2]))
    };
    if a.only_sum {
        let (min, med) = time(&mut || sum::stats(&refs, 1).map(|_| ()))?;
        println!("sum (decode + add), 1 thread: {min:.1} / {med:.1}");
        return Ok(());
    }
    let (min, med) = time(&mut || sum::sequential(&refs).map(|_| ()))?;
    println!("sum by Stats::from_wire + add (before issue 33), 1 thread: {min:.1} / {med:.1}");
    for threads in [1, 2, 4, 8] {
        let (min, med) = time(&mut || sum::stats(&refs, threads).map(|_| ()))?;
        println!("sum (decode + add), {threads} thread(s): {min:.1} / {med:.1}");
    }
    // The whole Merger::interval call: the sum, the merged row, the HDR logs.
    let agent: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(a.from.join("dist/agent.json")).context("dist/agent.json")?,
    )?;
    let mut req: kvmeter::plan::Request =
        serde_json::from_value(agent["published"]["request"].clone())?;
    let tmp = tempfile::tempdir()?;
    req.out = Some(tmp.path().join("merged"));
    req.quiet = true;
    let plan = kvmeter::plan::build(&req).map_err(|e| anyhow::anyhow!(e.0))?;
    let mut m = Merger::create(plan, DistInfo::default()).map_err(|e| anyhow::anyhow!(e.0))?;
    m.begin_phase(0, kvmeter::distributed::unix_ns());
    let (min, med) = time(&mut || m.interval(&refs))?;
    println!(
        "Merger::interval ({} thread(s) for the sum): {min:.1} / {med:.1}",
        sum::threads()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// run

/// What every agent thread shares.
struct Shared {
    args: RunArgs,
    spec: CoordSpec,
    published: Published,
    run_seal: Seal,
    phases: Vec<String>,
    rec: Vec<IntervalPost>,
    kill: Option<(usize, usize)>,
    /// The coordinator aborted, or its plan is gone: stop posting.
    stop: AtomicBool,
    counts: Counts,
}

#[derive(Default)]
struct Counts {
    posts: AtomicU64,
    bytes: AtomicU64,
    failed: AtomicU64,
    /// Channels to the coordinator that failed (their agents went on through etcd).
    relay_failed: AtomicU64,
    /// The latest post that failed: why.
    last_error: Mutex<String>,
    /// Most ms a report was posted after its interval's end (the simulator falling behind).
    behind_ms_max: AtomicU64,
}

fn run(a: RunArgs) -> anyhow::Result<()> {
    if a.agents == 0 || a.threads == 0 || a.every == 0 || a.intervals == 0 {
        bail!("--agents, --threads, --every and --intervals: expected at least 1");
    }
    let kill = a.kill.as_deref().map(parse_kill).transpose()?;
    let rec = recorded(&a.from)?;
    let seal = Seal::load(a.plan_key_file.as_deref(), std::env::var(KEY_ENV).ok())
        .map_err(|e| anyhow::anyhow!(e.0))?;
    let flags = CoordFlags {
        url: a.coord.clone(),
        ..Default::default()
    };
    let spec =
        CoordSpec::resolve(&flags, |k| std::env::var(k).ok()).map_err(|e| anyhow::anyhow!(e.0))?;
    let mut coord = Coord::connect(&spec, &a.job).map_err(|e| anyhow::anyhow!(e.0))?;
    coord.set_seal(seal.clone());
    let published = wait_plan(&mut coord, Duration::from_secs(a.wait_s))?;
    if published.agents != a.agents {
        bail!(
            "--agents {}: the plan under {} is for {} agents",
            a.agents,
            coord.prefix(),
            published.agents
        );
    }
    let phases = phase_names(&published)?;
    let threads = a.threads.min(a.agents);
    let shared = Arc::new(Shared {
        run_seal: seal.for_run(&published.nonce),
        spec,
        published,
        phases,
        rec,
        kill,
        stop: AtomicBool::new(false),
        counts: Counts::default(),
        args: a,
    });
    let t = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|th| {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(format!("sim-{th}"))
                .spawn(move || play(&s, th, threads))
        })
        .collect::<Result<_, _>>()?;
    let mut errors = vec![];
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(format!("{e:#}")),
            Err(_) => errors.push("a thread panicked".into()),
        }
    }
    let c = &shared.counts;
    // One JSON line for bench/dist-scale.sh.
    println!(
        "{}",
        serde_json::json!({
            "agents": shared.args.agents,
            "threads": threads,
            "every_ms": shared.args.every,
            "intervals": shared.args.intervals,
            "phases": shared.phases.len(),
            "posts": c.posts.load(Ordering::Relaxed),
            "bytes": c.bytes.load(Ordering::Relaxed),
            "failed_writes": c.failed.load(Ordering::Relaxed),
            "failed_channels": c.relay_failed.load(Ordering::Relaxed),
            "mode": if shared.published.reports.is_some() { "direct" } else { "etcd" },
            "last_error": c.last_error.lock().map(|e| e.clone()).unwrap_or_default(),
            "behind_ms_max": c.behind_ms_max.load(Ordering::Relaxed),
            "seconds": t.elapsed().as_secs_f64(),
            "errors": errors,
        })
    );
    if !errors.is_empty() {
        bail!("{}", errors.join("; "));
    }
    Ok(())
}

fn parse_kill(s: &str) -> anyhow::Result<(usize, usize)> {
    let (i, k) = s
        .split_once('@')
        .context("--kill: expected I@K (agent I stops at interval K)")?;
    Ok((
        i.parse().context("--kill I")?,
        k.parse().context("--kill K")?,
    ))
}

/// The published plan, its seal verified with the key, as an agent reads it.
fn wait_plan(coord: &mut Coord, wait: Duration) -> anyhow::Result<Published> {
    let deadline = Instant::now() + wait;
    loop {
        match coord.get_checked("plan") {
            Ok(Some(Ok(text))) => return Ok(serde_json::from_str(&text)?),
            Ok(Some(Err(why))) => bail!("{}plan: {why}", coord.prefix()),
            Ok(None) => {}
            Err(e) => bail!("etcd: {e}"),
        }
        if Instant::now() >= deadline {
            bail!("no plan under {} within {wait:?}", coord.prefix());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The plan's phase names, from the published request resolved here (as an agent does).
fn phase_names(p: &Published) -> anyhow::Result<Vec<String>> {
    let local = kvmeter::distributed::trust::Local::default();
    kvmeter::distributed::trust::check_published(&p.request, &local)
        .map_err(|e| anyhow::anyhow!(e))?;
    let mut req = kvmeter::distributed::trust::join(&p.request, &local);
    req.out = Some(std::env::temp_dir().join("dist-sim-unused"));
    let plan = kvmeter::plan::build(&req).map_err(|e| anyhow::anyhow!(e.0))?;
    Ok(plan.phases.iter().map(|p| p.name.clone()).collect())
}

/// One simulated agent on a thread: its lease, whether it still posts, and its channel to the
/// coordinator when the plan publishes a report address (else its reports go through etcd).
struct Sim {
    index: usize,
    lease: i64,
    alive: bool,
    relay: Option<Sender>,
}

/// Thread `th` of `threads`: registers its agents, then plays every phase.
fn play(s: &Shared, th: usize, threads: usize) -> anyhow::Result<()> {
    let mut c = Coord::connect(&s.spec, &s.args.job).map_err(|e| anyhow::anyhow!(e.0))?;
    c.set_seal(s.run_seal.clone());
    let ttl = s.published.lease_ttl_s;
    let mut agents = vec![];
    for i in (th..s.args.agents).step_by(threads) {
        let lease = c
            .grant(ttl)
            .map_err(|e| anyhow::anyhow!("agent {i}: lease: {e}"))?;
        let relay = match &s.published.reports {
            Some(addr) => Some(
                Sender::connect(
                    addr,
                    s.published.reports_tls_sha256.as_deref(),
                    s.run_seal.clone(),
                    c.prefix().to_string(),
                    i,
                )
                .with_context(|| format!("agent {i}: the report channel to {addr}"))?,
            ),
            None => None,
        };
        let reg = Registration {
            index: i,
            count: s.args.agents,
            placed_by: "dist_sim".into(),
            hash: s.published.hash.clone(),
            host: kvmeter::distributed::Host::here(),
            threads: 1,
            reports: if relay.is_some() { "direct" } else { "etcd" }.into(),
        };
        match c.create(
            &format!("agent/{i:04}"),
            &serde_json::to_string(&reg)?,
            Some(lease),
        ) {
            Ok(None) => {}
            Ok(Some(_)) => bail!("agent {i}: index taken"),
            Err(e) => bail!("agent {i}: register: {e}"),
        }
        agents.push(Sim {
            index: i,
            lease,
            alive: true,
            relay,
        });
    }
    let mut keep = Keeper {
        every: Duration::from_millis((ttl as u64 * 1000 / 3).clamp(200, 2000)),
        next: Instant::now(),
    };
    for (p, name) in s.phases.iter().enumerate() {
        let Some(t0) = wait_start(s, &mut c, &mut keep, &agents, p)? else {
            break;
        };
        phase(s, &mut c, &mut keep, &mut agents, (p, name), t0)?;
        if s.stop.load(Ordering::Relaxed) {
            break;
        }
    }
    for a in agents.iter_mut().filter(|a| a.alive) {
        if let Some(r) = a.relay.take() {
            let _ = r.finish();
        }
        let _ = c.revoke(a.lease);
    }
    Ok(())
}

/// Keep-alives for a thread's agents, every third of the lease's TTL.
struct Keeper {
    every: Duration,
    next: Instant,
}

impl Keeper {
    /// Renews the live agents' leases when due; watches for `abort` and the plan going away.
    fn tick(&mut self, s: &Shared, c: &mut Coord, agents: &[Sim]) {
        if Instant::now() < self.next {
            return;
        }
        for a in agents.iter().filter(|a| a.alive) {
            let _ = c.keepalive(a.lease);
        }
        if matches!(c.get("abort"), Ok(Some(_))) || matches!(c.get_checked("plan"), Ok(None)) {
            s.stop.store(true, Ordering::Relaxed);
        }
        let _ = c.take_rejected();
        self.next = Instant::now() + self.every;
    }

    /// Sleeps until `t` (Unix ns), keeping leases alive meanwhile.
    fn sleep_until(&mut self, s: &Shared, c: &mut Coord, agents: &[Sim], t: u64) {
        loop {
            self.tick(s, c, agents);
            let now = kvmeter::distributed::unix_ns();
            if now >= t || s.stop.load(Ordering::Relaxed) {
                return;
            }
            let left = Duration::from_nanos(t - now).min(Duration::from_millis(50));
            std::thread::sleep(left);
        }
    }
}

/// Phase `p`'s start time T0, once the coordinator published it; `None` when the run stopped.
fn wait_start(
    s: &Shared,
    c: &mut Coord,
    keep: &mut Keeper,
    agents: &[Sim],
    p: usize,
) -> anyhow::Result<Option<u64>> {
    let deadline = Instant::now() + Duration::from_secs(s.args.wait_s);
    loop {
        if let Ok(Some(v)) = c.get(&format!("start/{p}")) {
            return Ok(Some(v.trim().parse().context("start time")?));
        }
        if s.stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if Instant::now() >= deadline {
            bail!("no start time for phase {p} within {} s", s.args.wait_s);
        }
        keep.tick(s, c, agents);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One phase: every `--every` ms one report per live agent, then each one's end.
fn phase(
    s: &Shared,
    c: &mut Coord,
    keep: &mut Keeper,
    agents: &mut [Sim],
    (p, name): (usize, &str),
    t0: u64,
) -> anyhow::Result<()> {
    let every_ns = s.args.every * 1_000_000;
    let every_s = s.args.every as f64 / 1000.0;
    let run_lease = Some(s.published.lease);
    for k in 0..s.args.intervals {
        let due = t0 + (k as u64 + 1) * every_ns;
        keep.sleep_until(s, c, agents, due);
        if s.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        for a in agents.iter_mut().filter(|a| a.alive) {
            if s.kill.is_some_and(|(i, at)| i == a.index && at == k) {
                // Lost: no more reports, no keep-alives: its lease lapses (and its channel
                // closes, as a dead process's would).
                a.alive = false;
                a.relay = None;
                continue;
            }
            let post = report(&s.rec, a.index, (p, name), k, every_s);
            let body = serde_json::to_string(&post)?;
            let key = format!("iv/{p}/{k:06}/{:04}", a.index);
            send(s, c, a, &key, &body, run_lease);
        }
        let behind = kvmeter::distributed::unix_ns().saturating_sub(due) / 1_000_000;
        s.counts.behind_ms_max.fetch_max(behind, Ordering::Relaxed);
    }
    for a in agents.iter_mut().filter(|a| a.alive) {
        let done = PhaseDone {
            agent: a.index,
            phase_index: p,
            phase: name.to_string(),
            intervals: s.args.intervals,
            outcome: "completed".into(),
            error: None,
            threads: 1,
            started_at: kvmeter::distributed::rfc3339_of_unix_ns(t0),
            wall_seconds: s.args.intervals as f64 * every_s,
            measured_seconds: s.args.intervals as f64 * every_s,
            late_ms: 0.0,
            operations: 0,
            run_dir: None,
            store_stats: None,
            storage_io: None,
        };
        let key = format!("done/{p}/{:04}", a.index);
        send(s, c, a, &key, &serde_json::to_string(&done)?, run_lease);
    }
    Ok(())
}

/// Sends one report as the agent's poster does: over its channel to the coordinator (on an
/// error the channel is dropped and this agent's reports go through etcd from then on), or a
/// put to etcd with a few quick retries, then counted as failed.
fn send(s: &Shared, c: &mut Coord, a: &mut Sim, key: &str, body: &str, lease: Option<i64>) {
    if let Some(r) = a.relay.as_mut() {
        let before = r.bytes_sent;
        match r.send(key, body) {
            Ok(()) => {
                s.counts.posts.fetch_add(1, Ordering::Relaxed);
                s.counts
                    .bytes
                    .fetch_add(r.bytes_sent - before, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                s.counts.relay_failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut l) = s.counts.last_error.lock() {
                    *l = format!("agent {}: channel: {e}", a.index);
                }
                a.relay = None;
            }
        }
    }
    let before = c.bytes_sent;
    for attempt in 0..4 {
        match c.put(key, body, lease) {
            Ok(()) => {
                s.counts.posts.fetch_add(1, Ordering::Relaxed);
                s.counts
                    .bytes
                    .fetch_add(c.bytes_sent - before, Ordering::Relaxed);
                return;
            }
            Err(e) => {
                if let Ok(mut l) = s.counts.last_error.lock() {
                    *l = e;
                }
                std::thread::sleep(Duration::from_millis(50 << attempt));
            }
        }
    }
    s.counts.failed.fetch_add(1, Ordering::Relaxed);
}
