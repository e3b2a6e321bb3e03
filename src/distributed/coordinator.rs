//! `kvmeter dist run`: the coordinator of a distributed run. It resolves the run's plan as
//! `kvmeter run` would, publishes the request and the plan's hash under its lease, waits for N
//! agents to register (or refuses in one line: a refusing agent's reason, or who is missing
//! after `--register-timeout`), then for each phase publishes a start time T0 a little in the
//! future and merges the agents' intervals as they arrive (`merge`). An agent whose lease
//! expires is lost: later intervals merge the rest, and the run is marked degraded (or stopped
//! with `--on-agent-loss abort`). At the end it deletes every key of the run.

use super::keys::Coord;
use super::merge::{AgentInfo, DistInfo, Loss, Merger};
use super::{clock_warnings, IntervalPost, PhaseDone, Published, Registration};
use crate::error::{UsageError, EXIT_INTERRUPTED};
use crate::plan;
use crate::report::RunStatus;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod checks;
mod poll;
mod reports;
mod start;
pub use checks::Settings;
use checks::{checked, Checked};
use poll::{clip, PhasePoll};
use start::{announce, keep_lease};

/// A published plan larger than this is refused (a plan is a few KB; workload texts are
/// bounded by `trust`).
const MAX_PLAN: usize = 1 << 20;
/// How long an interrupted or aborted coordinator waits for the agents' ends before it merges
/// what it has.
const ABORT_GRACE: Duration = Duration::from_secs(10);

pub fn run(s: Settings) -> anyhow::Result<i32> {
    let Checked {
        plan,
        published: request,
        hash,
        seal,
        register: register_timeout,
        ttl,
        delay: start_delay,
        reports: reports_flag,
        reports_tls,
    } = checked(&s)?;
    // The coordinator's own endpoint (merged intervals, `agent="merged"`): bound before etcd
    // is touched, so a bad address or a port in use leaves nothing behind.
    let metrics = match plan.metrics.clone() {
        Some(m) => Some((bind_metrics(&m.addr)?, m.linger)),
        None => None,
    };
    let n = s.agents;
    let mut coord = Coord::connect(&s.coord, &s.job)?;
    coord.set_seal(seal.clone());
    let prefix = coord.prefix().to_string();
    let busy = || {
        UsageError::new(format!(
            "--job {}: a run is already registered under {prefix} in etcd (its coordinator is running, or its lease expires within {ttl} s); choose another --job",
            s.job
        ))
    };
    if coord.get("plan").map_err(UsageError::new)?.is_some() {
        return Err(busy().into());
    }
    // Agents push their reports here (bound before etcd is written: a port in use leaves
    // nothing behind), sealed for this run alone.
    let nonce = super::seal::fresh_nonce();
    let inbox = reports::listen(
        &reports_flag,
        reports_tls.clone(),
        s.coord.first_endpoint(),
        seal.for_run(&nonce),
        &prefix,
        n,
    )?;
    let lease = coord.grant(ttl).map_err(UsageError::new)?;
    let published = Published {
        kvmeter_version: env!("CARGO_PKG_VERSION").into(),
        agents: n,
        hash: hash.clone(),
        nonce,
        request,
        lease,
        lease_ttl_s: ttl,
        coordinator: super::Host::here(),
        reports: inbox.as_ref().map(|(_, a)| a.clone()),
        reports_tls_sha256: reports_tls
            .as_ref()
            .filter(|_| inbox.is_some())
            .map(|t| t.fingerprint.clone()),
    };
    publish(&mut coord, &published, busy)?;
    // Everything after the plan is sealed for this run alone.
    coord.set_seal(seal.for_run(&published.nonce));
    let stop_keeper = Arc::new(AtomicBool::new(false));
    let keeper = keep_lease(&s, lease, ttl, stop_keeper.clone())?;
    let interrupted = crate::driver::install_signals();
    announce(
        &s,
        &published,
        &prefix,
        inbox.as_ref().map(|(_, a)| a.as_str()),
    );
    let mut session = Session {
        coord,
        lease,
        stop_keeper,
        keeper: Some(keeper),
        warned: BTreeSet::new(),
        inbox: inbox.map(|(i, _)| i),
        liveness_checked: None,
        relay_warnings: 0,
    };
    let regs = match session.registrations(n, &hash, register_timeout, &s, &interrupted) {
        Ok(Some(r)) => r,
        Ok(None) => {
            session.close();
            return Ok(EXIT_INTERRUPTED);
        }
        Err(e) => {
            session.close();
            return Err(e.into());
        }
    };
    let result = session.phases(&s, plan, &hash, &published, regs, start_delay, &interrupted);
    session.close();
    if let Some((e, linger)) = metrics {
        e.finish(linger, &interrupted);
    }
    result
}

/// The coordinator's own metrics endpoint, installed for the merged intervals.
fn bind_metrics(addr: &str) -> Result<Arc<crate::metrics::Exporter>, UsageError> {
    let e = crate::metrics::Exporter::bind(addr)?;
    crate::metrics::install(e.clone());
    Ok(e)
}

/// Writes the plan under the run's lease, once: a plan already there (another coordinator of
/// this job) is `busy`. The lease is revoked when the plan is refused.
fn publish(
    coord: &mut Coord,
    published: &Published,
    busy: impl Fn() -> UsageError,
) -> anyhow::Result<()> {
    let lease = published.lease;
    let text = serde_json::to_string(published)?;
    if text.len() > MAX_PLAN {
        let _ = coord.revoke(lease);
        return Err(UsageError::new(format!(
            "the plan is {} bytes; a distributed run publishes at most {MAX_PLAN} (smaller workload files?)",
            text.len()
        ))
        .into());
    }
    if coord
        .create("plan", &text, Some(lease))
        .map_err(UsageError::new)?
        .is_some()
    {
        let _ = coord.revoke(lease);
        return Err(busy().into());
    }
    Ok(())
}

/// The coordinator's etcd session: its lease, kept alive by a thread, and the run's keys.
struct Session {
    coord: Coord,
    lease: i64,
    stop_keeper: Arc<AtomicBool>,
    keeper: Option<std::thread::JoinHandle<()>>,
    /// Keys already warned about (values that did not verify or did not fit their key).
    warned: BTreeSet<String>,
    /// Where agents push their reports, unless they go through etcd.
    inbox: Option<super::relay::Inbox>,
    /// When the agents' leases were last listed (at most once a second: a lease lasts
    /// seconds, and listing 1,000 registrations costs the coordinator milliseconds).
    liveness_checked: Option<Instant>,
    /// Dropped report connections said so far (at most 20).
    relay_warnings: usize,
}

fn parse<T: serde::de::DeserializeOwned>(what: &str, v: &str) -> Option<T> {
    match serde_json::from_str(v) {
        Ok(t) => Some(t),
        Err(e) => {
            errln!("warning: dist: ignoring a malformed {what} in etcd: {e}");
            None
        }
    }
}

impl Session {
    /// The keys under `sub` whose values verify; an error is said once (and the next poll
    /// tries again).
    fn listed(&mut self, sub: &str) -> Vec<(String, String)> {
        let l = match self.coord.list(sub) {
            Ok(l) => l,
            Err(e) => {
                errln!("warning: dist: etcd: {e}");
                vec![]
            }
        };
        for (k, why) in self.coord.take_rejected() {
            self.warn(&k, &why);
        }
        l
    }

    /// Says once per key why its value was ignored: whoever wrote it lacks the plan key, or
    /// wrote it where it does not belong.
    fn warn(&mut self, key: &str, why: &str) {
        if self.warned.insert(key.to_string()) {
            errln!(
                "warning: dist: ignoring {}{key}: {why}",
                self.coord.prefix()
            );
        }
    }

    /// The registrations that verify and sit under their own index's key.
    fn registered(&mut self, n: usize, hash: &str) -> Option<BTreeMap<usize, Registration>> {
        let listed = match self.coord.list("agent/") {
            Ok(l) => l,
            Err(e) => {
                errln!("warning: dist: etcd: {e}");
                return None;
            }
        };
        for (k, why) in self.coord.take_rejected() {
            self.warn(&k, &why);
        }
        let mut regs = BTreeMap::new();
        for (k, v) in listed {
            match parse::<Registration>("registration", &v) {
                Some(r)
                    if k == format!("agent/{:04}", r.index)
                        && r.index < n
                        && r.count == n
                        && r.hash == hash =>
                {
                    regs.insert(r.index, r);
                }
                Some(_) => self.warn(&k, "a registration that does not match its key or the plan"),
                None => {}
            }
        }
        Some(regs)
    }

    /// Deletes every key of the run and revokes the lease: nothing stays registered.
    fn close(&mut self) {
        let _ = self.coord.delete_all("");
        let _ = self.coord.revoke(self.lease);
        self.stop_keeper.store(true, Ordering::Relaxed);
        if let Some(k) = self.keeper.take() {
            let _ = k.join();
        }
    }

    /// Waits until all `n` agents registered; a refusal or the timeout is one line.
    fn registrations(
        &mut self,
        n: usize,
        hash: &str,
        timeout: Duration,
        s: &Settings,
        interrupted: &AtomicBool,
    ) -> Result<Option<BTreeMap<usize, Registration>>, UsageError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((_, why)) = self.listed("refused/").first() {
                return Err(UsageError::new(format!("{}; nothing was run", clip(why))));
            }
            let regs = self.registered(n, hash).unwrap_or_default();
            if regs.len() >= n {
                return Ok(Some(regs));
            }
            if interrupted.load(Ordering::Relaxed) {
                return Ok(None);
            }
            if Instant::now() >= deadline {
                let missing: Vec<String> = (0..n)
                    .filter(|i| !regs.contains_key(i))
                    .map(|i| i.to_string())
                    .collect();
                return Err(UsageError::new(format!(
                    "--register-timeout {}: {} of {n} agents registered under {} (missing: {}); nothing was run",
                    s.register_timeout,
                    regs.len(),
                    self.coord.prefix(),
                    missing.join(", ")
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn phases(
        &mut self,
        s: &Settings,
        plan: plan::Plan,
        hash: &str,
        published: &Published,
        regs: BTreeMap<usize, Registration>,
        start_delay: Duration,
        interrupted: &AtomicBool,
    ) -> anyhow::Result<i32> {
        let info = dist_info(s, hash, published, &regs);
        let quiet = plan.quiet;
        let phase_names: Vec<String> = plan.phases.iter().map(|p| p.name.clone()).collect();
        let polling = Polling {
            regs: &regs,
            abort_on_loss: s.abort_on_loss,
            interrupted,
            every: (plan.interval / 10)
                .clamp(Duration::from_millis(20), Duration::from_millis(200)),
        };
        let mut merger = Merger::create(plan, info)?;
        merger.record_merges()?;
        let mut run = Progress {
            live: regs.keys().copied().collect(),
            aborted: None,
            report_bytes: 0,
            reports: 0,
        };
        let mut status = RunStatus::Completed;
        for (p, name) in phase_names.iter().enumerate() {
            if run.live.is_empty() || run.aborted.is_some() {
                break;
            }
            let t0 = super::unix_ns() + start_delay.as_nanos() as u64;
            self.coord
                .put(&format!("start/{p}"), &t0.to_string(), Some(self.lease))
                .map_err(|e| anyhow::anyhow!(e))?;
            merger.begin_phase(p, t0);
            let mut ph = PhasePoll {
                p,
                name: name.clone(),
                t0,
                posts: BTreeMap::new(),
                dones: BTreeMap::new(),
                last_merged: BTreeMap::new(),
                next_k: 0,
                via_etcd: BTreeSet::new(),
                held_bytes: BTreeMap::new(),
                forced_said: false,
                duplicates: 0,
                etcd_agents: BTreeSet::new(),
            };
            self.poll_phase(&mut ph, &mut run, &mut merger, &polling)?;
            if ph.duplicates > 0 {
                let w = format!(
                    "phase {name}: {} second copies of reports arrived and were dropped (each report counts once)",
                    ph.duplicates
                );
                errln!("warning: dist: {w}");
                merger.info.warnings.push(w);
            }
            // An agent whose channel failed mid-run posted the rest through etcd.
            if self.inbox.is_some() {
                let via = &mut merger.info.reports_via_etcd;
                via.extend(ph.etcd_agents.iter().copied());
                via.sort_unstable();
                via.dedup();
            }
            let outcome = merger.end_phase(&ph.dones.into_values().collect::<Vec<_>>())?;
            if let Some(stop) = super::merge::stopped_by(outcome) {
                status = stop;
                break;
            }
        }
        if let Some(why) = &run.aborted {
            if why == "interrupted" {
                status = RunStatus::Interrupted;
            } else {
                status = RunStatus::Failed;
                merger.set_error(why.clone());
            }
        }
        merger.info.bytes_per_interval_report =
            (run.reports > 0).then(|| run.report_bytes as f64 / run.reports as f64);
        let root = merger.root().to_path_buf();
        let status = merger.finish(status, quiet)?;
        errln!("results: {}", root.display());
        Ok(super::merge::exit_code(status))
    }

    /// One phase: collects the agents' reports and merges them in order until every live
    /// agent has ended it (or, after an abort, the grace ran out).
    fn poll_phase(
        &mut self,
        ph: &mut PhasePoll,
        run: &mut Progress,
        merger: &mut Merger,
        polling: &Polling,
    ) -> anyhow::Result<()> {
        let mut aborted_at: Option<Instant> = None;
        loop {
            let alive = self.alive();
            let (bytes, count) = self.collect(ph, polling.regs);
            run.report_bytes += bytes;
            run.reports += count;
            if let Some(alive) = alive {
                self.losses(
                    ph,
                    alive,
                    &mut run.live,
                    merger,
                    polling.abort_on_loss,
                    &mut run.aborted,
                );
            }
            self.watch_aborts(&mut run.aborted, polling.interrupted);
            if run.aborted.is_some() && aborted_at.is_none() {
                aborted_at = Some(Instant::now());
            }
            self.merge_ready(ph, &run.live, merger)?;
            let all_done = run.live.iter().all(|a| ph.dones.contains_key(a));
            if all_done && ph.posts.is_empty() {
                return Ok(());
            }
            // Only lost agents' intervals are left, or a gap no agent will fill (a report
            // lost on its way to etcd), or the agents did not end within the grace after
            // an abort: merge what there is, in order, and go on.
            if all_done || aborted_at.is_some_and(|t| t.elapsed() > ABORT_GRACE) {
                return merge_the_rest(ph, merger);
            }
            std::thread::sleep(polling.every);
        }
    }

    /// An agent that refused (its setup failed) or Ctrl-C aborts the run: every agent is told.
    fn watch_aborts(&mut self, aborted: &mut Option<String>, interrupted: &AtomicBool) {
        if let Some((_, why)) = self.listed("refused/").into_iter().next() {
            if aborted.is_none() {
                let why = clip(&why);
                errln!("dist: {why}");
                *aborted = Some(why);
                let _ = self.coord.put("abort", "agent failed", Some(self.lease));
            }
        }
        if interrupted.load(Ordering::Relaxed) && aborted.is_none() {
            *aborted = Some("interrupted".into());
            let _ = self.coord.put("abort", "interrupted", Some(self.lease));
        }
    }
}

/// What polling a phase needs from the run.
struct Polling<'a> {
    regs: &'a BTreeMap<usize, Registration>,
    abort_on_loss: bool,
    interrupted: &'a AtomicBool,
    /// How often etcd is read.
    every: Duration,
}

/// How the run stands across its phases.
struct Progress {
    /// Agents not lost.
    live: BTreeSet<usize>,
    /// Why the run was stopped, if it was.
    aborted: Option<String>,
    report_bytes: u64,
    reports: u64,
}

/// The run's record for the merged directory: the agents as they registered, and warnings
/// about their clocks (printed too).
fn dist_info(
    s: &Settings,
    hash: &str,
    published: &Published,
    regs: &BTreeMap<usize, Registration>,
) -> DistInfo {
    let mut info = DistInfo {
        job: s.job.clone(),
        agents: s.agents,
        plan_hash: hash.to_string(),
        merged_by: "coordinator".into(),
        coordinator: Some(published.coordinator.clone()),
        ..Default::default()
    };
    for (i, r) in regs {
        info.agent_hosts.insert(
            *i,
            AgentInfo {
                host: r.host.clone(),
                placed_by: r.placed_by.clone(),
                threads: r.threads,
                run_dir: None,
            },
        );
    }
    info.warnings = clock_warnings(regs, Some(&published.coordinator));
    info.reports = Some(match (&published.reports, &published.reports_tls_sha256) {
        (Some(a), Some(pin)) => format!("direct to {a} in TLS (certificate SHA-256 {pin})"),
        (Some(a), None) => format!("direct to {a}"),
        (None, _) => "etcd".into(),
    });
    if published.reports.is_some() {
        info.reports_via_etcd = regs
            .iter()
            .filter(|(_, r)| r.reports != "direct")
            .map(|(i, _)| *i)
            .collect();
        if let Some((i, r)) = regs.iter().find(|(_, r)| r.reports != "direct") {
            info.warnings.push(format!(
                "{} of {} agents post their reports through etcd (agent {i}: {})",
                info.reports_via_etcd.len(),
                regs.len(),
                clip(&r.reports)
            ));
        }
    }
    for w in &info.warnings {
        errln!("WARNING: {w}");
    }
    info
}

/// Merges the intervals posted so far, in order, noting a gap some agents never filled.
fn merge_the_rest(ph: &mut PhasePoll, merger: &mut Merger) -> anyhow::Result<()> {
    if let Some(k) = ph.posts.keys().next().copied().filter(|k| *k > ph.next_k) {
        let w = format!(
            "phase {}: intervals {}..{} have no report from some agents (lost on the way to etcd, or the run was stopped); merged without them",
            ph.name,
            ph.next_k,
            k - 1
        );
        errln!("warning: dist: {w}");
        merger.info.warnings.push(w);
    }
    for (_, have) in std::mem::take(&mut ph.posts) {
        let list: Vec<&IntervalPost> = have.values().collect();
        merger.interval(&list)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributed::{ClockSync, Host};

    fn reg(i: usize, host: &str, synced: bool, max_us: i64) -> (usize, Registration) {
        (
            i,
            Registration {
                index: i,
                count: 2,
                placed_by: "--index".into(),
                hash: "0".into(),
                host: Host {
                    host: host.into(),
                    pid: 1,
                    clock: ClockSync {
                        synchronized: Some(synced),
                        max_error_us: Some(max_us),
                        est_error_us: Some(0),
                    },
                },
                threads: 1,
                reports: "direct".into(),
            },
        )
    }

    #[test]
    fn clocks_matter_only_across_hosts() {
        // One host: one clock, whatever its state.
        let same: BTreeMap<_, _> = [
            reg(0, "a", false, 16_000_000),
            reg(1, "a", false, 16_000_000),
        ]
        .into_iter()
        .collect();
        assert!(clock_warnings(&same, None).is_empty());
        // Two hosts: an unsynchronised clock and a 5 ms maximum error are named; a good one not.
        let two: BTreeMap<_, _> = [
            reg(0, "a", false, 0),
            reg(1, "b", true, 5_000),
            reg(2, "c", true, 200),
        ]
        .into_iter()
        .collect();
        let w = clock_warnings(&two, None);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("agent 0 on a: the kernel reports the clock unsynchronised"));
        assert!(w[1].starts_with("agent 1 on b: the clock's maximum error is 5 ms"));
    }
}
